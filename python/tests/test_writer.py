"""stoker.Writer, stoker.pack and stoker.merge: any samples from Python, back through the Reader."""
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import stoker
from conftest import expected_records, records, run_tool, tool

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32",
          "float64"]


def rand(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def every_kind(dtypes):
    f = {}
    for dt in dtypes:
        f[f"t_{dt}"] = stoker.Tensor(dt, (3, 2))
        f[f"s_{dt}"] = stoker.Scalar(dt)
        f[f"r_{dt}"] = stoker.Ragged(dt, (None, 2))
    f["bf16"] = stoker.Tensor("bfloat16", (4,))
    f["img"] = stoker.Ragged("uint8", (None, None, 3))
    f["raw"] = stoker.Bytes()
    f["text"] = stoker.String()
    f["z"] = stoker.Ragged("float32", (None,), codec="zstd:5")
    return f


def every_sample(rng, i, dtypes):
    s = {}
    for dt in dtypes:
        s[f"t_{dt}"] = rand(rng, dt, (3, 2))
        s[f"s_{dt}"] = rand(rng, dt, ())
        s[f"r_{dt}"] = rand(rng, dt, (i % 4, 2))
    s["bf16"] = rng.integers(0, 65535, 4, dtype=np.uint16)
    s["img"] = rand(rng, "uint8", (1 + i % 3, 1 + i % 5, 3))
    s["raw"] = bytes(rng.integers(0, 255, i % 7, dtype=np.uint8))
    s["text"] = f"record {i}: naïve ✓" * (i % 3)
    s["z"] = np.repeat(np.float32(i), i % 9)
    return s


def same(a, b):
    if isinstance(b, (bytes, str)):
        return a == b
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()  # bit for bit (NaNs, -0.0 included)


@pytest.mark.parametrize("dtypes", [DTYPES[:6], DTYPES[6:]], ids=["integers", "wide-and-float"])
def test_round_trip_every_kind_and_dtype(tmp_path, dtypes):  # at most 32 fields a dataset: two halves
    rng = np.random.default_rng(1)
    samples = [every_sample(rng, i, dtypes) for i in range(40)]
    out = tmp_path / "ds"
    with stoker.Writer(out, every_kind(dtypes), records_per_shard=9, classes=["cat", "dog"],
                       metadata={"source": "test", "n": [1, 2]}) as w:
        for s in samples:
            w.write(s)
        assert w.records == 40 and w.shards == 4
    run_tool(tool("shardcheck"), "--full", "--file-hash", "-q", out)
    with stoker.Reader(out, batch_size=7, order="shuffle", seed=3, tail="partial") as r:
        assert r.classes == ["cat", "dog"] and r.metadata == {"source": "test", "n": [1, 2]}
        seen = 0
        for b in r:
            for j, rec in enumerate(b.records):
                want = samples[int(rec)]
                for name, v in want.items():
                    got = b[name][j]
                    assert same(got, v), (name, int(rec), got, v)
                assert isinstance(b["text"][j], str) and isinstance(b["raw"][j], bytes)
                seen += 1
        assert seen == 40


def test_ragged_padded_with_lengths(tmp_path):
    f = {"boxes": stoker.Ragged("float32", (None, 4)), "img": stoker.Ragged("uint8", (None, None, 3))}
    rng = np.random.default_rng(2)
    samples = [{"boxes": rng.random((i % 5, 4), dtype=np.float32),
                "img": rand(rng, "uint8", (1 + i % 3, 2 + i % 4, 3))} for i in range(12)]
    with stoker.Writer(tmp_path / "ds", f) as w:
        for s in samples:
            w.write(s)
    with stoker.Reader(tmp_path / "ds", batch_size=6, ragged="pad") as r:
        b = next(iter(r))
        assert b["boxes"].shape == (6, 4, 4) and b.lengths["boxes"].shape == (6, 1)
        assert b["img"].shape == (6, 3, 5, 3) and b.lengths["img"].shape == (6, 2)
        for j, rec in enumerate(b.records):
            s = samples[int(rec)]
            n = b.lengths["boxes"][j, 0]
            assert n == len(s["boxes"]) and same(b["boxes"][j, :n], s["boxes"]) and not b["boxes"][j, n:].any()
            h, w_ = b.lengths["img"][j]
            assert (h, w_) == s["img"].shape[:2] and same(b["img"][j, :h, :w_], s["img"])
            assert not b["img"][j, h:].any() and not b["img"][j, :, w_:].any()


def test_torch_output_of_every_kind(tmp_path):
    torch = pytest.importorskip("torch")
    f = {"boxes": stoker.Ragged("int32", (None, 2)), "t": stoker.Tensor("float32", (3,)), "s": stoker.String()}
    with stoker.Writer(tmp_path / "ds", f) as w:
        for i in range(4):
            w.write({"boxes": np.full((i, 2), i, np.int32), "t": np.full(3, i, np.float32), "s": str(i)})
    with stoker.Reader(tmp_path / "ds", batch_size=4, output="torch") as r:
        b = next(iter(r))
        assert all(isinstance(x, torch.Tensor) for x in b["boxes"]) and b["boxes"][3].shape == (3, 2)
        assert b["s"] == ["0", "1", "2", "3"] and isinstance(b["t"], torch.Tensor)
    with stoker.Reader(tmp_path / "ds", batch_size=4, output="torch", ragged="pad") as r:
        b = next(iter(r))
        assert isinstance(b["boxes"], torch.Tensor) and tuple(b["boxes"].shape) == (4, 3, 2)
        assert b.lengths["boxes"].flatten().tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("bad, message", [
    ({"t": np.zeros(3, np.float64)}, "field 't': expected float32[3], got float64[3]"),
    ({"t": np.zeros(4, np.float32)}, "field 't': expected float32[3], got float32[4]"),
    ({"r": np.zeros((2, 3), np.int16)}, "field 'r': expected int16[*, 2], got int16[2, 3]"),
    ({"r": np.zeros(2, np.int16)}, "field 'r': expected int16[*, 2], got int16[2]"),
    ({"n": 1.5}, "field 'n': expected int64[], got float 1.5"),
    ({"n": 2 ** 70}, "field 'n': expected int64[]"),
    ({"s": b"x"}, "field 's' is a String: expected str, got bytes"),
    ({"b": "x"}, "field 'b' is Bytes: expected bytes, got str"),
    ({"s": "\ud800"}, "field 's': the str is not valid Unicode"),
    ({"t": [1.0, 2.0, 1e300]}, "field 't': expected float32[3], got list"),
])
def test_a_bad_value_names_field_expected_and_given_and_writes_nothing(tmp_path, bad, message):
    f = {"t": stoker.Tensor("float32", (3,)), "r": stoker.Ragged("int16", (None, 2)), "n": stoker.Scalar("int64"),
         "s": stoker.String(), "b": stoker.Bytes()}
    good = {"t": np.ones(3, np.float32), "r": np.ones((1, 2), np.int16), "n": 7, "s": "ok", "b": b"ok"}
    with stoker.Writer(tmp_path / "ds", f) as w:
        w.write(good)
        with pytest.raises((TypeError, ValueError)) as e:
            w.write({**good, **bad})
        assert message in str(e.value) and "sample 1" in str(e.value)
        w.write(good)
    with stoker.Reader(tmp_path / "ds", batch_size=2) as r:
        b = next(iter(r))
        assert r.num_records == 2 and list(b["n"]) == [7, 7]


def test_python_values_convert_and_other_arrays_do_not(tmp_path):
    torch = pytest.importorskip("torch")
    f = {"t": stoker.Tensor("float32", (2,)), "n": stoker.Scalar("float32")}
    with stoker.Writer(tmp_path / "ds", f) as w:
        w.write({"t": [0.1, 2], "n": 0.1})  # Python floats round to the field's precision
        w.write({"t": torch.tensor([1.0, 2.0]), "n": 1})
        with pytest.raises(TypeError, match="got float64"):  # a torch tensor is an array: never cast
            w.write({"t": torch.tensor([1.0, 2.0], dtype=torch.float64), "n": 1})
    with stoker.Reader(tmp_path / "ds", batch_size=2) as r:
        b = next(iter(r))
        assert b["n"].tolist() == [np.float32(0.1), 1.0] and b["t"][1].tolist() == [1.0, 2.0]


def test_a_codec_change_is_another_pack(tmp_path):
    fn = lambda i: {"x": np.full(100, i, np.int64)}  # noqa: E731
    stoker.pack(fn, range(10), tmp_path / "ds", {"x": stoker.Tensor("int64", (100,))}, workers=0, progress=False)
    with pytest.raises(stoker.Error, match="other arguments"):
        stoker.pack(fn, range(10), tmp_path / "ds", {"x": stoker.Tensor("int64", (100,), codec="zstd:9")},
                    workers=0, progress=False)


def test_missing_and_extra_keys(tmp_path):
    f = {"a": stoker.Scalar("int32"), "b": stoker.Scalar("int32")}
    with stoker.Writer(tmp_path / "ds", f) as w:
        with pytest.raises(ValueError, match=r"sample 0: missing 'b'; not a field: 'c'"):
            w.write({"a": 1, "c": 2})
        with pytest.raises(TypeError, match="a dict"):
            w.write([1, 2])
        w.write({"a": 1, "b": 2})


def test_exception_inside_with_leaves_no_dataset(tmp_path):
    f = {"a": stoker.Scalar("int32")}
    with pytest.raises(RuntimeError, match="boom"):
        with stoker.Writer(tmp_path / "ds", f, records_per_shard=2) as w:
            for i in range(5):
                w.write({"a": i})
            raise RuntimeError("boom")
    assert not (tmp_path / "ds" / "manifest.json").exists()
    with pytest.raises(stoker.Error):
        stoker.Reader(tmp_path / "ds")


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="at least one None"):
        stoker.Ragged("int32", (3, 4))
    with pytest.raises(ValueError, match="Ragged"):
        stoker.Tensor("int32", (0,))
    with pytest.raises(TypeError, match="dtype"):
        stoker.Tensor("complex64", (2,))
    with pytest.raises(ValueError, match="zstd"):
        stoker.Bytes(codec="lz4")
    with pytest.raises(TypeError, match="not a stoker"):
        stoker.Writer("/nonexistent/never", {"a": "int32"})


def test_an_existing_dataset_is_refused_unless_forced(tmp_path):
    f = {"a": stoker.Scalar("int32")}
    with stoker.Writer(tmp_path / "ds", f) as w:
        w.write({"a": 1})
    with pytest.raises(stoker.Error, match="already holds a dataset"):
        stoker.Writer(tmp_path / "ds", f)
    with stoker.Writer(tmp_path / "ds", f, force=True) as w:
        w.write({"a": 2})


# ------------------------------------------------------------------ pack

FIELDS = {"x": stoker.Ragged("int32", (None,)), "i": stoker.Scalar("int64"), "s": stoker.String()}


def make(i):
    """Deterministic samples: none, one or two per input, some inputs raise."""
    if i % 97 == 13:
        raise ValueError(f"bad input {i}")
    if i % 50 == 7:
        return None
    one = {"x": np.arange(i % 17, dtype=np.int32) * i, "i": i, "s": f"input {i}"}
    if i % 10 == 3:
        return [one, {"x": np.arange(2, dtype=np.int32), "i": -i, "s": "second"}]
    return one


def digest(d):
    h = hashlib.sha256()
    for n in sorted(os.listdir(d)):
        if n.endswith(".stk") or n in ("manifest.json", "skipped.tsv"):
            h.update(n.encode() + b"\0")
            with open(os.path.join(d, n), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def test_pack_is_byte_identical_whatever_the_workers(tmp_path):
    digests = set()
    for workers, mode in ((0, "process"), (1, "process"), (2, "process"), (4, "process"), (2, "thread"),
                          (4, "thread")):
        out = tmp_path / f"{mode}{workers}"
        s = stoker.pack(make, range(1500), out, FIELDS, workers=workers, mode=mode, records_per_shard=100,
                        chunk=7, progress=False)
        assert s["records"] == len(expected_records(make, 1500)) and s["skipped"] == 16
        digests.add(digest(out))
    assert len(digests) == 1
    assert records(tmp_path / "process2") == expected_records(make, 1500)
    run_tool(tool("shardcheck"), "--full", "--file-hash", "-q", tmp_path / "process2")


def test_pack_lists_raising_inputs_and_fail_stops(tmp_path):
    out = tmp_path / "ds"
    stoker.pack(make, range(300), out, FIELDS, workers=2, progress=False)
    lines = (out / "skipped.tsv").read_text().splitlines()
    assert lines[0] == "index\tinput\terror"
    assert lines[1:] == [f"{i}\t{i}\tValueError: bad input {i}" for i in (13, 110, 207)]
    with pytest.raises(RuntimeError, match=r"input 13 \(13\): ValueError: bad input 13"):
        stoker.pack(make, range(300), tmp_path / "fail", FIELDS, workers=2, on_error="fail", progress=False)
    assert not (tmp_path / "fail" / "manifest.json").exists()


def test_pack_again_with_the_same_arguments_is_a_no_op_and_others_are_refused(tmp_path):
    out = tmp_path / "ds"
    stoker.pack(make, range(200), out, FIELDS, workers=0, progress=False)
    before = digest(out)
    s = stoker.pack(make, range(200), out, FIELDS, workers=0, progress=False)
    assert s["complete"] and s["resumed"] and digest(out) == before
    with pytest.raises(stoker.Error, match="other arguments"):
        stoker.pack(make, range(201), out, FIELDS, workers=0, progress=False)
    stoker.pack(make, range(201), out, FIELDS, workers=0, progress=False, force=True)
    assert records(out) == expected_records(make, 201)


def test_part_and_merge_equal_one_pack(tmp_path):
    whole = tmp_path / "whole"
    stoker.pack(make, range(1000), whole, FIELDS, workers=2, records_per_shard=64, progress=False)
    parts = tmp_path / "parts"
    for k in (3, 1):
        stoker.pack(make, range(1000), parts, FIELDS, workers=2, records_per_shard=64, part=(k, 3),
                    progress=False)
    with pytest.raises(ValueError, match=r"1 of 3 parts missing or unfinished: part-00002-of-00003"):
        stoker.merge(parts)
    stoker.pack(make, range(1000), parts, FIELDS, workers=2, records_per_shard=64, part=(2, 3), progress=False)
    m = stoker.merge(parts)
    assert m["parts"] == 3 and m["skipped"] == 11
    for field in ("i", "s"):
        assert records(parts, field) == records(whole, field)
    assert (parts / "skipped.tsv").read_text() == (whole / "skipped.tsv").read_text()
    run_tool(tool("shardcheck"), "--full", "--file-hash", "-q", parts)


def test_a_killed_pack_resumes_to_the_same_bytes(tmp_path):
    """kill -9 at random points (several trials), then the same call: the result equals an uninterrupted run."""
    child = os.path.join(HERE, "writer_child.py")
    ref = tmp_path / "ref"
    env = dict(os.environ)
    subprocess.run([sys.executable, child, str(ref)], check=True, env=env)
    want = digest(ref)
    rnd = random.Random(7)
    kills = 0
    for trial in range(4):
        out = tmp_path / f"t{trial}"
        for attempt in range(40):
            p = subprocess.Popen([sys.executable, child, str(out)], env=env, stdout=subprocess.PIPE)
            p.stdout.readline()  # started packing: on a loaded machine the imports alone may take a second
            p.stdout.close()
            try:
                p.wait(timeout=rnd.uniform(0.3, 1.5))
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
                kills += 1
                continue
            assert p.returncode == 0
            break
        assert (out / "manifest.json").exists(), f"trial {trial}: not finished after {attempt + 1} runs"
        assert digest(out) == want, f"trial {trial}"
        assert not (out / "stoker-pack.state.json").exists()
    assert kills >= 2, "no run was interrupted: the test did not test resume"


def test_one_writer_per_directory(tmp_path):
    f = {"a": stoker.Scalar("int32")}
    with stoker.Writer(tmp_path / "ds", f) as w:
        with pytest.raises(stoker.Error) as e:
            stoker.Writer(tmp_path / "ds", f)
        assert e.value.status == "busy" and str(tmp_path / "ds") in str(e.value) and f"pid {os.getpid()}" in str(e.value)
        w.write({"a": 1})
    with stoker.Writer(tmp_path / "ds", f, force=True) as w:  # released at close
        w.write({"a": 2})


@pytest.mark.parametrize("hold_first", [0.0, 0.5])
def test_a_dead_worker_is_an_error_naming_its_inputs(tmp_path, hold_first):
    # With hold_first, worker 0 holds the parent on chunk 0 while worker 1 finishes chunk 1 and dies in
    # chunk 3: the parent then sends chunk 9 to a dead worker (a broken pipe) before it reads chunk 3. The
    # error is the same either way: the one naming chunk 3's inputs, in input order.
    def die(i):
        if i == 0:
            time.sleep(hold_first)
        if i == 30:
            os._exit(3)
        return {"a": i}
    with pytest.raises(RuntimeError, match=r"worker process \d+ died \(exit status 3\) on inputs 30\.\.39"):
        stoker.pack(die, range(200), tmp_path / "ds", {"a": stoker.Scalar("int64")}, workers=2, chunk=10,
                    progress=False)
    assert not (tmp_path / "ds" / "manifest.json").exists()


@pytest.mark.parametrize("classes,index,why", [
    (["cat", "a\x00b"], 1, r"holds a NUL at 1"),
    ([1], 0, r"is int, not str"),
    (["dog", b"cat"], 1, r"is bytes, not str"),
    (["\ud800"], 0, r"cannot be UTF-8 \(surrogates not allowed at 0\)"),
], ids=["nul", "int", "bytes", "lone-surrogate"])
def test_a_bad_class_name_is_refused_naming_class_and_argument(tmp_path, classes, index, why):
    """spec/FORMAT.md section 8: class names are str without NUL that can be UTF-8; a NUL was cut
    (['a\\x00b'] read back as ['a']) and the others ended in raw Python errors."""
    f = {"a": stoker.Scalar("int32")}
    for who, call in (("stoker.Writer", lambda out: stoker.Writer(out, f, classes=classes)),
                      ("stoker.pack", lambda out: stoker.pack(lambda i: {"a": i}, range(3), out, f, workers=0,
                                                              classes=classes, progress=False))):
        out = tmp_path / who
        with pytest.raises(stoker.ArgumentError) as e:
            call(out)
        msg = str(e.value)
        assert msg.startswith(f"{who}: classes[{index}] {classes[index]!r}") and e.value.code == 1, msg  # STK_E_ARG
        assert re.search(why, msg), msg
        assert not (out / "manifest.json").exists()


def test_classes_must_be_a_list_and_good_names_round_trip(tmp_path):
    f = {"a": stoker.Scalar("int32")}
    with pytest.raises(stoker.ArgumentError, match=r"stoker.Writer: classes='cat': a list of str"):
        stoker.Writer(tmp_path / "s", f, classes="cat")
    names = ["chat ✓", "dog", "🐈"]
    with stoker.Writer(tmp_path / "ok", f, classes=iter(names)) as w:
        w.write({"a": 1})
    with stoker.Reader(tmp_path / "ok", batch_size=1) as r:
        assert r.classes == names
