#!/usr/bin/env python3
"""examples/train_pytorch.py - a PyTorch training loop fed by stoker.

    .venv/bin/python examples/train_pytorch.py [DATASET] [--device auto|cpu|cuda] [--epochs 2]
        [--batch-size 64] [--log-every 10] [--threads 2] [--resume STATE.json] [--demo-dir DIR]
        [--demo-images N]

DATASET is a packed dataset (`pack`). Without one, the script makes the demo
data itself from this tree's build (rawgen: 2,000 images in 10 classes;
pack --size 64; about 100 MB) in a temporary directory that it removes at the
end, or in --demo-dir DIR, where it is kept and made only once.

The same script runs on the CPU (in seconds) and on a GPU: the reader yields
batches already transformed (random-resized crop + flip + normalise, f32
NCHW) on the device the model is on: uploaded and transformed by libstoker's
CUDA path, with the current stream made to wait for each batch; on the CPU the
host backend runs the same transform. Every --log-every steps it prints the
fetch-vs-step split (wall time blocked in the loader vs the rest of the step)
and the reader's verdict. --resume saves the reader's state at the end and
continues from it on the next run (what a checkpoint would hold).

Run it with the Python of the README's venv (.venv/bin/python: Debian's
python3-torch and the installed package); from the tree, /usr/bin/python3
finds the package in python/ and the library in build/.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # another Python than the venv's: say how to run it
    sys.exit(f"train_pytorch: {e}: run it with the README's venv, .venv/bin/python examples/train_pytorch.py\n"
             "(made by: /usr/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install ./python)")

try:
    import stoker
except ImportError:  # running from the source tree without installing
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "python"))
    os.environ.setdefault("STOKER_LIB", os.path.join(root, "build", "reader", "libstoker.so"))
    import stoker


def demo_dataset(work, images):
    """The demo data in work (made there unless it already is)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.environ.get("STOKER_BUILD_DIR", os.path.join(root, "build"))
    ds = os.path.join(work, "dataset")
    if os.path.exists(os.path.join(ds, "manifest.json")):
        return ds
    rawgen, pack = os.path.join(build, "tools", "rawgen"), os.path.join(build, "packer", "pack")
    for t in (rawgen, pack):
        if not os.access(t, os.X_OK):
            sys.exit(f"train_pytorch: {t} not found: build stoker first, or pass a packed DATASET")
    print(f"train_pytorch: making the demo data in {work} (rawgen {images:,} images, pack --size 64) ...", flush=True)
    subprocess.run([rawgen, "-q", "--force", "-n", str(images), "--classes", "10", os.path.join(work, "raw")], check=True)
    subprocess.run([pack, "-q", "--force", "--size", "64", os.path.join(work, "raw"), ds], check=True)
    return ds


class SmallCNN(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(64, 128, 3, stride=2, padding=1)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        x = F.relu(self.c3(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?")
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda[:N]")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=56, help="crop size fed to the model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--resume", help="state file: continue from it if it exists; save the reader's state there")
    ap.add_argument("--demo-dir", help="without DATASET: make the demo data here once and keep it (default: a "
                    "temporary directory, removed at the end)")
    ap.add_argument("--demo-images", type=int, default=2000, help="images in the demo data (default 2000)")
    a = ap.parse_args()
    tmp = None
    if not a.dataset and not a.demo_dir:
        tmp = a.demo_dir = tempfile.mkdtemp(prefix="stoker-train-demo-")
    try:
        train(a, a.dataset or demo_dataset(a.demo_dir, a.demo_images))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def train(a, ds):

    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    torch.manual_seed(0)

    # The transform runs on the model's device: the CUDA kernel, or the host backend on the CPU.
    tf = stoker.Transform.imagenet(train=True, size=a.size)
    reader = stoker.Reader(ds, batch_size=a.batch_size, order="shuffle", seed=1234, threads=a.threads,
                           fields="image,label", device=device, transform=tf, output="torch")
    classes = reader.classes
    model = SmallCNN(len(classes) or 1000).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    start = 0
    if a.resume and os.path.exists(a.resume):
        with open(a.resume) as f:
            reader.load_state_dict(json.load(f))
        start = reader.position()[0]
        print(f"resumed at epoch {start}, batch {reader.position()[1]}")
    print(f"{reader!r}: {len(reader)} batches/epoch, {len(classes)} classes, model on {dev}", flush=True)

    step = 0
    for epoch in range(start, a.epochs):
        reader.set_epoch(epoch)            # keeps a resumed mid-epoch position
        fetch = total = 0.0
        correct = seen = 0
        t_end = time.perf_counter()
        it = iter(reader)
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)           # blocks only if the loader is behind
            except StopIteration:
                break
            t1 = time.perf_counter()
            x, y = batch["image"], batch["label"]
            if y.device != dev:            # labels are tiny; images are already on `dev`
                y = y.to(dev, non_blocking=True)
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            fetch += t1 - t0
            if step % a.log_every == 0:
                correct += int((out.argmax(1) == y).sum())  # syncs with the device here only
                seen += y.numel()
                now = time.perf_counter()
                total += now - t_end
                t_end = now
                print(f"epoch {epoch} step {step:5d} loss {loss.item():.3f}  fetch {1e3 * fetch / a.log_every:6.2f} ms"
                      f"  step {1e3 * (total - fetch) / a.log_every:6.2f} ms per batch  "
                      f"({100 * fetch / total:4.1f}% waiting for data)", flush=True)
                fetch = total = 0.0
        s = reader.stats()
        print(f"epoch {epoch} done: sampled accuracy {correct / max(seen, 1):.3f}; loader {s['samples_per_s']:.0f} "
              f"samples/s, {s['device']} path; {s['verdict']}", flush=True)
        reader.reset_stats()
    if a.resume:
        with open(a.resume, "w") as f:
            json.dump(reader.state_dict(), f)
        print(f"saved the reader's state to {a.resume}")
    reader.close()


if __name__ == "__main__":
    main()
