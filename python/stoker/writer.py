"""Writing datasets of any samples from Python: the Writer and the field kinds.

    fields = {"tokens": stoker.Tensor("uint16", (1025,)),
              "boxes": stoker.Ragged("float32", (None, 4)),
              "caption": stoker.String(), "label": stoker.Scalar("int64")}
    with stoker.Writer("out/train", fields, shard_size=1 << 30) as w:
        for sample in samples:
            w.write(sample)                 # a dict: numpy arrays, Python scalars, bytes, str

    stoker.pack(make_sample, inputs, "out/train", fields, workers=8)

Both go through libstoker's dataset writer (the C code `pack` uses; stoker.pack is in _pack.py): the
shards, checksums and manifest are the format's, written crash-safely, and
`shardcheck` verifies them. The Reader gives every field kind back
(Reader(..., ragged="list"|"pad")).
"""
import ctypes
import json
import os

import numpy as np

from . import _lib as L

P = ctypes.POINTER


def _stk_dtype(dtype):
    if isinstance(dtype, str) and dtype in ("bfloat16", "bf16"):
        return L.DT_BF16
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    d = L.DTYPE_BY_NAME.get(name)
    if d is None or d.code == L.DT_BF16:  # numpy has no bfloat16: named only as a string
        raise TypeError(f"stoker: dtype {dtype!r} is not one of {', '.join(x.name for x in L.DTYPES)}")
    return d.code


def _dt_name(stk):
    return L.DTYPE[stk].name


def _np_dtype(stk):
    return np.dtype(L.DTYPE[stk].stored)  # bfloat16 values are given as their uint16 bit patterns


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
        return f"Tensor({_dt_name(self.dtype)!r}, {self.shape}{_codec_arg(self.codec)})"


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
        return f"Ragged({_dt_name(self.dtype)!r}, {self.shape}{_codec_arg(self.codec)})"


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
    if L.stk_schema_validate(ctypes.byref(s), ctypes.byref(err)):
        L.raise_error(err)
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
        return f"{_dt_name(f.dtype)}{shape}".replace("'", "")


def _class_names(classes, who):
    """The class names as the C writer takes them (UTF-8, NUL-terminated), checked as spec/FORMAT.md
    section 8 requires: each a str without NUL that can be UTF-8 (no lone surrogate), so that a name is
    never cut at a NUL nor ends in a raw Python error. Raises ArgumentError naming the class (its index
    and repr) and the argument. libstoker checks that none is empty and none repeats."""
    if classes is None:
        return []
    if isinstance(classes, (str, bytes)) or not hasattr(classes, "__iter__"):
        raise L.error(L.STK_E_ARG, f"{who}: classes={classes!r:.80}: a list of str (class i is classes[i])")
    out = []
    for i, c in enumerate(classes):
        if not isinstance(c, str):
            why = f"is {type(c).__name__}, not str"
        elif "\0" in c:
            why = f"holds a NUL at {c.index(chr(0))}"
        else:
            try:
                out.append(c.encode("utf-8"))
                continue
            except UnicodeEncodeError as e:
                why = f"cannot be UTF-8 ({e.reason} at {e.start})"
        raise L.error(L.STK_E_ARG, f"{who}: classes[{i}] {c!r:.80} {why}: class names are non-empty str "
                      "without NUL (spec/FORMAT.md section 8)")
    return out


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
                       or s3://bucket/prefix: each shard is written in a local staging directory
                       ($STOKER_CACHE_DIR/staging or $TMPDIR/stoker-staging), uploaded as it completes and
                       removed; manifest.json is uploaded last (the commit); abort() deletes what was uploaded
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
                 force=False, _tool="stoker.Writer", _pack_params=None, _resume_shards=None, _keep_staged=False):
        self.path = os.fspath(path)
        self.fields = _field_spec(fields)
        self._enc = _Encoder(self.fields)
        schema = _schema(self.fields)
        self._pack = _pack_json(self.fields, metadata, _tool, _pack_params)
        o = L.DatasetOptions()
        o.records_per_shard, o.shard_bytes, o.force = (int(records_per_shard), int(shard_size or 0),
                                                     2 if force == "in_place" else int(bool(force)))
        self._classes = _class_names(classes, "stoker.Writer")
        arr = (L.c_char_p * max(len(self._classes), 1))(*self._classes)
        o.nclasses, o.classes = len(self._classes), ctypes.cast(arr, P(L.c_char_p))
        o.pack_json = self._pack.encode()
        o.zstd_level = _zstd_level(self.fields)
        self._err = L.Error_()
        self._w = L.stk_dataset_writer_create(self.path.encode(), ctypes.byref(schema), ctypes.byref(o),
                                             ctypes.byref(self._err))
        if not self._w:
            L.raise_error(self._err)
        if _keep_staged and L.stk_dataset_writer_keep_staged(self._w, 1, ctypes.byref(self._err)):
            self.abort()
            L.raise_error(self._err)
        self.records = 0
        self.bytes = 0  # sample bytes written by this writer (values as given, before any codec)
        if _resume_shards:
            n = L.c_u64()
            if L.stk_dataset_writer_resume(self._w, _resume_shards, ctypes.byref(n), ctypes.byref(self._err)):
                self.abort()
                L.raise_error(self._err)
            self.records = n.value

    @property
    def prefix(self):
        """The shard file names' prefix (PREFIX-00000.stk): "shard", or a new one while replacing (force)."""
        return L.stk_dataset_writer_prefix(self._w) if self._w else None

    @property
    def shards(self):
        """Shards committed so far."""
        return L.stk_dataset_writer_shards(self._w) if self._w else 0

    def write(self, sample):
        if not self._w:
            raise ValueError(f"stoker.Writer({self.path!r}) is closed")
        keep = self._enc.encode(sample, self.records)
        if L.stk_dataset_writer_append_dims(self._w, self._enc.values, self._enc.dims, ctypes.byref(self._err)):
            L.raise_error(self._err)
        del keep
        self.records += 1
        self.bytes += self._enc.nbytes

    def close(self):
        """Commit the last shard and the manifest (idempotent)."""
        w, self._w = self._w, None
        if w and L.stk_dataset_writer_finish(w, ctypes.byref(self._err)):
            L.raise_error(self._err)

    def abort(self):
        """Discard: committed shards stay on disk (s3://: are deleted), but no manifest is written."""
        w, self._w = self._w, None
        if w:
            L.stk_dataset_writer_abort(w)

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


def __getattr__(name):
    """stoker.writer.pack and stoker.writer.merge, where they were before _pack.py held them."""
    if name in ("pack", "merge"):
        from . import _pack
        return getattr(_pack, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
