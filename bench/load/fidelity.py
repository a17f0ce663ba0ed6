#!/usr/bin/python3
"""bench/load/fidelity.py - stoker's images at load against Pillow + torchvision.

For each of --n records of a dataset packed with `pack --max-side M` from DIR
(raw or --image-format jpeg), the reference is what a PyTorch user computes
from the source file: Image.open(path).convert("RGB"), resized to the stored
size (Pillow's antialiased BILINEAR, what pack does), then
Resize(round(S / 0.875)) + CenterCrop(S) (torchvision's eval transform, on the
PIL image: antialiased). stoker's is the reader's eval crop
(Transform(crop="center", size=S), u8, on the worker threads) of the stored
image. Prints the PSNR per dataset: mean, median, worst record and its path.
The eval crop is deterministic, so both sides see the same box; a random
crop's box is drawn by the same code (tests/reader/test_crop.c checks its
distribution against torchvision's).

Usage: /usr/bin/python3 fidelity.py DIR DATASET [DATASET...] [--size 224] [--n 2000]
       (STOKER_LIB / PYTHONPATH as for the binding: see python/README)
"""
import argparse
import math
import os
import sys

import numpy as np
from PIL import Image
import torchvision.transforms.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import stoker  # noqa: E402


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--n", type=int, default=2000)
    a = ap.parse_args()
    s, r = a.size, round(a.size / 0.875)
    for ds in a.datasets:
        paths = {}
        with open(os.path.join(ds, "listing.tsv")) as f:
            next(f)
            for line in f:
                idx, _, p = line.rstrip("\n").split("\t")
                paths[int(idx)] = os.path.join(a.dir, p)
        t = stoker.Transform(dtype="uint8", layout="NHWC", crop="center", size=s)
        got, shapes = {}, {}
        with stoker.Reader(ds, batch_size=256, fields=["image", "source"], transform=t) as rd:
            for b in rd:
                for rec, src, img in zip(b.records, b["source"], b["image"]):
                    got[int(rec)] = (int(src), img.copy())
                if len(got) >= a.n:
                    break
        vals = []
        for rec, (src, img) in sorted(got.items())[: a.n]:
            pil = Image.open(paths[src]).convert("RGB")
            w, h = pil.size
            hi, lo = max(w, h), min(w, h)
            m = int(stoker_max_side(ds))
            if hi > m:
                lo2 = max(1, lo * m // hi)
                pil = pil.resize((m, lo2) if w >= h else (lo2, m), Image.BILINEAR)
            ref = np.asarray(F.center_crop(F.resize(pil, r, interpolation=F.InterpolationMode.BILINEAR), s))
            vals.append((psnr(img, ref), paths[src]))
        v = sorted(x for x, _ in vals)
        worst = min(vals)
        print(f"{os.path.basename(ds.rstrip('/'))}: {len(v)} records, PSNR mean {np.mean(v):.2f} dB, "
              f"median {v[len(v) // 2]:.2f} dB, worst {worst[0]:.2f} dB ({worst[1]})", flush=True)
        print(f"RESULT fidelity_{os.path.basename(ds.rstrip('/'))} {np.mean(v):.2f} dB")


def stoker_max_side(ds):
    import json
    with open(os.path.join(ds, "manifest.json")) as f:
        return json.load(f)["pack"]["max_side"]


if __name__ == "__main__":
    main()
