"""Distributed evaluation under torchrun (two processes, gloo, CPU): torchvision's evaluate() counts
every record once with the README's evaluation loader (tail="partial"), and the default tail pads
as DistributedSampler does."""
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import shardgen

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "eval_child.py")
# what a torch.distributed that cannot start on this machine says (no loopback, no sockets)
CANNOT_START = ("Connection refused", "Network is unreachable", "Cannot assign requested address",
                "Address family not supported", "RendezvousConnectionError", "DistNetworkError")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_evaluate_counts_300_images_as_300_under_torchrun(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip(f"torch {torch.__version__} has no torch.distributed with gloo: nothing to launch")
    ds = shardgen(tmp_path / "val", 300, per_shard=64)
    out = tmp_path / "eval.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           # Debian's torch 1.13 under Python 3.11 reads the default "0" of --redirects and --tee as None
           # (3.11's IntFlag iteration skips the 0 member) and fails to start: name a value that parses
           "--redirects", "1", "--tee", "1", "--log_dir", str(tmp_path / "logs"), CHILD, ds, str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0 and any(s in p.stderr for s in CANNOT_START):
        print(f"torch.distributed cannot start here: {p.stderr[-600:]}")
        pytest.skip("torch.distributed cannot start here (see the printed output)")
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.loads(out.read_text())

    # the default across ranks: padded as DistributedSampler pads, 300 counted as 320 (ceil(300/64) * 64)
    pad = res["default"]
    assert pad["dataset"] == 300 and pad["counted"] == 320
    assert [r["tail"] for r in pad["ranks"]] == ["pad", "pad"]
    assert [r["sizes"] for r in pad["ranks"]] == [[32] * 5, [32] * 5]

    # the README's evaluation loader: every image once, 300 counted as 300
    part = res["partial"]
    assert part["dataset"] == 300 and part["counted"] == 300
    assert [r["sizes"] for r in part["ranks"]] == [[32] * 5, [32] * 4 + [12]]
    seen = [h for r in part["ranks"] for h in r["images"]]
    assert len(seen) == len(set(seen)) == 300
    assert set(seen) == {h for r in pad["ranks"] for h in r["images"]}   # the same 300 images
    assert [(r["len"], r["sampler"]) for r in part["ranks"]] == [(5, 160), (5, 140)]

    # a rank whose share of the last global batch is empty stops a batch earlier: no empty batch
    big = res["partial100"]
    assert big["counted"] == 300
    assert [r["sizes"] for r in big["ranks"]] == [[100, 100], [100]]
    assert [(r["len"], r["sampler"]) for r in big["ranks"]] == [(2, 200), (1, 100)]
    assert len({h for r in big["ranks"] for h in r["images"]}) == 300
