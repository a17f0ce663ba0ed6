#!/usr/bin/python3
"""bench/read/torch_memmap.py - the PyTorch baseline over the same pixels.

What a PyTorch user does once the decoding has been done offline without
stoker: the decoded images in one NumPy memmap (u8[N, H, W, C], written from
the packed dataset by to_memmap, so the pixels are the ones stoker serves),
the labels in a second array, and a DataLoader with shuffle=True that yields
uint8 tensors in batches.

Two ways of writing the Dataset, both common, both measured:
  item     __getitem__(i) copies record i out of the memmap; the DataLoader's
           default collate stacks the batch (into shared memory in a worker)
  batched  the sampler yields whole batches of indices (BatchSampler over a
           RandomSampler, batch_size=None); __getitem__ gathers the batch with
           one NumPy fancy-index in sorted order (better locality), straight
           into shared memory when it runs in a worker, so no second copy is
           made to send it to the main process
for each of --workers (0 = in the main process; >0 = persistent workers).
The consumer only takes each batch (as stoker's benchmark does), so the rate
is the loader's alone. Before each configuration the memmap is read once so it
is in the page cache, and --warmup batches are taken untimed (worker start-up);
then batches are taken for --seconds, across epochs.

Prints one line per configuration, "RESULT torch_memmap_<variant>_w<W> <images/s>
images/s <GB/s> GB/s" for each and "RESULT torch_memmap_best ..." for the best
(GB = 1e9 bytes of image + label delivered).

Usage: /usr/bin/python3 torch_memmap.py IMAGES.npy [--labels LABELS.npy] [--workers 0,1,2]
       [--variants item,batched] [--batch 256] [--seconds 8] [--warmup 4] [--seed 0]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from loader_timing import take_rate  # noqa: E402  (bench/loader_timing.py)
import sys
import time

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler


def warm(path):
    """Read the file once: pages idle for about a minute leave the page cache on some machines."""
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(16 << 20)
        while f.readinto(buf):
            pass


class Memmap(Dataset):
    """Opens the memmap lazily, so each worker process maps it itself."""

    def __init__(self, images, labels):
        self.images_path = images
        self.labels = np.load(labels)
        self.mm = None

    def __len__(self):
        return len(self.labels)

    def _map(self):
        if self.mm is None:
            self.mm = np.load(self.images_path, mmap_mode="r")
        return self.mm


class ItemDS(Memmap):
    def __getitem__(self, i):
        return torch.from_numpy(np.array(self._map()[i])), int(self.labels[i])


def shared_uint8(shape):
    """An uninitialised uint8 tensor in shared memory, without the copy that
    Tensor.share_memory_() would make (the way default_collate allocates in
    workers; a private API, so fall back to ordinary memory if it is gone)."""
    n = int(np.prod(shape))
    try:
        storage = torch.ByteStorage._new_shared(n)
        return torch.ByteTensor(storage).view(*shape)
    except (AttributeError, RuntimeError, TypeError):
        return torch.empty(shape, dtype=torch.uint8)


class BatchDS(Memmap):
    def __getitem__(self, idxs):
        mm = self._map()
        idx = np.sort(np.asarray(idxs, dtype=np.int64))
        if torch.utils.data.get_worker_info() is not None:
            out = shared_uint8((len(idx),) + mm.shape[1:])
            np.take(mm, idx, axis=0, out=out.numpy())
        else:
            out = torch.from_numpy(mm[idx])
        return out, torch.from_numpy(self.labels[idx])


def loader_for(variant, images, labels, workers, batch, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    kw = dict(num_workers=workers, pin_memory=False)
    if workers > 0:
        kw["persistent_workers"] = True
    if variant == "item":
        return DataLoader(ItemDS(images, labels), batch_size=batch, shuffle=True, generator=g, **kw)
    ds = BatchDS(images, labels)
    sampler = BatchSampler(RandomSampler(ds, generator=g), batch, drop_last=False)
    return DataLoader(ds, sampler=sampler, batch_size=None, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images")
    ap.add_argument("--labels")
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--variants", default="item,batched")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    labels = a.labels or a.images[:-4] + ".labels.npy"
    mm = np.load(a.images, mmap_mode="r")
    n = mm.shape[0]
    if np.load(labels, mmap_mode="r").shape != (n,):
        sys.exit(f"torch_memmap: {labels} does not hold {n} labels")
    rec = int(np.prod(mm.shape[1:])) + 8
    del mm
    print(f"torch_memmap: torch {torch.__version__}, {n} images of {rec - 8} bytes + i64 label, "
          f"batch {a.batch}, {a.seconds:g} s per configuration", flush=True)
    best = None
    for v in a.variants.split(","):
        for w in (int(x) for x in a.workers.split(",")):
            warm(a.images)
            loader = loader_for(v, a.images, labels, w, a.batch, a.seed)
            imgs, el, x = take_rate(loader, a.warmup, a.seconds)
            del loader
            if x.dtype != torch.uint8:
                sys.exit(f"torch_memmap: batches are {x.dtype}, not uint8")
            rate = imgs / el
            print(f"  {v:8s} workers={w}: {imgs} images in {el:.2f} s: {rate:.0f} images/s, "
                  f"{rate * rec / 1e9:.2f} GB/s", flush=True)
            print(f"RESULT torch_memmap_{v}_w{w} {rate:.1f} images/s {rate * rec / 1e9:.3f} GB/s", flush=True)
            if best is None or rate > best[0]:
                best = (rate, f"{v}_w{w}")
    print(f"RESULT torch_memmap_best {best[0]:.1f} images/s {best[0] * rec / 1e9:.3f} GB/s {best[1]}")


if __name__ == "__main__":
    main()
