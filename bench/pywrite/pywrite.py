"""bench/pywrite: see run. Prints one line per measurement and a summary with the ratios."""
import argparse
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

import stoker

SAMPLE = 65536 - 8  # bytes of the array: with the 8-byte label a sample is 64 KiB
POOL = [np.random.default_rng(i).integers(0, 256, SAMPLE, dtype=np.uint8) for i in range(64)]
FIELDS = {"x": stoker.Tensor("uint8", (SAMPLE,)), "label": stoker.Scalar("int64")}


def sample(i):
    return {"x": POOL[i % 64], "label": i}


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def sync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.syncfs(fd) if hasattr(os, "syncfs") else os.sync()
    finally:
        os.close(fd)


def run_pack(out, n, workers, mode):
    shutil.rmtree(out, ignore_errors=True)
    t = time.monotonic()
    s = stoker.pack(sample, range(n), out, FIELDS, workers=workers, mode=mode, progress=False)
    return s["bytes"], time.monotonic() - t


def run_pickle(out, n):
    fresh(out)
    t = time.monotonic()
    for i in range(n):
        with open(os.path.join(out, f"{i:08d}.pkl"), "wb") as f:
            pickle.dump(sample(i), f, protocol=pickle.HIGHEST_PROTOCOL)
    sync_dir(out)
    return n * (SAMPLE + 8), time.monotonic() - t


def run_npy(out, n):
    fresh(out)
    t = time.monotonic()
    for i in range(n):
        s = sample(i)
        for k, v in s.items():
            np.save(os.path.join(out, f"{i:08d}.{k}.npy"), np.asarray(v))
    sync_dir(out)
    return n * (SAMPLE + 8), time.monotonic() - t


def run_dd(out, nbytes):
    path = os.path.join(out, "dd.bin")
    os.makedirs(out, exist_ok=True)
    t = time.monotonic()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={nbytes >> 20}", "conv=fdatasync"],
                   check=True, capture_output=True)
    dt = time.monotonic() - t
    os.unlink(path)
    return (nbytes >> 20) << 20, dt


def tokens_bench(work, ntok, T, B, seconds):
    path = os.path.join(work, "tokens.bin")
    if not os.path.exists(path) or os.path.getsize(path) != 2 * ntok:
        np.random.default_rng(0).integers(0, 50257, ntok, dtype=np.uint16).tofile(path)
    data = np.memmap(path, dtype=np.uint16, mode="r")
    n = (len(data) - 1) // T
    ds = os.path.join(work, "tokens")
    if stoker.pack(lambda c: [{"tokens": np.array(data[w * T:w * T + T + 1])}
                              for w in range(c * 256, min(n, c * 256 + 256))],
                   range((n + 255) // 256), ds, {"tokens": stoker.Tensor("uint16", (T + 1,))},
                   workers=0, progress=False, force=True)["records"] != n:
        raise SystemExit("bench/pywrite: the token dataset has the wrong size")

    def memmap_loop():  # nanoGPT's get_batch, numpy only
        rng = np.random.default_rng(1)
        t, k = time.monotonic(), 0
        while time.monotonic() - t < seconds:
            ix = rng.integers(0, len(data) - T - 1, B)
            x = np.stack([data[i:i + T + 1] for i in ix])
            k += x.shape[0]
        return k * T / (time.monotonic() - t)

    def stoker_loop():
        with stoker.Reader(ds, batch_size=B, order="shuffle", seed=1, threads=2) as r:
            it = iter(r)
            for _ in range(5):
                next(it)
            t, k = time.monotonic(), 0
            while time.monotonic() - t < seconds:
                try:
                    x = next(it)["tokens"]
                except StopIteration:
                    it = iter(r)
                    continue
                k += x.shape[0]
            return k * T / (time.monotonic() - t)

    for f in (path, *[os.path.join(ds, x) for x in os.listdir(ds)]):  # warm: both read from the page cache
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    return memmap_loop, stoker_loop


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--samples", type=int, default=16000)  # 1 GiB of sample bytes
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=50_000_000)
    ap.add_argument("--seconds", type=float, default=3)
    a = ap.parse_args()
    n, work = a.samples, a.work
    res = {}
    writers = [("stoker.pack, 2 worker processes", lambda: run_pack(os.path.join(work, "p2"), n, 2, "process")),
               ("stoker.pack, 2 threads", lambda: run_pack(os.path.join(work, "t2"), n, 2, "thread")),
               ("stoker.pack, in this process", lambda: run_pack(os.path.join(work, "p0"), n, 0, "process")),
               ("pickle, one file per sample", lambda: run_pickle(os.path.join(work, "pkl"), n)),
               ("numpy.save, one .npy per field", lambda: run_npy(os.path.join(work, "npy"), n)),
               ("disk: dd sequential write, fdatasync", lambda: run_dd(work, n * (SAMPLE + 8)))]
    print(f"writing {n:,} samples of 64 KiB ({n * 65536 / 1e9:.2f} GB), {a.repeat} rounds:")
    for rnd in range(a.repeat):
        for name, fn in writers:
            nbytes, dt = fn()
            res.setdefault(name, []).append(nbytes / dt / 1e6)
            print(f"  round {rnd + 1}: {name:40s} {nbytes / dt / 1e6:8.0f} MB/s")
    for d in ("p2", "t2", "p0", "pkl", "npy"):
        shutil.rmtree(os.path.join(work, d), ignore_errors=True)
    T, B = 1024, 32
    memmap_loop, stoker_loop = tokens_bench(work, a.tokens, T, B, a.seconds)
    print(f"reading {a.tokens:,} uint16 tokens as shuffled [{B}, {T + 1}] windows, {a.repeat} rounds:")
    for rnd in range(a.repeat):
        for name, fn in (("np.memmap + random offsets (nanoGPT)", memmap_loop),
                         ("stoker.Reader, shuffled, 2 threads", stoker_loop)):
            v = fn()
            res.setdefault(name, []).append(v / 1e6)
            print(f"  round {rnd + 1}: {name:40s} {v / 1e6:8.1f} M tokens/s")
    med = {k: statistics.median(v) for k, v in res.items()}
    print("\nmedians:")
    for k, v in med.items():
        unit = "M tokens/s" if "token" in k or "Reader" in k or "memmap" in k else "MB/s"
        print(f"  {k:40s} {v:10.1f} {unit}")
    p2, disk = med["stoker.pack, 2 worker processes"], med["disk: dd sequential write, fdatasync"]
    tok = med["stoker.Reader, shuffled, 2 threads"] / med["np.memmap + random offsets (nanoGPT)"]
    ok = p2 >= 200 and tok >= 1.0
    print("\nratios:")
    print(f"  stoker.pack 2 workers:                {p2:.0f} MB/s   (target >= 200 MB/s)  {'PASS' if p2 >= 200 else 'MISS'}")
    print(f"  stoker.pack 2 workers / disk write:   {p2 / disk:.2f}")
    print(f"  stoker.pack 2 workers / pickle files: {p2 / med['pickle, one file per sample']:.2f}")
    print(f"  stoker.pack 2 workers / numpy.save:   {p2 / med['numpy.save, one .npy per field']:.2f}")
    print(f"  token reader / memmap loop:           {tok:.2f}   (target >= 1.0)  {'PASS' if tok >= 1 else 'MISS'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
