"""bench/loader_timing.py - the one timing loop the PyTorch baselines share.

take_rate(loader, warmup, seconds): batches across epochs (a finished epoch
starts the next one), `warmup` of them untimed, then batches until `seconds`
have passed. Returns (images, elapsed seconds, the last batch's first tensor).
The consumer only takes each batch, as a loop that hands it to a model would.
"""
import time


def take_rate(loader, warmup, seconds):
    it = iter(loader)

    def take():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(loader)  # the next epoch (persistent workers stay up)
            return next(it)

    for _ in range(warmup):
        take()
    images = 0
    t0 = time.perf_counter()
    while True:
        x = take()[0]
        images += x.shape[0]
        el = time.perf_counter() - t0
        if el >= seconds:
            return images, el, x
