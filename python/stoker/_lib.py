"""ctypes mirror of stoker/reader.h and stoker/format.h, and the loader of libstoker.

Only this module knows the C layouts (the reader's structs, the dataset
writer's options, the dtype codes in the one dtype table), and it turns a
stk_error into stoker.Error. The option structs the library reads
(stk_reader_options, stk_transform, stk_dataset_options) go through the
`_sized` entry points with this binding's sizeof, as the C headers' inline
wrappers do: a newer libstoker reads and writes only the fields this binding
knows and defaults the rest. Structs the library fills (state, statistics)
are allocated with spare room behind them all the same.
"""
import collections
import ctypes
import ctypes.util
import os

c_u8, c_u16, c_u32, c_u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64
c_int, c_uint, c_float, c_double = ctypes.c_int, ctypes.c_uint, ctypes.c_float, ctypes.c_double
c_char_p, c_void_p, c_size_t = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t

STK_MAX_DIMS = 6
STK_ERROR_MSG_MAX = 512
SPARE = 1024  # bytes of room behind structs the library fills or copies

# stk_status
STK_OK, STK_E_ARG, STK_E_IO, STK_E_NOMEM, STK_E_FORMAT, STK_E_VERSION = 0, 1, 2, 3, 4, 5
STK_E_TRUNCATED, STK_E_CHECKSUM, STK_E_MANIFEST, STK_E_EXISTS, STK_E_RANGE, STK_E_UNSUPPORTED = 6, 7, 8, 9, 10, 11
STK_E_BUSY = 12  # another writer holds the output directory (stk_dir_lock_take)
# stk_kind
STK_KIND_TENSOR, STK_KIND_BYTES, STK_KIND_ARRAY = 1, 2, 3
STK_CODEC_NONE, STK_CODEC_ZSTD, STK_CODEC_JPEG = 0, 1, 2
# stk_dtype
DT_U8, DT_I8, DT_U16, DT_I16, DT_U32, DT_I32, DT_U64, DT_I64, DT_F16, DT_BF16, DT_F32, DT_F64 = range(1, 13)


class DType(collections.namedtuple("DType", "code name stored device torch")):
    """One stk_dtype, as each side shows it:
    name    the binding's name (numpy's, and "bfloat16")
    stored  the numpy typestr of a value as it lies in memory (bfloat16: its uint16 bit pattern)
    device  the typestr device memory is read as (torch has no uint16/32/64: their signed twins)
    torch   the torch dtype of a batch's tensor (uint16/32 widened exactly to int32/64, uint64
            reinterpreted as int64)"""


# The one dtype table: every other view of the dtypes (numpy, CUDA, torch, the Writer's names,
# the transform's outputs) is derived from it.
DTYPES = (
    DType(DT_U8, "uint8", "|u1", "|u1", "uint8"),
    DType(DT_I8, "int8", "|i1", "|i1", "int8"),
    DType(DT_U16, "uint16", "<u2", "<i2", "int32"),
    DType(DT_I16, "int16", "<i2", "<i2", "int16"),
    DType(DT_U32, "uint32", "<u4", "<i4", "int64"),
    DType(DT_I32, "int32", "<i4", "<i4", "int32"),
    DType(DT_U64, "uint64", "<u8", "<i8", "int64"),
    DType(DT_I64, "int64", "<i8", "<i8", "int64"),
    DType(DT_F16, "float16", "<f2", "<f2", "float16"),
    DType(DT_BF16, "bfloat16", "<u2", "<i2", "bfloat16"),
    DType(DT_F32, "float32", "<f4", "<f4", "float32"),
    DType(DT_F64, "float64", "<f8", "<f8", "float64"),
)
DTYPE = {d.code: d for d in DTYPES}
DTYPE_BY_NAME = {d.name: d for d in DTYPES}
ORDERS = {"sequential": 0, "shuffle": 1, "quasi": 2}
TAILS = {"pad": 0, "drop": 1, "partial": 2, "auto": 3}
TAIL_NAMES = {0: "pad", 1: "drop", 2: "partial"}
VERIFY = {"off": 0, "once": 1, "always": 2}
IO = {"auto": 0, "mmap": 1, "direct": 2}
IO_NAMES = {v: k for k, v in IO.items()}
IO_ENGINE_NAMES = {0: "none", 1: "io_uring", 2: "threads", 3: "remote"}
DEVICE_NONE, DEVICE_HOST, DEVICE_CUDA = 0, 1, 2
DEVICE_NAMES = {DEVICE_NONE: "none", DEVICE_HOST: "host", DEVICE_CUDA: "cuda"}
LAYOUTS = {"NCHW": 0, "NHWC": 1}
CROPS = {"none": 0, "center": 1, "random_resized": 2}
MIX_KINDS = {"weight": 1, "repeat": 2, "choose": 3}  # stk_mix_kind
XFORM_DTYPES = {n: DTYPE_BY_NAME[n].code for n in ("float32", "float16", "bfloat16", "uint8")}  # stk_transform


class Error_(ctypes.Structure):
    _fields_ = [("code", c_int), ("msg", ctypes.c_char * STK_ERROR_MSG_MAX)]


class Value(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("size", c_u64)]


class Transform(ctypes.Structure):
    _fields_ = [("field", c_char_p), ("dtype", c_int), ("layout", c_int),
                ("mean", c_float * 4), ("std", c_float * 4), ("crop", c_int),
                ("out_height", c_u32), ("out_width", c_u32),
                ("scale_min", c_float), ("scale_max", c_float),
                ("ratio_min", c_float), ("ratio_max", c_float), ("flip_prob", c_float)]


class Options(ctypes.Structure):
    _fields_ = [("batch_size", c_u32), ("order", c_int), ("seed", c_u64),
                ("rank", c_int), ("world_size", c_int), ("threads", c_uint), ("prefetch", c_uint),
                ("tail", c_int), ("verify", c_int), ("fields", c_char_p),
                ("memory_budget", c_u64), ("quasi_block_bytes", c_u64), ("quasi_window", c_u32),
                ("release_pages", c_int), ("device", c_int), ("device_index", c_int),
                ("device_fallback", c_int), ("stream", c_void_p),
                ("transform", ctypes.POINTER(Transform)), ("block_cache_bytes", c_u64),
                ("io", c_int), ("io_depth", c_uint), ("epoch_size", c_u64),
                ("cache_dir", c_char_p), ("cache_limit", c_u64), ("endpoint", c_char_p), ("region", c_char_p),
                ("profile", c_char_p),
                ("trace", c_char_p),
                ("tuning", c_int), ("tune_pin", c_uint), ("threads_max", c_uint), ("cpu_budget", c_double),
                ("read_once", c_int)]


class BatchField(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("kind", c_int), ("dtype", c_int), ("ndim", c_uint),
                ("shape", c_u64 * (STK_MAX_DIMS + 1)), ("data", c_void_p),
                ("values", ctypes.POINTER(Value)), ("nbytes", c_u64), ("zero_copy", c_int)]


class Field_(ctypes.Structure):  # stk_field
    _fields_ = [("name", ctypes.c_char * 32), ("kind", ctypes.c_uint8), ("dtype", ctypes.c_uint8),
                ("codec", ctypes.c_uint8), ("ndim", ctypes.c_uint8), ("shape", c_u64 * STK_MAX_DIMS)]


class Schema_(ctypes.Structure):  # stk_schema
    _fields_ = [("nfields", c_u32), ("fields", Field_ * 32)]


class Manifest_(ctypes.Structure):  # stk_manifest (stoker/format.h): read for a remote dataset's
    _fields_ = [("version_major", c_uint), ("version_minor", c_uint), ("schema", Schema_),  # classes, metadata
                ("record_count", c_u64), ("fingerprint", c_u64), ("nshards", c_size_t), ("shards", c_void_p),
                ("nclasses", c_size_t), ("classes", ctypes.POINTER(c_char_p)), ("pack_json", c_char_p)]


class Batch(ctypes.Structure):
    _fields_ = [("epoch", c_u64), ("index", c_u64), ("size", c_u32),
                ("records", c_void_p), ("nfields", c_uint),
                ("fields", ctypes.POINTER(BatchField)), ("on_device", c_int), ("event", c_void_p),
                ("sources", c_void_p), ("source_records", c_void_p)]


class Source(ctypes.Structure):  # stk_source
    _fields_ = [("path", c_char_p), ("dataset", c_void_p), ("kind", c_int), ("value", c_double),
                ("order", c_int)]


class SourceStats(ctypes.Structure):  # stk_reader_source_stats
    _fields_ = [("records", c_u64), ("per_epoch", c_u64), ("samples", c_u64), ("bytes", c_u64),
                ("busy_s", c_double)]


class State(ctypes.Structure):
    _fields_ = [("fingerprint", c_u64), ("order", c_int), ("seed", c_u64), ("global_batch", c_u64),
                ("tail", c_int), ("quasi_block_records", c_u64), ("quasi_window", c_u32),
                ("epoch", c_u64), ("batch", c_u64)]


class Stats(ctypes.Structure):
    _fields_ = [("batches", c_u64), ("samples", c_u64), ("bytes", c_u64),
                ("zero_copy_batches", c_u64), ("verified", c_u64),
                ("wall_s", c_double), ("wait_s", c_double), ("busy_s", c_double),
                ("mean_ready", c_double), ("threads", c_uint), ("prefetch", c_uint),
                ("device", c_int), ("h2d_s", c_double), ("h2d_bytes", c_u64)]


class DatasetOptions(ctypes.Structure):  # stk_dataset_options (stoker/format.h)
    _fields_ = [("records_per_shard", c_u64), ("shard_bytes", c_u64), ("prefix", c_char_p),
                ("force", c_int), ("nclasses", c_size_t), ("classes", ctypes.POINTER(c_char_p)),
                ("pack_json", c_char_p), ("zstd_level", c_int), ("zstd_block_bytes", c_u64)]


class IoStats(ctypes.Structure):
    _fields_ = [("io", c_int), ("engine", c_int), ("depth", c_uint), ("reads", c_u64), ("bytes", c_u64),
                ("retries", c_u64), ("bounced_bytes", c_u64), ("map_reads", c_u64),
                ("buffered_files", c_uint), ("quasi_blocks", c_u64), ("reason", ctypes.c_char * 512),
                ("filled_bytes", c_u64), ("read_once", c_int)]


class RemoteStats(ctypes.Structure):  # stk_reader_remote_stats
    _fields_ = [("remote", c_int), ("requests", c_u64), ("bytes_fetched", c_u64), ("retries", c_u64),
                ("retries_5xx", c_u64), ("retries_network", c_u64), ("failures", c_u64), ("gets", c_u64),
                ("get_bytes", c_u64), ("cache_hits", c_u64), ("cache_hit_bytes", c_u64),
                ("cache_stored_bytes", c_u64), ("cache_rejected_bytes", c_u64), ("checksum_refetches", c_u64),
                ("inflight_max", c_u64)]


class TuneStats(ctypes.Structure):  # stk_reader_tune_stats
    _fields_ = [("on", c_int), ("threads", c_uint), ("prefetch", c_uint), ("io_depth", c_uint),
                ("threads_max", c_uint), ("prefetch_max", c_uint), ("io_depth_max", c_uint),
                ("cpu_budget", c_double), ("trainer_cpu", c_double), ("memory_budget", c_u64),
                ("decisions", c_u64), ("changes", c_u64), ("period", c_u64), ("settled", c_int)]


class TuneEvent(ctypes.Structure):  # stk_reader_tune_event
    _fields_ = [("batch", c_u64), ("t_s", c_double), ("threads", c_uint), ("prefetch", c_uint),
                ("io_depth", c_uint), ("reason", ctypes.c_char * 120)]


class CropBox(ctypes.Structure):  # stk_crop_box
    _fields_ = [("x0", c_double), ("y0", c_double), ("w", c_double), ("h", c_double), ("flip", c_int)]


STK_TUNING = {"auto": 0, "on": 1, "off": 2}
STK_PIN = {"threads": 1, "prefetch": 2, "io_depth": 4, "io": 8}


def padded(struct_type):
    """A zeroed struct with SPARE bytes of room behind it (see the module doc)."""
    buf = ctypes.create_string_buffer(ctypes.sizeof(struct_type) + SPARE)
    obj = struct_type.from_buffer(buf)
    obj._keep = buf  # the buffer lives as long as the struct view
    return obj


def _candidates():
    """Where libstoker may be, in the order tried."""
    env = os.environ.get("STOKER_LIB")
    if env:
        return [("$STOKER_LIB", env)]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [("bundled with the package", os.path.join(here, "_lib", "libstoker.so"))]
    found = ctypes.util.find_library("stoker")
    if found:
        out.append(("installed (ld.so cache)", found))
    out.append(("installed (dynamic loader path)", "libstoker.so.0"))
    return out


def _load():
    tried = []
    for where, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} ({where}: no such file)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({where}: {e})")
    raise ImportError("stoker: cannot load libstoker; tried " + "; ".join(tried) +
                      ". Install the package with `pip install ./python` from a built tree, or set STOKER_LIB "
                      "to build/reader/libstoker.so")


lib, path = _load()


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


P = ctypes.POINTER


def _check_abi():
    """The structs above mirror stoker/reader.h: refuse a libstoker whose
    structs have other sizes (a binding from another release) instead of
    reading fields at the wrong offsets."""
    if not hasattr(lib, "stk_reader_open_sized"):
        raise ImportError(f"stoker: {path} is a libstoker older than this binding (no stk_reader_open_sized): "
                          "install the binding and the library from the same tree")
    sizeof = _fn("stk_reader_sizeof", c_size_t, c_char_p)
    mirrors = {"stk_error": Error_, "stk_value": Value, "stk_transform": Transform, "stk_reader_options": Options,
               "stk_batch_field": BatchField, "stk_batch": Batch, "stk_reader_state": State,
               "stk_reader_stats": Stats, "stk_reader_io_stats": IoStats, "stk_source": Source,
               "stk_reader_source_stats": SourceStats, "stk_dataset_options": DatasetOptions,
               "stk_reader_remote_stats": RemoteStats, "stk_reader_tune_stats": TuneStats,
               "stk_reader_tune_event": TuneEvent, "stk_crop_box": CropBox}
    for name, cls in mirrors.items():
        theirs, ours = sizeof(name.encode()), ctypes.sizeof(cls)
        if theirs and theirs != ours:
            raise ImportError(f"stoker: {path}: {name} is {theirs} bytes there, {ours} in this binding: "
                              "install the binding and the library from the same tree")


_check_abi()
stk_status_name = _fn("stk_status_name", c_char_p, c_int)
_options_init_sized = _fn("stk_reader_options_init_sized", None, c_void_p, c_size_t)
_open_sized = _fn("stk_reader_open_sized", c_void_p, c_char_p, c_void_p, c_size_t, c_size_t, P(Error_))
_transform_init_sized = _fn("stk_transform_init_sized", None, c_void_p, c_size_t)
_transform_imagenet_sized = _fn("stk_transform_imagenet_sized", None, c_void_p, c_size_t, c_int, c_u32)
_version_string = _fn("stk_version_string", c_char_p)
_io_stats_get_sized = _fn("stk_reader_io_stats_get_sized", None, c_void_p, c_void_p, c_size_t)
_source_init_sized = _fn("stk_source_init_sized", None, c_void_p, c_size_t)
_open_mix_sized = _fn("stk_reader_open_mix_sized", c_void_p, c_void_p, c_uint, c_size_t, c_void_p, c_size_t,
                      c_size_t, P(Error_))
_remote_stats_get_sized = _fn("stk_reader_remote_stats_get_sized", None, c_void_p, c_void_p, c_size_t)
_tune_stats_get_sized = _fn("stk_reader_tune_stats_get_sized", None, c_void_p, c_void_p, c_size_t)
_tune_log_sized = _fn("stk_reader_tune_log_sized", c_size_t, c_void_p, c_void_p, c_size_t, c_size_t)
_source_stats_get_sized = _fn("stk_reader_source_stats_get_sized", c_int, c_void_p, c_uint, c_void_p, c_size_t,
                              P(Error_))
_crop_box_sized = _fn("stk_reader_crop_box_sized", c_int, c_void_p, c_u64, c_u64, c_u32, c_u32, c_void_p, c_size_t,
                      P(Error_))


# The C header's inline wrappers, with this binding's struct sizes.
def stk_reader_options_init(addr):
    _options_init_sized(addr, ctypes.sizeof(Options))


def stk_reader_open(path, opts_addr, err):
    return _open_sized(path, opts_addr, ctypes.sizeof(Options), ctypes.sizeof(Transform), err)


def stk_source_init(addr):
    _source_init_sized(addr, ctypes.sizeof(Source))


def stk_reader_open_mix(sources, n, opts_addr, err):
    """sources: a ctypes array of Source."""
    return _open_mix_sized(ctypes.addressof(sources), n, ctypes.sizeof(Source), opts_addr, ctypes.sizeof(Options),
                           ctypes.sizeof(Transform), err)


def stk_reader_source_stats_get(r, s, addr, err):
    return _source_stats_get_sized(r, s, addr, ctypes.sizeof(SourceStats), err)


def stk_transform_init(addr):
    _transform_init_sized(addr, ctypes.sizeof(Transform))


def stk_transform_imagenet(addr, train, size):
    _transform_imagenet_sized(addr, ctypes.sizeof(Transform), train, size)


def stk_reader_io_stats_get(r, addr):
    _io_stats_get_sized(r, addr, ctypes.sizeof(IoStats))


def stk_reader_remote_stats_get(r, addr):
    _remote_stats_get_sized(r, addr, ctypes.sizeof(RemoteStats))


def stk_reader_tune_stats_get(r, addr):
    _tune_stats_get_sized(r, addr, ctypes.sizeof(TuneStats))


def stk_reader_crop_box(r, epoch, record, height, width, addr, err):
    return _crop_box_sized(r, epoch, record, height, width, addr, ctypes.sizeof(CropBox), err)


def stk_reader_tune_log(r, events, cap):
    """events: a ctypes array of TuneEvent of at least cap."""
    return _tune_log_sized(r, ctypes.addressof(events), cap, ctypes.sizeof(TuneEvent))


def version():
    """The release of the loaded libstoker (STK_VERSION_STRING, generated from CMakeLists.txt's project())."""
    return _version_string().decode()


stk_reader_close = _fn("stk_reader_close", None, c_void_p)
stk_reader_next = _fn("stk_reader_next", P(Batch), c_void_p, P(Error_))
stk_reader_release = _fn("stk_reader_release", None, c_void_p)
stk_reader_set_epochs = _fn("stk_reader_set_epochs", None, c_void_p, c_u64)
stk_reader_batches_per_epoch = _fn("stk_reader_batches_per_epoch", c_u64, c_void_p)
stk_reader_position = _fn("stk_reader_position", None, c_void_p, P(c_u64), P(c_u64))
stk_reader_seek = _fn("stk_reader_seek", c_int, c_void_p, c_u64, c_u64, P(Error_))
stk_reader_save = _fn("stk_reader_save", None, c_void_p, c_void_p)
stk_reader_restore = _fn("stk_reader_restore", c_int, c_void_p, c_void_p, P(Error_))
stk_reader_state_format = _fn("stk_reader_state_format", c_size_t, c_void_p, c_char_p, c_size_t)
stk_reader_state_parse = _fn("stk_reader_state_parse", c_int, c_char_p, c_size_t, c_void_p, P(Error_))
stk_reader_save_text = _fn("stk_reader_save_text", c_size_t, c_void_p, c_char_p, c_size_t)
stk_reader_restore_text = _fn("stk_reader_restore_text", c_int, c_void_p, c_char_p, c_size_t, c_uint, P(Error_))
stk_reader_sources = _fn("stk_reader_sources", c_uint, c_void_p)
stk_reader_verdict_sources = _fn("stk_reader_verdict_sources", c_int, c_void_p, c_char_p, c_size_t)
stk_reader_source_path = _fn("stk_reader_source_path", c_char_p, c_void_p, c_uint)
stk_reader_stats_get = _fn("stk_reader_stats_get", None, c_void_p, c_void_p)
stk_reader_stats_reset = _fn("stk_reader_stats_reset", None, c_void_p)
stk_reader_verdict = _fn("stk_reader_verdict", c_int, c_void_p, c_char_p, c_size_t)
stk_reader_diag_get_sized = _fn("stk_reader_diag_get_sized", None, c_void_p, c_void_p, c_size_t)
stk_reader_diagnose_sized = _fn("stk_reader_diagnose_sized", c_int, c_void_p, c_size_t, c_char_p, c_size_t)
stk_reader_metrics = _fn("stk_reader_metrics", c_int, c_void_p, c_char_p, c_size_t)
stk_reader_get_options = _fn("stk_reader_get_options", P(Options), c_void_p)
stk_reader_dataset = _fn("stk_reader_dataset", c_void_p, c_void_p)
stk_dataset_schema = _fn("stk_dataset_schema", P(Schema_), c_void_p)
stk_dataset_manifest = _fn("stk_dataset_manifest", P(Manifest_), c_void_p)
stk_batch_shapes = _fn("stk_batch_shapes", P(c_u64), c_void_p, c_uint)
stk_dataset_records = _fn("stk_dataset_records", c_u64, c_void_p)
stk_cuda_available = _fn("stk_cuda_available", c_int, P(Error_))


# The dataset writer (stoker/format.h), for stoker.Writer and stoker.pack.
_dataset_writer_create_sized = _fn("stk_dataset_writer_create_sized", c_void_p, c_char_p, P(Schema_),
                                   P(DatasetOptions), c_size_t, P(Error_))


def stk_dataset_writer_create(path, schema, opts, err):
    return _dataset_writer_create_sized(path, schema, opts, ctypes.sizeof(DatasetOptions), err)


stk_dataset_writer_append_dims = _fn("stk_dataset_writer_append_dims", c_int, c_void_p, P(Value), P(c_u64),
                                     P(Error_))
stk_dataset_writer_finish = _fn("stk_dataset_writer_finish", c_int, c_void_p, P(Error_))
stk_dataset_writer_abort = _fn("stk_dataset_writer_abort", None, c_void_p)
stk_dataset_writer_shards = _fn("stk_dataset_writer_shards", c_u64, c_void_p)
stk_dataset_writer_prefix = _fn("stk_dataset_writer_prefix", c_char_p, c_void_p)
stk_dataset_writer_resume = _fn("stk_dataset_writer_resume", c_int, c_void_p, c_u64, P(c_u64), P(Error_))
stk_dataset_merge = _fn("stk_dataset_merge", c_int, c_char_p, P(c_char_p), c_size_t, P(Error_))
stk_schema_validate = _fn("stk_schema_validate", c_int, P(Schema_), P(Error_))
# One shard, opened to check what a pack state file says about it.
stk_shard_open = _fn("stk_shard_open", c_void_p, c_char_p, P(Error_))
stk_shard_close = _fn("stk_shard_close", None, c_void_p)
stk_shard_records = _fn("stk_shard_records", c_u64, c_void_p)
stk_shard_index_hash = _fn("stk_shard_index_hash", c_u64, c_void_p)
_shard_file_name = _fn("stk_shard_file_name", c_int, c_char_p, c_size_t, c_char_p, c_u64)
# s3:// datasets (stoker/format.h, "Writing to object storage"), for stoker.pack and stoker.merge.
stk_dataset_writer_keep_staged = _fn("stk_dataset_writer_keep_staged", c_int, c_void_p, c_int, P(Error_))
stk_path_is_remote = _fn("stk_path_is_remote", c_int, c_char_p)
stk_upload_open = _fn("stk_upload_open", c_void_p, c_char_p, P(Error_))
stk_upload_close = _fn("stk_upload_close", None, c_void_p)
stk_upload_staging_dir = _fn("stk_upload_staging_dir", c_int, c_char_p, c_char_p, c_size_t, P(Error_))
stk_upload_put = _fn("stk_upload_put", c_int, c_void_p, c_char_p, c_char_p, c_size_t, P(Error_))
stk_upload_fetch = _fn("stk_upload_fetch", c_int, c_void_p, c_char_p, c_char_p, c_size_t, P(c_int), P(Error_))
stk_upload_list = _fn("stk_upload_list", c_int, c_void_p, P(P(c_char_p)), P(P(c_u64)), P(c_size_t), P(Error_))
stk_upload_list_free = _fn("stk_upload_list_free", None, P(c_char_p), P(c_u64), c_size_t)


def shard_file_name(index, prefix=b"shard"):
    """The dataset writer's name of shard `index` ("shard-00000.stk")."""
    buf = ctypes.create_string_buffer(64)
    _shard_file_name(buf, len(buf), prefix, index)
    return buf.value.decode()


class Error(Exception):
    """An error reported by libstoker. str(e) is the library's message, unchanged;
    `code` is its stk_status and `status` the status's short name ("checksum", "io", ...)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.status = stk_status_name(code).decode()


class ArgumentError(Error, ValueError):
    """libstoker refused an argument or option (STK_E_ARG, STK_E_RANGE)."""


def error(code, message):
    """The stoker exception for a status: ArgumentError for ARG and RANGE, else Error."""
    return (ArgumentError if code in (STK_E_ARG, STK_E_RANGE) else Error)(code, message)


def raise_error(err):
    """Raise the stoker exception of a filled stk_error."""
    raise error(err.code, err.msg.decode("utf-8", "replace"))
