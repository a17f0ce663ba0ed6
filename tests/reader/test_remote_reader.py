"""The reader over s3:// against the S3 test server (tests/support/s3fixture.py), through the
fault-injecting proxy: every order x ranks x resume gives the batches of the local copy, with a
cache limited to a quarter of the dataset and without a limit; compressed fields and the JPEG crop;
a mixture of a remote and a local source; two processes sharing one cache dir, one killed; the
proxy's faults survived and counted; bytes fetched per epoch bounded; a second epoch with a big
cache fetches nothing. Skipped with the reason when the server cannot start (no Node >= 20 or no
s3rver package: scripts/setup-deps installs it).

Run by ctest (tests/reader/CMakeLists.txt: label reader, remote, python) with the built
libstoker.so ($STOKER_LIB) and tools ($STOKER_TOOLS)."""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "support")):
    if p not in sys.path:
        sys.path.insert(0, p)
if not os.environ.get("STOKER_LIB"):
    os.environ["STOKER_LIB"] = os.path.join(ROOT, "build", "reader", "libstoker.so")
TOOLS = os.environ.get("STOKER_TOOLS") or os.path.join(ROOT, "build", "tools")

import s3fixture  # noqa: E402

s3 = s3fixture.pytest_fixture(scope="module")
NO_LIMIT = 2 ** 64 - 1  # stk_remote_options: no cache limit


def run(*args):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"
    return p


@pytest.fixture(scope="module")
def stoker(s3):
    """The binding, with the fixture's AWS_* variables in this process (libstoker reads them at open)."""
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.update(s3.env)
    import stoker as mod
    return mod


@pytest.fixture(scope="module")
def data(s3, tmp_path_factory):
    """Local datasets and their remote copies: plain (image u8[40,40,3] + label, 160 records in 4
    shards), b (another seed, for mixtures), captions (a bytes field), z (image and caption zstd,
    small blocks), jpeg (pack's JPEG images of their own size)."""
    base = tmp_path_factory.mktemp("remote")
    tool = lambda n: os.path.join(TOOLS, n)  # noqa: E731
    d = {}
    gen = {"plain": ["-n", 160, "--size", 40, "--records-per-shard", 40],
           "b": ["-n", 90, "--size", 40, "--records-per-shard", 40, "--seed", 9],
           "captions": ["-n", 70, "--size", 16, "--records-per-shard", 30, "--captions"],
           "z": ["-n", 80, "--size", 24, "--records-per-shard", 30, "--captions", "--compress", "zstd",
                 "--block-size", 8192]}
    for name, args in gen.items():
        run(tool("shardgen"), "-q", *args, base / name)
    run(tool("rawgen"), "-q", "-n", 24, "--classes", 3, "--min-side", 40, "--max-side", 64, base / "raw")
    run(os.path.join(TOOLS, "..", "packer", "pack"), "-q", "-j", 1, "--max-side", 48, base / "raw", base / "jpeg")
    for name in list(gen) + ["jpeg"]:
        s3.upload_tree(str(base / name), f"ds/{name}")
        d[name] = (str(base / name), f"s3://{s3.bucket}/ds/{name}")
    d["base"] = base
    return d


def digest(b):
    """One batch as comparable values: position, records, and every field's bytes."""
    out = [int(b.epoch), int(b.index), [int(x) for x in b.records]]
    for name in sorted(b.keys()):
        v = b[name]
        if isinstance(v, list):
            out.append([hashlib.sha1(np.ascontiguousarray(x).tobytes() if not isinstance(x, bytes) else x)
                        .hexdigest() for x in v])
        else:
            out.append(hashlib.sha1(np.ascontiguousarray(v).tobytes()).hexdigest())
    return out


def epoch(stoker, path, resume_at=None, **kw):
    """One epoch's batch digests; with resume_at, the reader is closed after that many batches and a
    new one continues from the saved state."""
    got = []
    with stoker.Reader(path, **kw) as r:
        for b in r:
            got.append(digest(b))
            if resume_at is not None and len(got) == resume_at:
                state = r.state_dict()
                break
        else:
            return got
    with stoker.Reader(path, **kw) as r:
        r.load_state_dict(state)
        got += [digest(b) for b in r]
    return got


def dataset_bytes(local):
    return sum(os.path.getsize(os.path.join(local, f)) for f in os.listdir(local) if f.endswith(".stk"))


@pytest.mark.parametrize("order", ["sequential", "shuffle", "quasi"])
def test_orders_ranks_resume_equal_the_local_copy(stoker, data, tmp_path, order):
    local, remote = data["plain"]
    quarter = dataset_bytes(local) // 4
    common = dict(batch_size=12, order=order, seed=5, threads=2, quasi_block_bytes=24000, quasi_window=3)
    for limit in (quarter, NO_LIMIT):
        cache = str(tmp_path / f"cache-{limit}")
        for world in (1, 2):
            for rank in range(world):
                for resume in (None, 3):
                    kw = dict(common, rank=rank, world_size=world)
                    want = epoch(stoker, local, resume, **kw)
                    got = epoch(stoker, remote, resume, cache_dir=cache, cache_limit=limit, **kw)
                    assert got == want, (order, limit, world, rank, resume)
    with stoker.Reader(remote, cache_dir=str(tmp_path / "c"), **common) as r:
        io = r.io_stats()
        assert io["io"] == "direct" and io["engine"] == "remote" and "remote" in io["reason"]
        next(iter(r))
        st = r.remote_stats()
        assert st["remote"] and st["gets"] > 0 and st["requests"] > 0 and st["failures"] == 0



def test_remote_window_is_deeper(stoker, data, tmp_path):
    """A remote reader outside quasi blocks keeps 4 parts begun per worker (more range GETs queued at
    once, so more of them join), 2 until the stream's first batch is out (the ramp), and, with
    prefetch left to it, deepens prefetch to hold that window (4 batches at 2 threads in 2 parts)
    plus a batch per thread; a prefetch given is kept; batches equal the local copy's either way,
    and after a seek (which ramps again)."""
    local, remote = data["plain"]
    kw = dict(batch_size=12, order="shuffle", seed=5, threads=2, tuning="off")
    want = epoch(stoker, local, **kw)
    with stoker.Reader(remote, cache_dir=str(tmp_path / "c"), **kw) as r:
        reason = r.io_stats()["reason"]
        assert ("; 4 parts begun per worker (2 until the first batch is out; a window of 4 batches, "
                "prefetch 6)") in reason, reason
        assert [digest(b) for b in r] == want
        r.seek(0, 7)
        assert [digest(b) for b in r] == want[7:]
    with stoker.Reader(remote, cache_dir=str(tmp_path / "c"), prefetch=3, **kw) as r:
        assert "; a window of 4 batches, prefetch 3)" in r.io_stats()["reason"]
        assert [digest(b) for b in r] == want
    with stoker.Reader(local, **kw) as r:
        assert "parts begun" not in r.io_stats()["reason"]


def test_quasi_reads_whole_blocks(stoker, data, tmp_path):
    """Quasi order over s3:// reads each block's run of records with one GET per field, not a GET per
    record: a cold epoch of 160 records (blocks of 5) makes far fewer GETs than records, and equals
    the local copy (the label column, under one disk block a run, included)."""
    local, remote = data["plain"]
    kw = dict(batch_size=12, order="quasi", seed=5, threads=2, quasi_block_bytes=24000, quasi_window=3)
    want = epoch(stoker, local, **kw)
    with stoker.Reader(remote, cache_dir=str(tmp_path / "c"), **kw) as r:
        assert "quasi blocks read whole" in r.io_stats()["reason"]
        assert "parts begun" not in r.io_stats()["reason"]  # their block lists: two parts per worker
        got = [digest(b) for b in r]
        io, st = r.io_stats(), r.remote_stats()
    assert got == want
    assert io["quasi_blocks"] >= 160 // 5
    assert 0 < st["gets"] < 160, st

def test_bytes_compressed_and_jpeg_crop(stoker, data, tmp_path):
    for name, kw in (("captions", dict(batch_size=8, order="shuffle", seed=2)),
                     ("z", dict(batch_size=8, order="shuffle", seed=3)),
                     ("z", dict(batch_size=10, order="quasi", seed=3, quasi_block_bytes=4096)),
                     ("jpeg", dict(batch_size=5, order="shuffle", seed=4, crop="random:24")),
                     ("jpeg", dict(batch_size=5, crop="center:24")),
                     ("jpeg", dict(batch_size=5, order="shuffle", seed=1))):
        local, remote = data[name]
        for limit in (1 << 14, NO_LIMIT):  # a cache far too small: nothing kept, values copied at once
            cache = str(tmp_path / f"{name}-{limit}")
            assert epoch(stoker, remote, cache_dir=cache, cache_limit=limit, threads=2, **kw) == \
                epoch(stoker, local, threads=2, **kw), (name, kw, limit)


def test_mixture_of_a_remote_and_a_local_source(stoker, data, tmp_path):
    (a, ra), (b, _) = data["plain"], data["b"]
    kw = dict(batch_size=9, order="shuffle", seed=7, threads=2)
    want = epoch(stoker, [stoker.Source(a, weight=2), stoker.Source(b, weight=1)], **kw)
    got = epoch(stoker, [stoker.Source(ra, weight=2), stoker.Source(b, weight=1)],
                cache_dir=str(tmp_path / "c"), **kw)
    assert got == want
    assert epoch(stoker, [stoker.Source(ra, weight=2), stoker.Source(b, weight=1)], resume_at=4,
                 cache_dir=str(tmp_path / "c"), **kw) == want


CHILD = r"""
import hashlib, json, os, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, stoker
out, path, cache, slow = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
with open(out, "w") as f, stoker.Reader(path, batch_size=8, order="shuffle", seed=11, threads=2,
                                         cache_dir=cache or None, cache_limit=int(sys.argv[6])) as r:
    for b in r:
        f.write(json.dumps([int(b.index), [int(x) for x in b.records],
                            hashlib.sha1(np.ascontiguousarray(b["image"]).tobytes()).hexdigest()]) + "\n")
        f.flush()
        time.sleep(slow)
"""


def test_two_processes_share_a_cache_one_killed(stoker, s3, data, tmp_path):
    local, remote = data["plain"]
    cache = str(tmp_path / "shared")
    limit = dataset_bytes(local) // 2
    env = s3.environ()
    env["STOKER_LIB"] = os.environ["STOKER_LIB"]
    procs = []
    for who, slow in (("victim", 0.05), ("survivor", 0.01)):
        procs.append((who, tmp_path / f"{who}.jsonl", subprocess.Popen(
            [sys.executable, "-c", CHILD, os.path.join(ROOT, "python"), str(tmp_path / f"{who}.jsonl"), remote,
             cache, str(slow), str(limit)], env=env)))
    victim = procs[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # mid-epoch: some batches out, not all
        if os.path.exists(victim[1]) and len(open(victim[1]).read().splitlines()) >= 3:
            break
        time.sleep(0.02)
    victim[2].send_signal(signal.SIGKILL)
    victim[2].wait()
    assert procs[1][2].wait(timeout=120) == 0
    survivor = [line for line in open(procs[1][1]).read().splitlines()]
    want = []
    with stoker.Reader(local, batch_size=8, order="shuffle", seed=11, threads=2) as r:
        import json
        for b in r:
            want.append(json.dumps([int(b.index), [int(x) for x in b.records],
                                    hashlib.sha1(np.ascontiguousarray(b["image"]).tobytes()).hexdigest()]))
    assert survivor == want
    # a reader after both: the cache the killed process left is still right
    assert epoch(stoker, remote, cache_dir=cache, cache_limit=limit, batch_size=8, order="shuffle", seed=11) == \
        epoch(stoker, local, batch_size=8, order="shuffle", seed=11)


def test_faults_survived_and_counted(stoker, s3, data, tmp_path):
    local, remote = data["plain"]
    kw = dict(batch_size=10, order="shuffle", seed=13, threads=2)
    want = epoch(stoker, local, **kw)
    try:
        s3.plan(rules=[{"match": "ds/plain/", "method": "GET", "fault": "503", "count": 3},
                       {"match": "ds/plain/", "method": "GET", "fault": "reset", "count": 2},
                       {"match": "ds/plain/", "method": "GET", "fault": "truncate", "count": 2},
                       # abandoned after the client's stall timeout (30 s, remote.h) and retried
                       {"match": "ds/plain/shard", "method": "GET", "fault": "stall", "count": 1}],
                faults="503:0.05,reset:0.03,truncate:0.03,latency:2ms,seed:5")
        with stoker.Reader(remote, cache_dir=str(tmp_path / "c"), cache_limit=NO_LIMIT, **kw) as r:
            got = [digest(b) for b in r]
            st = r.remote_stats()
    finally:
        s3.clear_plan()
    assert got == want
    assert st["retries"] >= 8 and st["retries_5xx"] >= 3 and st["retries_network"] >= 5, st
    assert st["failures"] == 0, st


def test_bytes_fetched_bounded_and_a_big_cache_fetches_nothing(stoker, data, tmp_path):
    local, remote = data["plain"]
    selected = 160 * 40 * 40 * 3  # the image field's bytes
    kw = dict(batch_size=16, seed=3, threads=2, fields="image")
    for order in ("shuffle", "sequential", "quasi"):  # a quarter-size cache: no thrash
        with stoker.Reader(remote, order=order, cache_dir=str(tmp_path / order),
                           cache_limit=dataset_bytes(local) // 4, **kw) as r:
            r.set_epochs(3)  # nothing read past the third epoch
            while r.next_batch() is not None:
                pass
            st = r.remote_stats()
        assert st["get_bytes"] <= 3 * 1.05 * selected, (order, st)
        assert st["cache_hit_bytes"] > 0.1 * selected, (order, st)  # the quarter kept serves every epoch
    cache = str(tmp_path / "big")
    with stoker.Reader(remote, order="shuffle", cache_dir=cache, cache_limit=NO_LIMIT, **kw) as r:
        r.set_epochs(1)
        while r.next_batch() is not None:
            pass
        first = r.remote_stats()
    assert selected <= first["get_bytes"] <= 1.05 * selected, first
    with stoker.Reader(remote, order="shuffle", cache_dir=cache, cache_limit=NO_LIMIT, **kw) as r:
        r.seek(1, 0)
        r.set_epochs(3)
        while r.next_batch() is not None:
            pass
        later = r.remote_stats()
    assert later["gets"] == 0 and later["get_bytes"] == 0, later  # epochs 1 and 2 from the cache
    assert later["cache_hit_bytes"] >= 2 * selected, later
    assert later["bytes_fetched"] < 0.05 * selected, later  # the manifest, no record


def test_damaged_cache_refetched(stoker, data, tmp_path):
    """Bytes the cache holds are checked when read: flipped on disk, they are fetched again, and the
    batches are still the local copy's."""
    local, remote = data["plain"]
    kw = dict(batch_size=16, order="shuffle", seed=21, threads=2)
    cache = str(tmp_path / "c")
    want = epoch(stoker, local, **kw)
    assert epoch(stoker, remote, cache_dir=cache, cache_limit=NO_LIMIT, **kw) == want
    damaged = 0
    for root, _, files in os.walk(cache):
        for name in files:
            if not name.endswith(".data"):
                continue
            path = os.path.join(root, name)
            size = os.path.getsize(path)
            with open(path, "r+b") as f:  # bytes well inside the image column, every 4 KiB
                for off in range(size // 4, size // 2, 4096):
                    f.seek(off)
                    b = f.read(1)
                    f.seek(off)
                    f.write(bytes([b[0] ^ 0x5A]) if b else b"\x5a")
                    damaged += 1
    assert damaged > 0
    with stoker.Reader(remote, cache_dir=cache, cache_limit=NO_LIMIT, **kw) as r:
        got = [digest(b) for b in r]
        st = r.remote_stats()
    assert got == want
    assert st["get_bytes"] > 0 and st["cache_hits"] > 0, st
