"""device='cuda': device tensors, the stream protocol, the transform on the GPU.

Skipped, with the reason printed (pytest -rs), where torch has no CUDA device or
libstoker was built without the CUDA backend (cmake -DSTOKER_CUDA=ON needs nvcc).
"""
import pytest

import stoker

torch = pytest.importorskip("torch", reason="python3-torch is not installed (apt-get install python3-torch)")


def _why_not():
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch (torch.cuda.is_available() is False)"
    ok, why = stoker.cuda_available()
    if not ok:
        return f"libstoker has no usable CUDA backend: {why}"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


def host_batches(ds, n, **kw):
    with stoker.Reader(ds, output="torch", copy=True, **kw) as r:
        it = iter(r)
        return [next(it) for _ in range(n)]


def test_device_tensors_equal_host_batches(ds):
    kw = dict(batch_size=8, order="shuffle", seed=4, threads=2)
    want = host_batches(ds, 5, **kw)
    with stoker.Reader(ds, device="cuda", **kw) as r:
        assert r.device == "cuda" and r.output == "torch"
        it = iter(r)
        for w in want:
            b = next(it)
            img = b["image"]
            assert img.is_cuda and img.dtype == torch.uint8 and img.shape == w["image"].shape
            assert img.data_ptr() == b.data_ptrs["image"]          # the reader's device buffer, no copy
            assert torch.equal(img.cpu(), w["image"]) and torch.equal(b["label"].cpu(), w["label"])
            assert b.records.tolist() == w.records.tolist()
        s = r.stats()
        assert s["device"] == "cuda" and s["h2d_bytes"] > 0


def test_consumer_stream_is_the_current_stream(ds):
    kw = dict(batch_size=8, order="shuffle", seed=4)
    want = host_batches(ds, 3, **kw)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        with stoker.Reader(ds, device="cuda", debug=True, **kw) as r:
            it = iter(r)
            for w in want:
                b = next(it)
                x = b["image"].float().sum()          # queued on `side`, after the batch's event
                assert x.item() == w["image"].float().sum().item()
    with stoker.Reader(ds, device="cuda", debug=True, stream=side, **kw) as r:
        with pytest.raises(RuntimeError, match="stream"):
            next(iter(r))                              # debug: the current stream is not `side`


def test_copy_and_debug_on_the_device(ds):
    kw = dict(batch_size=8, order="shuffle", seed=4, threads=1, prefetch=1)
    with stoker.Reader(ds, device="cuda", copy=True, **kw) as r:
        it = iter(r)
        b = next(it)
        keep, ref = b["image"], b["image"].clone()
        for _ in range(4):
            next(it)
        assert torch.equal(keep, ref)
    with stoker.Reader(ds, device="cuda", debug=True, **kw) as r:
        it = iter(r)
        lab = next(it)["label"]
        next(it)
        assert bool((lab == -1).all())


def test_transform_on_the_gpu_matches_the_host_backend(ds):
    tf = stoker.Transform.imagenet(train=True, size=6)
    kw = dict(batch_size=8, order="shuffle", seed=6, transform=tf, output="torch")
    with stoker.Reader(ds, device="host", **kw) as h, stoker.Reader(ds, device="cuda", **kw) as g:
        for bh, bg in zip(h, g):
            assert bg["image"].is_cuda and bg["image"].shape == (8, 3, 6, 6)
            torch.testing.assert_close(bg["image"].cpu(), bh["image"], rtol=1e-5, atol=1e-5)


def test_uint8_transform_on_the_gpu_matches_the_host_backend(ds):
    tf = stoker.Transform(crop="random_resized", size=5, dtype="uint8", flip_prob=0.5)
    kw = dict(batch_size=8, order="shuffle", seed=7, transform=tf, output="torch")
    with stoker.Reader(ds, device="host", **kw) as h, stoker.Reader(ds, device="cuda", **kw) as g:
        for bh, bg in zip(h, g):
            assert bg["image"].dtype == torch.uint8 and bg["image"].shape == (8, 3, 5, 5)
            assert torch.equal(bg["image"].cpu(), bh["image"])


def test_state_dict_on_the_device(ds):
    kw = dict(batch_size=8, order="shuffle", seed=8, device="cuda", fields="label")
    with stoker.Reader(ds, **kw) as r:
        it = iter(r)
        for _ in range(3):
            next(it)
        st = r.state_dict()
        rest = [b["label"].cpu().tolist() for b in it]
    with stoker.Reader(ds, **kw) as r2:
        r2.load_state_dict(st)
        assert [b["label"].cpu().tolist() for b in r2] == rest
