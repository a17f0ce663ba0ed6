"""The binding against the C reader: orders, positions, resume, lifetimes, errors."""
import json
import os
import threading

import numpy as np
import pytest

import stoker
from conftest import dump_order, run_tool, shardgen, tool


def read_records(reader, epochs=1):
    out = []
    for _ in range(epochs):
        out.extend(b.records.tolist() for b in reader)
    return out


def reference_images(ds):
    """Record -> (image bytes, label), read in dataset order (zero-copy views of the mapping)."""
    ref = {}
    with stoker.Reader(ds, batch_size=17, threads=1) as r:
        for b in r:
            img, lab = b["image"], b["label"]
            for i, rec in enumerate(b.records):
                ref[int(rec)] = (img[i].tobytes(), int(lab[i]))
    return ref


# ----------------------------------------------------------------- orders
ORDER_CASES = [
    # order, batch, world, rank, tail, seed
    ("sequential", 8, 1, 0, "pad", 0),
    ("sequential", 10, 1, 0, "partial", 0),
    ("sequential", 16, 1, 0, "drop", 0),
    ("shuffle", 8, 1, 0, "pad", 7),
    ("shuffle", 10, 1, 0, "partial", 12345678901234567890),
    ("shuffle", 6, 3, 1, "pad", 5),
    ("shuffle", 6, 3, 2, "drop", 5),
    ("shuffle", 30, 4, 3, "partial", 1),   # rank 3's slice of the last global batch is short
    ("shuffle", 60, 3, 2, "partial", 2),   # ... and here empty
    ("quasi", 8, 1, 0, "pad", 3),
    ("quasi", 5, 2, 1, "partial", 9),
]


@pytest.mark.parametrize("order,batch,world,rank,tail,seed", ORDER_CASES)
def test_iteration_equals_shardread_dump_order(ds, order, batch, world, rank, tail, seed):
    extra = ["--quasi-block", "1K", "--quasi-window", "3"] if order == "quasi" else []
    want = dump_order(ds, batch, order, seed, epochs=3, rank=rank, world=world, tail=tail, extra=extra)
    kw = dict(quasi_block_bytes=1024, quasi_window=3) if order == "quasi" else {}
    with stoker.Reader(ds, batch_size=batch, order=order, seed=seed, rank=rank, world_size=world, tail=tail,
                       threads=2, fields="label", **kw) as r:
        assert len(r) == len(want) // 3
        got = read_records(r, epochs=3)
        assert r.position() == (3, 0)
    assert got == want
    if order != "sequential" and any(got):
        assert got[: len(want) // 3] != got[len(want) // 3: 2 * len(want) // 3]  # epochs differ


def test_batches_carry_the_records_they_name(ds):
    """Shuffled batches (gathered into slots) hold exactly the data of their records
    as the sequential zero-copy views of the mapping show it."""
    ref = reference_images(ds)
    assert sorted(ref) == list(range(103))
    with stoker.Reader(ds, batch_size=9, order="shuffle", seed=4, threads=2) as r:
        seen = 0
        for b in r:
            assert b["image"].shape == (b.size, 8, 8, 3) and b["image"].dtype == np.uint8
            assert b["label"].shape == (b.size,) and b["label"].dtype == np.int64
            for i, rec in enumerate(b.records):
                assert (b["image"][i].tobytes(), int(b["label"][i])) == ref[int(rec)]
            seen += b.size
        assert seen == len(r) * 9


def test_sequential_batches_inside_a_shard_are_zero_copy(ds):
    with stoker.Reader(ds, batch_size=17, threads=1, tail="partial") as r:
        flags = [b.zero_copy for b in r]
    assert all(flags) and len(flags) == 7  # shards of 17 records (the last of 1): every batch is one shard
    with stoker.Reader(ds, batch_size=17, threads=1) as r:
        flags = [b.zero_copy for b in r]
    assert flags == [True] * 6 + [False]  # the padded last batch wraps around: gathered
    with stoker.Reader(ds, batch_size=17, order="shuffle", threads=1) as r:
        assert not any(b.zero_copy for b in r)


def test_epochs_continue_and_set_epoch(ds):
    want = dump_order(ds, 10, "shuffle", 11, epochs=6)
    per = len(want) // 6
    with stoker.Reader(ds, batch_size=10, order="shuffle", seed=11, threads=2, fields="label") as r:
        assert read_records(r) == want[:per]                       # epoch 0
        assert read_records(r) == want[per:2 * per]                # the next iteration is epoch 1
        r.set_epoch(5)
        assert read_records(r) == want[5 * per:]
        r.set_epoch(2)
        first = next(iter(r))
        assert (first.epoch, first.index) == (2, 0) and first.records.tolist() == want[2 * per]
        r.set_epoch(2)                                             # already in epoch 2: stays put
        assert next(iter(r)).records.tolist() == want[2 * per + 1]
        r.seek(2, 0)                                               # seek always restarts
        assert next(iter(r)).records.tolist() == want[2 * per]
        with pytest.raises(stoker.ArgumentError, match="out of range"):
            r.seek(0, per)


def test_set_epochs_ends_the_stream(ds):
    with stoker.Reader(ds, batch_size=50, fields="label") as r:
        r.set_epochs(2)
        n = 0
        while r.next_batch() is not None:
            n += 1
        assert n == 2 * len(r) == 6
        assert r.next_batch() is None


# ----------------------------------------------------------------- resume
def test_state_dict_round_trip_mid_epoch(ds, tmp_path):
    kw = dict(batch_size=8, order="shuffle", seed=21, threads=2, fields="image,label")
    with stoker.Reader(ds, **kw) as r:
        read_records(r)                      # epoch 0
        it = iter(r)
        for _ in range(5):                   # 5 batches into epoch 1
            next(it)
        state = r.state_dict()
        rest = [b.records.tolist() for b in it] + read_records(r)
    assert state["epoch"] == 1 and state["batch"] == 5 and state["order"] == "shuffle"
    assert state["seed"] == "21" and state["global_batch"] == 8
    saved = json.loads(json.dumps(state))    # what a checkpoint keeps
    with stoker.Reader(ds, **kw) as r2:
        r2.load_state_dict(saved)
        assert r2.position() == (1, 5)
        r2.set_epoch(1)                      # the usual loop's set_epoch keeps the resumed position
        got = read_records(r2, epochs=2)
    assert got == rest

    # the same state resumes in the C tool, and with another world size of the same global batch
    (tmp_path / "state.json").write_text(json.dumps(state))
    c = dump_order(ds, 8, "shuffle", 21, epochs=2, extra=["--state-in", str(tmp_path / "state.json")])
    assert c == rest
    halves = []
    for rank in (0, 1):
        with stoker.Reader(ds, batch_size=4, order="shuffle", seed=21, rank=rank, world_size=2,
                           fields="label") as rr:
            rr.load_state_dict(json.dumps(state))
            halves.append(read_records(rr))
    assert [a + b for a, b in zip(*halves)] == rest[: len(halves[0])]


def test_load_state_dict_refusals_are_the_c_messages(ds):
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=1, fields="label") as r:
        state = r.state_dict()
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=2, fields="label") as other:
        with pytest.raises(stoker.ArgumentError) as e:
            other.load_state_dict(state)
        assert "seed" in str(e.value)
        bad = dict(state, surprise=1)
        with pytest.raises(stoker.Error, match="surprise"):
            other.load_state_dict(bad)
        with pytest.raises(stoker.Error):
            other.load_state_dict("{not json")


def test_state_from_the_c_tool_loads(ds, tmp_path):
    sf = tmp_path / "st.json"
    run_tool(tool("shardread"), "-q", "-b", "8", "--order", "shuffle", "--seed", "3", "-f", "label",
             "--stop-after", "7", "--state-out", sf, ds)
    want = dump_order(ds, 8, "shuffle", 3, epochs=1, extra=["--state-in", str(sf)])
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=3, fields="label") as r:
        r.load_state_dict(sf.read_text())
        assert read_records(r) == want


# -------------------------------------------------------------- lifetimes
def test_copy_true_arrays_survive_later_batches_views_do_not(ds):
    ref = reference_images(ds)
    kw = dict(batch_size=8, order="shuffle", seed=9, threads=1, prefetch=1)  # a ring of 2 slots
    with stoker.Reader(ds, copy=True, **kw) as r:
        it = iter(r)
        first = next(it)
        img0, recs0 = first["image"], first.records
        for _ in range(6):
            later = next(it)
        assert first.valid and later.valid
        assert img0.flags.owndata or img0.base is not None
        assert first["image"] is img0
        for i, rec in enumerate(recs0):      # untouched by six later batches
            assert img0[i].tobytes() == ref[int(rec)][0]
    with stoker.Reader(ds, **kw) as r:       # the same without copy: the slot was reused
        it = iter(r)
        first = next(it)
        view, recs0 = first["image"], first.records
        assert not view.flags.writeable
        for _ in range(6):
            next(it)
        assert not first.valid
        with pytest.raises(stoker.ExpiredBatchError, match="batch 0 of epoch 0 has expired"):
            first["image"]
        stale = [view[i].tobytes() == ref[int(rec)][0] for i, rec in enumerate(recs0)]
        assert not all(stale)  # what copy=True protects against


def test_debug_mode_poisons_expired_views(ds):
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=9, threads=1, debug=True) as r:
        ref = reference_images(ds)
        it = iter(r)
        b = next(it)
        img, lab = b["image"], b["label"]
        for i, rec in enumerate(b.records):  # the debug copy holds the batch while it is valid
            assert img[i].tobytes() == ref[int(rec)][0] and lab[i] == ref[int(rec)][1]
        assert b.data_ptrs["image"] != img.__array_interface__["data"][0]
        next(it)
        assert (img == 255).all() and (lab == -1).all()   # poisoned when the batch expired
        assert not img.flags.writeable
        with pytest.raises(stoker.ExpiredBatchError):
            b["label"]
        with pytest.raises(stoker.ExpiredBatchError):
            list(b.items())
        b2 = next(it)
        lab2 = b2["label"]
        r.seek(0, 0)                                        # seeking expires the batch too
        assert not b2.valid and (lab2 == -1).all()


def test_views_share_the_readers_memory(ds):
    with stoker.Reader(ds, batch_size=17, threads=1) as r:
        b = next(iter(r))
        a = b["image"]
        assert a.__array_interface__["data"][0] == b.data_ptrs["image"]
        assert not a.flags.owndata and not a.flags.writeable


def test_bytes_fields(ds_captions):
    with stoker.Reader(ds_captions, batch_size=7, order="shuffle", seed=1) as r:
        b = next(iter(r))
        assert isinstance(b["caption"], list) and len(b["caption"]) == 7
        assert all(isinstance(c, bytes) for c in b["caption"])
        assert "caption" not in b.data_ptrs
        caps = {int(rec): c for rec, c in zip(b.records, b["caption"])}
    with stoker.Reader(ds_captions, batch_size=40, fields=["caption"]) as r:
        b = next(iter(r))
        for rec, c in caps.items():
            assert b["caption"][rec] == c


def test_array_fields_give_one_array_per_record(ds_aspect):
    """A variable-shape field (u8[*,*,3]) comes as a list of arrays, each of its own record's shape."""
    with stoker.Reader(ds_aspect, batch_size=30) as r:
        b = next(iter(r))
        seq = {int(rec): img for rec, img in zip(b.records, b["image"])}
        assert "image" not in b.data_ptrs and len(b["label"]) == 30  # the label stays one tensor
    shapes = {img.shape for img in seq.values()}
    assert all(len(s) == 3 and s[2] == 3 and max(s[:2]) == 12 and 6 <= min(s[:2]) for s in shapes)
    assert len(shapes) > 3 and any(h > w for h, w, _ in shapes) and any(h < w for h, w, _ in shapes)
    assert all(img.dtype == np.uint8 and img.flags.owndata for img in seq.values())
    with stoker.Reader(ds_aspect, batch_size=7, order="shuffle", seed=3, threads=2, verify="always",
                       tail="partial") as r:
        n = 0
        for b in r:
            if b.epoch:
                break
            for rec, img in zip(b.records, b["image"]):
                np.testing.assert_array_equal(img, seq[int(rec)])
                n += 1
    assert n == 30


def test_array_fields_cropped_on_the_workers(ds_aspect):
    """A transform over images of their own size: the workers crop and resize each to `size`; eval is
    torchvision's Resize(round(S / 0.875)) + CenterCrop(S) on the PIL image, within a level."""
    tvf = pytest.importorskip("torchvision.transforms.functional")
    Image = pytest.importorskip("PIL.Image")
    with stoker.Reader(ds_aspect, batch_size=30) as r:
        b = next(iter(r))
        whole = {int(rec): img for rec, img in zip(b.records, b["image"])}
    t = stoker.Transform(dtype="uint8", layout="NHWC", crop="center", size=8)
    with stoker.Reader(ds_aspect, batch_size=30, transform=t) as r:
        b = next(iter(r))
        assert b["image"].shape == (30, 8, 8, 3) and b["image"].dtype == np.uint8
        for rec, got in zip(b.records, b["image"]):
            pil = Image.fromarray(whole[int(rec)])
            want = np.asarray(tvf.center_crop(tvf.resize(pil, 9, interpolation=tvf.InterpolationMode.BILINEAR), 8))
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1, int(rec)
    with stoker.Reader(ds_aspect, batch_size=6, order="shuffle", transform=stoker.Transform.imagenet(True, 8)) as r:
        b = next(iter(r))
        assert b["image"].shape == (6, 3, 8, 8) and b["image"].dtype == np.float32
    with stoker.Reader(ds_aspect, batch_size=30, crop="center:8") as r:  # the crop alone, as shardread --crop
        b = next(iter(r))
        assert b["image"].shape == (30, 8, 8, 3) and b["image"].dtype == np.uint8
    with pytest.raises(ValueError):
        stoker.Reader(ds_aspect, crop="middle:8")


def test_array_fields_as_torch(ds_aspect):
    torch = pytest.importorskip("torch")
    with stoker.Reader(ds_aspect, batch_size=5, output="torch") as r:
        b = next(iter(r))
        assert isinstance(b["image"], list) and all(isinstance(t, torch.Tensor) for t in b["image"])
        assert all(t.dtype == torch.uint8 and t.dim() == 3 for t in b["image"])


# ---------------------------------------------------------- ranks, stats
def test_rank_and_world_size_from_the_environment(ds, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    want = dump_order(ds, 5, "shuffle", 4, rank=1, world=3)
    with stoker.Reader(ds, batch_size=5, order="shuffle", seed=4, fields="label") as r:
        assert (r.rank, r.world_size) == (1, 3)
        assert read_records(r) == want
    with stoker.Reader(ds, batch_size=5, rank=0, world_size=1, fields="label") as r:
        assert (r.rank, r.world_size) == (0, 1)


def test_tail_auto_resolves_by_world_size(ds, monkeypatch):
    """tail="auto": pad across ranks (the world size from the arguments or the environment), partial alone."""
    with stoker.Reader(ds, batch_size=10, rank=0, world_size=1, tail="auto", fields="label") as r:
        assert r.tail == "partial" and r.state_dict()["tail"] == "partial"
        assert read_records(r) == dump_order(ds, 10, tail="partial")       # 103 records: the last batch has 3
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with stoker.Reader(ds, batch_size=10, tail="auto", fields="label") as r:
        assert r.tail == "pad" and r.state_dict()["tail"] == "pad"
        assert read_records(r) == dump_order(ds, 10, rank=1, world=2, tail="pad")
    with stoker.Reader(ds, batch_size=10, fields="label") as r:
        assert r.tail == "pad"                                              # the Reader's default stays pad


def test_statistics_and_verdict(ds):
    # tuning off: the knobs stay as given (stats report where the tuner has them)
    with stoker.Reader(ds, batch_size=10, order="shuffle", threads=2, prefetch=3, tuning="off") as r:
        assert r.stats()["batches"] == 0
        n = sum(b.size for b in r)
        s = r.stats()
        assert s["batches"] == len(r) and s["samples"] == n
        assert s["bytes"] == n * (8 * 8 * 3 + 8)
        assert s["threads"] == 2 and s["prefetch"] == 3 and s["device"] == "none"
        assert s["wall_s"] > 0 and 0 <= s["wait_fraction"] <= 1
        # The verdict of one snapshot follows from that snapshot's wait fraction
        # (10% is the line). verdict() takes a later snapshot: wall time has
        # grown, so only its form is compared (a run waiting close to 10% may
        # sit on either side by then).
        assert s["verdict"].startswith("input-bound:" if s["wait_fraction"] >= 0.10 else "not input-bound:")
        assert f"{int(s['wait_fraction'] * 100 + 0.5)}% of wall time" in s["verdict"]
        v = r.verdict()
        assert v.startswith(("input-bound:", "not input-bound:")) and "threads=2" in v
        r.reset_stats()
        assert r.stats()["batches"] == 0


# ----------------------------------------------------------------- errors
def test_open_errors_carry_the_c_message(ds, tmp_path):
    missing = str(tmp_path / "nothing")
    with pytest.raises(stoker.Error) as e:
        stoker.Reader(missing)
    c = run_tool(tool("shardread"), missing, check=False)
    assert c.returncode == 1  # an input that cannot be read (2 is the command line)
    assert c.stderr.strip() == f"shardread: {e.value}"      # the same message, word for word
    assert e.value.code == 2 and e.value.status == "I/O error"
    with pytest.raises(stoker.ArgumentError) as e:
        stoker.Reader(ds, fields="image,nope")
    assert "nope" in str(e.value) and isinstance(e.value, ValueError)
    with pytest.raises(stoker.ArgumentError, match="larger|smaller|drop|global batch"):
        stoker.Reader(ds, batch_size=200, drop_last=True)
    with pytest.raises(stoker.ArgumentError, match="budget"):
        stoker.Reader(ds, batch_size=64, memory_budget=1000)
    with pytest.raises(ValueError, match="order 'random'"):
        stoker.Reader(ds, order="random")
    with pytest.raises(stoker.ArgumentError, match="transform"):
        stoker.Reader(ds, transform=stoker.Transform(field="label"))


def test_checksum_error_during_iteration(ds_copy):
    ref = reference_images(ds_copy)
    shard = sorted(f for f in os.listdir(ds_copy) if f.endswith(".stk"))[0]
    path = os.path.join(ds_copy, shard)
    data = bytearray(open(path, "rb").read())
    at = data.find(ref[3][0])                # record 3's pixels inside shard 0
    assert at > 0
    data[at + 5] ^= 0x40
    with open(path + ".tmp", "wb") as f:     # replaced by rename, as stoker's rules ask
        f.write(data)
    os.replace(path + ".tmp", path)
    with stoker.Reader(ds_copy, batch_size=2, verify="always", threads=1) as r:
        it = iter(r)
        assert next(it).records.tolist() == [0, 1]
        with pytest.raises(stoker.Error) as e:
            next(it)                         # records 2, 3
        msg = str(e.value)
    assert e.value.status == "checksum mismatch" and "record 3" in msg and shard in msg
    c = run_tool(tool("shardread"), "-q", "-b", "2", "--verify", "always", "-j", "1", ds_copy, check=False)
    assert c.returncode == 1 and msg in c.stderr


def test_errors_are_sticky(ds_copy):
    shard = sorted(f for f in os.listdir(ds_copy) if f.endswith(".stk"))[1]
    path = os.path.join(ds_copy, shard)
    data = bytearray(open(path, "rb").read())
    ref = reference_images(ds_copy)
    at = data.find(ref[17][0])
    data[at] ^= 1
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    with stoker.Reader(ds_copy, batch_size=17, verify="once", threads=1) as r:
        r.next_batch()
        msgs = []
        for _ in range(2):
            with pytest.raises(stoker.Error) as e:
                r.next_batch()
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1] and "record 0" in msgs[0]


def test_closed_reader_and_threads(ds):
    r = stoker.Reader(ds, batch_size=10, fields="label")
    b = next(iter(r))
    r.close()
    assert not b.valid
    with pytest.raises(ValueError, match="closed"):
        next(iter(r))
    with pytest.raises(ValueError, match="closed"):
        len(r)
    r.close()  # twice is fine

    # one consumer at a time: concurrent callers are serialised, not interleaved mid-call
    with stoker.Reader(ds, batch_size=1, fields="label", threads=2) as r:
        r.set_epochs(1)
        got, lock = [], threading.Lock()

        def take():
            while True:
                b = r.next_batch()
                if b is None:
                    return
                with lock:
                    got.append(int(b.records[0]))

        ts = [threading.Thread(target=take) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert sorted(got) == list(range(103))


def test_host_transform_matches_numpy(ds):
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    tf = stoker.Transform(crop="center", size=6, mean=mean, std=std)   # a 6x6 centre crop: no resampling
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=2, transform=tf) as r:
        assert r.device == "none"  # u8 RGB images: cropped and normalised by the worker threads
        ref = reference_images(ds)
        b = next(iter(r))
        x = b["image"]
        assert x.dtype == np.float32 and x.shape == (8, 3, 6, 6)
        for i, rec in enumerate(b.records):
            img = np.frombuffer(ref[int(rec)][0], np.uint8).reshape(8, 8, 3)[1:7, 1:7].astype(np.float32)
            want = ((img / 255 - np.array(mean, np.float32)) / np.array(std, np.float32)).transpose(2, 0, 1)
            np.testing.assert_allclose(x[i], want, rtol=1e-5, atol=1e-5)
        assert r.stats()["device"] == "none"
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=2, transform=tf, device="host") as r:
        assert r.device == "host"
        np.testing.assert_array_equal(next(iter(r))["image"], x)  # the host backend gives the same


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_sequential_batches_with_a_transform_are_made_not_mapped(ds, train):
    """Sequential batches inside a shard are zero-copy views, but a transformed field is
    made by the workers: per record, the pixels of the shuffled order's batches."""
    tf = stoker.Transform.imagenet(train=train, size=6)
    got = {}
    for order in ("sequential", "shuffle"):
        with stoker.Reader(ds, batch_size=17, order=order, tail="partial", threads=1, transform=tf) as r:
            for b in r:
                for i, rec in enumerate(b.records):
                    got.setdefault(int(rec), []).append(b["image"][i].copy())
    assert len(got) == 103
    for rec, (seq, shuf) in got.items():
        assert np.isfinite(seq).all() and np.array_equal(seq, shuf), rec


def test_host_transform_uint8(ds):
    # u8 out: the cropped pixels themselves (no resampling at 6x6 of 8x8), mean and std not applied
    tf = stoker.Transform(crop="center", size=6, dtype="uint8", layout="NHWC", mean=(0.5, 0.5, 0.5))
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=3, transform=tf) as r:
        ref = reference_images(ds)
        b = next(iter(r))
        x = b["image"]
        assert x.dtype == np.uint8 and x.shape == (8, 6, 6, 3)
        for i, rec in enumerate(b.records):
            want = np.frombuffer(ref[int(rec)][0], np.uint8).reshape(8, 8, 3)[1:7, 1:7]
            np.testing.assert_array_equal(x[i], want)


def test_imagenet_transform_values():
    t = stoker.Transform.imagenet(train=True, size=224)
    assert t.crop == "random_resized" and t.size == (224, 224) and t.flip_prob == pytest.approx(0.5)
    assert t.mean == pytest.approx((0.485, 0.456, 0.406)) and t.std == pytest.approx((0.229, 0.224, 0.225))
    e = stoker.Transform.imagenet(train=False, size=160)
    assert e.crop == "center" and e.size == (160, 160) and e.flip_prob == 0


def _mapped(name):
    return any(name in line for line in open("/proc/self/maps"))


def test_views_keep_the_c_reader_alive_past_close(ds_copy):
    r = stoker.Reader(ds_copy, batch_size=17, tail="partial")
    b = next(iter(r))
    assert b.zero_copy
    v = b["image"]
    want = v.copy()
    r.close()
    assert not b.valid
    assert _mapped(os.path.join(ds_copy, "shard-00000.stk"))   # still mapped: v is a view of it
    assert np.array_equal(v, want)                              # readable, not a dangling pointer
    del v, b
    assert not _mapped(os.path.join(ds_copy, "shard-00000.stk"))  # the last view went: the reader closed
    r2 = stoker.Reader(ds_copy, batch_size=17)
    del r2                                                      # dropping an open reader closes it
    assert not _mapped(os.path.join(ds_copy, "shard-00000.stk"))


def test_a_forked_child_gets_an_error_not_a_hang(ds):
    r = stoker.Reader(ds, batch_size=10, fields="label", threads=2)
    next(iter(r))
    pid = os.fork()
    if pid == 0:  # the child: no worker threads here
        code = 1
        try:
            r.next_batch()
        except RuntimeError as e:
            code = 0 if "forked child" in str(e) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert r.next_batch().index == 1  # the parent's reader is unaffected
    r.close()


# ----------------------------------------------------------------- the read path
@pytest.fixture(scope="session")
def ds48(tmp_path_factory):
    """60 records of image u8[48,48,3] (6912 bytes: direct reads, through the bounce area)."""
    return shardgen(tmp_path_factory.mktemp("ds48") / "ds", 60, size=48, per_shard=13)


@pytest.mark.parametrize("order", ["sequential", "shuffle", "quasi"])
def test_direct_reads_give_the_mmap_batches(ds48, order):
    kw = dict(batch_size=7, order=order, seed=3, threads=2, tail="partial", copy=True)
    if order == "quasi":  # small blocks, so that each batch spans several of them
        kw.update(quasi_block_bytes=3 * 6920, quasi_window=4)
    with stoker.Reader(ds48, io="mmap", **kw) as a, stoker.Reader(ds48, io="direct", io_depth=4, tune_pin="io_depth",
                                                                               **kw) as b:
        for _ in range(2):
            for x, y in zip(a, b):
                assert x.records.tolist() == y.records.tolist()
                assert np.array_equal(x["image"], y["image"]) and np.array_equal(x["label"], y["label"])
        s = b.io_stats()
        assert s["io"] == "direct" and s["engine"] in ("io_uring", "threads") and s["depth"] == 4
        assert s["reads"] > 0 and s["bounced_bytes"] > 0 and s["reason"].startswith("direct: asked for")
        if order == "quasi":  # one rank: blocks read whole
            assert s["quasi_blocks"] > 0 and "quasi blocks read whole" in s["reason"]
        assert a.io_stats()["io"] == "mmap"


def test_io_auto_says_why_and_bad_io_is_refused(ds48):
    with stoker.Reader(ds48, batch_size=4) as r:
        s = r.io_stats()
        assert s["io"] == "mmap" and s["reason"].startswith("auto: ")
    with pytest.raises(ValueError, match="io 'fast'"):
        stoker.Reader(ds48, io="fast")


def test_direct_read_error_names_shard_and_record(ds48, monkeypatch):
    monkeypatch.setenv("STOKER_IO_FAULT", "eio:2/3")
    with stoker.Reader(ds48, batch_size=1, io="direct", threads=1) as r:
        with pytest.raises(stoker.Error, match=r"-00002\.stk: record 3: read of 6912 bytes .*Input/output error"):
            for _ in r:
                pass


def test_trace_writes_a_chrome_timeline_at_close(ds, tmp_path):
    import json
    path = tmp_path / "trace.json"
    with stoker.Reader(ds, batch_size=10, order="shuffle", threads=2, trace=str(path)) as r:
        n = sum(1 for _ in r)
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(e["name"] == "next" and e["ph"] == "X" for e in events) == n
    assert any(e["name"] == "gather" for e in events)
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert "stoker worker 0" in names and "stoker worker 1" in names


def test_diagnose_and_metrics(ds):
    with stoker.Reader(ds, batch_size=10, order="shuffle", threads=2) as r:
        n = sum(1 for _ in r)  # no step: a bare read loop
        lines = r.diagnose().splitlines()
        m = r.metrics()
    assert lines[0].startswith("loader: ") and lines[1].startswith("workers: decode/crop ")
    assert lines[2].startswith("trainer: no training step recorded")
    assert lines[3].startswith("bound by: ")
    assert "# TYPE stoker_batches_total counter" in m
    assert f"stoker_batches_total {n}\n" in m
