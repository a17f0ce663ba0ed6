#!/usr/bin/python3
"""bench/py_end_to_end/e2e.py - images/s delivered to a Python training loop as
torch uint8 tensors: stoker (after one `pack`) against torchvision's
ImageFolder + DataLoader over the raw JPEGs, in one run. Called by ./run,
which builds what this needs and passes the tools; see bench/README.md.

    e2e.py RAWDIR --pack PACK --work DIR [--size 256] [--batch 256] [--threads 2]
           [--workers 0,1,2] [--repeat 3] [--seconds 4] [--torch-seconds 12] [--target 30]
           [--loader-target 0.97] [--pairs 6] [--slice 1]

1. pack: `pack -j <cores> --size N RAWDIR WORK/packed`, timed once (output on
   WORK's disk, durable when pack exits, as a real job's would be).
2. Rounds (--repeat): in each, stoker shuffled, stoker sequential, the
   paired stoker.torch.DataLoader / Reader slices, then the DataLoader with
   each --workers setting, one after the other, so that other work on the
   machine tends to hit all of them; the median of each counts.
   - stoker: stoker.Reader(output="torch", order=shuffle|sequential,
     fields="image,label", threads=--threads, batch --batch); one untimed epoch
     first, then batches for --seconds. Tensors are [B, N, N, 3] uint8 views of
     the reader's memory (int64 labels).
   - stoker.torch.DataLoader(packed, batch_size=--batch, shuffle=True,
     num_workers=--threads, seed=1) against the shuffled Reader, paired: both
     open at once (the idle one's ring full, its threads asleep), an untimed
     epoch each, then --pairs pairs of --slice-second slices, alternating
     ABBA; each pair's ratio counts, and the median over all rounds is judged
     (target --loader-target). The DataLoader's loop is a script's: `for
     image, label in loader`, each iter() an epoch, the tail partial.
   - DataLoader: ImageFolder(RAWDIR, Resize(N) + CenterCrop(N) + PILToTensor)
     (the pixels pack stores), shuffle=True, batch --batch, a fresh DataLoader
     per measurement, its workers joined before the next one starts;
     max(1, workers) untimed batches first (worker start-up), then batches
     for --torch-seconds.
     Tensors are [B, 3, N, N] uint8 (int64 labels).
   The loop takes each batch's two tensors and counts the images; it does not
   copy them. Every raw file is read once before (page cache warm): what is
   measured is the loaders, not the disk.
3. Ratios: stoker shuffled / best DataLoader (target --target),
   stoker.torch.DataLoader / stoker.Reader (target --loader-target), and the
   pack cost in epochs: pack time / one epoch of the best DataLoader, and the
   epochs after which pack + stoker epochs cost less than DataLoader epochs.
Exit status 0 targets met, 1 below a target, 2 could not run.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from loader_timing import take_rate  # noqa: E402  (bench/loader_timing.py)


def fmt(x):
    return f"{x:,.0f}"


def warm_files(root):
    n = 0
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                while fh.read(1 << 20):
                    pass
            n += 1
    return n


def stoker_rate(stoker, ds, order, batch, threads, seconds):
    with stoker.Reader(ds, batch_size=batch, order=order, seed=1, threads=threads, fields="image,label",
                       output="torch") as r:
        for b in r:  # untimed epoch: page cache, mappings, ring full
            x = b["image"]
        images = 0
        t0 = time.perf_counter()
        while True:
            for b in r:
                x, y = b["image"], b["label"]
                images += min(x.shape[0], y.shape[0])
                el = time.perf_counter() - t0
                if el >= seconds:
                    assert str(x.dtype) == "torch.uint8" and x.shape[3] == 3
                    return images / el


def loader_vs_reader(stoker, ds, batch, threads, pairs, slice_s):
    """stoker.torch.DataLoader against stoker.Reader, paired: both open over the same
    data (the idle one's ring sits full, its threads asleep), measured in alternating
    slices of slice_s seconds, ABBA, so that load from elsewhere hits both alike.
    Returns (reader images/s, loader images/s, the ratio of each pair of slices)."""
    reader = stoker.Reader(ds, batch_size=batch, order="shuffle", seed=1, threads=threads, fields="image,label",
                           output="torch")
    loader = stoker.torch.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=threads, seed=1)

    def reader_batches():
        while True:
            for b in reader:
                yield b["image"], b["label"]

    def loader_batches():
        while True:
            for x, y in loader:  # each iter() an epoch, as a training script's loop
                yield x, y

    def take(it, seconds):
        images = 0
        t0 = time.perf_counter()
        while True:
            x, y = next(it)
            images += min(x.shape[0], y.shape[0])
            el = time.perf_counter() - t0
            if el >= seconds:
                assert str(x.dtype) == "torch.uint8" and x.shape[3] == 3
                return images, el

    with reader, loader:
        streams = {"reader": reader_batches(), "loader": loader_batches()}
        for it in streams.values():  # an untimed epoch each: page cache, mappings, rings full
            for _ in range(len(reader)):
                next(it)
        tot = {"reader": [0, 0.0], "loader": [0, 0.0]}
        ratios = []
        for i in range(pairs):
            rate = {}
            for name in (("reader", "loader") if i % 2 == 0 else ("loader", "reader")):
                n, el = take(streams[name], slice_s)
                tot[name][0] += n
                tot[name][1] += el
                rate[name] = n / el
            ratios.append(rate["loader"] / rate["reader"])
    return tot["reader"][0] / tot["reader"][1], tot["loader"][0] / tot["loader"][1], ratios


def dataloader_rate(torch, DataLoader, ds_raw, batch, workers, warmup, seconds):
    """A fresh DataLoader per measurement, whose (non-persistent) workers end with
    the measurement, so their prefetching never runs into another one."""
    g = torch.Generator()
    g.manual_seed(0)
    loader = DataLoader(ds_raw, batch_size=batch, shuffle=True, num_workers=workers, generator=g)
    images, el, x = take_rate(loader, warmup, seconds)  # its workers end with its iterator, inside
    assert x.dtype == torch.uint8
    return images / el


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw")
    ap.add_argument("--pack", required=True, help="the pack binary")
    ap.add_argument("--work", required=True)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--torch-seconds", type=float, default=12.0)
    ap.add_argument("--target", type=float, default=30.0)
    ap.add_argument("--loader-target", type=float, default=0.97)
    ap.add_argument("--pairs", type=int, default=6, help="DataLoader vs Reader: slice pairs per round")
    ap.add_argument("--slice", type=float, default=1.0, help="DataLoader vs Reader: seconds per slice")
    a = ap.parse_args()

    try:
        import torch
        import torchvision
        from torch.utils.data import DataLoader
        from torchvision import datasets, transforms as T
    except ImportError as e:
        print(f"bench/py_end_to_end: {e}: apt-get install python3-torch python3-torchvision", file=sys.stderr)
        return 2
    import stoker
    import stoker.torch

    torch.set_num_threads(1)  # the loop itself does no math; keep intra-op pools from competing with loaders
    nfiles = warm_files(a.raw)
    ds_raw = datasets.ImageFolder(a.raw, transform=T.Compose([T.Resize(a.size), T.CenterCrop(a.size),
                                                               T.PILToTensor()]))
    N = len(ds_raw)
    cores = os.cpu_count() or 1
    print(f"py_end_to_end: {a.raw}: {N:,} images in {len(ds_raw.classes)} classes ({nfiles:,} files); "
          f"{cores} cores; torch {torch.__version__}, torchvision {torchvision.__version__}, stoker "
          f"{stoker.__version__} ({stoker.library_path})", flush=True)

    # ---------------------------------------------------------------- pack
    out = os.path.join(a.work, "packed")
    cmd = [a.pack, "-q", "--force", "-j", str(cores), "--size", str(a.size), a.raw, out]
    t0 = time.perf_counter()
    p = subprocess.run(cmd)
    pack_s = time.perf_counter() - t0
    if p.returncode not in (0, 3):
        print(f"bench/py_end_to_end: {' '.join(cmd)}: exit {p.returncode}", file=sys.stderr)
        return 2
    with stoker.Reader(out, batch_size=a.batch) as r:
        packed_n = r.num_records
    print(f"pack -j{cores} --size {a.size}: {packed_n:,} records in {pack_s:.1f} s "
          f"({packed_n / pack_s:,.0f} images/s), once", flush=True)

    # -------------------------------------------------------------- rounds
    workers = [int(w) for w in a.workers.split(",")]
    runs = {"stoker shuffle": [], "stoker sequential": [], "stoker paired reader": [], "stoker loader": []}
    loader_ratios = []
    runs.update({f"DataLoader workers={w}": [] for w in workers})
    for rep in range(a.repeat):
        for order in ("shuffle", "sequential"):
            v = stoker_rate(stoker, out, order, a.batch, a.threads, a.seconds)
            runs[f"stoker {order}"].append(v)
            print(f"  round {rep + 1}: stoker {order:<10} {fmt(v):>9} images/s", flush=True)
        rv, lv, ratios = loader_vs_reader(stoker, out, a.batch, a.threads, a.pairs, a.slice)
        runs["stoker paired reader"].append(rv)
        runs["stoker loader"].append(lv)
        loader_ratios += ratios
        print(f"  round {rep + 1}: paired, Reader {fmt(rv)} vs stoker.torch.DataLoader {fmt(lv)} images/s; "
              f"ratios " + " ".join(f"{x:.3f}" for x in ratios), flush=True)
        for w in workers:
            v = dataloader_rate(torch, DataLoader, ds_raw, a.batch, w, max(1, w), a.torch_seconds)
            runs[f"DataLoader workers={w}"].append(v)
            print(f"  round {rep + 1}: DataLoader workers={w} {fmt(v):>9} images/s", flush=True)

    # ------------------------------------------------------------- results
    med = {k: statistics.median(v) for k, v in runs.items()}
    print()
    print(f"images/s delivered to a Python loop as torch uint8 tensors, batch {a.batch}, {a.size} px, "
          f"median of {a.repeat}")
    print(f"{'what':<58}{'images/s':>11}   runs")
    rows = [("stoker shuffle", f"stoker, shuffled, {a.threads} threads (Reader, output='torch')"),
            ("stoker paired reader", "  paired slices: the Reader, shuffled"),
            ("stoker loader", "  paired slices: stoker.torch.DataLoader, shuffle=True"),
            ("stoker sequential", f"stoker, sequential (zero-copy), {a.threads} threads")]
    rows += [(f"DataLoader workers={w}", f"ImageFolder + DataLoader, num_workers={w}") for w in workers]
    for key, label in rows:
        print(f"{label:<58}{fmt(med[key]):>11}   " + " ".join(fmt(x) for x in runs[key]))
    best_key = max((k for k in med if k.startswith("DataLoader")), key=lambda k: med[k])
    best = med[best_key]
    ratio = med["stoker shuffle"] / best
    ok = ratio >= a.target
    dl_epoch = N / best
    st_epoch = packed_n / med["stoker shuffle"]
    print()
    print(f"{'stoker shuffled / best DataLoader (' + best_key.split()[-1] + ')':<58}{ratio:>11.1f}   "
          f"target >= {a.target:g}  {'PASS' if ok else 'BELOW TARGET'}")
    print(f"{'stoker sequential / best DataLoader':<58}{med['stoker sequential'] / best:>11.1f}")
    lr = statistics.median(loader_ratios)
    lok = lr >= a.loader_target
    print(f"{'stoker.torch.DataLoader / Reader (median of pairs)':<58}{lr:>11.3f}   target >= "
          f"{a.loader_target:g}  {'PASS' if lok else 'BELOW TARGET'}  ({len(loader_ratios)} pairs of "
          f"{a.slice:g} s, {min(loader_ratios):.3f}-{max(loader_ratios):.3f})")
    print(f"{'one epoch, best DataLoader (s)':<58}{dl_epoch:>11.1f}")
    print(f"{'one epoch, stoker shuffled (s)':<58}{st_epoch:>11.2f}")
    print(f"{'pack, once (s)':<58}{pack_s:>11.1f}")
    print(f"{'pack cost in epochs of the best DataLoader':<58}{pack_s / dl_epoch:>11.2f}")
    be = pack_s / (dl_epoch - st_epoch) if dl_epoch > st_epoch else float("inf")
    print(f"{'pack + stoker is cheaper than the DataLoader after (epochs)':<58}{be:>11.2f}")
    print(f"{'time saved over 90 epochs (pack included, minutes)':<58}"
          f"{(90 * dl_epoch - (pack_s + 90 * st_epoch)) / 60:>11.1f}")
    return 0 if ok and lok else 1


if __name__ == "__main__":
    sys.exit(main())
