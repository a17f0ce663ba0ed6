"""stoker.import_mds and `python3 -m stoker.import_mds`: MosaicML Streaming (MDS) datasets written here
in Streaming's documented layout (streaming/base/format/mds: index.json, shard.NNNNN.mds of u32 count,
u32 offsets, the shard's JSON config, then samples of u32 sizes of the variable columns and the columns'
bytes; the streaming package is not in Debian), imported and read back equal."""
import ctypes
import ctypes.util
import gzip
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker

PIL = pytest.importorskip("PIL.Image")
PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXED = {"int": 8, "int64": 8, "int32": 4, "uint8": 1, "float32": 4, "float64": 8}
DTYPE_CODE = {"uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "float16": 18, "uint32": 32, "int32": 33,
              "float32": 34, "uint64": 64, "int64": 65, "float64": 66}


def enc_value(enc, v):
    """Streaming's mds_encode for the encodings the tests use."""
    base, *args = enc.split(":")
    if base in ("bytes", "pkl"):
        return v
    if base in ("str", "str_int"):
        return str(v).encode()
    if base == "json":
        return json.dumps(v).encode()
    if base == "int":
        return np.int64(v).tobytes()
    if base in FIXED:
        return np.dtype(base).type(v).tobytes()
    if base in ("jpeg", "png"):
        b = io.BytesIO()
        PIL.fromarray(v).save(b, "JPEG" if base == "jpeg" else "PNG")
        return b.getvalue()
    if base == "pil":
        im = PIL.fromarray(v)
        mode = im.mode.encode()
        return np.array([im.size[0], im.size[1], len(mode)], np.uint32).tobytes() + mode + im.tobytes()
    if base == "ndarray":
        parts = []
        if not args:
            parts.append(bytes([DTYPE_CODE[v.dtype.name]]))
        if len(args) < 2:
            parts += [bytes([(v.ndim << 2) | 0]), np.array(v.shape, np.uint8).tobytes()]  # shape dims < 256
        return b"".join(parts) + v.tobytes()
    raise AssertionError(enc)


def enc_size(enc):
    base, *args = enc.split(":")
    if base in FIXED:
        return FIXED[base]
    if base == "ndarray" and len(args) == 2:
        return int(np.prod([int(d) for d in args[1].split(",")])) * np.dtype(args[0]).itemsize
    return None


def write_mds(root, columns, samples, per_shard, compress=None):
    """An MDS dataset as MDSWriter writes it (column names sorted, index.json version 2)."""
    os.makedirs(root, exist_ok=True)
    names = sorted(columns)
    encs = [columns[n] for n in names]
    sizes = [enc_size(e) for e in encs]
    shards = []
    for k in range(0, len(samples), per_shard):
        blobs = []
        for s in samples[k:k + per_shard]:
            head, body = [], []
            for n, e, z in zip(names, encs, sizes):
                d = enc_value(e, s[n])
                if z is None:
                    head.append(len(d))
                else:
                    assert len(d) == z
                body.append(d)
            blobs.append(np.array(head, np.uint32).tobytes() + b"".join(body))
        config = {"column_encodings": encs, "column_names": names, "column_sizes": sizes,
                  "compression": compress, "format": "mds", "hashes": [], "size_limit": 1 << 26, "version": 2}
        cdata = json.dumps(config, sort_keys=True).encode()
        n = np.uint32(len(blobs))
        offs = np.array([0] + [len(b) for b in blobs]).cumsum().astype(np.uint32)
        offs += 4 + offs.nbytes + len(cdata)
        data = n.tobytes() + offs.tobytes() + cdata + b"".join(blobs)
        base = f"shard.{len(shards):05d}.mds"
        entry = dict(config, raw_data={"basename": base, "bytes": len(data), "hashes": {}}, samples=len(blobs),
                     zip_data=None)
        if compress:
            z = gzip.compress(data) if compress == "gz" else zstd_compress(data)
            zname = base + "." + compress
            with open(os.path.join(root, zname), "wb") as f:
                f.write(z)
            entry["zip_data"] = {"basename": zname, "bytes": len(z), "hashes": {}}
        else:
            with open(os.path.join(root, base), "wb") as f:
                f.write(data)
        shards.append(entry)
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump({"shards": shards, "version": 2}, f)
    return str(root)


def zstd_compress(data):
    name = ctypes.util.find_library("zstd")
    if not name:
        pytest.skip("no libzstd to write a zstd shard with")
    z = ctypes.CDLL(name)
    z.ZSTD_compressBound.restype = ctypes.c_size_t
    z.ZSTD_compress.restype = ctypes.c_size_t
    z.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    cap = z.ZSTD_compressBound(ctypes.c_size_t(len(data)))
    out = ctypes.create_string_buffer(cap)
    n = z.ZSTD_compress(out, cap, data, len(data), 3)
    return out.raw[:n]


COLUMNS = {"image": "jpeg", "label": "int", "caption": "str", "emb": "ndarray:float32:4", "mask": "ndarray:uint8",
           "any": "ndarray", "meta": "json", "raw": "bytes", "score": "float32", "pix": "pil", "obj": "pkl"}


def make_samples(n):
    out = []
    for i in range(n):
        rng = np.random.default_rng(i)
        out.append({"image": rng.integers(0, 256, (6 + i % 4, 5, 3), dtype=np.uint8), "label": i * 7 - 3,
                    "caption": f"sample {i} \u00e9", "emb": rng.standard_normal(4).astype(np.float32),
                    "mask": rng.integers(0, 2, (2 + i % 3, 3), dtype=np.uint8),
                    "any": np.arange(i + 1, dtype=np.int16) * 3, "meta": {"i": i},
                    "raw": bytes([i]) * (i % 5), "score": i / 4, "pix": rng.integers(0, 256, (3, 4, 3), dtype=np.uint8),
                    "obj": b"\x80\x04K%d." % i})
    return out


def read_rows(path):
    with stoker.Reader(path, batch_size=5, tail="partial") as r:
        rows = []
        for b in r:
            n = len(b["caption"])
            rows += [{f: (np.array(b[f][i]) if isinstance(b[f][i], np.ndarray) else b[f][i]) for f in b}
                     for i in range(n)]
        return rows, r.field_names


@pytest.mark.parametrize("compress", [None, "gz", "zstd"])
def test_mds_reads_back_equal(tmp_path, compress):
    smp = make_samples(11)
    src = write_mds(tmp_path / "mds", COLUMNS, smp, per_shard=4, compress=compress)
    s = stoker.import_mds(src, tmp_path / "out", workers=2)
    assert (s["shards"], s["records"], s["skipped"]) == (3, 11, 0)
    rows, names = read_rows(tmp_path / "out")
    assert list(names) == sorted(COLUMNS)
    for r, w in zip(rows, smp):
        b = io.BytesIO()
        PIL.fromarray(w["image"]).save(b, "JPEG")
        with PIL.open(io.BytesIO(b.getvalue())) as im:
            assert np.array_equal(r["image"], np.asarray(im.convert("RGB")))
        assert r["label"] == w["label"] and r["caption"] == w["caption"] and json.loads(r["meta"]) == w["meta"]
        assert np.array_equal(r["emb"], w["emb"]) and r["emb"].dtype == np.float32
        assert np.array_equal(r["mask"], w["mask"]) and np.array_equal(r["any"], w["any"])
        assert r["any"].dtype == np.int16
        assert r["raw"] == w["raw"] and r["obj"] == w["obj"] and r["score"] == pytest.approx(w["score"])
        assert np.array_equal(r["pix"], w["pix"])
    with open(tmp_path / "out" / "manifest.json") as f:
        schema = {x["name"]: (x["kind"], x.get("dtype"), x.get("shape")) for x in json.load(f)["schema"]}
    assert schema["emb"] == ("tensor", "f32", [4]) and schema["label"] == ("tensor", "i64", [])
    assert schema["mask"] == ("array", "u8", [None, None]) and schema["any"] == ("array", "i16", [None])
    assert schema["image"] == schema["pix"] == ("array", "u8", [None, None, 3])
    assert schema["caption"][0] == schema["obj"][0] == "bytes"


def test_mds_images_as_bytes(tmp_path):
    smp = make_samples(3)
    src = write_mds(tmp_path / "mds", {"image": "png", "label": "int"}, smp, per_shard=2)
    stoker.import_mds(src, tmp_path / "out", images="bytes")
    rows, _ = read_rows_simple(tmp_path / "out")
    for r, w in zip(rows, smp):
        assert r["image"] == enc_value("png", w["image"])
        with PIL.open(io.BytesIO(r["image"])) as im:
            assert np.array_equal(np.asarray(im), w["image"])


def read_rows_simple(path):
    with stoker.Reader(path, batch_size=5, tail="partial") as r:
        rows = []
        for b in r:
            rows += [{f: b[f][i] for f in b} for i in range(len(b["label"]))]
        return rows, r.field_names


def test_mds_bad_samples_are_listed(tmp_path):
    smp = make_samples(6)
    smp[2]["any"] = np.arange(4, dtype=np.float64)           # another dtype than the first sample's
    smp[3]["image"] = np.zeros((2, 2, 3), np.uint8)
    src = write_mds(tmp_path / "mds", COLUMNS, smp, per_shard=3)
    path = os.path.join(src, "shard.00001.mds")
    data = bytearray(open(path, "rb").read())
    n = int.from_bytes(data[:4], "little")
    offs = np.frombuffer(bytes(data[4:8 + 4 * n]), "<u4")
    jpeg = data.find(b"\xff\xd8", int(offs[0]))               # sample 3's JPEG: its SOI, then junk
    data[jpeg + 2:jpeg + 40] = b"\x00" * 38
    data = data[:int(offs[2]) + 10]                          # the last sample (5) cut short
    open(path, "wb").write(bytes(data))
    s = stoker.import_mds(src, tmp_path / "out")
    got = {}
    with open(os.path.join(tmp_path / "out", "skipped.tsv")) as f:
        for line in f.read().splitlines()[1:]:
            i, where, why = line.split("\t")
            shard, k = os.path.basename(where).split(":")
            got[shard, int(k)] = why
    assert s["records"] == 3 and s["skipped"] == 3, got      # samples 0, 1, 4 in
    why = got["shard.00000.mds", 2]
    assert "column 'any'" in why and "float64" in why and "int16" in why
    assert "column 'image' (jpeg)" in got["shard.00001.mds", 0]
    assert "truncated" in got["shard.00001.mds", 2]
    assert [r["label"] for r in read_rows_simple(tmp_path / "out")[0]] == [smp[i]["label"] for i in (0, 1, 4)]
    with pytest.raises(stoker.Error, match="shard.00000.mds:2: column 'any'"):
        stoker.import_mds(src, tmp_path / "fail", on_error="fail")


def test_mds_refusals_and_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="index.json"):
        stoker.import_mds(tmp_path, tmp_path / "out")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "index.json").write_text(json.dumps({"shards": [{"format": "xsv"}], "version": 2}))
    with pytest.raises(ValueError, match="MDS shards only"):
        stoker.import_mds(tmp_path / "x", tmp_path / "out")
    src = write_mds(tmp_path / "mds", {"label": "int", "caption": "str"},
                    [{"label": i, "caption": str(i)} for i in range(5)], per_shard=2)
    env = dict(os.environ, PYTHONPATH=PKG)
    p = subprocess.run([sys.executable, "-m", "stoker.import_mds", src, str(tmp_path / "out")], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert "3 shards" in p.stdout and "5 records, 0 skipped" in p.stdout and "label (int)" in p.stdout
    assert [r["label"] for r in read_rows_simple(tmp_path / "out")[0]] == list(range(5))


def test_mds_images_into_a_jpeg_field(tmp_path):
    smp = make_samples(4)
    src = write_mds(tmp_path / "mds", {"image": "jpeg", "png": "png", "label": "int"},
                    [{"image": s["image"], "png": s["pix"], "label": s["label"]} for s in smp], per_shard=3)
    s = stoker.import_mds(src, tmp_path / "out", images="jpeg")
    assert (s["records"], s["skipped"], s["reencoded"]) == (4, 0, 4)     # the PNG column's images encoded
    rows, _ = read_rows_simple(tmp_path / "out")
    assert [r["image"] for r in rows] == [enc_value("jpeg", w["image"]) for w in smp]   # the JPEGs as they were
    assert all(r["png"][:2] == b"\xff\xd8" for r in rows)
