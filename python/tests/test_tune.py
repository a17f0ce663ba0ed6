"""The online tuner from Python: Reader(tuning=, tune_pin=, threads_max=, cpu_budget=), tune_stats()
and its log, the batches unchanged by tuning, metrics, and DataLoader's num_workers as the bound."""
import numpy as np
import pytest

import stoker


def read_all(r, epochs=2):
    out = []
    for _ in range(epochs):
        for b in r:
            out.append((b.records.tolist(), b["image"].tobytes(), b["label"].tobytes()))
    return out


def test_tuning_off_keeps_the_knobs(ds):
    with stoker.Reader(ds, batch_size=8, threads=2, prefetch=3, tuning="off") as r:
        read_all(r)
        t = r.tune_stats()
        assert t["on"] is False and t["changes"] == 0 and t["log"] == []
        assert (t["threads"], t["prefetch"], t["threads_max"], t["prefetch_max"]) == (2, 3, 2, 3)


def test_tuning_on_same_batches_and_a_log(ds):
    kw = dict(batch_size=8, order="shuffle", seed=4, copy=True)
    with stoker.Reader(ds, threads=2, tuning="off", **kw) as a:
        want = read_all(a, 3)
    with stoker.Reader(ds, threads=1, prefetch=1, tuning="on", threads_max=3, **kw) as b:
        assert read_all(b, 3) == want
        t = b.tune_stats(log=256)
        assert t["on"] is True and t["threads_max"] == 3 and 1 <= t["threads"] <= 3
        assert 1 <= t["prefetch"] <= t["prefetch_max"] <= 256 and t["memory_budget"] > 0
        # a decision needs 25 ms of batches: a read this short may make none
        assert t["changes"] <= t["decisions"] and t["period"] >= 8 and t["cpu_budget"] >= 1
        assert len(t["log"]) == min(t["changes"], 256)
        for e in t["log"]:
            assert e["reason"] and e["threads"] <= 3 and e["prefetch"] <= t["prefetch_max"]
        s = b.stats()
        assert s["threads"] == t["threads"] and s["prefetch"] == t["prefetch"]
        m = b.metrics()
        assert "stoker_tune_changes_total %d" % t["changes"] in m and "stoker_tuning 1" in m


def test_pins_and_bad_values(ds):
    with stoker.Reader(ds, batch_size=8, threads=1, prefetch=1, tuning="on", threads_max=2,
                       tune_pin="threads,prefetch") as r:
        read_all(r, 3)
        t = r.tune_stats()
        assert t["threads"] == 1 and t["prefetch"] == 1  # pinned: left as given
        assert t["threads_max"] == 1 and t["prefetch_max"] == 1
    with pytest.raises(ValueError, match="tuning 'sometimes'"):
        stoker.Reader(ds, tuning="sometimes")
    with pytest.raises(ValueError, match="tune_pin 'speed'"):
        stoker.Reader(ds, tune_pin=["speed"])
    with pytest.raises(stoker.Error, match="threads_max 2"):
        stoker.Reader(ds, threads=4, threads_max=2, tuning="on")


def test_environment_switch(ds, monkeypatch):
    monkeypatch.setenv("STOKER_TUNING", "off")
    with stoker.Reader(ds, batch_size=8) as r:
        assert r.tune_stats()["on"] is False
    monkeypatch.setenv("STOKER_TUNING", "bogus")
    with pytest.raises(stoker.Error, match="STOKER_TUNING"):
        stoker.Reader(ds, batch_size=8)
    with stoker.Reader(ds, batch_size=8, tuning="on") as r:  # the option rules: the variable is not read
        assert r.tune_stats()["on"] is True


def test_dataloader_num_workers_bounds_the_threads(ds):
    torch = pytest.importorskip("torch")
    import stoker.torch
    loader = stoker.torch.DataLoader(ds, batch_size=8, num_workers=2, tuning="on")
    for img, lab in loader:
        assert isinstance(img, torch.Tensor)
    t = loader.reader.tune_stats()
    assert t["threads_max"] == 2 and t["threads"] <= 2
    loader.reader.close()
