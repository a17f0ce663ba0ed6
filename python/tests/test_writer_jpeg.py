"""stoker.Writer fields with codec="jpeg": JPEG streams stored as they are (format 1.2, as pack
--image-format original stores them), their frame size as the record's shape, read back as bytes or
decoded by the reader's image pipeline."""
import io
import json

import numpy as np
import pytest

import stoker

PIL = pytest.importorskip("PIL.Image")


def jpeg(a, **kw):
    b = io.BytesIO()
    PIL.fromarray(a).save(b, "JPEG", **kw)
    return b.getvalue()


def test_jpeg_field_round_trip_and_refusals(tmp_path):
    ims = [np.random.default_rng(i).integers(0, 256, (9 + i, 13, 3), dtype=np.uint8) for i in range(4)]
    fields = {"image": stoker.Ragged("uint8", (None, None, 3), codec="jpeg"), "label": stoker.Scalar("int64")}
    assert "codec='jpeg'" in repr(fields["image"])
    with stoker.Writer(tmp_path / "ds", fields) as w:
        for i, a in enumerate(ims):
            w.write({"image": jpeg(a, progressive=i == 1), "label": i})
        with pytest.raises(TypeError, match="expected the JPEG's bytes"):
            w.write({"image": ims[0], "label": 9})
        with pytest.raises(ValueError, match="not a JPEG with a frame header"):
            w.write({"image": b"\xff\xd8\xff\xd9", "label": 9})
        with pytest.raises(ValueError, match="does not decode"):
            w.write({"image": jpeg(ims[0])[:-200], "label": 9})
        with pytest.raises(ValueError, match="components"):
            w.write({"image": jpeg(ims[0][:, :, 0]), "label": 9})       # greyscale into a 3-channel field
        assert w.records == 4
    with open(tmp_path / "ds" / "manifest.json") as f:
        schema = json.load(f)["schema"]
    assert schema[0]["codec"] == "jpeg"
    with stoker.Reader(tmp_path / "ds", batch_size=4) as r:
        b = next(iter(r))
        assert list(b["image"]) == [jpeg(a, progressive=i == 1) for i, a in enumerate(ims)]
    with pytest.raises(stoker.Error, match="codec jpeg needs an array field"):
        stoker.Writer(tmp_path / "bad", {"b": stoker.Bytes(codec="jpeg")})
    with stoker.Reader(tmp_path / "ds", batch_size=4, transform=stoker.Transform.imagenet(train=False, size=8)) as r:
        assert np.asarray(next(iter(r))["image"]).shape == (4, 3, 8, 8)          # decoded by the reader
