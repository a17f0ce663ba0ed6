#!/usr/bin/python3
"""bench/pack/quality.py - pack's pixels against Pillow's, image by image.

The issue's quality bar: what `pack --size N` stores must be comparable to
what a PyTorch user gets from torchvision's Resize(N) + CenterCrop(N) on PIL
images (Pillow decode, convert("RGB"), antialiased BILINEAR), at least 30 dB
PSNR on average over a set. This reads every record of a packed dataset
through the Python binding, finds its source file by the record's `source`
field in the dataset's listing.tsv, preprocesses that file with Pillow the
torchvision way (the same geometry as pillow_baseline.py), and prints the PSNR
per image summarised: mean, median, 1st percentile, worst (with its file), and
the share of bytes that differ by more than 1 and by more than 4 levels.

Usage: quality.py DATASET --input DIR [--size N] [--max N] [--target DB]
(DIR: the INPUT pack was given; listing.tsv's paths are relative to it)
Prints "RESULT psnr_mean <dB>"; exit status 0 when the mean meets --target
(default 30), 1 when not, 2 when it could not run.
"""
import argparse
import csv
import math
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def pillow_prep(path, n):
    """torchvision Resize(n) + CenterCrop(n) on a PIL image, in Pillow alone."""
    img = Image.open(path).convert("RGB")
    w, h = img.size
    nw, nh = (n, int(n * h / w)) if w <= h else (int(n * w / h), n)
    img = img.resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - n) / 2.0)), int(round((nw - n) / 2.0))
    return np.asarray(img.crop((left, top, left + n, top + n)))


def listing(ds):
    """Listing index -> input path (relative to the input root), from the
    dataset's listing.tsv (spec/FORMAT.md)."""
    with open(os.path.join(ds, "listing.tsv"), newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    ip, ix = rows[0].index("path"), rows[0].index("index")
    return {int(r[ix]): r[ip] for r in rows[1:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--max", type=int, default=0, help="records to compare (0: all)")
    ap.add_argument("--input", required=True, help="the input root the listing's paths are relative to")
    ap.add_argument("--target", type=float, default=30.0)
    a = ap.parse_args()
    try:
        import stoker
    except Exception as e:  # pragma: no cover - a setup problem
        print(f"quality: cannot import the stoker binding: {e}", file=sys.stderr)
        return 2
    paths = listing(a.dataset)
    dbs, over1, over4, total, worst = [], 0, 0, 0, (99.0, "")
    n = 0
    with stoker.Reader(a.dataset, batch_size=64, order="sequential", fields="image,source", tail="partial") as r:
        for batch in r:
            imgs, srcs = batch["image"], batch["source"]
            for k in range(len(srcs)):
                p = paths[int(srcs[k])]
                if not os.path.isabs(p):
                    p = os.path.join(a.input, p)
                want = pillow_prep(p, a.size).astype(np.int16)
                got = np.asarray(imgs[k]).astype(np.int16)
                d = np.abs(got - want)
                mse = float(np.mean(d.astype(np.float64) ** 2))
                db = 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)
                dbs.append(db)
                over1 += int(np.count_nonzero(d > 1))
                over4 += int(np.count_nonzero(d > 4))
                total += d.size
                if db < worst[0]:
                    worst = (db, p)
                n += 1
                if a.max and n >= a.max:
                    break
            if a.max and n >= a.max:
                break
    if not dbs:
        print("quality: no records", file=sys.stderr)
        return 2
    s = np.sort(np.array(dbs))
    mean = float(np.mean(s))
    print(f"quality: {n} images of {a.dataset} against Pillow Resize({a.size})+CenterCrop({a.size})")
    print(f"  PSNR mean {mean:.2f} dB, median {float(np.median(s)):.2f}, 1st percentile "
          f"{float(s[max(0, int(len(s) * 0.01) - 1)]):.2f}, worst {worst[0]:.2f} ({worst[1]})")
    print(f"  bytes off by more than 1 level: {100.0 * over1 / total:.3f}%, by more than 4: {100.0 * over4 / total:.4f}%")
    print(f"RESULT psnr_mean {mean:.2f}")
    return 0 if mean >= a.target else 1


if __name__ == "__main__":
    sys.exit(main())
