"""stoker.torch.DataLoader's automatic checkpoints ($STOKER_CHECKPOINT_DIR) exact from the model's
view: a script killed with SIGKILL anywhere and started again, restoring its own model
checkpoint, has trained on every batch of every epoch once, each under the epoch of its loop,
the same batches as a run never interrupted. Where the loader cannot know, one ResumeWarning
line says so. The kill matrix runs ckpt_child.run in processes forked from one server that
imported torch once; it runs in the plain test stage only (not under the sanitizers)."""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from conftest import shardgen

torch = pytest.importorskip("torch", reason="python3-torch is not installed (apt-get install python3-torch)")
import stoker.torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCHS, EVERY, N = 3, 50, 125  # 1,000 records in batches of 8: 125 an epoch; step saves after batches 49, 99
SANITIZED = any(s in os.environ.get("LD_PRELOAD", "") for s in ("asan", "ubsan", "tsan"))
plain_stage_only = pytest.mark.skipif(SANITIZED, reason="the kill matrix runs in the plain test stage only")

KILLS = {
    "first-epoch": ["handed", 0, 60],     # before the script has a checkpoint of its own (step: after its first)
    "mid-batch": ["handed", 1, 37],       # right after a batch was handed out
    "after-save": ["handed", 1, 100],     # step: the loop asked for the batch after a save; the old default save
    "before-save": ["handed", 1, 99],     # step: the batch the script saves after, handed out, not trained
    "step-saved": ["saved", 1, 99],       # step: right after the script's save, before the loop asks again
    "loop-end": ["end", 1, None],         # the epoch's loop is over, the script's save not written
    "epoch-saved": ["endsaved", 1, None],  # the script's save of the epoch written, the next loop not begun
    "last-step-saved": ["saved", 1, 124],  # step, every 25: its save after the epoch's last batch, the loop not over
}
EPOCH_END_WARNING = r"^ResumeWarning: stoker\.torch\.DataLoader: .*call loader\.set_epoch\(epoch\) before each epoch"
STEP_WARNING = r"^ResumeWarning: stoker\.torch\.DataLoader: .*cannot tell whether the script's save after it"


def expectation(mode, set_epoch, kill):
    """(what the restored model trained on: "exact", "repeats" (the batches since the save
    before the last, twice) or "mislabelled", warning regex or None)."""
    if kill in ("loop-end", "epoch-saved") and not set_epoch and mode != "state":
        return ("exact" if kill == "loop-end" else "mislabelled"), EPOCH_END_WARNING
    if mode == "step" and kill in ("before-save", "step-saved", "last-step-saved"):
        return ("exact" if kill == "before-save" else "repeats"), STEP_WARNING
    return "exact", None


MATRIX = [(mode, se, kill, EVERY) for mode in ("epoch", "step", "state") for se in (True, False) for kill in KILLS
          if (mode != "epoch" or kill != "step-saved") and kill != "last-step-saved"]
MATRIX += [("step", se, kill, 25) for se in (True, False) for kill in ("loop-end", "last-step-saved")]  # 25 | 125


@pytest.fixture(scope="module")
def ds1000(tmp_path_factory):
    """1,000 records of u8[4,4,3] + label: 125 batches of 8 an epoch."""
    return shardgen(tmp_path_factory.mktemp("ds1000") / "ds", 1000, size=4, per_shard=100)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`ckpt_child.py --serve`: torch and stoker.torch imported once, each run a fork of it."""
    err = tmp_path_factory.mktemp("server") / "stderr.txt"
    with open(err, "w") as f:
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "ckpt_child.py"), "--serve"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=f, text=True)
    p.stderr_path = err
    yield p
    p.stdin.close()
    p.wait(timeout=60)


def launch(server, cfg):
    """The exit status of ckpt_child.run(cfg) in a process of its own (-9: it killed itself)."""
    server.stdin.write(json.dumps(cfg) + "\n")
    server.stdin.flush()
    line = server.stdout.readline()
    if not line:
        raise AssertionError(f"ckpt_child.py --serve ended: {open(server.stderr_path).read()}")
    code = int(line)
    if code not in (0, -signal.SIGKILL):
        raise AssertionError(f"ckpt_child.run: exit {code}: {open(server.stderr_path).read()[-3000:]}")
    return code


def job(tmp, ds, mode, set_epoch, kill, every=EVERY):
    return {"dataset": ds, "ckdir": str(tmp / "ck"), "model": str(tmp / "model.json"),
            "warnings": str(tmp / "warnings.txt"), "mode": mode, "set_epoch": set_epoch, "epochs": EPOCHS,
            "every": every, "kill": kill}


def trained(cfg):
    with open(cfg["model"]) as f:
        return json.load(f)["trained"]


def warning_lines(cfg):
    if not os.path.exists(cfg["warnings"]):
        return []
    with open(cfg["warnings"]) as f:
        return f.read().splitlines()


@pytest.fixture(scope="module")
def reference(ds1000, server, tmp_path_factory):
    """The uninterrupted run: [loop epoch, loader.epoch, batch index, batch hash] per batch."""
    cfg = job(tmp_path_factory.mktemp("ref"), ds1000, "epoch", True, None)
    assert launch(server, cfg) == 0
    ref = trained(cfg)
    assert [t[:3] for t in ref] == [[e, e, i] for e in range(EPOCHS) for i in range(N)]
    assert len({t[3] for t in ref}) == len(ref)   # every batch of every epoch distinct: a mix-up shows
    assert warning_lines(cfg) == []
    return ref


@plain_stage_only
@pytest.mark.parametrize("mode,set_epoch,kill,every", MATRIX,
                         ids=[f"{m}-{'set_epoch' if s else 'no_set_epoch'}-{k}" + (f"-every{n}" if n != EVERY else "")
                              for m, s, k, n in MATRIX])
def test_sigkill_and_restart_trains_the_model_on_every_batch_once(ds1000, server, reference, tmp_path, mode,
                                                                   set_epoch, kill, every):
    outcome, warning = expectation(mode, set_epoch, kill)
    cfg = job(tmp_path, ds1000, mode, set_epoch, KILLS[kill], every)
    assert launch(server, cfg) == -signal.SIGKILL
    assert warning_lines(cfg) == []
    cfg["kill"] = None                                      # the same command again
    assert launch(server, cfg) == 0
    got, lines = trained(cfg), warning_lines(cfg)
    if warning is None:
        assert lines == []
    else:
        assert len(lines) == 1 and re.search(warning, lines[0]), lines
    if outcome == "exact":
        first = next((i for i, (a, b) in enumerate(zip(got, reference)) if a != b), None)
        assert got == reference, f"first difference at entry {first}: {got[first:first + 2]} vs " \
                                 f"{reference[first:first + 2]}; {len(got)} entries, {len(reference)} wanted"
    elif outcome == "repeats":      # saved after batch km - 1, resumed from the save before: twice, none lost
        km = KILLS[kill][2] + 1
        assert got == reference[:N + km] + reference[N + km - every:]
    else:                           # the loader repeats epoch 1 while the loop is in 2: loader.epoch says so
        assert got[:2 * N] == reference[:2 * N]
        assert got[2 * N][:2] == [2, 1] and got[2 * N][3] == reference[N + (100 if mode == "step" else 0)][3]


# ------------------------------------------------------------------ in one process (also under the sanitizers)
def read_epoch(loader):
    return [image.clone() for image, _ in loader]


def test_set_epoch_from_zero_without_a_checkpoint_says_it_drops_the_position(ds1000, tmp_path):
    """A script with no checkpoint of its own restarts at set_epoch(0): it gets epoch 0 from its
    first batch (its model is new) and one ResumeWarning saying the saved position is dropped."""
    kw = dict(batch_size=8, shuffle=True, seed=3, num_workers=2, checkpoint_dir=tmp_path)
    with stoker.torch.DataLoader(ds1000, **kw) as a:
        a.set_epoch(0)
        e0 = read_epoch(a)
        a.set_epoch(1)
        read_epoch(a)
        a.set_epoch(2)
        next(iter(a))
    with stoker.torch.DataLoader(ds1000, **kw) as b:
        assert b.epoch == 2                     # the saved position: epoch 2 from its start
        b.set_epoch(0)
        assert b.epoch == 0
        with pytest.warns(stoker.torch.ResumeWarning, match=r"set_epoch\(0\) while the saved position is batch 0 "
                                                            r"of epoch 2: starting epoch 0 .* dropped") as w:
            got = read_epoch(b)
        assert len(w) == 1 and "\n" not in str(w[0].message)
        assert all(torch.equal(x, y) for x, y in zip(got, e0)) and len(got) == len(e0) == N
    with open(tmp_path / "stoker-ds.rank0.json") as f:
        doc = json.load(f)
    assert (doc["saved"]["epoch"], doc["maybe"]) == (0, {"epoch": 0, "batch": N, "at": "end"})


def test_epoch_tells_the_truth_after_a_restore(ds1000, tmp_path):
    kw = dict(batch_size=8, shuffle=True, seed=3, num_workers=2)
    with stoker.torch.DataLoader(ds1000, **kw) as a:
        read_epoch(a)
        finished = a.state_dict()               # epoch 0's loop over
    assert finished["_iterator_finished"]
    with stoker.torch.DataLoader(ds1000, **kw) as b:
        b.load_state_dict(finished)
        assert b.epoch == 1                     # what the next iter() yields, not the loaded epoch
        it = iter(b)
        assert b.epoch == it.epoch == 1
    with stoker.torch.DataLoader(ds1000, **kw, checkpoint_dir=tmp_path) as c:
        read_epoch(c)                           # the file: epoch 0 saved from its start, its loop over
    with stoker.torch.DataLoader(ds1000, **kw, checkpoint_dir=tmp_path) as d:
        d.set_epoch(1)                          # the script's checkpoint of epoch 0 was written
        assert d.epoch == 1
    with stoker.torch.DataLoader(ds1000, **kw, checkpoint_dir=tmp_path) as e:
        e.set_epoch(0)                          # it was not: epoch 0 again, from its start
        assert e.epoch == 0
        assert iter(e).epoch == 0 and e.reader.position() == (0, 0)


def test_checkpoint_every_is_the_declared_model_cadence(ds1000, tmp_path, monkeypatch):
    """Without checkpoint_every the file moves at epoch boundaries only (a restart begins the
    epoch); with it, at every N-th batch too. A bad declaration is refused, naming it."""
    kw = dict(batch_size=8, shuffle=True, seed=3, num_workers=2, checkpoint_dir=tmp_path)
    path = tmp_path / "stoker-ds.rank0.json"
    with stoker.torch.DataLoader(ds1000, **kw) as a:
        it = iter(a)
        for _ in range(110):
            next(it)
        assert json.load(open(path))["saved"]["_num_yielded"] == 0 and json.load(open(path))["maybe"] is None
    with stoker.torch.DataLoader(ds1000, **kw) as b:
        assert b.state_dict()["_num_yielded"] == 0
    path.unlink()
    with stoker.torch.DataLoader(ds1000, checkpoint_every=50, **kw) as c:
        it = iter(c)
        for _ in range(101):                     # batches 0..100 handed out: the loop asked for 100
            next(it)
        assert json.load(open(path))["saved"]["_num_yielded"] == 100
    monkeypatch.setenv("STOKER_CHECKPOINT_EVERY", "0")
    with pytest.raises(ValueError, match="STOKER_CHECKPOINT_EVERY"):
        stoker.torch.DataLoader(ds1000, **kw)
    with pytest.raises(ValueError, match="checkpoint_every"):
        stoker.torch.DataLoader(ds1000, checkpoint_every=1.5, **kw)


def test_a_damaged_checkpoint_file_is_refused_naming_it(ds1000, tmp_path):
    kw = dict(batch_size=8, shuffle=True, seed=3, num_workers=2, checkpoint_dir=tmp_path)
    with stoker.torch.DataLoader(ds1000, **kw) as a:
        next(iter(a))
    path = tmp_path / "stoker-ds.rank0.json"
    doc = json.load(open(path))
    for bad in (dict(doc, maybe={"epoch": 5, "batch": 3}), dict(doc, saved=[1]), dict(doc, stoker_loader_checkpoint=9)):
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=r"stoker-ds\.rank0\.json.*delete it"):
            stoker.torch.DataLoader(ds1000, **kw)
