"""stoker.import_litdata and `python3 -m stoker.import_litdata`: LitData optimized datasets written here
in LitData's documented layout (src/litdata/streaming/writer.py: index.json with "chunks" and "config"
{data_format, data_spec (torch's treespec_dumps)}, chunk-R-N.bin of u32 count, u32 offsets, then items
of u32 leaf sizes and the leaves' bytes; the litdata package is not in Debian), imported and read back
equal."""
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker
from test_import_mds import zstd_compress

PIL = pytest.importorskip("PIL.Image")
PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMPY_IDX = {n: i for i, n in enumerate(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                         "float16", "float32", "float64"])}
TORCH_IDX = {"float32": 0, "float64": 2, "float16": 8, "uint8": 11, "int8": 12, "int16": 13, "int32": 15,
             "int64": 17}
LEAF = {"type": None, "context": None, "children_spec": []}


def leaf(fmt, v):
    """LitData's serializer output for one leaf."""
    base = fmt.split(":")[0]
    if base == "int":
        return np.int64(v).tobytes()
    if base == "float":
        return np.float64(v).tobytes()
    if base == "bool":
        return np.bool_(v).tobytes()
    if base == "str":
        return v.encode()
    if base in ("bytes", "pickle"):
        return v
    if base == "jpeg":
        b = io.BytesIO()
        PIL.fromarray(v).save(b, "JPEG")
        return b.getvalue()
    if base == "pil":
        im = PIL.fromarray(v)
        mode = im.mode.encode()
        return np.array([im.size[0], im.size[1], len(mode)], np.uint32).tobytes() + mode + im.tobytes()
    if base in ("numpy", "tensor"):
        idx = (NUMPY_IDX if base == "numpy" else TORCH_IDX)[v.dtype.name]
        return np.array([idx, v.ndim, *v.shape], np.uint32).tobytes() + v.tobytes()
    if base in ("no_header_numpy", "no_header_tensor"):
        return v.tobytes()
    raise AssertionError(fmt)


def write_litdata(root, spec, fmts, items, per_chunk, compress=None, lone=False):
    """A LitData dataset as its writer leaves it after merging (index.json with every chunk)."""
    os.makedirs(root, exist_ok=True)
    chunks = []
    for k in range(0, len(items), per_chunk):
        blobs = []
        for it in items[k:k + per_chunk]:
            parts = [leaf(f, v) for f, v in zip(fmts, it)]
            blobs.append(parts[0] if lone else np.array([len(p) for p in parts], np.uint32).tobytes() + b"".join(parts))
        n = np.uint32(len(blobs))
        offs = np.array([0] + [len(b) for b in blobs]).cumsum().astype(np.uint32)
        offs += 4 + offs.nbytes
        data = n.tobytes() + offs.tobytes() + b"".join(blobs)
        name = f"chunk-0-{len(chunks)}.{compress}.bin" if compress else f"chunk-0-{len(chunks)}.bin"
        with open(os.path.join(root, name), "wb") as f:
            f.write(zstd_compress(data) if compress else data)
        chunks.append({"chunk_bytes": len(data), "chunk_size": len(blobs), "dim": None, "filename": name})
    config = {"chunk_bytes": 1 << 26, "chunk_size": None, "compression": compress, "data_format": fmts,
              "data_spec": json.dumps([1, spec])}
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump({"chunks": chunks, "config": config, "updated_at": "1"}, f, sort_keys=True)
    return str(root)


KEYS = ["image", "label", "name", "emb", "tok", "t", "ok", "score", "blob", "pic", "obj"]
FMTS = ["jpeg", "int", "str", "numpy", "no_header_numpy:9", "tensor", "bool", "float", "bytes", "pil", "pickle"]
SPEC = {"type": "builtins.dict", "context": json.dumps(KEYS), "children_spec": [LEAF] * len(KEYS)}


def make_items(n):
    out = []
    for i in range(n):
        rng = np.random.default_rng(i)
        out.append([rng.integers(0, 256, (5 + i % 3, 7, 3), dtype=np.uint8), i * 3, f"item {i}",
                    rng.standard_normal((2, 1 + i % 3)).astype(np.float64),
                    rng.standard_normal(i + 1).astype(np.float32),
                    rng.integers(-5, 5, (3, 2), dtype=np.int32), i % 2 == 0, i / 8, bytes([i]) * i,
                    rng.integers(0, 256, (2, 3, 3), dtype=np.uint8), b"\x80\x04K%d." % i])
    return out


def rows_of(path, fields):
    with stoker.Reader(path, batch_size=4, tail="partial") as r:
        out = []
        for b in r:
            out += [{f: b[f][i] for f in fields} for i in range(len(b[fields[0]]))]
        return out


@pytest.mark.parametrize("compress", [None, "zstd"])
def test_litdata_reads_back_equal(tmp_path, compress):
    items = make_items(9)
    src = write_litdata(tmp_path / "ld", SPEC, FMTS, items, per_chunk=4, compress=compress)
    s = stoker.import_litdata(src, tmp_path / "out", workers=2)
    assert (s["shards"], s["records"], s["skipped"]) == (3, 9, 0)
    assert list(s["fields"]) == KEYS
    rows = rows_of(tmp_path / "out", KEYS)
    for r, w in zip(rows, items):
        with PIL.open(io.BytesIO(leaf("jpeg", w[0]))) as im:
            assert np.array_equal(r["image"], np.asarray(im.convert("RGB")))
        assert r["label"] == w[1] and r["name"] == w[2]
        assert np.array_equal(r["emb"], w[3]) and r["emb"].dtype == np.float64
        assert np.array_equal(r["tok"], w[4]) and r["tok"].dtype == np.float32
        assert np.array_equal(r["t"], w[5]) and r["t"].dtype == np.int32
        assert r["ok"] == int(w[6]) and r["score"] == w[7] and r["blob"] == w[8] and r["obj"] == w[10]
        assert np.array_equal(r["pic"], w[9])


def test_litdata_tokens_and_a_nested_spec(tmp_path):
    toks = [np.arange(i * 10, i * 10 + 3 + i, dtype=np.int64) for i in range(6)]
    src = write_litdata(tmp_path / "tok", LEAF, ["no_header_tensor:17"], [[t] for t in toks], per_chunk=4, lone=True)
    s = stoker.import_litdata(src, tmp_path / "out")
    assert s["records"] == 6 and list(s["fields"]) == ["data"]
    assert all(np.array_equal(r["data"], t) for r, t in zip(rows_of(tmp_path / "out", ["data"]), toks))
    spec = {"type": "builtins.tuple", "context": "null", "children_spec": [
        LEAF, {"type": "builtins.dict", "context": json.dumps(["a", "b"]), "children_spec": [LEAF, LEAF]}]}
    src = write_litdata(tmp_path / "nest", spec, ["int", "str", "float"], [[i, str(i), i / 2] for i in range(3)],
                        per_chunk=2)
    s = stoker.import_litdata(src, tmp_path / "nested")
    assert list(s["fields"]) == ["0", "1.a", "1.b"]
    assert [(r["0"], r["1.a"], r["1.b"]) for r in rows_of(tmp_path / "nested", ["0", "1.a", "1.b"])] == \
        [(i, str(i), i / 2) for i in range(3)]


def test_litdata_bad_items_are_listed(tmp_path):
    items = make_items(8)
    items[2][3] = np.zeros((2, 2, 2))                          # rank 3 where the first item's is 2
    src = write_litdata(tmp_path / "ld", SPEC, FMTS, items, per_chunk=4)
    path = os.path.join(src, "chunk-0-1.bin")
    data = open(path, "rb").read()
    n = int.from_bytes(data[:4], "little")
    offs = np.frombuffer(data[4:8 + 4 * n], "<u4")
    open(path, "wb").write(data[:int(offs[3]) + 5])            # items 4..6 whole, 7 cut short
    s = stoker.import_litdata(src, tmp_path / "out")
    with open(tmp_path / "out" / "skipped.tsv") as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:]]
    assert s["records"] == 6 and s["skipped"] == 2, rows
    assert rows[0][1].endswith("chunk-0-0.bin:2") and "leaf 'emb'" in rows[0][2] and "float64[*, *]" in rows[0][2]
    assert rows[1][1].endswith("chunk-0-1.bin:3") and "truncated" in rows[1][2]
    env = dict(os.environ, PYTHONPATH=PKG)
    p = subprocess.run([sys.executable, "-m", "stoker.import_litdata", src, str(tmp_path / "cmd")],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 3 and "2 not imported" in p.stderr and "6 records, 2 skipped" in p.stdout
    with pytest.raises(FileNotFoundError, match="index.json"):
        stoker.import_litdata(tmp_path, tmp_path / "none")


def test_litdata_jpeg_field(tmp_path):
    items = make_items(3)
    spec = {"type": "builtins.dict", "context": json.dumps(["image", "label"]), "children_spec": [LEAF, LEAF]}
    src = write_litdata(tmp_path / "ld", spec, ["jpeg", "int"], [[it[0], it[1]] for it in items], per_chunk=2)
    s = stoker.import_litdata(src, tmp_path / "out", images="jpeg")
    assert (s["records"], s["reencoded"]) == (3, 0)
    assert [r["image"] for r in rows_of(tmp_path / "out", ["image"])] == [leaf("jpeg", it[0]) for it in items]
