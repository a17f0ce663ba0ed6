"""The eval crop of JPEGs stored as their own bytes (pack --image-format original) against torchvision on a
full decode: Resize(round(S / 0.875)) + CenterCrop(S) on the PIL image (antialiased). The images are large
enough (shorter side 520-900) that the reader decodes the box DCT-scaled (image/plan.c), so the pixels are a
scaled decode's; README promises mean PSNR >= 35 dB and worst >= 30 dB against this reference."""
import io
import os

import numpy as np
import pytest

import stoker
from conftest import TOOLS, run_tool

N = 200
S = 224


def photo(rng, h, w):
    """Photo-like: a smooth random field, a few hard-edged shapes, mild sensor noise."""
    from PIL import Image, ImageDraw
    low = rng.integers(0, 256, (rng.integers(3, 9), rng.integers(3, 9), 3), dtype=np.uint8)
    img = Image.fromarray(low).resize((w, h), Image.BICUBIC)
    d = ImageDraw.Draw(img)
    for _ in range(rng.integers(2, 8)):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        box = [x0, y0, x0 + int(rng.integers(20, w // 2)), y0 + int(rng.integers(20, h // 2))]
        col = tuple(int(c) for c in rng.integers(0, 256, 3))
        (d.ellipse if rng.integers(0, 2) else d.rectangle)(box, fill=col)
    a = np.asarray(img).astype(np.int16) + rng.normal(0, 4, (h, w, 3)).astype(np.int16)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def test_eval_crop_within_psnr_of_torchvision(tmp_path):
    tvf = pytest.importorskip("torchvision.transforms.functional")
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(43)
    src = tmp_path / "src" / "c0"
    src.mkdir(parents=True)
    files = []  # what pack is given
    for i in range(N):
        short, long_ = int(rng.integers(520, 900)), int(rng.integers(900, 1300))
        h, w = (short, long_) if i % 2 else (long_, short)
        p = src / ("img-%04d.jpg" % i)
        photo(rng, h, w).save(p, quality=int(rng.integers(85, 96)))
        files.append(p.read_bytes())
    ds = tmp_path / "ds"
    pack = os.path.join(os.path.dirname(TOOLS), "packer", "pack")
    if not os.access(pack, os.X_OK):
        pytest.fail(f"{pack} missing: build the project first")
    run_tool(pack, "-q", "--max-side", "16384", "--image-format", "original", src.parent, ds)
    with stoker.Reader(str(ds), batch_size=N, fields=["image"]) as r:  # the stored JPEG bytes, by record
        b = next(iter(r))
        stored = {int(rec): bytes(v) for rec, v in zip(b.records, b["image"])}
    assert sorted(stored.values()) == sorted(files)  # the files' own bytes
    psnr = []
    with stoker.Reader(str(ds), batch_size=N, crop="center:%d" % S) as r:
        b = next(iter(r))
        for rec, got in zip(b.records, b["image"]):
            rec = int(rec)
            pil = Image.open(io.BytesIO(stored[rec])).convert("RGB")
            want = np.asarray(tvf.center_crop(tvf.resize(pil, round(S / 0.875), antialias=True), S))
            se = np.mean((got.astype(float) - want.astype(float)) ** 2)
            psnr.append(99.0 if se == 0 else 10 * np.log10(255.0 ** 2 / se))
    psnr = np.array(psnr)
    print("eval crop vs torchvision: PSNR mean %.2f dB, worst %.2f dB over %d images" % (psnr.mean(), psnr.min(), N))
    assert psnr.mean() >= 35 and psnr.min() >= 30


def test_scaled_crops_same_on_1_and_3_threads(tmp_path):
    """Scaled region decodes give the same pixels whichever worker decodes a record (random and eval crops)."""
    pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(7)
    src = tmp_path / "src" / "c0"
    src.mkdir(parents=True)
    for i in range(24):
        photo(rng, int(rng.integers(500, 1100)), int(rng.integers(500, 1100))).save(src / ("%02d.jpg" % i), quality=90)
    ds = tmp_path / "ds"
    run_tool(os.path.join(os.path.dirname(TOOLS), "packer", "pack"), "-q", "--max-side", "16384",
             "--image-format", "original", src.parent, ds)
    for crop in ("random:64", "center:64"):
        got = []
        for threads in (1, 3):
            with stoker.Reader(str(ds), batch_size=8, order="shuffle", seed=5, threads=threads, crop=crop) as r:
                got.append({int(rec): img.copy() for b in r if b.epoch == 0
                            for rec, img in zip(b.records, b["image"])})
        assert sorted(got[0]) == list(range(24)) and got[0].keys() == got[1].keys()
        for rec in got[0]:
            np.testing.assert_array_equal(got[0][rec], got[1][rec], err_msg="%s record %d" % (crop, rec))
