"""The reader's crops of JPEGs stored as their own bytes (pack --image-format original) against torchvision on a
full decode of the stored bytes (the PIL image, antialiased): the eval crop, Resize(round(S / 0.875)) +
CenterCrop(S); and RandomResizedCrop(S) + flip with the box the reader drew (Reader.crop_box), applied by
tvf.resized_crop then hflip. Large images (shorter side 520-900) make the reader decode the box DCT-scaled
(image/plan.c), so the pixels are a scaled decode's; small ones (100-400) are upscaled or a whole decode's.
README promises mean PSNR >= 35 dB and worst >= 30 dB against this reference."""
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
    # the files' own pixels (pack's default adds restart markers losslessly), each stored once
    def pixels(jpeg):
        return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).tobytes()

    assert sorted(map(pixels, stored.values())) == sorted(map(pixels, files))
    assert all(b"\xff\xdd\x00\x04\x00\x01" in v for v in stored.values())  # a restart marker every MCU
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


def psnr_of(got, want):
    se = np.mean((got.astype(float) - want.astype(float)) ** 2)
    return 99.0 if se == 0 else 10 * np.log10(255.0 ** 2 / se)


def test_random_resized_crop_within_psnr_of_torchvision(tmp_path):
    """RandomResizedCrop(S) + flip with the reader's own box: tvf.resized_crop (+ hflip) of a full PIL decode."""
    tvf = pytest.importorskip("torchvision.transforms.functional")
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(4343)
    src = tmp_path / "src" / "c0"
    src.mkdir(parents=True)
    n = 120
    for i in range(n):
        if i % 2:  # boxes of 448 px and more: decoded DCT-scaled
            short, long_ = int(rng.integers(520, 900)), int(rng.integers(900, 1300))
        else:      # small: crops upscaled, or from a whole-scale decode
            short, long_ = int(rng.integers(100, 300)), int(rng.integers(300, 420))
        h, w = (short, long_) if i % 4 < 2 else (long_, short)
        photo(rng, h, w).save(src / ("img-%04d.jpg" % i), quality=int(rng.integers(85, 96)))
    ds = tmp_path / "ds"
    run_tool(os.path.join(os.path.dirname(TOOLS), "packer", "pack"), "-q", "--max-side", "16384",
             "--image-format", "original", src.parent, ds)
    with stoker.Reader(str(ds), batch_size=n, fields=["image"]) as r:  # the stored JPEG bytes, by record
        b = next(iter(r))
        stored = {int(rec): bytes(v) for rec, v in zip(b.records, b["image"])}
    psnr, scaled, flips = [], 0, 0
    with stoker.Reader(str(ds), batch_size=n, order="shuffle", seed=3, crop="random:%d" % S) as r:
        r.set_epoch(1)
        b = next(iter(r))
        assert b.epoch == 1
        for rec, got in zip(b.records, b["image"]):
            rec = int(rec)
            pil = Image.open(io.BytesIO(stored[rec])).convert("RGB")
            box = r.crop_box(rec)  # the epoch of the batch just read; the stored shape
            assert box == r.crop_box(rec, pil.height, pil.width, epoch=b.epoch)
            assert all(float(v).is_integer() for v in box[:4])  # RandomResizedCrop's box: whole pixels
            assert 0 <= box.x0 and box.x0 + box.w <= pil.width and 0 <= box.y0 and box.y0 + box.h <= pil.height
            want = tvf.resized_crop(pil, int(box.y0), int(box.x0), int(box.h), int(box.w), [S, S], antialias=True)
            if box.flip:
                want = tvf.hflip(want)
            psnr.append(psnr_of(got, np.asarray(want)))
            scaled += min(box.w, box.h) >= 2 * S
            flips += box.flip
    psnr = np.array(psnr)
    print("RandomResizedCrop vs torchvision: PSNR mean %.2f dB, worst %.2f dB over %d images (%d boxes DCT-scaled, "
          "%d flipped)" % (psnr.mean(), psnr.min(), n, scaled, flips))
    assert scaled >= n // 8 and 0 < flips < n  # both decode paths, both flips
    assert psnr.mean() >= 35 and psnr.min() >= 30


def test_crop_box_moves_labels(tmp_path):
    """CropBox.map_points takes the box's corners to the output's corners (mirrored when flipped); the eval
    box is the source region Resize + CenterCrop keeps; a reader without a crop has no box."""
    pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(5)
    src = tmp_path / "src" / "c0"
    src.mkdir(parents=True)
    for i in range(8):
        photo(rng, 300, 400).save(src / ("%02d.jpg" % i), quality=90)
    ds = tmp_path / "ds"
    run_tool(os.path.join(os.path.dirname(TOOLS), "packer", "pack"), "-q", "--max-side", "16384",
             "--image-format", "original", src.parent, ds)
    with stoker.Reader(str(ds), batch_size=8, crop="random:64", seed=9) as r:
        before = r.crop_box(3)  # no batch yet: the epoch the reader stands at (0)
        b = next(iter(r))
        flipped = 0
        for rec in b.records:
            box = r.crop_box(rec)
            corners = box.map_points([[box.x0, box.y0], [box.x0 + box.w, box.y0 + box.h]], 64)
            want = [[64, 0], [0, 64]] if box.flip else [[0, 0], [64, 64]]
            np.testing.assert_allclose(corners, want, atol=1e-9)
            flipped += box.flip
        assert before == r.crop_box(3, epoch=0)
        assert r.crop_box(3, epoch=1) != r.crop_box(3, epoch=0)
        with pytest.raises(stoker.ArgumentError, match="past the dataset"):
            r.crop_box(8)
    with stoker.Reader(str(ds), batch_size=8, crop="center:224") as r:
        box = r.crop_box(0)  # 300 x 400: Resize(256) -> 256 x 341, CenterCrop(224) at (58, 16)
        np.testing.assert_allclose(box[:4], [58 * 400 / 341, 16 * 300 / 256, 224 * 400 / 341, 224 * 300 / 256])
        assert box.flip is False
    with stoker.Reader(str(ds), batch_size=8) as r:
        with pytest.raises(stoker.ArgumentError, match="no transform"):
            r.crop_box(0)


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
