"""Mixtures through the binding: stoker.Source, batch.sources, state across processes and world sizes."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker
from conftest import PKG, shardgen


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Three datasets of 60, 40 and 25 records (different seeds: different images)."""
    d = tmp_path_factory.mktemp("mix")
    return [shardgen(d / f"s{i}", n, seed=10 + i, per_shard=13) for i, n in enumerate((60, 40, 25))]


def images_of(path):
    """Record -> image bytes of one dataset, read alone in dataset order."""
    out = {}
    with stoker.Reader(path, batch_size=16, fields="image") as r:
        for b in r:
            for i, rec in enumerate(b.records):
                out[int(rec)] = b["image"][i].tobytes()
    return out


def test_batches_say_where_each_record_came_from(three):
    ref = [images_of(p) for p in three]
    src = [stoker.Source(three[0], weight=0.5), stoker.Source(three[1], weight=0.3),
           stoker.Source(three[2], weight=0.2, order="sequential")]
    with stoker.Reader(src, batch_size=10, order="shuffle", seed=4, epoch_size=80, tail="drop") as r:
        assert len(r) == 8 and r.num_records == 125 and r.path == three
        per = np.zeros(3, np.int64)
        for b in r:
            assert b.sources.dtype == np.uint32 and b.source_records.dtype == np.uint64
            base = np.array([0, 60, 100], np.uint64)[b.sources]
            assert (b.records == base + b.source_records).all()
            for i in range(b.size):
                assert b["image"][i].tobytes() == ref[b.sources[i]][int(b.source_records[i])]
            counts = np.bincount(b.sources, minlength=3)
            assert (np.abs(counts - 10 * np.array([0.5, 0.3, 0.2])) <= 2).all()  # in proportion, every batch
            per += counts
        assert per.tolist() == [40, 24, 16]
        stats = r.source_stats()
        assert [s["samples"] for s in stats] == [40, 24, 16]
        assert [s["per_epoch"] for s in stats] == [40, 24, 16]
        assert [s["path"] for s in stats] == three
        assert abs(sum(s["share"] for s in stats) - 1) < 1e-9
        v = r.verdict().splitlines()
        assert len(v) == 2 and v[1].startswith("sources: s0 50% of samples, ") and "; s1 30%, " in v[1]
        state = r.state_dict()
    assert state["stoker_reader_state"] == 2 and state["epoch_size"] == 80
    assert [s["value"] for s in state["sources"]] == [0.5, 0.3, 0.2]
    assert state["sources"][2]["order"] == "sequential"


def test_one_dataset_has_no_sources(three):
    with stoker.Reader(three[0], batch_size=8) as r:
        b = r.next_batch()
        assert b.sources is None and b.source_records is None
        assert r.sources is None and len(r.source_stats()) == 1


def test_source_arguments():
    with pytest.raises(ValueError, match="one of weight, repeat or choose"):
        stoker.Source("a", weight=1, repeat=2)
    with pytest.raises(ValueError, match="whole number"):
        stoker.Source("a", choose=2.5)
    with pytest.raises(ValueError, match="order"):
        stoker.Source("a", order="random")
    assert repr(stoker.Source("a", choose=3)) == "stoker.Source('a', choose=3)"
    assert stoker.Source("a").kind == "weight"


def test_errors_name_the_source(three, tmp_path):
    other = shardgen(tmp_path / "wide", 10, size=16)
    with pytest.raises(stoker.ArgumentError, match=r"source 1 .*wide.*field image u8\[16,16,3\]"):
        stoker.Reader([three[0], other], batch_size=4)
    with pytest.raises(stoker.ArgumentError, match="weights are for all sources or none"):
        stoker.Reader([stoker.Source(three[0]), stoker.Source(three[1], repeat=1)], batch_size=4)


CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import stoker
paths, state, rank, world, n = json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
src = [stoker.Source(paths[0], repeat=0.5), stoker.Source(paths[1], repeat=1.5, order="quasi"),
       stoker.Source(paths[2], choose=7)]
with stoker.Reader(src, batch_size=12 // world, order="shuffle", seed=9, rank=rank, world_size=world,
                   quasi_block_bytes=2048, fields="label") as r:
    r.load_state_dict(open(state).read())
    out = []
    for _ in range(n):
        b = r.next_batch()
        out.append(b.records.tolist())
print(json.dumps(out))
"""


def test_resume_in_a_new_process_and_another_world_size(three, tmp_path):
    src = [stoker.Source(three[0], repeat=0.5), stoker.Source(three[1], repeat=1.5, order="quasi"),
           stoker.Source(three[2], choose=7)]
    with stoker.Reader(src, batch_size=12, order="shuffle", seed=9, quasi_block_bytes=2048, fields="label") as r:
        assert len(r) == (30 + 60 + 7 + 11) // 12
        for _ in range(5):
            r.next_batch()
        sf = tmp_path / "state.json"
        sf.write_text(json.dumps(r.state_dict()))
        want = [r.next_batch().records.tolist() for _ in range(20)]  # across the epoch's end
    got = {}
    for world in (1, 2, 3):
        for rank in range(world):
            p = subprocess.run([sys.executable, "-c", CHILD, PKG, json.dumps(three), str(sf), str(rank),
                                str(world), "20"], capture_output=True, text=True, env=os.environ)
            assert p.returncode == 0, p.stderr
            got[world, rank] = json.loads(p.stdout)
    for world in (1, 2, 3):
        for j in range(20):
            merged = sum((got[world, rank][j] for rank in range(world)), [])
            assert merged == want[j], (world, j)


def test_reweight_between_phases(three):
    kw = dict(batch_size=8, order="shuffle", seed=1, fields="label")
    with stoker.Reader([stoker.Source(three[0], weight=0.8), stoker.Source(three[1], weight=0.2)], **kw) as r:
        for _ in range(len(r) + 3):
            r.next_batch()
        state = r.state_dict()
    phase2 = [stoker.Source(three[0], weight=0.2), stoker.Source(three[1], weight=0.8)]
    with stoker.Reader(phase2, **kw) as r:
        with pytest.raises(stoker.ArgumentError, match=r"source 0 .* weight 0.8 in the state, weight 0.2 here"):
            r.load_state_dict(state)
        r.load_state_dict(state, reweight=True)
        assert r.position() == (1, 3)
        b = r.next_batch()
        assert np.bincount(b.sources, minlength=2)[1] >= 5  # the new weights rule
    with stoker.Reader([three[0], three[2]], **kw) as r:
        with pytest.raises(stoker.ArgumentError, match="source 1 .* another dataset"):
            r.load_state_dict(state, reweight=True)


def test_dataloader_over_a_mixture(three):
    torch = pytest.importorskip("torch")
    import stoker.torch as st
    loader = st.DataLoader([stoker.Source(three[0], weight=2), stoker.Source(three[1], weight=1)], batch_size=6,
                           shuffle=True, seed=3, drop_last=True)
    n = 0
    for img, lab in loader:
        assert isinstance(img, torch.Tensor) and img.shape[0] == 6 and lab.shape == (6,)
        n += 1
    assert n == len(loader) == 100 // 6
    # the sampler's length is the epoch's records on this rank, a mixture's counts (not its sources' sum)
    loader = st.DataLoader([stoker.Source(three[0], repeat=2), stoker.Source(three[1], choose=10)], batch_size=4,
                           drop_last=True)
    assert loader.reader.epoch_records == 130 and loader.reader.num_records == 100
    assert len(loader) == 32 and len(loader.sampler) == 128
