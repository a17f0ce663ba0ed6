"""Writing datasets of any samples from Python: Writer, pack, merge.

    fields = {"tokens": stoker.Tensor("uint16", (1025,)),
              "boxes": stoker.Ragged("float32", (None, 4)),
              "caption": stoker.String(), "label": stoker.Scalar("int64")}
    with stoker.Writer("out/train", fields, shard_size=1 << 30) as w:
        for sample in samples:
            w.write(sample)                 # a dict: numpy arrays, Python scalars, bytes, str

    stoker.pack(make_sample, inputs, "out/train", fields, workers=8)

Both go through libstoker's dataset writer (the C code `pack` uses): the
shards, checksums and manifest are the format's, written crash-safely, and
`shardcheck` verifies them. The Reader gives every field kind back
(Reader(..., ragged="list"|"pad")).
"""
import ctypes
import hashlib
import json
import os
import pickle
import signal
import struct
import sys
import time
import traceback
import warnings

import numpy as np

from . import _lib as L

P = ctypes.POINTER
_STATE = "stoker-pack.state.json"
_SKIPPED = "skipped.tsv"


class _DatasetOptions(ctypes.Structure):  # stk_dataset_options
    _fields_ = [("records_per_shard", L.c_u64), ("shard_bytes", L.c_u64), ("prefix", L.c_char_p),
                ("force", L.c_int), ("nclasses", L.c_size_t), ("classes", P(L.c_char_p)),
                ("pack_json", L.c_char_p), ("zstd_level", L.c_int), ("zstd_block_bytes", L.c_u64)]


_create = L._fn("stk_dataset_writer_create_sized", L.c_void_p, L.c_char_p, P(L.Schema_), P(_DatasetOptions),
                L.c_size_t, P(L.Error_))
_append = L._fn("stk_dataset_writer_append_dims", L.c_int, L.c_void_p, P(L.Value), P(L.c_u64), P(L.Error_))
_finish = L._fn("stk_dataset_writer_finish", L.c_int, L.c_void_p, P(L.Error_))
_abort = L._fn("stk_dataset_writer_abort", None, L.c_void_p)
_shards = L._fn("stk_dataset_writer_shards", L.c_u64, L.c_void_p)
_resume = L._fn("stk_dataset_writer_resume", L.c_int, L.c_void_p, L.c_u64, P(L.c_u64), P(L.Error_))
_merge = L._fn("stk_dataset_merge", L.c_int, L.c_char_p, P(L.c_char_p), L.c_size_t, P(L.Error_))
_schema_validate = L._fn("stk_schema_validate", L.c_int, P(L.Schema_), P(L.Error_))

_theirs = L._fn("stk_reader_sizeof", L.c_size_t, L.c_char_p)(b"stk_dataset_options")
if _theirs and _theirs != ctypes.sizeof(_DatasetOptions):
    raise ImportError(f"stoker: {L.path}: stk_dataset_options is {_theirs} bytes there, "
                      f"{ctypes.sizeof(_DatasetOptions)} in this binding: install both from the same tree")

# numpy dtype -> stk dtype; bfloat16 values are given as their uint16 bit patterns
_DT = {"uint8": L.DT_U8, "int8": L.DT_I8, "uint16": L.DT_U16, "int16": L.DT_I16, "uint32": L.DT_U32,
       "int32": L.DT_I32, "uint64": L.DT_U64, "int64": L.DT_I64, "float16": L.DT_F16, "float32": L.DT_F32,
       "float64": L.DT_F64}
_DT_NAME = {v: k for k, v in _DT.items()}
_DT_NAME[L.DT_BF16] = "bfloat16"


def _error(err):
    from . import _raise
    _raise(err)


def _stk_dtype(dtype):
    if isinstance(dtype, str) and dtype in ("bfloat16", "bf16"):
        return L.DT_BF16
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in _DT:
        raise TypeError(f"stoker: dtype {dtype!r} is not one of {', '.join(list(_DT) + ['bfloat16'])}")
    return _DT[name]


def _np_dtype(stk):
    return np.dtype("<u2") if stk == L.DT_BF16 else np.dtype(_DT_NAME[stk]).newbyteorder("<")


def _codec(codec):
    """None/"none" -> (NONE, 0); "zstd" / "zstd:L" -> (ZSTD, L)."""
    if codec in (None, "none"):
        return L.STK_CODEC_NONE, 0
    if isinstance(codec, str) and (codec == "zstd" or codec.startswith("zstd:")):
        lvl = codec[5:]
        if lvl and not (lvl.isdigit() and 1 <= int(lvl) <= 19):
            raise ValueError(f"stoker: codec {codec!r}: the zstd level is 1..19")
        return L.STK_CODEC_ZSTD, int(lvl) if lvl else 3
    raise ValueError(f"stoker: codec {codec!r}: say None, 'zstd' or 'zstd:LEVEL'")


def _codec_arg(codec):
    """", codec='zstd:3'" for a repr (and so for stoker.pack's resume parameters); "" without a codec."""
    return "" if codec in (None, "none") else f", codec={codec!r}"


class _FieldKind:
    kind = None
    codec = None

    def _describe(self):
        raise NotImplementedError

    def __repr__(self):
        return f"stoker.{self._describe()}"

    def __eq__(self, other):
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self):
        return hash(repr(self))


class Tensor(_FieldKind):
    """A fixed-shape array per record (shape () is a scalar); batches are one [B, *shape] array."""
    kind = L.STK_KIND_TENSOR

    def __init__(self, dtype, shape=(), codec=None):
        self.dtype, self.shape, self.codec = _stk_dtype(dtype), tuple(int(d) for d in shape), codec
        if any(d <= 0 for d in self.shape):
            raise ValueError(f"stoker.Tensor: shape {shape!r}: every dimension is positive (variable ones: Ragged)")
        _codec(codec)

    def _describe(self):
        return f"Tensor({_DT_NAME[self.dtype]!r}, {self.shape}{_codec_arg(self.codec)})"


def Scalar(dtype, codec=None):
    """One value per record: Tensor(dtype, ())."""
    return Tensor(dtype, (), codec)


class Ragged(_FieldKind):
    """An array whose shape differs per record: None marks a per-record dimension, e.g. boxes
    ("float32", (None, 4)), tokens ("int32", (None,)), an image ("uint8", (None, None, 3)).
    Batches give a list of arrays, or with Reader(ragged="pad") one array padded to the batch's
    longest with its lengths."""
    kind = L.STK_KIND_ARRAY

    def __init__(self, dtype, shape=(None,), codec=None):
        self.dtype, self.codec = _stk_dtype(dtype), codec
        self.shape = tuple(None if d is None else int(d) for d in shape)
        if not self.shape or None not in self.shape or len(self.shape) > L.STK_MAX_DIMS:
            raise ValueError(f"stoker.Ragged: shape {shape!r}: 1..{L.STK_MAX_DIMS} dimensions, at least one None")
        if any(d is not None and d <= 0 for d in self.shape):
            raise ValueError(f"stoker.Ragged: shape {shape!r}: fixed dimensions are positive")
        _codec(codec)

    def _describe(self):
        return f"Ragged({_DT_NAME[self.dtype]!r}, {self.shape}{_codec_arg(self.codec)})"


class Bytes(_FieldKind):
    """A byte string per record (bytes, bytearray or a contiguous memoryview); read back as bytes."""
    kind = L.STK_KIND_BYTES

    def __init__(self, codec=None):
        self.codec = codec
        _codec(codec)

    def _describe(self):
        return f"Bytes({_codec_arg(self.codec)[2:]})"


class String(Bytes):
    """A str per record, stored as UTF-8 bytes; read back as str (the manifest says which fields are strings)."""

    def _describe(self):
        return f"String({_codec_arg(self.codec)[2:]})"


def _field_spec(fields):
    if not isinstance(fields, dict) or not fields:
        raise TypeError("stoker: fields is a dict of name -> stoker.Tensor/Scalar/Ragged/Bytes/String")
    for name, f in fields.items():
        if not isinstance(f, _FieldKind):
            raise TypeError(f"stoker: field {name!r}: {f!r} is not a stoker.Tensor/Scalar/Ragged/Bytes/String")
    return dict(fields)


def _schema(fields):
    """The C schema of a field dict, checked by libstoker."""
    s = L.Schema_()
    if len(fields) > 32:
        raise ValueError(f"stoker: {len(fields)} fields; at most 32")
    s.nfields = len(fields)
    for i, (name, f) in enumerate(fields.items()):
        c = s.fields[i]
        raw = name.encode()
        if len(raw) >= 32:
            raise ValueError(f"stoker: field name {name!r} is longer than 31 bytes")
        c.name = raw
        c.kind = f.kind
        c.codec = _codec(f.codec)[0]
        if f.kind == L.STK_KIND_BYTES:
            c.dtype, c.ndim = L.DT_U8, 0
        else:
            c.dtype, c.ndim = f.dtype, len(f.shape)
            for d, v in enumerate(f.shape):
                c.shape[d] = 0 if v is None else v
    err = L.Error_()
    if _schema_validate(ctypes.byref(s), ctypes.byref(err)):
        _error(err)
    return s


def _zstd_level(fields):
    levels = {_codec(f.codec)[1] for f in fields.values() if _codec(f.codec)[0] == L.STK_CODEC_ZSTD}
    if len(levels) > 1:
        raise ValueError(f"stoker: compressed fields at levels {sorted(levels)}: one level per dataset")
    return levels.pop() if levels else 0


def _describe_value(v):
    if isinstance(v, np.ndarray):
        return f"{v.dtype.name}{list(v.shape)}"
    return type(v).__name__


class _Encoder:
    """Checks a sample against the fields and turns it into the C call's values and dims.
    Everything is checked before anything is written: a bad sample leaves the writer unchanged."""

    def __init__(self, fields):
        self.fields = fields
        self.names = list(fields)
        self.n = len(fields)
        self.values = (L.Value * self.n)()
        nvar = sum(sum(d is None for d in f.shape) for f in fields.values() if f.kind == L.STK_KIND_ARRAY)
        self.dims = (L.c_u64 * max(nvar, 1))()
        # per field, for the common values (an array of the field's dtype, a Python scalar): the numpy dtype,
        # whether its shape is fixed, and an integer field's bounds
        self.fast = []
        for f in fields.values():
            if f.kind == L.STK_KIND_BYTES:
                self.fast.append(None)
                continue
            want = _np_dtype(f.dtype)
            bounds = (int(np.iinfo(want).min), int(np.iinfo(want).max)) if want.kind in "iu" else None
            self.fast.append((want, f.kind == L.STK_KIND_TENSOR, bounds))

    def encode(self, sample, index):
        if not isinstance(sample, dict):
            raise TypeError(f"stoker: sample {index}: a dict of field values, not {type(sample).__name__}")
        if sample.keys() != self.fields.keys():
            missing = [k for k in self.names if k not in sample]
            extra = [k for k in sample if k not in self.fields]
            raise ValueError(f"stoker: sample {index}: " + "; ".join(
                (["missing " + ", ".join(map(repr, missing))] if missing else []) +
                (["not a field: " + ", ".join(map(repr, extra))] if extra else [])))
        keep, d = [], 0
        self.nbytes = 0
        for i, name in enumerate(self.names):
            f, v = self.fields[name], sample[name]
            buf = self._fast(self.fast[i], f, v)
            if buf is None:
                buf = self._value(f, name, v, index)
            if f.kind == L.STK_KIND_ARRAY:
                for k, want in enumerate(f.shape):
                    if want is None:
                        self.dims[d] = buf.shape[k]
                        d += 1
            keep.append(buf)
            self.nbytes += buf.nbytes if isinstance(buf, np.ndarray) else len(buf)
            if isinstance(buf, np.ndarray):
                self.values[i].data = buf.ctypes.data if buf.nbytes else None
                self.values[i].size = buf.nbytes
            else:
                self.values[i].data = ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p) if buf else None
                self.values[i].size = len(buf)
        return keep  # the buffers must live until the C call returns

    @staticmethod
    def _fast(fast, f, v):
        """The value as it is written when it needs no conversion (or a trivially exact one), else None:
        _value then converts or explains."""
        if fast is None:
            if type(v) is bytes and not isinstance(f, String):
                return v
            if type(v) is str and isinstance(f, String):
                try:
                    return v.encode("utf-8")
                except UnicodeEncodeError:
                    return None  # _value says what is wrong
            return None
        want, fixed, bounds = fast
        t = type(v)
        if t is np.ndarray:
            if v.dtype != want or not v.flags.c_contiguous:
                return None
            if fixed:
                return v if v.shape == f.shape else None
            if v.ndim != len(f.shape) or any(w is not None and w != g for w, g in zip(f.shape, v.shape)):
                return None
            return v
        if f.shape or not fixed:
            return None
        if t is int and bounds is not None:
            return np.array(v, want) if bounds[0] <= v <= bounds[1] else None
        if t is float and bounds is None and want.itemsize == 8:
            return np.array(v, want)
        return None

    def _value(self, f, name, v, index):
        if f.kind == L.STK_KIND_BYTES:
            if isinstance(f, String):
                if not isinstance(v, str):
                    raise TypeError(f"stoker: sample {index}: field {name!r} is a String: expected str, "
                                    f"got {_describe_value(v)}")
                try:
                    return v.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise ValueError(f"stoker: sample {index}: field {name!r}: the str is not valid Unicode "
                                     f"({e.reason} at {e.start})") from None
            if isinstance(v, (bytes, bytearray, memoryview)):
                return bytes(v)
            raise TypeError(f"stoker: sample {index}: field {name!r} is Bytes: expected bytes, got "
                            f"{_describe_value(v)}")
        want = _np_dtype(f.dtype)
        if not isinstance(v, (bool, int, float, list, tuple)):  # arrays: numpy's, torch's, anything with __array__
            a = np.asarray(v)
            if a.dtype != want and not (a.dtype.kind == want.kind and a.dtype.itemsize == want.itemsize):
                raise TypeError(f"stoker: sample {index}: field {name!r}: expected {self._expect(f)}, got "
                                f"{_describe_value(a)} (convert it explicitly: stoker never casts arrays)")
        else:  # Python scalars and lists: converted when exact (Python floats round to a float field's precision)
            try:
                with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, not warned
                    a = np.asarray(v, dtype=want)
                b = np.asarray(v)
                if want.kind == "f" and b.dtype.kind == "f":
                    exact = bool(np.all(np.isfinite(a) | ~np.isfinite(b)))  # rounded, not overflowed
                else:
                    exact = b.dtype.kind != "O" and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
            except (TypeError, ValueError, OverflowError):
                exact = False
            if not exact:
                raise TypeError(f"stoker: sample {index}: field {name!r}: expected {self._expect(f)}, got "
                                f"{type(v).__name__} {v!r:.60}")
        if f.kind == L.STK_KIND_TENSOR:
            if a.shape != f.shape:
                raise ValueError(f"stoker: sample {index}: field {name!r}: expected {self._expect(f)}, got "
                                 f"{_describe_value(a)}")
        elif a.ndim != len(f.shape) or any(w is not None and w != g for w, g in zip(f.shape, a.shape)):
            raise ValueError(f"stoker: sample {index}: field {name!r}: expected {self._expect(f)}, got "
                             f"{_describe_value(a)}")
        return np.ascontiguousarray(a, dtype=want)

    @staticmethod
    def _expect(f):
        shape = ["*" if d is None else d for d in f.shape]
        return f"{_DT_NAME[f.dtype]}{shape}".replace("'", "")


def _pack_json(fields, metadata, tool, params=None):
    kinds = {n: ("string" if isinstance(f, String) else "bytes" if f.kind == L.STK_KIND_BYTES
                 else "ragged" if f.kind == L.STK_KIND_ARRAY else "tensor") for n, f in fields.items()}
    doc = {"tool": tool, "fields": kinds}
    if metadata is not None:
        json.dumps(metadata)  # must be JSON
        if not isinstance(metadata, dict):
            raise TypeError("stoker: metadata is a JSON object (a dict)")
        doc["metadata"] = metadata
    if params is not None:
        doc["params"] = params
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


class Writer:
    """A dataset written record by record through libstoker's dataset writer.

    path               the dataset directory (created; one that holds a dataset is refused unless force=True)
    fields             dict name -> stoker.Tensor / Scalar / Ragged / Bytes / String, in schema order
    shard_size         bytes per shard, whole records (default 1 GiB); records_per_shard: a record limit
    classes            class names (label i is classes[i]), as the Reader's .classes gives them back
    metadata           any JSON object, kept in the manifest: Reader(...).metadata
    force              replace a dataset already in `path`: the new one is built beside it (the disk must hold
                       both) and replaces it at close(); until then, and after any failure, the old one stays
                       readable. force="in_place" removes the old one first (room for one dataset: a failure
                       leaves neither)

    write(sample) takes a dict with exactly the fields' keys: numpy arrays of the field's dtype and shape
    (never cast: a float64 array for a float32 field is an error), Python scalars and lists where they
    convert exactly, bytes, str. A bad sample raises (naming the field, what was expected and what was
    given, and the sample's index) and writes nothing. close() commits the last shard and then the
    manifest; until then the directory is no dataset. As a context manager, an exception inside the
    `with` aborts: no manifest is written.
    """

    def __init__(self, path, fields, shard_size=1 << 30, records_per_shard=0, classes=None, metadata=None,
                 force=False, _tool="stoker.Writer", _pack_params=None, _resume_shards=None):
        self.path = os.fspath(path)
        self.fields = _field_spec(fields)
        self._enc = _Encoder(self.fields)
        schema = _schema(self.fields)
        self._pack = _pack_json(self.fields, metadata, _tool, _pack_params)
        o = _DatasetOptions()
        o.records_per_shard, o.shard_bytes, o.force = (int(records_per_shard), int(shard_size or 0),
                                                     2 if force == "in_place" else int(bool(force)))
        self._classes = [c.encode() for c in (classes or [])]
        arr = (L.c_char_p * max(len(self._classes), 1))(*self._classes)
        o.nclasses, o.classes = len(self._classes), ctypes.cast(arr, P(L.c_char_p))
        o.pack_json = self._pack.encode()
        o.zstd_level = _zstd_level(self.fields)
        self._err = L.Error_()
        self._w = _create(self.path.encode(), ctypes.byref(schema), ctypes.byref(o), ctypes.sizeof(o),
                          ctypes.byref(self._err))
        if not self._w:
            _error(self._err)
        self.records = 0
        self.bytes = 0  # sample bytes written by this writer (values as given, before any codec)
        if _resume_shards:
            n = L.c_u64()
            if _resume(self._w, _resume_shards, ctypes.byref(n), ctypes.byref(self._err)):
                self.abort()
                _error(self._err)
            self.records = n.value

    @property
    def shards(self):
        """Shards committed so far."""
        return _shards(self._w) if self._w else 0

    def write(self, sample):
        if not self._w:
            raise ValueError(f"stoker.Writer({self.path!r}) is closed")
        keep = self._enc.encode(sample, self.records)
        if _append(self._w, self._enc.values, self._enc.dims, ctypes.byref(self._err)):
            _error(self._err)
        del keep
        self.records += 1
        self.bytes += self._enc.nbytes

    def close(self):
        """Commit the last shard and the manifest (idempotent)."""
        w, self._w = self._w, None
        if w and _finish(w, ctypes.byref(self._err)):
            _error(self._err)

    def abort(self):
        """Discard: committed shards stay on disk, but no manifest is written."""
        w, self._w = self._w, None
        if w:
            _abort(w)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def __del__(self):
        if getattr(self, "_w", None):
            self.abort()

    def __repr__(self):
        return f"<stoker.Writer {self.path!r}: {self.records} records, {self.shards} shards committed>"


# ------------------------------------------------------------------ pack

# fn and the inputs, for the workers (_Workers): forked processes inherit
# them, threads read them; set while a pack runs (one at a time per process).
_job = None


def _run_chunk(first, end):
    fn, inputs = _job
    out = []
    for i in range(first, end):
        try:
            r = fn(inputs[i])
            out.append((i, None, r))
        except Exception as e:  # listed in skipped.tsv (or the run stops: on_error="fail")
            out.append((i, f"{type(e).__name__}: {e}".replace("\t", " ").replace("\n", " "), None))
    return out


def _samples_of(i, r):
    if r is None:
        return []
    if isinstance(r, dict):
        return [r]
    if isinstance(r, (list, tuple)):
        return list(r)
    raise TypeError(f"stoker.pack: input {i}: fn returned {type(r).__name__}; return a sample dict, a list "
                    "of them, or None to skip")


def _params(fields, inputs, fn, shard_size, records_per_shard, classes, metadata, part):
    """What must be equal for a re-run to continue an interrupted one."""
    h = hashlib.sha256()
    h.update(json.dumps([repr(fields), shard_size, records_per_shard, classes, metadata, part,
                         getattr(fn, "__module__", None), getattr(fn, "__qualname__", repr(fn)), len(inputs)],
                        default=repr).encode())
    for x in inputs:
        h.update(repr(x).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _load_state(out, params):
    try:
        with open(os.path.join(out, _STATE)) as f:
            st = json.load(f)
    except (OSError, ValueError):
        return None
    return st if st.get("params") == params else None


class _Progress:
    def __init__(self, total, start, enabled):
        self.total, self.start, self.enabled = total, start, enabled
        self.t0 = self.last = time.monotonic()

    def update(self, done, skipped, force=False):
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < 0.2:
            return
        self.last = now
        rate = (done - self.start) / max(now - self.t0, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else 0
        sys.stderr.write(f"\rstoker.pack: {done:,}/{self.total:,} inputs, {rate:,.0f}/s, "
                         f"ETA {int(eta // 60)}:{int(eta % 60):02d}, {skipped:,} skipped ")
        sys.stderr.flush()

    def end(self):
        if self.enabled:
            sys.stderr.write("\n")


def _part_dir(out, part):
    k, n = part
    return os.path.join(out, f"part-{k:05d}-of-{n:05d}")


def pack(fn, inputs, out, fields, workers=None, mode="process", shard_size=1 << 30, records_per_shard=0,
         classes=None, metadata=None, on_error="skip", part=None, progress=None, chunk=16, force=False):
    """Write fn(input) for every input into a dataset at `out`, in parallel, in input order.

    fn                 input -> a sample dict (as Writer.write takes), a list of them, or None (skip)
    inputs             a sequence (paths, indices, records); its order is the dataset's
    workers            None: os.cpu_count(); 0: in this process
    mode               "process" (default: forked workers, fn needs no pickling, for Python code that holds
                       the GIL) or "thread" (for fns that release it: numpy, PIL decode, I/O)
    on_error           "skip": an input whose fn raises is listed in OUT/skipped.tsv with the exception
                       (index, input, error) and the run goes on; "fail": the run stops, no manifest
    part               (k, n): the k-th (1-based) of n slices of the inputs, written to
                       OUT/part-0000k-of-0000n; stoker.merge(out) joins them once all are there
    progress           None: a progress line on stderr when it is a terminal
    chunk              inputs per task handed to a worker
    force              replace a dataset in `out` that other arguments made (the same arguments: returned as is),
                       beside it: the disk must hold both, and a failure leaves the old one readable (Writer)
    shard_size, records_per_shard, classes, metadata: as for Writer

    The dataset is byte-identical whatever `workers` and `mode` (samples are written in input order).
    A killed run resumes when called again with the same arguments: the shards it committed are verified
    and kept, and fn runs again only on the inputs after them. "The same arguments" are the fields, the
    inputs (their repr), the shard settings, classes, metadata, part and fn's module and name: a changed fn
    body under the same name is not seen (pass force=True, or another out, after changing what fn makes).
    Returns a summary dict.
    """
    if on_error not in ("skip", "fail"):
        raise ValueError(f"stoker.pack: on_error={on_error!r}: 'skip' or 'fail'")
    if mode not in ("process", "thread"):
        raise ValueError(f"stoker.pack: mode={mode!r}: 'process' or 'thread'")
    inputs = inputs if hasattr(inputs, "__getitem__") and hasattr(inputs, "__len__") else list(inputs)
    fields = _field_spec(fields)
    first, end = 0, len(inputs)
    target = os.fspath(out)
    if part is not None:
        k, n = part
        if not (isinstance(k, int) and isinstance(n, int) and 1 <= k <= n):
            raise ValueError(f"stoker.pack: part={part!r}: (k, n) with 1 <= k <= n")
        first, end = len(inputs) * (k - 1) // n, len(inputs) * k // n
        target = _part_dir(target, (k, n))
    params = _params(fields, inputs, fn, shard_size, records_per_shard, classes, metadata, part)
    # the pack object is the same for every part, so that their manifests merge
    whole = _params(fields, inputs, fn, shard_size, records_per_shard, classes, metadata, None)
    done = _manifest_params(target)
    if done == whole:  # finished before (a run killed after its manifest may have left its state file)
        _unlink(os.path.join(target, _STATE))
        return {"out": target, "resumed": True, "complete": True, **_summary_of(target)}
    if done is not None and not force:
        from . import Error
        raise Error(L.STK_E_EXISTS, f"stoker.pack: {target} already holds a dataset made with other arguments; "
                    "pass force=True to replace it")
    st = _load_state(target, params) if done is None else None
    t0 = time.monotonic()
    skipped = [tuple(s) for s in st["skipped"]] if st else []
    nxt, sub = (st["next"] if st else (first, 0))
    pool = _Workers(fn, inputs, workers, mode)  # before the writer: workers hold none of its files
    try:
        try:
            w = Writer(target, fields, shard_size, records_per_shard, classes, metadata, force=done is not None,
                       _tool="stoker.pack", _pack_params=whole, _resume_shards=st["shards"] if st else None)
        except Exception as e:
            if not st:
                raise
            warnings.warn(f"stoker.pack: {target}: the interrupted run's shards do not verify ({e}); "
                          "starting over")
            st, skipped, nxt, sub = None, [], first, 0
            w = Writer(target, fields, shard_size, records_per_shard, classes, metadata, force=done is not None,
                       _tool="stoker.pack", _pack_params=whole)
        if st and w.records != st["records"]:
            w.abort()
            raise RuntimeError(f"stoker.pack: {target}: the kept shards hold {w.records} records, the state "
                               f"says {st['records']}")
    except BaseException:
        pool.close(kill=True)
        raise
    resumed = st is not None
    bar = _Progress(end - first, nxt - first, sys.stderr.isatty() if progress is None else progress)
    try:
        pos = []  # (input, sample) of each record in the open shard, for the state file
        shards = w.shards
        for i, err, r in pool.results(nxt, end, chunk):
            if err is not None:
                if on_error == "fail":
                    raise RuntimeError(f"stoker.pack: input {i} ({inputs[i]!r:.200}): {err}")
                skipped.append((i, repr(inputs[i]), err))
            else:
                samples = _samples_of(i, r)
                for j in range(sub if i == nxt else 0, len(samples)):
                    w.write(samples[j])
                    pos.append((i, j))
                    if w.shards != shards:  # the shard before this record is on disk
                        shards = w.shards
                        pos = pos[-1:]
                        _write_atomic(os.path.join(target, _STATE), json.dumps({
                            "params": params, "shards": shards, "records": w.records - 1, "next": [i, j],
                            "skipped": [s for s in skipped if s[0] < i]}))
            bar.update(i + 1 - first, len(skipped))
        pool.close()
        _write_skipped(target, skipped)
        w.close()
    except BaseException:
        pool.close(kill=True)
        w.abort()  # replacing: the new shards go, the old dataset stays as it was
        bar.end()
        if done is not None:  # no resume of a replace: nothing of it is kept
            _unlink(os.path.join(target, _STATE))
        raise
    bar.end()
    _unlink(os.path.join(target, _STATE))
    return {"out": target, "resumed": resumed, "complete": True, "inputs": end - first, "records": w.records,
            "skipped": len(skipped), "seconds": time.monotonic() - t0, "bytes": w.bytes}


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _write_skipped(target, skipped):
    text = "".join(f"{i}\t{inp}\t{err}\n" for i, inp, err in skipped)
    _write_atomic(os.path.join(target, _SKIPPED), "index\tinput\terror\n" + text)


def _manifest_params(target):
    try:
        with open(os.path.join(target, "manifest.json")) as f:
            return (json.load(f).get("pack") or {}).get("params", "")
    except (OSError, ValueError):
        return None


def _summary_of(target):
    with open(os.path.join(target, "manifest.json")) as f:
        m = json.load(f)
    try:
        with open(os.path.join(target, _SKIPPED)) as f:
            nskip = sum(1 for _ in f) - 1
    except OSError:
        nskip = 0
    return {"records": m["record_count"], "skipped": nskip}


class _Workers:
    """fn over chunks of inputs, results in chunk order, at most `depth` chunks in flight per worker so that
    memory does not grow with the input count.

    mode "process": forked processes, started before the dataset writer opens (they hold none of its files).
    fn and the inputs are inherited, not pickled (lambdas and closures work); a chunk's (first, end) goes out
    on a pipe and its results come back pickled on the worker's own pipe. Chunk c goes to worker c % n, so
    reading the workers in turn gives input order with no reordering, and the parent reads on its main
    thread (no result thread contending for the GIL, no pool that hangs when a worker dies: a dead worker is
    an error naming its inputs). mode "thread": a thread pool, for fns that release the GIL. workers 0: here."""

    def __init__(self, fn, inputs, workers, mode, depth=4):
        global _job
        self.n = (os.cpu_count() or 1) if workers is None else max(int(workers), 0)
        self.mode, self.depth, self.procs, self.pool = mode, depth, [], None
        _job = (fn, inputs)
        if self.n and mode == "thread":
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(self.n)
        elif self.n:
            try:
                for _ in range(self.n):
                    self._fork()
            except BaseException:
                self.close(kill=True)
                raise

    def _fork(self):
        tr, tw = os.pipe()
        rr, rw = os.pipe()
        sys.stdout.flush(), sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            code = 0
            try:
                os.close(tw), os.close(rr)
                for r, w, _ in self.procs:  # the other workers' pipe ends
                    os.close(r), os.close(w)
                _worker_loop(tr, rw)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(tr), os.close(rw)
        self.procs.append((rr, tw, pid))

    def results(self, first, end, chunk):
        """(index, error or None, fn's result) for inputs [first, end), in order."""
        chunks = [(a, min(a + chunk, end)) for a in range(first, end, chunk)]
        if not self.n:
            for a, b in chunks:
                yield from _run_chunk(a, b)
            return
        ahead = self.depth * self.n
        if self.pool is not None:
            import collections
            window = collections.deque(self.pool.submit(_run_chunk, *c) for c in chunks[:ahead])
            for c in range(len(chunks)):
                res = window.popleft().result()
                if c + ahead < len(chunks):
                    window.append(self.pool.submit(_run_chunk, *chunks[c + ahead]))
                yield from res
            return
        for c, ab in enumerate(chunks[:ahead]):
            self._send(c, ab)
        for c in range(len(chunks)):
            res = self._receive(c, chunks[c])
            if c + ahead < len(chunks):
                self._send(c + ahead, chunks[c + ahead])
            yield from res

    def _send(self, c, ab):
        try:
            _write_all(self.procs[c % self.n][1], _HEAD.pack(*ab))
        except BrokenPipeError:
            pass  # the worker is dead: _receive says so, in input order, naming the inputs it held

    def _receive(self, c, ab):
        rr, _, pid = self.procs[c % self.n]
        head = _read_exact(rr, _HEAD.size)
        res = None
        if head is not None:
            nbody, nbuf = _HEAD.unpack(head)
            sizes = _read_exact(rr, 8 * nbuf) if nbuf else b""
            body = _read_exact(rr, nbody) if sizes is not None else None
            bufs = [_read_exact(rr, k) for k in struct.unpack(f"<{nbuf}Q", sizes)] if body is not None else [None]
            if body is not None and all(b is not None for b in bufs):
                res = pickle.loads(body, buffers=bufs)  # arrays over the received buffers: no copy
        if res is None:
            _, status = os.waitpid(pid, 0)
            self.procs[c % self.n] = (rr, self.procs[c % self.n][1], 0)
            why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"exit status {os.WEXITSTATUS(status)}")
            raise RuntimeError(f"stoker.pack: worker process {pid} died ({why}) on inputs {ab[0]}..{ab[1] - 1}")
        return res

    def close(self, kill=False):
        global _job
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        for rr, tw, pid in self.procs:
            os.close(tw)  # a waiting worker reads EOF and exits
            os.close(rr)
            if pid:
                if kill:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                os.waitpid(pid, 0)
        self.procs, self.pool, _job = [], None, None


# A task is (first, end). A result is (pickle bytes, out-of-band buffers), their sizes, the pickle, then
# the buffers: protocol 5 sends array data as it lies, not copied into the pickle.
_HEAD = struct.Struct("<QQ")


def _read_exact(fd, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            return None
        got += k
    return buf


def _write_all(fd, *parts):
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        k = os.writev(fd, views[:64])
        while views and k >= len(views[0]):
            k -= len(views[0])
            views.pop(0)
        if views and k:
            views[0] = views[0][k:]


def _worker_loop(tr, rw):
    while True:
        task = _read_exact(tr, _HEAD.size)
        if task is None:
            return
        res = _run_chunk(*_HEAD.unpack(task))
        bufs = []
        try:
            body = pickle.dumps(res, protocol=5, buffer_callback=bufs.append)
            raws = [b.raw() for b in bufs]
        except Exception as e:  # a result that does not pickle: every input of the chunk is listed
            why = f"fn's result cannot be sent from the worker process: {type(e).__name__}: {e}"
            body, raws = pickle.dumps([(i, err or why, None) for i, err, _ in res]), []
        sizes = struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
        _write_all(rw, _HEAD.pack(len(body), len(raws)), sizes, body, *raws)


def merge(out):
    """Join the parts stoker.pack(..., part=(k, n)) wrote under `out` into one dataset there: a manifest
    naming their shards in part order (nothing copied) and skipped.tsv. Refuses while a part is missing
    or unfinished, naming them."""
    out = os.fspath(out)
    names = sorted(d for d in os.listdir(out) if d.startswith("part-") and "-of-" in d)
    counts = {d.rsplit("-of-", 1)[1] for d in names}
    if not names or len(counts) != 1:
        raise ValueError(f"stoker.merge: {out}: " + ("no part-K-of-N directories" if not names else
                         f"parts of different counts ({', '.join(sorted(counts))})"))
    n = int(counts.pop())
    want = [f"part-{k:05d}-of-{n:05d}" for k in range(1, n + 1)]
    missing = [d for d in want if not os.path.exists(os.path.join(out, d, "manifest.json"))]
    if missing:
        raise ValueError(f"stoker.merge: {out}: {len(missing)} of {n} parts missing or unfinished: "
                         + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
    lines = ["index\tinput\terror\n"]
    for d in want:
        try:
            with open(os.path.join(out, d, _SKIPPED)) as f:
                lines += f.readlines()[1:]
        except OSError:
            pass
    _write_atomic(os.path.join(out, _SKIPPED), "".join(lines))
    arr = (L.c_char_p * n)(*[d.encode() for d in want])
    err = L.Error_()
    if _merge(out.encode(), arr, n, ctypes.byref(err)):
        _error(err)
    return {"out": out, "parts": n, **_summary_of(out)}
