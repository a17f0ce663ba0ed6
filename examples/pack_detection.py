#!/usr/bin/env python3
"""Detection-style samples: an image of its own size, a variable number of boxes and their labels.

    .venv/bin/python examples/pack_detection.py OUT [--n 1000] [--read N]

The samples are made here (random images, 0-8 boxes each) so the example needs no dataset; a real one
replaces `sample(i)` with its own decoding (a COCO image and its annotations). Fields:
image u8[*, *, 3], boxes f32[*, 4] (x0, y0, x1, y1 in pixels), labels i64[*], image_id i64. Read back with
ragged="pad": boxes [B, max boxes, 4] zero-padded with batch.lengths["boxes"] ([B, 1]), as a detection
collate does; images as a list (or padded the same way).
"""
import argparse
import sys

try:
    import numpy as np
    import stoker
except ImportError as e:  # another Python than the venv's: say how to run it
    sys.exit(f"pack_detection: {e}: run it with the README's venv, .venv/bin/python examples/pack_detection.py\n"
             "(made by: /usr/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install ./python)")

FIELDS = {"image": stoker.Ragged("uint8", (None, None, 3)), "boxes": stoker.Ragged("float32", (None, 4)),
          "labels": stoker.Ragged("int64", (None,)), "image_id": stoker.Scalar("int64")}
CLASSES = ["person", "bicycle", "car", "dog", "cat"]


def sample(i):
    rng = np.random.default_rng(i)
    h, w = int(rng.integers(32, 97)), int(rng.integers(32, 97))
    k = int(rng.integers(0, 9))
    xy = rng.random((k, 2)) * [w - 8, h - 8]
    wh = 4 + rng.random((k, 2)) * 16
    boxes = np.concatenate([xy, np.minimum(xy + wh, [w, h])], 1).astype(np.float32)
    return {"image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "boxes": boxes,
            "labels": rng.integers(0, len(CLASSES), k), "image_id": i}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--read", type=int, default=2, metavar="N", help="then print N padded batches' shapes")
    ap.add_argument("--batch-size", type=int, default=8)
    a = ap.parse_args()
    s = stoker.pack(sample, range(a.n), a.out, FIELDS, classes=CLASSES, shard_size=256 << 20)
    print(f"pack_detection: {s['records']:,} images into {a.out}")
    with stoker.Reader(a.out, batch_size=a.batch_size, order="shuffle", seed=0, ragged="pad") as r:
        for k, b in enumerate(r):
            if k == a.read:
                break
            print(f"batch {k}: image {list(b['image'].shape)}, boxes {list(b['boxes'].shape)}, "
                  f"boxes per image {b.lengths['boxes'][:, 0].tolist()}")


if __name__ == "__main__":
    main()
