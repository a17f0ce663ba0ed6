"""A training script with its own model checkpoint, for test_checkpoint_restart.py: run(cfg) runs it
until it ends or kills itself with SIGKILL at a named point; the same cfg again is the restarted
job. `ckpt_child.py --serve` imports torch once and runs each cfg (a JSON line on stdin) in a
process forked for it, answering with its exit status (-9: SIGKILL) on a line of stdout.

The "model" is what it trained on: one entry per batch, [the epoch of the script's loop,
loader.epoch, the batch index from loader.enumerate(), a hash of the batch's images]. The
script saves it (atomically, as a careful torch.save would) with its start epoch, in one of
three shapes, the loader's position kept by $STOKER_CHECKPOINT_DIR:
  epoch   after each epoch's loop only (torchvision's train.py)
  step    also after every `every`-th batch of an epoch, declared with checkpoint_every=
  state   like step, the loader's state_dict() saved with the model and loaded back
On restart the model comes back from its file: what it trained on up to its last save, then
what it trains on after. Warnings the loader gives go to cfg["warnings"], one per line.
"""
import hashlib
import json
import os
import signal
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # the package from the source tree

import torch  # noqa: E402,F401  (imported once by the server the runs fork from)

import stoker.torch  # noqa: E402

BATCH, SEED = 8, 7


def _save(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def run(cfg):
    """cfg: dataset, ckdir, model, warnings, mode, set_epoch, epochs, every, kill (None or
    [point, epoch, batch]: "handed" right after batch `batch` was handed out, "saved" right
    after the script's save that follows batch `batch`, "end" when the loop of `epoch` is over
    and the script has not saved yet, "endsaved" right after its save of `epoch`)."""
    os.environ["STOKER_CHECKPOINT_DIR"] = cfg["ckdir"]
    os.environ.pop("STOKER_CHECKPOINT_EVERY", None)
    mode, every, kill = cfg["mode"], cfg["every"], cfg["kill"]
    kill = tuple(kill) if kill else None
    model = {"epoch": 0, "trained": []}
    if os.path.exists(cfg["model"]):
        with open(cfg["model"]) as f:
            model = json.load(f)
    trained = model["trained"]
    kw = {"checkpoint_every": every} if mode == "step" else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = stoker.torch.DataLoader(cfg["dataset"], batch_size=BATCH, shuffle=True, seed=SEED, num_workers=2,
                                         **kw)
        if mode == "state" and "loader" in model:
            loader.load_state_dict(model["loader"])

        def save(start_epoch):
            m = {"epoch": start_epoch, "trained": trained}
            if mode == "state":
                m["loader"] = loader.state_dict()
            _save(cfg["model"], m)

        def note():
            if not caught:
                return
            with open(cfg["warnings"], "a") as f:
                for w in caught:
                    f.write(f"{w.category.__name__}: {w.message}\n")
            del caught[:]

        for epoch in range(model["epoch"], cfg["epochs"]):
            if cfg["set_epoch"]:
                loader.set_epoch(epoch)
            for i, (image, _) in loader.enumerate():
                note()
                if kill == ("handed", epoch, i):
                    _die()
                h = hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()[:16]
                trained.append([epoch, loader.epoch, i, h])
                if mode != "epoch" and (i + 1) % every == 0:
                    save(epoch)
                    if kill == ("saved", epoch, i):
                        _die()
            note()
            if kill == ("end", epoch, None):
                _die()
            save(epoch + 1)
            if kill == ("endsaved", epoch, None):
                _die()
        loader.close()


def serve():
    for line in sys.stdin:
        cfg = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                run(cfg)
                code = 0
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(code, flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
