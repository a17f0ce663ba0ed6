"""Replacing a dataset on a disk that fills (issue 39): Writer(force=True) and stoker.pack(force=True)
build the new dataset beside the old one, so a full disk leaves the old one readable, and the error says
so; a replace that fits leaves only the new dataset's files. The disk is a small tmpfs mounted for the
test (root only: skipped with the reason otherwise) and unmounted after it."""
import os
import subprocess

import numpy as np
import pytest

import stoker
from conftest import run_tool, tool

F = {"x": stoker.Tensor("uint8", (4096,)), "i": stoker.Scalar("int64")}


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("not root: mounting a small tmpfs to fill needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs on {mnt}: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _write(path, n, seed, **kw):
    with stoker.Writer(path, F, records_per_shard=kw.pop("per", 4), **kw) as w:
        for i in range(n):
            w.write({"x": np.full(4096, (seed + i) % 251, np.uint8), "i": seed * 1000 + i})


def _records(path):
    with stoker.Reader(path, batch_size=1, tail="partial") as r:
        return [int(b["i"][0]) for b in r]


def _files(path):
    return sorted(n for n in os.listdir(path) if not n.startswith("."))


def test_writer_force_on_a_full_disk_keeps_the_old_dataset(small_disk):
    ds = small_disk / "ds"
    _write(ds, 8, 1)
    before = _files(ds)
    assert before == ["manifest.json", "shard-00000.stk", "shard-00001.stk"]
    with pytest.raises(stoker.Error, match=f"No space left on device.*the old dataset in {ds} is intact"):
        _write(ds, 200, 2, per=1, force=True)  # ~4 MB: fits neither beside it nor in its place
    assert _files(ds) == before
    assert _records(ds) == [1000 + i for i in range(8)]
    run_tool(tool("shardcheck"), "--full", ds)
    # a replace that fits: only the new dataset's files are left
    _write(ds, 5, 3, force=True)
    assert _files(ds) == ["manifest.json", "shard.g1-00000.stk", "shard.g1-00001.stk"]
    assert _records(ds) == [3000 + i for i in range(5)]
    # the old behaviour only by name: the old dataset goes first
    with pytest.raises(stoker.Error) as e:
        _write(ds, 200, 2, per=1, force="in_place")
    assert "is intact" not in str(e.value)
    assert not (ds / "manifest.json").exists()


def _make(i):
    return {"x": np.full(4096, i % 251, np.uint8), "i": i}


def test_pack_force_on_a_full_disk_keeps_the_old_dataset(small_disk):
    out = small_disk / "ds"
    stoker.pack(_make, range(8), out, F, workers=0, progress=False, records_per_shard=4)
    before = _files(out)
    with pytest.raises(stoker.Error, match=f"the old dataset in {out} is intact"):
        stoker.pack(_make, range(200), out, F, workers=0, progress=False, records_per_shard=1, force=True)
    assert _files(out) == before
    assert _records(out) == list(range(8))
    stoker.pack(_make, range(6), out, F, workers=0, progress=False, records_per_shard=4, force=True)
    assert _files(out) == ["manifest.json", "shard.g1-00000.stk", "shard.g1-00001.stk", "skipped.tsv"]
    assert _records(out) == list(range(6))
