"""output='torch' on the CPU: tensors share the reader's memory; dtypes; torch.distributed."""
import os

import numpy as np
import pytest

import stoker
from conftest import run_tool, tool

torch = pytest.importorskip("torch", reason="python3-torch is not installed (apt-get install python3-torch)")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A real `pack` output (image, label, orig_size u32[2], source u64) of 12 rawgen images."""
    base = tmp_path_factory.mktemp("packed")
    run_tool(tool("rawgen"), "-q", "-n", "12", "--classes", "3", "--min-side", "40", "--max-side", "90",
             base / "raw")
    pack = os.path.join(os.path.dirname(tool("rawgen")), "..", "packer", "pack")
    run_tool(pack, "-q", "-j", "1", "--size", "16", base / "raw", base / "ds")
    return str(base / "ds")


def test_tensors_share_memory_with_the_batch(ds):
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=3, threads=1, prefetch=1, output="torch") as r:
        it = iter(r)
        b = next(it)
        img, lab = b["image"], b["label"]
        assert isinstance(img, torch.Tensor) and img.dtype == torch.uint8 and img.shape == (8, 8, 8, 3)
        assert lab.dtype == torch.int64
        assert img.data_ptr() == b.data_ptrs["image"] and lab.data_ptr() == b.data_ptrs["label"]
        before = img.clone()
        # DLPack consumers see the same memory
        again = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(img))
        assert again.data_ptr() == img.data_ptr()
        for _ in range(4):      # the ring has 2 slots: this batch's slot is refilled
            next(it)
        assert not torch.equal(img, before)      # the tensor is the slot, not a copy of it


def test_zero_copy_tensor_points_into_the_mapping(ds):
    with stoker.Reader(ds, batch_size=17, output="torch", tail="partial") as r:
        b = next(iter(r))
        assert b.zero_copy and b["image"].data_ptr() == b.data_ptrs["image"]
        shard = os.path.realpath(os.path.join(ds, "shard-00000.stk"))  # not another dataset's shard 0
        m = [l for l in open("/proc/self/maps") if l.rstrip().endswith(shard)]
        lo, hi = (int(x, 16) for x in m[0].split()[0].split("-"))
        assert lo <= b["image"].data_ptr() < hi


def test_copy_true_tensors_are_owned(ds):
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=3, threads=1, prefetch=1, output="torch",
                       copy=True) as r:
        it = iter(r)
        b = next(it)
        img = b["image"]
        assert img.data_ptr() != b.data_ptrs["image"]
        before = img.clone()
        for _ in range(4):
            next(it)
        assert torch.equal(img, before)
        img += 1  # owned tensors are writable


def test_debug_poisons_tensors(ds):
    with stoker.Reader(ds, batch_size=8, order="shuffle", seed=3, output="torch", debug=True) as r:
        it = iter(r)
        b = next(it)
        img, lab = b["image"], b["label"]
        assert img.data_ptr() != b.data_ptrs["image"]
        next(it)
        assert bool((img == 255).all()) and bool((lab == -1).all())


def test_pack_fields_and_dtypes(packed):
    with stoker.Reader(packed, batch_size=12) as r:
        n = next(iter(r))
        assert n["orig_size"].dtype == np.uint32 and n["source"].dtype == np.uint64
        want = {k: np.array(v) for k, v in n.items()}
    with stoker.Reader(packed, batch_size=12, output="torch") as r:
        t = next(iter(r))
        assert t["image"].shape == (12, 16, 16, 3) and t["image"].dtype == torch.uint8
        assert t["orig_size"].dtype == torch.int64          # torch has no uint32: widened, exactly
        assert t["source"].dtype == torch.int64             # uint64 read as int64 (exact below 2^63)
        for k in want:
            assert np.array_equal(t[k].numpy().astype(want[k].dtype), want[k]), k
        assert (t["orig_size"] >= 40).all() and (t["orig_size"] <= 90).all()
        assert sorted(t["source"].tolist()) == list(range(12))


def test_bfloat16_transform_on_the_host(ds):
    kw = dict(batch_size=8, order="shuffle", seed=5, output="torch")
    tf32 = stoker.Transform(crop="center", size=6, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    tf16 = stoker.Transform(crop="center", size=6, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
                            dtype="bfloat16", layout="NHWC")
    with stoker.Reader(ds, transform=tf32, **kw) as a, stoker.Reader(ds, transform=tf16, **kw) as b:
        x, y = next(iter(a))["image"], next(iter(b))["image"]
        assert x.dtype == torch.float32 and x.shape == (8, 3, 6, 6)
        assert y.dtype == torch.bfloat16 and y.shape == (8, 6, 6, 3)
        torch.testing.assert_close(y.float().permute(0, 3, 1, 2), x, rtol=1e-2, atol=1e-2)


def test_rank_from_torch_distributed(ds, tmp_path, monkeypatch):
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        with stoker.Reader(ds, batch_size=4, fields="label") as r:
            assert (r.rank, r.world_size) == (0, 1)  # the process group wins over the environment
    finally:
        dist.destroy_process_group()
    with stoker.Reader(ds, batch_size=4, fields="label") as r:
        assert (r.rank, r.world_size) == (2, 3)


def test_a_training_step_runs_on_a_batch(ds):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with stoker.Reader(ds, batch_size=16, order="shuffle", output="torch") as r:
        for b in r:
            x = b["image"].permute(0, 3, 1, 2).float().div_(255)
            loss = torch.nn.functional.cross_entropy(model(x), b["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert torch.isfinite(loss)
