#!/usr/bin/python3
"""bench/pack/pillow_baseline.py - the preprocessing baseline for `pack`.

What a PyTorch user does without stoker to pre-compute fixed-size images:
torchvision's Resize(N) + CenterCrop(N) on PIL images (Pillow, antialiased
bilinear; emulated here with Pillow alone so torchvision is not required),
written into one numpy memmap (N x N x 3 u8 per image), with P worker
processes. Prints "RESULT pillow_P<procs> <images/s>".

Usage: pillow_baseline.py DIR OUT.npy [--size 256] [--procs 1]
"""
import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np
from PIL import Image


def listing(root):
    """torchvision ImageFolder order: sorted classes, sorted walk."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for c in classes:
        for d, _, files in sorted(os.walk(os.path.join(root, c), followlinks=True)):
            out += [os.path.join(d, f) for f in sorted(files)]
    return out


def prep(path, n):
    img = Image.open(path).convert("RGB")
    w, h = img.size
    if w <= h:
        nw, nh = n, int(n * h / w)
    else:
        nw, nh = int(n * w / h), n
    img = img.resize((nw, nh), Image.BILINEAR)          # torchvision Resize(n), antialias on PIL
    top, left = int(round((nh - n) / 2.0)), int(round((nw - n) / 2.0))
    return np.asarray(img.crop((left, top, left + n, top + n)))


def work(args):
    paths, start, out, n, total = args
    mm = np.lib.format.open_memmap(out, mode="r+")
    for k, p in enumerate(paths):
        try:
            mm[start + k] = prep(p, n)
        except Exception:  # the baseline skips what Pillow cannot read
            pass
    mm.flush()
    return len(paths)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--procs", type=int, default=1)
    a = ap.parse_args()
    paths = listing(a.dir)
    if not paths:
        sys.exit("pillow_baseline: no files")
    np.lib.format.open_memmap(a.out, mode="w+", dtype=np.uint8, shape=(len(paths), a.size, a.size, 3)).flush()
    chunk = (len(paths) + a.procs - 1) // a.procs
    jobs = [(paths[i:i + chunk], i, a.out, a.size, len(paths)) for i in range(0, len(paths), chunk)]
    t0 = time.perf_counter()
    if a.procs == 1:
        done = sum(map(work, jobs))
    else:
        with mp.Pool(a.procs) as pool:
            done = sum(pool.map(work, jobs))
    el = time.perf_counter() - t0
    print(f"pillow_baseline: {done} images, {a.procs} process(es), {el:.2f} s: {done / el:.0f} images/s")
    print(f"RESULT pillow_P{a.procs} {done / el:.1f}")


if __name__ == "__main__":
    main()
