"""examples/train_imagenet.py on the CPU, a few steps on a tiny packed dataset: it trains,
evaluates and prints the fetch-vs-step split every epoch; killed (SIGKILL) after a
checkpoint and resumed, it reads the batches an uninterrupted run reads, and trains alike."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, run_tool, tool

pytest.importorskip("torch", reason="python3-torch is not installed (apt-get install python3-torch)")
pytest.importorskip("torchvision", reason="python3-torchvision is not installed")

EXAMPLE = os.path.join(ROOT, "examples", "train_imagenet.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """DATA/train (24 images, 3 classes) and DATA/val (10), packed at 36 px."""
    base = tmp_path_factory.mktemp("imagenet")
    pack = os.path.join(os.path.dirname(tool("rawgen")), "..", "packer", "pack")
    for split, n, seed in (("train", 24, 0), ("val", 10, 1)):
        run_tool(tool("rawgen"), "-q", "-n", n, "--classes", 3, "--seed", seed, "--min-side", 40, "--max-side", 64,
                 base / f"raw-{split}")
        run_tool(pack, "-q", "-j", 1, "--size", 36, base / f"raw-{split}", base / "data" / split)
    return base / "data"


def train(data, out, log, *extra, check=True):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("WORLD_SIZE", None)
    args = [sys.executable, EXAMPLE, str(data), "--model", "resnet18", "--epochs", "2", "--batch-size", "4",
            "--image-size", "32", "--workers", "1", "--checkpoint-every", "4", "--print-every", "5",
            "--output-dir", str(out), "--log-batches", str(log), *map(str, extra)]
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"train_imagenet.py: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def steps(log):
    """[(epoch, step, batch hash, loss)] in the order written."""
    with open(log) as f:
        return [(int(e), int(s), h, float(loss)) for e, s, h, loss in (line.split() for line in f)]


def test_trains_evaluates_and_prints_the_split(data, tmp_path):
    p = train(data, tmp_path / "run", tmp_path / "log")
    lines = [line for line in p.stdout.splitlines() if line.startswith("epoch ") and ": " in line]
    assert len(lines) == 2, p.stdout
    for line in lines:
        assert "6 steps, fetch " in line and "ms per step" in line and "waiting for data" in line, line
        assert "eval on 10 records: loss " in line and "nan" not in line, line   # every record, once
    log = steps(tmp_path / "log")
    assert [s for _, s, _, _ in log] == list(range(1, 13))
    assert len({h for _, _, h, _ in log}) == 12                                    # 12 distinct batches
    assert os.path.exists(tmp_path / "run" / "checkpoint.pth")


def test_killed_after_a_checkpoint_and_resumed_equals_an_uninterrupted_run(data, tmp_path):
    train(data, tmp_path / "full", tmp_path / "full.log")
    full = steps(tmp_path / "full.log")
    # checkpoints after steps 4, 6 (epoch 0's end) and 8; killed after step 10
    p = train(data, tmp_path / "run", tmp_path / "run.log", "--crash-at-step", 10, check=False)
    assert p.returncode == -signal.SIGKILL, p.stderr
    killed = steps(tmp_path / "run.log")
    assert [s for _, s, _, _ in killed] == list(range(1, 11))
    p = train(data, tmp_path / "run", tmp_path / "run.log", "--resume", tmp_path / "run" / "checkpoint.pth")
    assert "resumed from" in p.stdout and "epoch 1, step 8" in p.stdout, p.stdout
    resumed = steps(tmp_path / "run.log")[10:]
    assert [s for _, s, _, _ in resumed] == [9, 10, 11, 12]                       # steps 9, 10 again
    assert [x[:3] for x in killed[:8] + resumed] == [x[:3] for x in full]         # the same batches
    assert [x[:3] for x in resumed[:2]] == [x[:3] for x in killed[8:10]]
    for got, want in zip(killed[:8] + resumed, full):                              # and the same training
        assert got[3] == pytest.approx(want[3], rel=1e-4, abs=1e-5), (got, want)
