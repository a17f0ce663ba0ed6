"""Fixtures for the stoker binding's tests.

Run from the repository after building (`cmake -S . -B build && cmake --build build`):
    /usr/bin/python3 -m pytest python/tests
ctest runs the same (tests/python). Found through the environment when set:
STOKER_LIB (libstoker.so; default build/reader/libstoker.so) and STOKER_TOOLS
(the folder with shardgen and shardread; default build/tools; the older name
STK_TOOLS is still read).
"""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
ROOT = os.path.dirname(PKG)

if PKG not in sys.path:
    sys.path.insert(0, PKG)  # the package from the source tree
if not os.environ.get("STOKER_LIB"):
    built = os.path.join(ROOT, "build", "reader", "libstoker.so")
    if os.path.exists(built):
        os.environ["STOKER_LIB"] = built

TOOLS = os.environ.get("STOKER_TOOLS") or os.environ.get("STK_TOOLS") or os.path.join(ROOT, "build", "tools")


def records(path, field="i"):
    """Field `field` of every record of the dataset at `path`, in order."""
    import numpy as np
    import stoker
    with stoker.Reader(path, batch_size=64, tail="partial") as r:
        return [x for b in r for x in np.asarray(b[field]).tolist()]


def expected_records(make, n):
    """The "i" of every sample make() gives for inputs 0..n-1, in order (inputs that raise give none)."""
    out = []
    for i in range(n):
        try:
            r = make(i)
        except ValueError:
            continue
        out += [s["i"] for s in ([] if r is None else r if isinstance(r, list) else [r])]
    return out


def tool(name):
    path = os.path.join(TOOLS, name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} missing: build the project first (or set STOKER_TOOLS)")
    return path


def run_tool(*args, check=True):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))}: exit {p.returncode}\n{p.stderr}")
    return p


def shardgen(out, n, size=8, classes=5, per_shard=17, captions=False, seed=0, aspect=False):
    args = [tool("shardgen"), "-q", "-n", n, "--size", size, "--classes", classes,
            "--records-per-shard", per_shard, "--seed", seed]
    if captions:
        args.append("--captions")
    if aspect:
        args.append("--aspect")
    run_tool(*args, out)
    return str(out)


@pytest.fixture(scope="session")
def ds(tmp_path_factory):
    """103 records of image u8[8,8,3] + label i64 in 7 shards of 17 (the last short)."""
    return shardgen(tmp_path_factory.mktemp("ds") / "ds", 103)


@pytest.fixture(scope="session")
def ds_captions(tmp_path_factory):
    """40 records with a variable-length 'caption' field."""
    return shardgen(tmp_path_factory.mktemp("dscap") / "ds", 40, captions=True, per_shard=16)


@pytest.fixture(scope="session")
def ds_aspect(tmp_path_factory):
    """30 records whose 'image' is u8[*,*,3]: each its own height and width (longer side 12)."""
    return shardgen(tmp_path_factory.mktemp("dsasp") / "ds", 30, size=12, per_shard=11, aspect=True)


@pytest.fixture
def ds_copy(ds, tmp_path):
    """A private copy of `ds` a test may damage."""
    dst = tmp_path / "ds"
    shutil.copytree(ds, dst)
    return str(dst)


def dump_order(dataset, batch, order="sequential", seed=0, epochs=1, rank=0, world=1, tail="pad",
               extra=()):
    """`shardread --dump-order`: one list of global record indices per batch."""
    p = run_tool(tool("shardread"), "-q", "--dump-order", "-b", batch, "--order", order, "--seed", seed,
                 "-e", epochs, "--rank", rank, "--world-size", world, "--tail", tail, "-f", "label",
                 *extra, dataset)
    return [[int(x) for x in line.split()] for line in p.stdout.splitlines()]
