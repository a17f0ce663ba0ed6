#!/usr/bin/env python3
"""Token sequences for language-model training: pack a tokenised corpus as fixed windows, read shuffled batches.

    .venv/bin/python examples/pack_tokens.py OUT --bin train.bin [--dtype uint16] [--T 1024]  # a nanoGPT / llm.c style token file
    .venv/bin/python examples/pack_tokens.py OUT --synthetic 10000000 [--vocab 50257]  # tokens made here, no tokenizer needed

Each record is `tokens`, T + 1 consecutive tokens starting at a multiple of T (windows overlap by one token, so
every token but the first is a target exactly once per epoch): x = tokens[:, :-1], y = tokens[:, 1:]. Against the
usual `np.memmap` + random offsets loop, the reader gives full shuffles without replacement (every window once
an epoch), ranks that never overlap and exact resume (`state_dict()`), at the memmap loop's speed or better
(bench/pywrite). Then `--read N` reads N shuffled batches and prints their shape and rate.

A .bin file is raw tokens (llm.c's files begin with a 256 x int32 header: --header-bytes 1024).
"""
import argparse
import os
import sys
import time

try:
    import numpy as np
    import stoker
except ImportError as e:  # another Python than the venv's: say how to run it
    sys.exit(f"pack_tokens: {e}: run it with the README's venv, .venv/bin/python examples/pack_tokens.py\n"
             "(made by: /usr/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install ./python)")

WINDOWS_PER_INPUT = 256  # one fn call packs this many windows: the per-call overhead stays small


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--bin", help="raw token file")
    src.add_argument("--synthetic", type=int, metavar="N", help="N random tokens instead of a file")
    ap.add_argument("--dtype", default="uint16", choices=["uint16", "uint32"])
    ap.add_argument("--header-bytes", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--T", type=int, default=1024, help="context length (records hold T + 1 tokens)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--read", type=int, default=0, metavar="N", help="then read N shuffled batches")
    ap.add_argument("--batch-size", type=int, default=32)
    a = ap.parse_args()

    if a.bin:
        tokens = np.memmap(a.bin, dtype=a.dtype, mode="r", offset=a.header_bytes)
    else:
        tokens = np.random.default_rng(0).integers(0, a.vocab, a.synthetic, dtype=a.dtype)
    T = a.T
    n = (len(tokens) - 1) // T  # windows
    if n < 1:
        sys.exit(f"pack_tokens: {len(tokens)} tokens: fewer than one window of {T + 1}")

    def windows(c):  # inherited by the forked workers with `tokens`: nothing is pickled but the index
        lo, hi = c * WINDOWS_PER_INPUT, min(n, (c + 1) * WINDOWS_PER_INPUT)
        return [{"tokens": np.array(tokens[w * T:w * T + T + 1])} for w in range(lo, hi)]

    fields = {"tokens": stoker.Tensor(a.dtype, (T + 1,))}
    t = time.monotonic()
    s = stoker.pack(windows, range((n + WINDOWS_PER_INPUT - 1) // WINDOWS_PER_INPUT), a.out, fields,
                    workers=a.workers, metadata={"T": T, "tokens": int(len(tokens)), "stride": T})
    dt = time.monotonic() - t
    print(f"pack_tokens: {s['records']:,} windows of {T + 1} {a.dtype} tokens into {a.out} in {dt:.1f} s")
    if a.read:
        with stoker.Reader(a.out, batch_size=a.batch_size, order="shuffle", seed=1) as r:
            t, k = time.monotonic(), 0
            for b in r:
                x = b["tokens"]
                k += 1
                if k == a.read:
                    break
            dt = time.monotonic() - t
            print(f"pack_tokens: {k} shuffled batches {list(x.shape)} {x.dtype} in {dt:.3f} s "
                  f"({k * a.batch_size * T / dt / 1e6:.1f} M tokens/s)")


if __name__ == "__main__":
    main()
