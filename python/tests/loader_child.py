"""A process that reads a stoker.torch.DataLoader the way a training script does, for the tests
that need a fresh process (resume in a new process, kill -9, torch.distributed).

    loader_child.py DATASET --log FILE [--batch B] [--seed S] [--shuffle] [--transform]
        [--epochs E] [--state-in FILE] [--state-out FILE --state-after N] [--kill-after N]
        [--checkpoint-dir DIR --checkpoint-every N] [--dist RANK WORLD INIT_FILE] [--tail T]

Each batch appends one JSON line to --log: {"epoch", "batch", "images": [a hash per
sample], "labels"}, flushed, so what a killed process read is on disk. --state-after N
writes state_dict() to --state-out after N batches (counted over the whole run);
--kill-after N sends SIGKILL to itself after N batches (as kill -9 would).
"""
import argparse
import hashlib
import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package from the source tree

import torch  # noqa: E402

import stoker  # noqa: E402
import stoker.torch  # noqa: E402


def sample_hashes(images):
    images = images.contiguous()
    return [hashlib.sha1(images[i].numpy().tobytes()).hexdigest()[:16] for i in range(images.shape[0])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--log", required=True)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shuffle", action="store_true")
    ap.add_argument("--transform", action="store_true")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--state-in")
    ap.add_argument("--state-out")
    ap.add_argument("--state-after", type=int, default=-1)
    ap.add_argument("--kill-after", type=int, default=-1)
    ap.add_argument("--checkpoint-dir")
    ap.add_argument("--checkpoint-every", type=int)
    ap.add_argument("--dist", nargs=3)
    ap.add_argument("--tail")
    a = ap.parse_args()

    if a.dist:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{a.dist[2]}", rank=int(a.dist[0]),
                                world_size=int(a.dist[1]))
    kw = {}
    if a.transform:
        kw["transform"] = stoker.Transform.imagenet(train=True, size=6)
    if a.checkpoint_dir:
        kw.update(checkpoint_dir=a.checkpoint_dir, checkpoint_every=a.checkpoint_every)
    if a.tail:
        kw["tail"] = a.tail
    loader = stoker.torch.DataLoader(a.dataset, batch_size=a.batch, shuffle=a.shuffle, seed=a.seed, num_workers=2,
                                     **kw)
    if a.state_in:
        with open(a.state_in) as f:
            loader.load_state_dict(json.load(f))
    done = 0
    with open(a.log, "a") as log:
        for _ in range(a.epochs):
            for i, (image, label) in loader.enumerate():
                assert isinstance(image, torch.Tensor) and isinstance(label, torch.Tensor)
                line = {"epoch": loader.epoch, "batch": i, "images": sample_hashes(image),
                        "labels": label.tolist(), "rank": loader.rank, "world": loader.world_size,
                        "tail": loader.tail, "len": len(loader)}
                log.write(json.dumps(line) + "\n")
                log.flush()
                done += 1
                if done == a.state_after:
                    with open(a.state_out, "w") as f:
                        json.dump(loader.state_dict(), f)
                if done == a.kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
    if a.dist:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
