#!/usr/bin/python3
"""bench/read/torch_imagefolder.py - the PyTorch baseline over the raw JPEGs.

The input pipeline most PyTorch training scripts start with: torchvision's
ImageFolder over the raw tree, decoding every image every epoch with Pillow,
with the transform that yields the same kind of tensor stoker serves (and the
pixels pack stores by default): Resize(N) + CenterCrop(N) + PILToTensor
(uint8, [3, N, N]), in a DataLoader with shuffle=True and batches of --batch,
for each of --workers (0 = in the main process; >0 = persistent workers).

Per configuration: the JPEGs are read once (page cache), the first --warmup
batches are taken untimed (worker start-up), then batches are taken until
--seconds have passed. The consumer only takes each batch.

Prints one line per configuration, "RESULT torch_imagefolder_w<W> <images/s>
images/s" for each and "RESULT torch_imagefolder_best <images/s> images/s w<W>".

With --crop random the transform is the training one instead:
RandomResizedCrop(N) + RandomHorizontalFlip + PILToTensor (bench/load).

Usage: /usr/bin/python3 torch_imagefolder.py DIR [--size 256] [--workers 0,1,2]
       [--batch 256] [--seconds 15] [--warmup W] [--seed 0] [--crop center|random]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from loader_timing import take_rate  # noqa: E402  (bench/loader_timing.py)

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=int, default=-1,
                    help="untimed batches first; default max(1, workers): the first round, which all workers start together")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--crop", choices=("center", "random"), default="center")
    a = ap.parse_args()
    if a.crop == "random":
        tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.PILToTensor()])
    else:
        tf = T.Compose([T.Resize(a.size), T.CenterCrop(a.size), T.PILToTensor()])
    ds = datasets.ImageFolder(a.dir, transform=tf)
    print(f"torch_imagefolder: torch {torch.__version__} torchvision {torchvision.__version__}, "
          f"{len(ds)} images in {len(ds.classes)} classes, "
          f"{'RandomResizedCrop+flip' if a.crop == 'random' else f'Resize({a.size})+CenterCrop'}({a.size})+PILToTensor, "
          f"batch {a.batch}, {a.seconds:g} s per configuration", flush=True)
    best = None
    for w in (int(x) for x in a.workers.split(",")):
        for path, _ in ds.samples:  # page cache: the benchmark is about decoding, not the disk
            with open(path, "rb") as f:
                f.read()
        g = torch.Generator()
        g.manual_seed(a.seed)
        kw = dict(persistent_workers=True) if w > 0 else {}
        loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=w, generator=g, **kw)
        imgs, el, x = take_rate(loader, a.warmup if a.warmup >= 0 else max(1, w), a.seconds)
        del loader
        assert x.dtype == torch.uint8 and tuple(x.shape[1:]) == (3, a.size, a.size), (x.dtype, x.shape)
        rate = imgs / el
        print(f"  workers={w}: {imgs} images in {el:.2f} s: {rate:.0f} images/s", flush=True)
        print(f"RESULT torch_imagefolder_w{w} {rate:.1f} images/s", flush=True)
        if best is None or rate > best[0]:
            best = (rate, w)
    print(f"RESULT torch_imagefolder_best {best[0]:.1f} images/s w{best[1]}")


if __name__ == "__main__":
    main()
