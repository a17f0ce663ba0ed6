"""stoker.Reader and stoker.torch.DataLoader over s3:// (the S3 test server of tests/support):
a shuffled epoch equals the local copy's; the remote statistics count what was fetched. Skipped
with the reason when the server cannot start."""
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, shardgen

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import s3fixture  # noqa: E402

import stoker  # noqa: E402

s3 = s3fixture.pytest_fixture(scope="module")


@pytest.fixture(scope="module")
def remote(s3, tmp_path_factory):
    os.environ.pop("AWS_PROFILE", None)
    os.environ.update(s3.env)  # libstoker reads the AWS_* variables at open
    local = shardgen(tmp_path_factory.mktemp("rds") / "ds", 60, size=12, per_shard=25)
    s3.upload_tree(local, "py/ds")
    return local, f"s3://{s3.bucket}/py/ds"


def test_shuffled_epoch_equals_the_local_copy(remote, tmp_path):
    local, url = remote
    kw = dict(batch_size=7, order="shuffle", seed=3, threads=2, tail="partial", copy=True)
    with stoker.Reader(local, **kw) as r:
        want = [(list(b.records), b["image"], b["label"]) for b in r]
    with stoker.Reader(url, cache_dir=str(tmp_path / "cache"), cache_limit=1 << 30, **kw) as r:
        got = [(list(b.records), b["image"], b["label"]) for b in r]
        st = r.remote_stats()
        assert r.num_records == 60 and r.io_stats()["engine"] == "remote"
    assert len(got) == len(want)
    for (ra, ia, la), (rb, ib, lb) in zip(got, want):
        assert ra == rb
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(la, lb)
    # records of 432 bytes: their columns are fetched a window at a time, not a GET each
    assert st["remote"] is True and st["requests"] > 0 and st["bytes_fetched"] >= 60 * 12 * 12 * 3
    assert st["failures"] == 0 and set(st) >= {"cache_hits", "cache_stored_bytes", "checksum_refetches"}
    with stoker.Reader(local, batch_size=4) as r:
        assert r.remote_stats()["remote"] is False


def test_dataloader_over_s3(remote, tmp_path):
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    from stoker.torch import DataLoader
    local, url = remote
    kw = dict(batch_size=8, shuffle=True, seed=5, num_workers=2, fields=("image", "label"), checkpoint_dir=False)
    want = [(x.clone(), y.clone()) for x, y in DataLoader(local, **kw)]
    got = [(x.clone(), y.clone()) for x, y in DataLoader(url, cache_dir=str(tmp_path / "c"), **kw)]
    assert len(got) == len(want) > 0
    for (xa, ya), (xb, yb) in zip(got, want):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
