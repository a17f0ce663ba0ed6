"""stoker.import_webdataset and `python3 -m stoker.import_wds`: WebDataset shards written here in
WebDataset's documented layout (POSIX tars whose members are KEY.EXT, a sample's members together;
the webdataset package itself is not in Debian), imported and read back equal."""
import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import stoker
from stoker._import import braceexpand

PIL = pytest.importorskip("PIL.Image")
PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def image(i, h=None, w=None):
    rng = np.random.default_rng(i)
    return rng.integers(0, 256, (h or 5 + i % 7, w or 6 + i % 5, 3), dtype=np.uint8)


def encode(a, fmt):
    b = io.BytesIO()
    PIL.fromarray(a).save(b, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return b.getvalue()


def decoded(data):
    with PIL.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))


def samples(first, n, fmt="JPEG", ext="jpg"):
    """WebDataset samples: key -> {ext: bytes}. Keys hold a directory and a dot after the key
    ('train/000007.a.jpg' is key 'train/000007', extension 'a.jpg' in WebDataset's reading)."""
    out = {}
    for i in range(first, first + n):
        out[f"train/{i:06d}"] = {f"a.{ext}": encode(image(i), fmt), "cls": str(i % 3).encode(),
                                 "json": json.dumps({"i": i, "name": f"n{i}"}).encode(),
                                 "txt": f"caption {i} \u00e9".encode(), "meta.bin": bytes([i % 256]) * (i % 4 + 1)}
    return out


def write_tar(path, smp, gz=False):
    with (tarfile.open(path, "w:gz") if gz else tarfile.open(path, "w")) as tf:
        for key, parts in smp.items():
            for ext, data in parts.items():
                add(tf, f"{key}.{ext}", data)
    return str(path)


def read_all(path):
    with stoker.Reader(path, batch_size=7, tail="partial") as r:
        rows = []
        for b in r:
            n = len(b["key"])
            rows += [{f: (b[f][i].copy() if isinstance(b[f][i], np.ndarray) else b[f][i]) for f in b} for i in range(n)]
        return rows, r.field_names


def skipped_rows(out):
    with open(os.path.join(out, "skipped.tsv")) as f:
        lines = f.read().splitlines()
    assert lines[0] == "index\tinput\terror"
    return [line.split("\t") for line in lines[1:]]


# ------------------------------------------------------------------ brace expansion
def test_braceexpand_as_webdataset_does():
    assert braceexpand("shards-{000000..000002}.tar") == [f"shards-{i:06d}.tar" for i in range(3)]
    assert braceexpand("s-{8..10}.tar") == ["s-8.tar", "s-9.tar", "s-10.tar"]
    assert braceexpand("s-{08..10}") == ["s-08", "s-09", "s-10"]           # a leading zero pads to the width
    assert braceexpand("{1..7..3}") == ["1", "4", "7"]
    assert braceexpand("{3..1}") == ["3", "2", "1"]
    assert braceexpand("{c..a}") == ["c", "b", "a"]
    assert braceexpand("{a,b}{1..2}.tar") == ["a1.tar", "a2.tar", "b1.tar", "b2.tar"]
    assert braceexpand("x{a,b{1,2},}y") == ["xay", "xb1y", "xb2y", "xy"]     # nested, and an empty alternative
    assert braceexpand("{abc}") == ["{abc}"]                                  # neither list nor range: literal
    assert braceexpand(r"a\{1,2\}") == ["a{1,2}"]
    assert braceexpand("plain.tar") == ["plain.tar"]
    for bad in ("a{1..2", "a}b", "{a,{b}"):
        with pytest.raises(ValueError, match="has no"):
            braceexpand(bad)


# ------------------------------------------------------------------ round trips
def test_tar_and_tar_gz_braces_and_globs_read_back_equal(tmp_path):
    parts = [samples(0, 9), samples(9, 8), samples(17, 6)]
    write_tar(tmp_path / "shard-000000.tar", parts[0])
    write_tar(tmp_path / "shard-000001.tar.gz", parts[1], gz=True)
    write_tar(tmp_path / "shard-000002.tar", parts[2])
    want = {k: v for p in parts for k, v in p.items()}
    srcs = [str(tmp_path / "shard-{000000..000001}.tar*"), str(tmp_path / "shard-00000[2].tar")]
    s = stoker.import_webdataset(srcs, tmp_path / "out", workers=2)
    assert (s["shards"], s["records"], s["skipped"]) == (3, 23, 0)
    assert s["fields"] == {"key": "__key__", "image": "a.jpg", "label": "cls", "json": "json", "meta.bin": "meta.bin",
                           "txt": "txt"}
    rows, names = read_all(tmp_path / "out")
    assert list(names) == list(s["fields"])
    assert [r["key"] for r in rows] == list(want)                  # shard order, then member order
    for r in rows:
        w = want[r["key"]]
        assert np.array_equal(r["image"], decoded(w["a.jpg"]))     # the pixels PIL decodes
        assert r["label"] == int(w["cls"])
        assert json.loads(r["json"]) == json.loads(w["json"]) and r["json"] == w["json"].decode()
        assert r["txt"] == w["txt"].decode() and r["meta.bin"] == w["meta.bin"]
    assert skipped_rows(tmp_path / "out") == []
    # images kept as their bytes: the files as they were
    s = stoker.import_webdataset(srcs, tmp_path / "raw", images="bytes", workers=0)
    rows, _ = read_all(tmp_path / "raw")
    assert [r["image"] for r in rows] == [want[r["key"]]["a.jpg"] for r in rows]
    # with PyTorch's default fields, the decoded set feeds a transform like any packed one
    with stoker.Reader(tmp_path / "out", batch_size=4, fields="image,label",
                       transform=stoker.Transform.imagenet(train=False, size=4)) as r:
        b = next(iter(r))
        assert np.asarray(b["image"]).shape[0] == 4


def test_png_and_a_directory_of_shards(tmp_path):
    (tmp_path / "d").mkdir()
    smp = {f"k{i}": {"png": encode(image(i), "PNG"), "cls": b"%d" % i} for i in range(5)}
    write_tar(tmp_path / "d" / "a.tar", dict(list(smp.items())[:2]))
    write_tar(tmp_path / "d" / "b.tgz", dict(list(smp.items())[2:]), gz=True)
    s = stoker.import_webdataset(tmp_path / "d", tmp_path / "out")
    assert (s["shards"], s["records"]) == (2, 5)
    rows, _ = read_all(tmp_path / "out")
    for r in rows:
        assert np.array_equal(r["image"], image(int(r["key"][1:])))   # PNG: lossless, the very pixels
    assert [r["label"] for r in rows] == list(range(5))


# ------------------------------------------------------------------ bad input, named
def test_a_broken_member_header_is_named_and_the_samples_before_it_kept(tmp_path):
    smp = samples(0, 6)
    path = write_tar(tmp_path / "s.tar", smp)
    raw = bytearray(open(path, "rb").read())
    # the member headers in order; break the one of member 13 (sample 2's third member)
    offsets, off = [], 0
    with tarfile.open(path) as tf:
        for m in tf:
            offsets.append((m.offset, m.name))
    off, name = offsets[12]
    raw[off + 148:off + 156] = b"9999999\0"           # a wrong header checksum
    open(path, "wb").write(raw)
    s = stoker.import_webdataset(path, tmp_path / "out")
    assert s["records"] == 2                         # samples 0 and 1: before the break
    rows = skipped_rows(tmp_path / "out")
    assert any(r[1] == path and "member 13" in r[2] and f"at byte {off}" in r[2] and "not a tar member header" in r[2]
               for r in rows), rows
    assert any(r[1] == f"{path}:train/000002" and "cut off" in r[2] for r in rows), rows
    with pytest.raises(stoker.Error, match="member 13.*not a tar member header"):
        stoker.import_webdataset(path, tmp_path / "fail", on_error="fail")
    assert not os.path.exists(tmp_path / "fail" / "manifest.json")


def test_a_truncated_tar_gz_is_named(tmp_path):
    path = write_tar(tmp_path / "s.tar.gz", samples(0, 20), gz=True)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) * 2 // 3])
    s = stoker.import_webdataset(path, tmp_path / "out")
    rows = skipped_rows(tmp_path / "out")
    assert 0 < s["records"] < 20 and s["skipped"] == len(rows) >= 1
    assert any(r[1] == path and "the tar breaks at member" in r[2] for r in rows), rows
    # every sample is either read back or listed
    keys = {r["key"] for r in read_all(tmp_path / "out")[0]}
    listed = {r[1].split(":", 1)[1] for r in rows if ":" in r[1]}
    assert len(keys) + len(listed) <= 20 and not keys & listed
    assert f"train/{s['records'] - 1:06d}" in keys


def test_a_tar_cut_inside_a_member_is_named(tmp_path):
    path = write_tar(tmp_path / "s.tar", samples(0, 4))
    data = open(path, "rb").read()
    with tarfile.open(path) as tf:
        m = tf.getmembers()[7]
    open(path, "wb").write(data[:m.offset_data + 1])
    s = stoker.import_webdataset(path, tmp_path / "out")
    assert s["records"] == 1
    rows = skipped_rows(tmp_path / "out")
    assert any(r[1] == path and "member 8" in r[2] for r in rows), rows


def test_samples_that_differ_from_the_first_are_listed(tmp_path):
    smp = samples(0, 5)
    del smp["train/000001"]["cls"]                       # a missing field
    smp["train/000002"]["extra"] = b"x"                  # a field the first sample lacks
    smp["train/000003"]["cls"] = b"three"                # a label that is no integer
    smp["train/000004"]["a.jpg"] = b"not a jpeg"         # an image that does not decode
    path = write_tar(tmp_path / "s.tar", smp)
    with tarfile.open(path, "a") as tf:
        add(tf, "README", b"no extension")                # belongs to no sample
    s = stoker.import_webdataset(path, tmp_path / "out", workers=2)
    assert (s["records"], s["skipped"]) == (1, 5)
    rows = skipped_rows(tmp_path / "out")
    got = {r[1].split(":", 1)[1]: r[2] for r in rows}
    assert "no .cls" in got["train/000001"] and "train/000000" in got["train/000001"]
    assert "also .extra" in got["train/000002"]
    assert "not an integer" in got["train/000003"]
    assert "does not decode" in got["train/000004"]
    assert "no extension" in got["README"]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5]   # their places in the input, as pack lists them
    with pytest.raises(stoker.Error, match="train/000001: no .cls"):
        stoker.import_webdataset(path, tmp_path / "fail", on_error="fail")
    # kept as bytes, the broken JPEG is imported as it is (nothing decodes it)
    s = stoker.import_webdataset(path, tmp_path / "raw", images="bytes")
    assert (s["records"], s["skipped"]) == (2, 4)


def test_duplicate_extension_in_one_sample_is_listed(tmp_path):
    path = tmp_path / "s.tar"
    with tarfile.open(path, "w") as tf:
        for key, val in (("a", b"1"), ("b", b"2"), ("b", b"3"), ("c", b"4")):
            add(tf, f"{key}.cls", val)
    s = stoker.import_webdataset(path, tmp_path / "out")
    assert (s["records"], s["skipped"]) == (2, 1)
    assert "twice" in skipped_rows(tmp_path / "out")[0][2]


def test_missing_shards_and_urls_are_refused(tmp_path):
    write_tar(tmp_path / "s-0.tar", samples(0, 1))
    with pytest.raises(FileNotFoundError, match="s-1.tar: no such file"):
        stoker.import_webdataset(str(tmp_path / "s-{0..1}.tar"), tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no file matches"):
        stoker.import_webdataset(str(tmp_path / "x-*.tar"), tmp_path / "out")
    with pytest.raises(ValueError, match="local"):
        stoker.import_webdataset("https://example.com/s-{0..1}.tar", tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")


# ------------------------------------------------------------------ the command
def test_the_command(tmp_path):
    write_tar(tmp_path / "s-0.tar", samples(0, 3))
    smp = samples(3, 2)
    del smp["train/000004"]["txt"]
    write_tar(tmp_path / "s-1.tar", smp)
    env = dict(os.environ, PYTHONPATH=PKG)
    cmd = [sys.executable, "-m", "stoker.import_wds"]
    p = subprocess.run(cmd + [str(tmp_path / "s-0.tar"), str(tmp_path / "a")], capture_output=True, text=True,
                       env=env)
    assert p.returncode == 0, p.stderr
    assert "3 records, 0 skipped" in p.stdout and "image (.a.jpg)" in p.stdout
    p = subprocess.run(cmd + [str(tmp_path / "s-{0..1}.tar"), str(tmp_path / "b"), "--images", "bytes"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 3 and "1 not imported" in p.stderr and "skipped.tsv" in p.stderr
    assert stoker.Reader(tmp_path / "b").num_records == 4
    p = subprocess.run(cmd + [str(tmp_path / "nope.tar"), str(tmp_path / "c")], capture_output=True, text=True,
                       env=env)
    assert p.returncode == 1 and "nope.tar: no such file" in p.stderr
    p = subprocess.run(cmd + ["--bogus", str(tmp_path / "c")], capture_output=True, text=True, env=env)
    assert p.returncode == 2


def test_a_png_among_jpegs_is_the_same_image_field(tmp_path):
    smp = samples(0, 4)
    smp["train/000002"] = {("a.png" if e == "a.jpg" else e): (encode(image(2), "PNG") if e == "a.jpg" else v)
                           for e, v in smp["train/000002"].items()}
    path = write_tar(tmp_path / "s.tar", smp)
    for images in ("decode", "bytes"):
        s = stoker.import_webdataset(path, tmp_path / images, images=images)
        assert (s["records"], s["skipped"]) == (4, 0)
        rows, _ = read_all(tmp_path / images)
        png = rows[2]["image"]
        if images == "decode":
            assert np.array_equal(png, image(2))
        else:
            assert png == smp["train/000002"]["a.png"]


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_long_names_directories_links_and_compressions(tmp_path, fmt):
    """Names past the 100 bytes of a header (pax 'path', GNU 'L', ustar's prefix), non-ASCII names,
    directory members (skipped, as WebDataset does), a symlink (listed), xz and bzip2 streams."""
    deep = "d" * 60 + "/" + "e" * 60 if fmt == tarfile.USTAR_FORMAT else "d" * 80 + "/" + "\u00e9t\u00e9" * 30
    keys = [f"{deep}/k{i}" for i in range(3)]
    for mode, name in (("w", "s.tar"), ("w:xz", "s.tar.xz"), ("w:bz2", "s.tar.bz2")):
        path = tmp_path / name
        with tarfile.open(path, mode, format=fmt) as tf:
            d = tarfile.TarInfo(deep)
            d.type = tarfile.DIRTYPE
            tf.addfile(d)
            for i, k in enumerate(keys):
                add(tf, f"{k}.cls", b"%d" % i)
                add(tf, f"{k}.txt", f"t{i}".encode())
            ln = tarfile.TarInfo(f"{deep}/link.cls")
            ln.type, ln.linkname = tarfile.SYMTYPE, "k0.cls"
            tf.addfile(ln)
        s = stoker.import_webdataset(path, tmp_path / f"out-{name}", workers=0)
        assert (s["records"], s["skipped"]) == (3, 1)
        rows, _ = read_all(tmp_path / f"out-{name}")
        assert [(r["key"], r["label"], r["txt"]) for r in rows] == [(k, i, f"t{i}") for i, k in enumerate(keys)]
        assert "link or device" in skipped_rows(tmp_path / f"out-{name}")[0][2]


def test_images_into_a_jpeg_field(tmp_path):
    """images="jpeg": colour JPEGs stored byte for byte in a codec="jpeg" field the reader decodes at load,
    other images (a PNG, a greyscale JPEG) encoded as JPEG and counted, a JPEG that does not decode listed."""
    smp = samples(0, 6)
    y, x = np.mgrid[0:24, 0:32]
    smooth = np.stack([x * 8, y * 10, (x + y) * 4], axis=-1).astype(np.uint8)   # JPEG keeps it within a few levels
    smp["train/000002"]["a.png"] = encode(smooth, "PNG")
    del smp["train/000002"]["a.jpg"]
    grey = io.BytesIO()
    PIL.fromarray(smooth[:, :, 0]).save(grey, "JPEG")
    smp["train/000003"]["a.jpg"] = grey.getvalue()
    smp["train/000004"]["a.jpg"] = smp["train/000004"]["a.jpg"][:-300]   # cut: does not decode
    path = write_tar(tmp_path / "s.tar", smp)
    s = stoker.import_webdataset(path, tmp_path / "out", images="jpeg", workers=2)
    assert (s["records"], s["skipped"], s["reencoded"]) == (5, 1, 2)
    assert "train/000004" in skipped_rows(tmp_path / "out")[0][1]
    with open(tmp_path / "out" / "manifest.json") as f:
        image_field = [x for x in json.load(f)["schema"] if x["name"] == "image"][0]
    assert image_field["codec"] == "jpeg" and image_field["shape"] == [None, None, 3]
    rows, _ = read_all(tmp_path / "out")
    keys = [r["key"] for r in rows]
    assert keys == [k for k in smp if k != "train/000004"]
    for r in rows:
        src = smp[r["key"]]
        if r["key"] in ("train/000002", "train/000003"):
            assert np.abs(decoded(r["image"]).astype(int) - decoded(src.get("a.png") or src["a.jpg"])).mean() < 3
        else:
            assert r["image"] == src["a.jpg"]                      # the file's own bytes
    with stoker.Reader(tmp_path / "out", batch_size=5, fields="image,label",
                       transform=stoker.Transform.imagenet(train=False, size=4)) as r:
        assert np.asarray(next(iter(r))["image"]).shape == (5, 3, 4, 4)
