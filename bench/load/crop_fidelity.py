#!/usr/bin/python3
"""bench/load/crop_fidelity.py - the reader's crops against torchvision on a full decode of the same bytes.

For the first --n records of each dataset (JPEG images of their own size: pack --image-format jpeg or
original), the reference is what torchvision computes from a full decode of the stored JPEG bytes
(PIL: Image.open(...).convert("RGB"), antialiased bilinear):
  rrc   RandomResizedCrop(S) + RandomHorizontalFlip with the box and flip the reader drew for that record
        (Reader.crop_box, the library's stk_reader_crop_box): tvf.resized_crop(img, y0, x0, h, w, S), then
        tvf.hflip when flipped; stoker's is the reader's crop="random:S" (u8, worker threads) of the record.
  eval  Resize(round(S / 0.875)) + CenterCrop(S); stoker's is crop="center:S".
Unlike fidelity.py (which starts from the source files, so pack's resize and re-encode are in its figures),
both sides here decode the same bytes: what is left is the reader's region decode (DCT-scaled when the box is
at least twice the output) and resampling. Prints per dataset and crop: PSNR mean, median, worst (record), how
many boxes were at least 2S on both sides (decoded DCT-scaled) and their mean, and the target (issue 43: mean
>= 35 dB, worst >= 30 dB). An identical crop counts as 99 dB. Exit status 1 when a target is missed.

Usage: /usr/bin/python3 crop_fidelity.py DATASET [DATASET...] [--size 224] [--n 2000] [--seed 0] [--epoch 0]
       (STOKER_LIB: the libstoker.so to load, e.g. build/reader/libstoker.so)
"""
import argparse
import io
import math
import os
import sys

import numpy as np
from PIL import Image
import torchvision.transforms.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import stoker  # noqa: E402

MEAN_TARGET, WORST_TARGET = 35.0, 30.0


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def measure(ds, size, n, seed, epoch):
    """{crop: [(psnr, record, scaled)]} over the first n records of ds, read sequentially in lockstep: the
    stored bytes from one reader, the crops from the others."""
    out = {"rrc": [], "eval": []}
    batch = 64
    raw = stoker.Reader(ds, batch_size=batch, fields=["image"], tail="partial")
    crops = {k: stoker.Reader(ds, batch_size=batch, fields=["image"], tail="partial", seed=seed,
                              crop="%s:%d" % ("random" if k == "rrc" else "center", size)) for k in out}
    for r in [raw] + list(crops.values()):
        r.seek(epoch, 0)
    done = 0
    try:
        while done < n:
            b = raw.next_batch()
            got = {k: r.next_batch() for k, r in crops.items()}
            if b is None or b.epoch != epoch:
                break
            for i, rec in enumerate(b.records):
                if done >= n:
                    break
                rec = int(rec)
                pil = Image.open(io.BytesIO(b["image"][i])).convert("RGB")
                for k, r in crops.items():
                    g = got[k]
                    assert int(g.records[i]) == rec and g.epoch == epoch
                    box = r.crop_box(rec, pil.height, pil.width, epoch=epoch)
                    if k == "rrc":
                        want = F.resized_crop(pil, int(box.y0), int(box.x0), int(box.h), int(box.w), [size, size],
                                              antialias=True)
                        if box.flip:
                            want = F.hflip(want)
                    else:
                        want = F.center_crop(F.resize(pil, round(size / 0.875), antialias=True), size)
                    out[k].append((psnr(g["image"][i], np.asarray(want)), rec, min(box.w, box.h) >= 2 * size))
                done += 1
    finally:
        for r in [raw] + list(crops.values()):
            r.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--n", type=int, default=2000, help="records per dataset (default 2000; fewer if it has fewer)")
    ap.add_argument("--seed", type=int, default=0, help="the reader's seed (the random boxes)")
    ap.add_argument("--epoch", type=int, default=0, help="the epoch whose boxes are drawn")
    a = ap.parse_args()
    print(f"crops vs torchvision on a full decode of the stored bytes (PIL, antialias), S={a.size}; "
          f"target: mean >= {MEAN_TARGET:.0f} dB, worst >= {WORST_TARGET:.0f} dB")
    print("  %-10s %-5s %7s %9s %9s %17s %7s %12s  %s" % ("dataset", "crop", "records", "mean dB", "median",
                                                          "worst (record)", "scaled", "scaled mean", "target"))
    ok = True
    for ds in a.datasets:
        name = os.path.basename(ds.rstrip("/"))
        res = measure(ds, a.size, a.n, a.seed, a.epoch)
        for k in ("rrc", "eval"):
            v = res[k]
            p = np.array([x for x, _, _ in v])
            worst = min(v)
            met = p.mean() >= MEAN_TARGET and worst[0] >= WORST_TARGET
            ok = ok and met
            sc = [x for x, _, s in v if s]
            print("  %-10s %-5s %7d %9.2f %9.2f %8.2f (%6d) %7d %12s  %s" % (
                name, k, len(v), p.mean(), np.median(p), worst[0], worst[1], len(sc),
                "%.2f" % np.mean(sc) if sc else "-", "met" if met else "MISSED"), flush=True)
            print(f"RESULT crop_fidelity_{name}_{k} {p.mean():.2f} {worst[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
