"""stoker.Reader and what it hands out (Batch, Transform, Source): libstoker's reader
(stoker/reader.h) turning each batch into numpy arrays or torch tensors without copying
them. The lifetime of a batch's views is in the package's doc (help(stoker)).
"""
import atexit
import collections
import ctypes
import importlib
import json
import operator
import os
import sys
import threading
import weakref

import numpy as np

from . import _lib as L

_NP = {d.code: np.dtype(d.stored) for d in L.DTYPES}  # stk dtype -> numpy dtype of the values in memory


def _torch_how(d):
    """How a value of dtype d becomes its torch dtype (torch 1.13 has no uint16/32/64)."""
    if d.torch == "bfloat16":
        return "bfloat16"  # the bit patterns, viewed
    if np.dtype(d.torch).itemsize > np.dtype(d.stored).itemsize:
        return "widen"  # uint16, uint32: exactly, as a copy
    return "view" if d.stored != d.device else "same"  # uint64: reinterpreted, exact below 2^63


_TORCH_HOW = {d.code: _torch_how(d) for d in L.DTYPES}


def _torch_of(torch, a, dtype):
    """A numpy array of stk dtype `dtype` as a torch tensor of the table's torch dtype."""
    d, how = L.DTYPE[dtype], _TORCH_HOW[dtype]
    if how == "widen":
        return torch.from_numpy(a.astype(np.dtype(d.torch)))
    if how == "view":
        return torch.from_numpy(a.view(np.dtype(d.device)))
    if how == "bfloat16":
        return torch.from_numpy(a.view(np.dtype(d.device))).view(torch.bfloat16)
    return torch.from_numpy(a)


class CropBox(collections.namedtuple("CropBox", "x0 y0 w h flip")):
    """Where the reader cropped a record (Reader.crop_box): the box [x0, x0 + w) x [y0, y0 + h) of the
    image as stored, in pixels (fractional for the eval crop of images of their own size), and flip
    (True: the output was mirrored left to right). A point (x, y) of the stored image lands at
    ((x - x0) * out_w / w, (y - y0) * out_h / h) of the out_h x out_w output, then u -> out_w - u when
    flipped: how detection boxes and keypoints follow the crop."""

    def map_points(self, xy, out_size):
        """Points [N, 2] (x, y) of the stored image, in pixel edges, to the output's (out_size: S or
        (out_h, out_w)); points outside the box land outside [0, out_w) x [0, out_h)."""
        oh, ow = (out_size, out_size) if np.isscalar(out_size) else out_size
        p = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        u = (p[:, 0] - self.x0) * ow / self.w
        v = (p[:, 1] - self.y0) * oh / self.h
        if self.flip:
            u = ow - u
        return np.stack([u, v], axis=1)


class ExpiredBatchError(RuntimeError):
    """A field of a batch was looked up after the batch's memory went back to the reader."""


def cuda_available():
    """(True, "") when this libstoker has the CUDA backend and a usable device, else (False, reason)."""
    err = L.Error_()
    ok = L.stk_cuda_available(ctypes.byref(err))
    return bool(ok), "" if ok else err.msg.decode("utf-8", "replace")


class Transform:
    """The reader's per-sample image transform (stk_transform), run on the device
    (CUDA) or by the host backend: u8 HWC in; (x / 255 - mean) / std out, as
    `dtype` in `layout`, with an optional crop resized bilinearly to `size` and a
    horizontal flip. Crop boxes and flips depend on (seed, epoch, record) only.

    field     the u8 [H, W, C] field (default "image")
    dtype     "float32", "float16", "bfloat16" or "uint8" (the cropped, resized
              pixels, rounded: mean and std are not applied)
    layout    "NCHW" or "NHWC"
    mean, std per channel in [0, 1] units (up to 4 values)
    crop      "none" (whole image resized), "center" or "random_resized"
    size      output (height, width) or one int; None: the input's size
    scale, ratio  random_resized: area fraction and aspect ratio ranges
    flip_prob horizontal flip probability
    """

    def __init__(self, field="image", dtype="float32", layout="NCHW", mean=(0.0, 0.0, 0.0),
                 std=(1.0, 1.0, 1.0), crop="none", size=None, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3), flip_prob=0.0):
        if dtype not in L.XFORM_DTYPES:
            raise ValueError(f"transform dtype {dtype!r}: one of {', '.join(L.XFORM_DTYPES)}")
        if layout not in L.LAYOUTS:
            raise ValueError(f"transform layout {layout!r}: NCHW or NHWC")
        if crop not in L.CROPS:
            raise ValueError(f"transform crop {crop!r}: one of {', '.join(L.CROPS)}")
        if len(mean) > 4 or len(std) > 4 or len(mean) != len(std):
            raise ValueError("transform mean and std: the same number of values, at most 4")
        if size is not None:
            size = (size, size) if isinstance(size, int) else tuple(size)
            if len(size) != 2:
                raise ValueError("transform size: an int or (height, width)")
        self.field, self.dtype, self.layout = field, dtype, layout
        self.mean, self.std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
        self.crop, self.size = crop, size
        self.scale, self.ratio, self.flip_prob = tuple(scale), tuple(ratio), float(flip_prob)

    @classmethod
    def imagenet(cls, train, size=224):
        """torchvision's ImageNet recipe, as stk_transform_imagenet: train =
        RandomResizedCrop(size) + RandomHorizontalFlip + Normalize; eval =
        CenterCrop(size) + Normalize; float32, NCHW."""
        t = L.padded(L.Transform)
        L.stk_transform_imagenet(ctypes.addressof(t), 1 if train else 0, size)
        inv = {v: k for k, v in L.CROPS.items()}
        return cls(dtype="float32", layout="NCHW", mean=tuple(t.mean)[:3], std=tuple(t.std)[:3],
                   crop=inv[t.crop], size=(t.out_height, t.out_width), scale=(t.scale_min, t.scale_max),
                   ratio=(t.ratio_min, t.ratio_max), flip_prob=t.flip_prob)

    def _c(self):
        t = L.padded(L.Transform)
        L.stk_transform_init(ctypes.addressof(t))  # defaults for any field this binding does not set
        t._field = self.field.encode()
        t.field = t._field
        t.dtype = L.XFORM_DTYPES[self.dtype]
        t.layout = L.LAYOUTS[self.layout]
        for c in range(4):
            t.mean[c] = self.mean[c] if c < len(self.mean) else 0.0
            t.std[c] = self.std[c] if c < len(self.std) else 1.0
        t.crop = L.CROPS[self.crop]
        t.out_height, t.out_width = self.size if self.size else (0, 0)
        t.scale_min, t.scale_max = self.scale
        t.ratio_min, t.ratio_max = self.ratio
        t.flip_prob = self.flip_prob
        return t

    def __repr__(self):
        return (f"Transform(field={self.field!r}, dtype={self.dtype!r}, layout={self.layout!r}, mean={self.mean}, "
                f"std={self.std}, crop={self.crop!r}, size={self.size}, scale={self.scale}, ratio={self.ratio}, "
                f"flip_prob={self.flip_prob})")


class _Lease:
    """What a batch's views depend on: valid until the reader moves on."""
    __slots__ = ("valid", "epoch", "index", "poison")

    def __init__(self, epoch, index):
        self.valid, self.epoch, self.index, self.poison = True, epoch, index, []

    def expire(self):
        if not self.valid:
            return
        self.valid = False
        for fill in self.poison:
            fill()
        self.poison = []


class Batch(dict):
    """One batch: a dict of field name -> array (numpy) or tensor (torch), plus
    `epoch`, `index` (the batch's index within its epoch), `size` (records),
    `records` (their global indices, an owned numpy uint64 array),
    `data_ptrs` (field -> address of the data the reader handed out) and
    `zero_copy` (the tensors point into the mapped shard). Bytes fields are
    lists of `bytes` (of `str` for stoker.String fields); variable-shape
    (ragged) fields lists of arrays, or with Reader(ragged="pad") one array
    padded with zeros to the batch's largest shape and `lengths[name]`, the
    records' sizes along the variable dimensions ([B, k] int64). A mixture's batches
    also carry `sources` (each record's source, an index into Reader.sources, uint32)
    and `source_records` (its index inside that source, uint64); None for one
    dataset. Unless the reader was opened with copy=True, the arrays
    are views valid until the reader's next batch (see the module doc);
    looking a field up after that raises ExpiredBatchError."""
    __slots__ = ("epoch", "index", "size", "records", "sources", "source_records", "data_ptrs", "zero_copy",
                 "lengths", "_lease")

    def _check(self):
        lease = self._lease
        if lease is not None and not lease.valid:
            raise ExpiredBatchError(
                f"batch {lease.index} of epoch {lease.epoch} has expired: its memory went back to the reader when "
                "the next batch was taken (or at seek/set_epoch/load_state_dict/close); keep copies of what you need "
                "past a step (Reader(copy=True), array.copy(), tensor.clone())")

    @property
    def valid(self):
        return self._lease is None or self._lease.valid

    def __getitem__(self, key):
        self._check()
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self._check()
        return dict.get(self, key, default)

    def values(self):
        self._check()
        return dict.values(self)

    def items(self):
        self._check()
        return dict.items(self)

    def __repr__(self):
        state = "" if self.valid else ", expired"
        return f"<stoker.Batch epoch {self.epoch} batch {self.index}, {self.size} records, fields {list(self)}{state}>"


def _crop_transform(crop):
    """crop="random:224" / "center:224" (or ("random", 224)): the crop alone, u8 HWC, as shardread --crop."""
    kind, _, size = crop.partition(":") if isinstance(crop, str) else (crop[0], None, crop[1])
    try:
        size = int(size)
    except (TypeError, ValueError):
        size = 0
    if kind not in ("random", "center") or not 1 <= size <= 65535:
        raise ValueError(f"crop {crop!r}: 'random:SIZE' or 'center:SIZE'")
    t = Transform.imagenet(kind == "random", size)
    t.dtype, t.layout, t.mean, t.std = "uint8", "NHWC", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    return t


def _device_arg(device):
    """(stk_device, index, torch device or None) from device=... ."""
    if getattr(device, "type", None) == "cpu":  # torch.device("cpu")
        device = "cpu"
    if device is None or device == "cpu":  # a transform runs on the workers (or the host backend: the C side picks)
        return L.DEVICE_NONE, 0, None
    if device == "host":
        return L.DEVICE_HOST, 0, None
    s = str(device)
    if s == "cuda" or s.startswith("cuda:"):
        index = getattr(device, "index", None)
        if index is None and ":" in s:
            try:
                index = int(s.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"device {device!r}: cuda, cuda:N, cpu or host") from None
        if index is None:
            import torch
            index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return L.DEVICE_CUDA, index, s
    raise ValueError(f"device {device!r}: cpu, host, cuda or cuda:N")


def _dist_rank_world():
    """Rank and world size of an initialised torch.distributed group, else None."""
    if "torch" not in sys.modules:  # nobody initialised a process group without importing torch
        return None
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # a half-configured torch must not stop the reader from opening
        return None
    return None


class Source:
    """One dataset of a mixture (Reader([Source(...), ...])): its path and how many of its
    records each epoch carries, by exactly one of
      weight  its share of the epoch (every source weighted, or none; the epoch then has
              Reader(epoch_size=) records, by default the sum of the sources' records),
      repeat  passes over it per epoch (2: twice; 0.5: half of it, the other half next epoch for a
              sequential source, a new random half each epoch for a shuffled one),
      choose  a fixed number of its records per epoch;
    none given: weight 1. order: its own order ("sequential", "shuffle", "quasi"), or None
    for the reader's (spec/ORDERS.md, "Mixtures")."""

    __slots__ = ("path", "kind", "value", "order")

    def __init__(self, path, weight=None, repeat=None, choose=None, order=None):
        given = [(k, v) for k, v in (("weight", weight), ("repeat", repeat), ("choose", choose)) if v is not None]
        if len(given) > 1:
            raise ValueError(f"stoker.Source({path!r}): give one of weight, repeat or choose, not "
                             f"{' and '.join(k for k, _ in given)}")
        self.kind, value = given[0] if given else ("weight", 1.0)
        if self.kind == "choose":
            try:
                value = operator.index(value)
            except TypeError:
                raise ValueError(f"stoker.Source({path!r}): choose={value!r}, a whole number of records") from None
        self.value = float(value)
        if order is not None and order not in L.ORDERS:
            raise ValueError(f"stoker.Source({path!r}): order {order!r}: sequential, shuffle or quasi")
        self.path, self.order = os.fspath(path), order

    def __repr__(self):
        value = int(self.value) if self.kind == "choose" else self.value
        order = f", order={self.order!r}" if self.order else ""
        return f"stoker.Source({self.path!r}, {self.kind}={value!r}{order})"


def _tune_pin(pin):
    """Reader(tune_pin=): None, an int of STK_PIN_* bits, or knob names (a list or a
    comma-separated string) -> the bits."""
    if pin is None:
        return 0
    if isinstance(pin, int):
        return pin
    names = pin.split(",") if isinstance(pin, str) else list(pin)
    bits = 0
    for n in names:
        n = n.strip().replace("-", "_")
        if n not in L.STK_PIN:
            raise ValueError(f"tune_pin {n!r}: threads, prefetch, io_depth or io")
        bits |= L.STK_PIN[n]
    return bits


class Reader:
    """Batches of a packed dataset for one rank, from libstoker's worker threads.

    path          a dataset directory or its manifest.json, "s3://bucket/prefix" or
                  "https://host/path" (a remote dataset, see cache_dir), or a list of stoker.Source
                  (or paths, weight 1 each): a mixture of datasets read as one stream
                  (see stoker.Source; batch.sources / batch.source_records say where
                  each record came from; source_stats() counts per source)
    epoch_size    a mixture of weighted sources: records per epoch (0: the sum of theirs)
    batch_size    records per batch on this rank
    order         "sequential", "shuffle" or "quasi" (spec/ORDERS.md); shuffle=True is order="shuffle"
    seed          seed of the shuffled orders
    rank, world_size  None: from torch.distributed when a process group is
                  initialised, else $RANK/$WORLD_SIZE, $SLURM_PROCID/$SLURM_NTASKS, else 0/1
    threads       worker threads (0: online CPUs, at most 8); prefetch: batches prepared ahead (0: 2 x threads)
    drop_last     True: drop the incomplete last global batch (tail="drop")
    tail          "pad" (default: wrap around, as DistributedSampler), "drop",
                  "partial" (a short last batch, DataLoader's drop_last=False), or
                  "auto" (pad when world_size > 1, else partial; .tail says which)
    fields        names to read (list or comma-separated string); None: all
    device        None/"cpu": host arrays; "cuda"/"cuda:N"/torch.device: device
                  tensors, uploaded by the reader, the current torch stream made
                  to wait for each batch (no host sync); "host": the device
                  protocol on the CPU (a copy thread and the CPU transform)
    crop          "random:SIZE" or "center:SIZE": RandomResizedCrop(SIZE) + flip,
                  or the eval crop, alone: u8 [B, SIZE, SIZE, 3] (shardread --crop)
    transform     a stoker.Transform. On the CPU, u8 RGB images (square, of
                  their own size, or JPEG) are cropped, resized and normalised
                  by the worker threads; others by the host backend. On CUDA
                  the GPU normalises (and crops square images).
    output        "numpy" or "torch" (default: torch on CUDA, numpy otherwise)
    ragged        variable-shape fields: "list" (default: one array per record) or
                  "pad" (one zero-padded array and batch.lengths[name])
    copy          True: every batch's arrays are owned copies (valid forever)
    debug         True: catch views used after they expired (see the module doc)
    verify        "off", "once" or "always": check record checksums on read
    io            "auto" (default), "mmap" or "direct": how records reach the batches
                  (direct: asynchronous O_DIRECT reads for larger-than-RAM data or
                  one pass over cold data; io_stats() says which path auto chose
                  and why)
    io_depth      direct: reads in flight per worker queue (0: 32; see the README)
    tuning        "auto" (default: $STOKER_TUNING, else on), "on" or "off": the online
                  tuner turns threads, prefetch and io_depth while batches are read
                  (threads, prefetch and io_depth above are where it starts);
                  tune_stats() shows where they are and why
    tune_pin      knobs the tuner leaves as opened: names ("threads", "prefetch",
                  "io_depth") as a list or comma-separated string
    threads_max   most worker threads the tuner may run (0: the CPU budget rounded up)
    cpu_budget    cores the workers may keep busy (0: measured: this process's cores
                  shared by the node's ranks, minus what the rest of the process uses)
    read_once     True: each record is read once (an evaluation pass): cold data
                  is read directly, never filled into the page cache for epochs
                  that will not come (default False: auto, which reads cold data
                  that fits in memory through the page cache, ahead of the workers)
    memory_budget, quasi_block_bytes, quasi_window, release_pages, device_fallback:
                  as in stk_reader_options
    stream        CUDA: the stream batches are consumed on (torch.cuda.Stream or
                  a cudaStream_t as int); default: torch's current stream at open
    cache_dir, cache_limit  a remote dataset (and remote sources): the node cache
                  of fetched bytes, shared by the processes of the node, and the
                  bytes it may hold (None / 0: libstoker's defaults)
    endpoint, region, profile  a remote dataset: the S3 endpoint URL, region and
                  ~/.aws profile (None: $AWS_ENDPOINT_URL, $AWS_REGION, $AWS_PROFILE,
                  the profile's, the defaults); remote_stats() counts its requests

    Iterating yields the batches from the current position to the end of its
    epoch (len(reader) batches from an epoch's start), as Batch dicts; the next
    iteration continues with the next epoch. Errors from libstoker raise
    stoker.Error with the library's message.

    Attributes: num_records (records in the dataset, all ranks together; a mixture's: the
    sum of its sources'), epoch_records (records an epoch: num_records, or a mixture's
    counts summed),
    classes (the manifest's class names: label i is classes[i]), field_names
    (every field, in schema order), metadata (the JSON object stoker.Writer
    or stoker.pack was given, or {}), and the effective options: batch_size,
    rank, world_size, threads, prefetch, order, seed, tail (auto resolved),
    device (after any fallback), output. stoker.torch.DataLoader wraps a
    Reader with PyTorch's DataLoader conventions.
    """

    def __init__(self, path, batch_size=256, order="sequential", seed=0, rank=None, world_size=None,
                 threads=0, prefetch=0, drop_last=False, fields=None, device=None, transform=None,
                 output=None, copy=False, debug=False, tail=None, shuffle=None, verify="off",
                 memory_budget=0, quasi_block_bytes=0, quasi_window=0, release_pages=-1,
                 device_fallback=False, stream=None, io="auto", io_depth=0, crop=None, ragged="list",
                 epoch_size=0, cache_dir=None, cache_limit=0, endpoint=None, region=None, profile=None,
                 trace=None, tuning="auto", tune_pin=None, threads_max=0, cpu_budget=0.0, read_once=False):
        self._r = None
        self._h = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._lease = None
        if shuffle is not None:
            order = "shuffle" if shuffle else order
        if order not in L.ORDERS:
            raise ValueError(f"order {order!r}: sequential, shuffle or quasi")
        if tail is None:
            tail = "drop" if drop_last else "pad"
        elif drop_last and tail != "drop":
            raise ValueError(f"drop_last=True contradicts tail={tail!r}")
        if tail not in L.TAILS:
            raise ValueError(f"tail {tail!r}: pad, drop, partial or auto")
        if ragged not in ("list", "pad"):
            raise ValueError(f"ragged {ragged!r}: list or pad")
        self.ragged = ragged
        if verify not in L.VERIFY:
            raise ValueError(f"verify {verify!r}: off, once or always")
        if io not in L.IO:
            raise ValueError(f"io {io!r}: auto, mmap or direct")
        if tuning not in L.STK_TUNING:
            raise ValueError(f"tuning {tuning!r}: auto, on or off")
        pin = _tune_pin(tune_pin)
        if transform is not None and not isinstance(transform, Transform):
            raise TypeError("transform: a stoker.Transform")
        if crop is not None:
            if transform is not None:
                raise ValueError("crop= is a transform of its own: give crop or transform, not both")
            transform = _crop_transform(crop)
        try:
            batch_size = operator.index(batch_size)  # numpy and torch integers too
        except TypeError:
            raise ValueError(f"batch_size {batch_size!r}: an int >= 1") from None
        if not 1 <= batch_size < 2 ** 32:
            raise ValueError(f"batch_size {batch_size!r}: an int >= 1")
        dev, dev_index, torch_dev = _device_arg(device)
        if output is None:
            output = "torch" if dev == L.DEVICE_CUDA else "numpy"
        if output not in ("numpy", "torch"):
            raise ValueError(f"output {output!r}: numpy or torch")
        if dev == L.DEVICE_CUDA and output != "torch":
            raise ValueError("device cuda yields torch tensors: output='torch'")
        if output == "torch":
            importlib.import_module("torch")  # fail here, not at the first batch
        if rank is None and world_size is None:
            rw = _dist_rank_world()
            if rw:
                rank, world_size = rw
        if isinstance(fields, (list, tuple)):
            fields = ",".join(fields)
        sources = None
        if isinstance(path, (list, tuple)):
            sources = [x if isinstance(x, Source) else Source(x) for x in path]
            if not sources:
                raise ValueError("stoker.Reader: an empty list of sources")

        o = L.padded(L.Options)
        L.stk_reader_options_init(ctypes.addressof(o))
        o.batch_size = batch_size
        o.order = L.ORDERS[order]
        o.seed = int(seed) & (2 ** 64 - 1)
        o.rank = -1 if rank is None else int(rank)
        o.world_size = -1 if world_size is None else int(world_size)
        o.threads, o.prefetch = int(threads), int(prefetch)
        o.tail, o.verify = L.TAILS[tail], L.VERIFY[verify]
        self._fields_c = fields.encode() if fields is not None else None
        o.fields = self._fields_c
        o.memory_budget, o.quasi_block_bytes, o.quasi_window = int(memory_budget), int(quasi_block_bytes), int(quasi_window)
        o.release_pages = int(release_pages)
        o.io, o.io_depth = L.IO[io], int(io_depth)
        o.read_once = 1 if read_once else 0
        o.epoch_size = int(epoch_size)
        o.tuning, o.tune_pin = L.STK_TUNING[tuning], pin
        o.threads_max, o.cpu_budget = int(threads_max), float(cpu_budget)
        # kept alive with the reader's options: libstoker reads them at open
        self._remote_c = [None if v is None else os.fsencode(v) for v in (cache_dir, endpoint, region, profile)]
        o.cache_dir, o.endpoint, o.region, o.profile = self._remote_c
        o.cache_limit = int(cache_limit)
        o.trace = os.fsencode(trace) if trace is not None else None  # the library copies it at open
        o.device, o.device_index, o.device_fallback = dev, dev_index, 1 if device_fallback else 0
        self._stream_handle = None
        if dev == L.DEVICE_CUDA:
            import torch
            if stream is None and torch.cuda.is_available():
                stream = torch.cuda.current_stream(dev_index)
            handle = getattr(stream, "cuda_stream", stream)
            self._stream_obj = stream  # the stream must outlive the C reader (close waits on it)
            self._stream_handle = int(handle) if handle is not None else 0
            o.stream = self._stream_handle or None
        elif stream is not None:
            raise ValueError("stream: only for device cuda")
        if transform is not None:
            self._xform_c = transform._c()
            o.transform = ctypes.cast(ctypes.addressof(self._xform_c), ctypes.POINTER(L.Transform))

        err = L.Error_()
        if sources is None:
            r = L.stk_reader_open(os.fsencode(path), ctypes.addressof(o), ctypes.byref(err))
        else:
            r = self._open_mix(sources, o, err)
        if not r:
            L.raise_error(err)
        self._r = r
        self._h = _Handle(r, getattr(self, "_stream_obj", None))
        _open_readers.add(self)
        eff = L.stk_reader_get_options(r).contents
        self.sources = sources  # None for one dataset
        self.path = os.fspath(path) if sources is None else [x.path for x in sources]
        self.batch_size, self.rank, self.world_size = eff.batch_size, eff.rank, eff.world_size
        self.threads, self.prefetch = eff.threads, eff.prefetch
        self.order, self.seed, self.tail, self.verify = order, o.seed, L.TAIL_NAMES[eff.tail], verify
        self.device = L.DEVICE_NAMES.get(eff.device, str(eff.device))  # after any fallback
        self.num_records = L.stk_dataset_records(L.stk_reader_dataset(r))  # a mixture: its sources' sum
        self.epoch_records = self.num_records if sources is None else sum(
            d["per_epoch"] for d in self.source_stats())  # records an epoch (positions, all ranks together)
        sc = L.stk_dataset_schema(L.stk_reader_dataset(r)).contents
        self._codecs = {sc.fields[i].name.decode(): sc.fields[i].codec for i in range(sc.nfields)}
        self.field_names = list(self._codecs)  # every field of the dataset, in schema order
        pack = self._manifest().get("pack") or {}
        kinds = pack.get("fields") if isinstance(pack.get("fields"), dict) else {}
        self._strings = {n for n, k in kinds.items() if k == "string"}  # stoker.String fields (stoker.Writer)
        self.metadata = pack.get("metadata") if isinstance(pack.get("metadata"), dict) else {}
        self._nbatches = L.stk_reader_batches_per_epoch(r)
        self._torch = output == "torch"
        self._cuda = eff.device == L.DEVICE_CUDA
        self._torch_device = None
        if self._cuda:
            import torch
            self._torch_device = torch.device("cuda", eff.device_index)
        self.output, self.copy, self.debug = output, bool(copy), bool(debug)
        self._epoch, self._batch = self.position()
        self._last_epoch = None  # the epoch of the batch last returned (crop_box's default)

    # ------------------------------------------------------------ plumbing
    @staticmethod
    def _open_mix(sources, o, err):
        arr = (L.Source * len(sources))()
        keep = []
        for c, x in zip(arr, sources):
            L.stk_source_init(ctypes.addressof(c))
            keep.append(os.fsencode(x.path))
            c.path = keep[-1]
            c.kind, c.value = L.MIX_KINDS[x.kind], x.value
            c.order = -1 if x.order is None else L.ORDERS[x.order]
        return L.stk_reader_open_mix(arr, len(sources), ctypes.addressof(o), ctypes.byref(err))

    def _handle(self):
        """The C reader's owner, for one call: the caller keeps it in a local for the
        duration, so a close() from another thread cannot free the C reader under the
        call (it is freed when the last reference goes)."""
        h = self._h
        if h is None or self._r is None:
            raise ValueError("stoker.Reader: the reader is closed")
        if os.getpid() != self._pid:
            raise RuntimeError("stoker.Reader: used in a forked child; its worker threads live in the parent "
                               "(open a reader in each process)")
        return h

    def _expire(self):
        if self._lease is not None:
            self._lease.expire()
            self._lease = None

    def close(self):
        """Close the reader: stop the workers, unmap the dataset, free the slots. Batches
        expire. When arrays or tensors of this reader are still referenced, the C reader
        is closed when the last of them goes (so a view never points at unmapped memory)."""
        if self._r is None:
            return
        with self._lock:
            self._expire()
            self._r = None
            self._h = None  # the last reference, unless a view holds one

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------ iteration
    def __len__(self):
        """Batches per epoch on this rank (the same on every rank)."""
        self._handle()
        return self._nbatches

    def __iter__(self):
        while True:
            b = self.next_batch()
            if b is None:
                return
            yield b
            if b.index + 1 >= self._nbatches:
                return

    def next_batch(self):
        """The next batch of the endless stream (it crosses epochs), or None at the
        end of the stream set with set_epochs(). Expires the batch before."""
        h = self._handle()  # noqa: F841 (keeps the C reader alive during the call)
        r = h.r
        with self._lock:
            if self._h is not h:  # closed by another thread while this one waited for the lock
                raise ValueError("stoker.Reader: the reader is closed")
            self._expire()
            err = L.Error_()
            p = L.stk_reader_next(r, ctypes.byref(err))
            if not p:
                if err.code:
                    L.raise_error(err)
                return None
            b = p.contents
            out = self._wrap(b)
            self._epoch, self._batch = b.epoch, b.index + 1
            self._last_epoch = b.epoch
            if self._batch == self._nbatches:
                self._epoch, self._batch = self._epoch + 1, 0
            return out

    def _wrap(self, b):
        out = Batch()
        out.epoch, out.index, out.size = b.epoch, b.index, b.size
        n = b.size
        out.records = (np.frombuffer((ctypes.c_char * (8 * n)).from_address(b.records), np.uint64).copy()
                       if n else np.empty(0, np.uint64))
        out.sources = out.source_records = None
        if b.sources:
            out.sources = np.frombuffer((ctypes.c_char * (4 * n)).from_address(b.sources), np.uint32).copy()
            out.source_records = np.frombuffer((ctypes.c_char * (8 * n)).from_address(b.source_records),
                                               np.uint64).copy()
        lease = None if self.copy else _Lease(b.epoch, b.index)
        out._lease = lease
        out.data_ptrs = {}
        out.lengths = {}
        out.zero_copy = False
        on_device = self._cuda and b.on_device
        if on_device and self.debug:
            import torch
            cur = torch.cuda.current_stream(self._torch_device).cuda_stream
            if int(cur) != self._stream_handle:
                raise RuntimeError(f"stoker.Reader(debug=True): the current CUDA stream ({cur:#x}) is not the "
                                   f"stream the reader was opened with ({self._stream_handle:#x}): the batch "
                                   "is only ordered on the latter")
        for k in range(b.nfields):
            f = b.fields[k]
            name = f.name.decode()
            if f.kind == L.STK_KIND_BYTES:
                vals = f.values
                out[name] = [ctypes.string_at(vals[i].data, vals[i].size) if vals[i].size else b""
                             for i in range(n)]
                if name in self._strings:
                    out[name] = [v.decode("utf-8") for v in out[name]]
                continue
            if f.kind == L.STK_KIND_ARRAY:
                codec = self._codecs.get(name)
                if self.ragged == "pad" and codec != L.STK_CODEC_JPEG:
                    out[name], out.lengths[name] = self._padded_field(b, k, f, n)
                else:
                    out[name] = self._array_field(b, k, f, n, codec)
                continue
            shape = tuple(f.shape[d] for d in range(f.ndim))
            out.data_ptrs[name] = f.data or 0
            out.zero_copy = out.zero_copy or bool(f.zero_copy)
            if on_device:
                out[name] = self._cuda_field(f, shape, lease)
            else:
                out[name] = self._host_field(f, shape, lease)
        if lease is not None:
            self._lease = lease
        return out

    def _array_field(self, b, k, f, n, codec):
        """A variable-shape field: one array per record (copied out of the mapping), shaped as stored;
        JPEG values come as their bytes (the image pipeline decodes them when a crop is asked for)."""
        vals = f.values
        if codec == L.STK_CODEC_JPEG:
            return [ctypes.string_at(vals[i].data, vals[i].size) for i in range(n)]
        nd = f.ndim - 1
        shapes = L.stk_batch_shapes(ctypes.addressof(b), k)
        dt = _NP[f.dtype]
        out = []
        for i in range(n):
            shape = tuple(shapes[i * nd + d] for d in range(nd))
            a = np.empty(shape, dt)  # owned: one copy out of the mapping (its size checked by the C reader)
            if a.nbytes:
                ctypes.memmove(a.ctypes.data, vals[i].data, a.nbytes)
            out.append(self._to_torch(a, f.dtype) if self._torch else a)
        return out

    def _padded_field(self, b, k, f, n):
        """A variable-shape field as one array [n, *max shape], zero-filled past each record's extent,
        and the per-record sizes of its variable dimensions, [n, number of them] int64."""
        nd = f.ndim - 1
        shapes = L.stk_batch_shapes(ctypes.addressof(b), k)
        sh = np.array([[shapes[i * nd + d] for d in range(nd)] for i in range(n)], np.int64).reshape(n, nd)
        var = [d for d in range(nd) if f.shape[d + 1] == 0]  # the batch field shows 0 for them
        top = tuple(int(sh[:, d].max()) if n else 0 for d in range(nd))
        dt = _NP[f.dtype]
        out = np.zeros((n,) + top, dt)
        vals = f.values
        for i in range(n):
            shape = tuple(int(x) for x in sh[i])
            if not vals[i].size:
                continue
            a = np.frombuffer((ctypes.c_char * vals[i].size).from_address(vals[i].data), dt).reshape(shape)
            out[(i,) + tuple(slice(0, x) for x in shape)] = a
        lengths = np.ascontiguousarray(sh[:, var])
        if self._torch:
            import torch
            return self._to_torch(out, f.dtype), torch.from_numpy(lengths)
        return out, lengths

    def _to_torch(self, a, dtype):
        import torch
        return _torch_of(torch, a, dtype)

    def _host_field(self, f, shape, lease):
        dt = _NP[f.dtype]
        if f.data and f.nbytes:
            mem = (ctypes.c_char * f.nbytes).from_address(f.data)
            mem._reader = self._h  # the C reader (mapping, slots) outlives every view: stale, never dangling
            view = np.frombuffer(mem, dt).reshape(shape)
        else:
            view = np.empty(shape, dt)
        if self.copy or self.debug:
            raw = np.empty(view.nbytes, np.uint8)  # owned
            arr = raw.view(dt).reshape(shape)
            arr[...] = view
            if self.debug and lease is not None:
                lease.poison.append(_poison_host(raw, arr))
            view = arr
        if not self._torch:
            view.flags.writeable = False
            return view
        import torch
        t = _torch_of(torch, view, f.dtype)
        if self.debug and lease is not None and _TORCH_HOW[f.dtype] == "widen":  # a copy: poisoned too
            lease.poison.append(_poison_host(t.numpy().reshape(-1).view(np.uint8), None))
        return t

    def _cuda_field(self, f, shape, lease):
        import torch
        d, how = L.DTYPE[f.dtype], _TORCH_HOW[f.dtype]
        if f.data and f.nbytes:
            mem = _CudaMemory(f.data, shape, d.device, self._h)
            t = torch.as_tensor(mem, device=self._torch_device)
        else:
            t = torch.empty(shape, dtype=getattr(torch, np.dtype(d.device).name), device=self._torch_device)
        if how == "bfloat16":
            t = t.view(torch.bfloat16)
        elif how == "widen":  # read as signed, widened exactly on the device
            t = t.to(getattr(torch, d.torch)) & ((1 << 8 * np.dtype(d.device).itemsize) - 1)
        if self.copy or self.debug:
            if self.debug and lease is not None:
                raw = torch.empty(t.numel() * t.element_size(), dtype=torch.uint8, device=t.device)
                own = raw.view(t.dtype).view(t.shape)
                own.copy_(t)
                lease.poison.append(lambda raw=raw: raw.fill_(0xFF))
                return own
            return t.clone()
        return t

    # ------------------------------------------------------------ crop boxes
    def crop_box(self, record, height=None, width=None, epoch=None):
        """The crop box and flip of global record `record` (batch.records[i]) as the reader crops it
        under its transform (or crop=), as a stoker.CropBox: exactly the box of the stored
        height x width image that became the output (stk_reader_crop_box; a pure function of
        the transform, seed, epoch and record). Detection and keypoint labels move with the crop
        through it (CropBox.map_points). height, width None: the record's stored shape.
        epoch None: the epoch of the batch last returned (batch.epoch), before any the epoch the
        reader stands at. Raises ArgumentError without a transform."""
        h = self._handle()
        if (height is None) != (width is None):
            raise ValueError("stoker.Reader.crop_box: give height and width, or neither")
        if epoch is None:
            epoch = self._last_epoch if self._last_epoch is not None else self.position()[0]
        box = L.padded(L.CropBox)
        err = L.Error_()
        if L.stk_reader_crop_box(h.r, int(epoch), int(record), int(height or 0), int(width or 0),
                                 ctypes.addressof(box), ctypes.byref(err)):
            L.raise_error(err)
        return CropBox(box.x0, box.y0, box.w, box.h, bool(box.flip))

    # ------------------------------------------------------------ positions
    def position(self):
        """(epoch, batch) of the batch the next step returns."""
        e, b = ctypes.c_uint64(), ctypes.c_uint64()
        h = self._handle()
        L.stk_reader_position(h.r, ctypes.byref(e), ctypes.byref(b))
        return e.value, b.value

    def seek(self, epoch, batch=0):
        """The next batch will be `batch` of `epoch`. Expires the current batch."""
        h = self._handle()  # noqa: F841 (keeps the C reader alive during the call)
        r = h.r
        with self._lock:
            self._expire()
            err = L.Error_()
            if L.stk_reader_seek(r, int(epoch), int(batch), ctypes.byref(err)):
                L.raise_error(err)
            self._epoch, self._batch = int(epoch), int(batch)
            self._last_epoch = None

    def set_epoch(self, epoch):
        """PyTorch's set_epoch: go to the start of `epoch`, unless the reader is
        already in that epoch (at its start, or mid-epoch after load_state_dict),
        so that `for e in range(start, n): reader.set_epoch(e); for b in reader: ...`
        resumes where a saved state left off. seek(epoch, 0) always restarts."""
        self._handle()
        if int(epoch) != self._epoch:
            self.seek(epoch, 0)

    def set_epochs(self, epochs):
        """End the stream after `epochs` epochs (0: endless, the default); next_batch() then returns None."""
        h = self._handle()
        L.stk_reader_set_epochs(h.r, int(epochs))

    def state_dict(self):
        """The position (the batch the next step returns) and what defines the stream,
        as the JSON object of stk_reader_save_text (spec/ORDERS.md, "State"): plain ints
        and strings, for torch.save or json; a mixture's also names its sources and their
        weights. `shardread --state-in` reads it too."""
        h = self._handle()  # noqa: F841 (keeps the C reader alive during the call)
        r = h.r
        with self._lock:
            n = L.stk_reader_save_text(r, None, 0)
            buf = ctypes.create_string_buffer(n + 1)
            L.stk_reader_save_text(r, buf, len(buf))
        return json.loads(buf.value.decode())

    def load_state_dict(self, state, reweight=False):
        """Continue from a state_dict() (a dict or its JSON text) of a reader over the same
        dataset (or mixture), order, seed, global batch (batch_size x world_size) and tail;
        rank and world size may differ. reweight=True: a mixture whose sources are the same
        datasets but whose weights (kinds, values, orders, epoch size) changed goes on at the
        saved epoch and batch with the new weights (spec/ORDERS.md, "Mixtures"). Refusals
        raise ArgumentError with libstoker's message, naming the source that differs."""
        h = self._handle()  # noqa: F841 (keeps the C reader alive during the call)
        r = h.r
        text = state if isinstance(state, str) else json.dumps(state, separators=(",", ":"))
        data = text.encode()
        err = L.Error_()
        with self._lock:
            self._expire()
            if L.stk_reader_restore_text(r, data, len(data), 1 if reweight else 0, ctypes.byref(err)):
                L.raise_error(err)
            self._epoch, self._batch = self.position()
            self._last_epoch = None

    def source_stats(self):
        """Per source (one entry for one dataset): path, records, per_epoch (records it gives
        each epoch), samples and bytes delivered, busy_s (worker time, shared by bytes) and
        share (of the samples delivered), since open or reset_stats()."""
        h = self._handle()
        out = []
        n = L.stk_reader_sources(h.r)
        for i in range(n):
            s = L.padded(L.SourceStats)
            err = L.Error_()
            if L.stk_reader_source_stats_get(h.r, i, ctypes.addressof(s), ctypes.byref(err)):
                L.raise_error(err)
            d = {name: getattr(s, name) for name, _ in L.SourceStats._fields_}
            d["path"] = self.path[i] if self.sources is not None else self.path
            out.append(d)
        total = sum(d["samples"] for d in out)
        for d in out:
            d["share"] = d["samples"] / total if total else 0.0
        return out

    # ------------------------------------------------------------ statistics
    def _stats_c(self):
        s = L.padded(L.Stats)
        h = self._handle()
        L.stk_reader_stats_get(h.r, ctypes.addressof(s))
        return s

    def stats(self):
        """The reader's statistics since open or reset_stats(), as a dict: the fields of
        stk_reader_stats plus samples_per_s, gb_per_s, wait_fraction and verdict."""
        s = self._stats_c()
        d = {name: getattr(s, name) for name, _ in L.Stats._fields_}
        d["device"] = L.DEVICE_NAMES.get(s.device, str(s.device))
        wall = s.wall_s
        d["samples_per_s"] = s.samples / wall if wall > 0 else 0.0
        d["gb_per_s"] = s.bytes / wall / 1e9 if wall > 0 else 0.0
        d["wait_fraction"] = s.wait_s / wall if wall > 0 else 0.0
        d["verdict"] = self._verdict(s)
        return d

    def io_stats(self):
        """How records are read, as a dict: io ("mmap" or "direct"), engine ("io_uring",
        "threads" or "none"), depth, reads, bytes, retries, bounced_bytes, map_reads,
        buffered_files, quasi_blocks, filled_bytes (cold data read into the page cache ahead
        of the workers), read_once, and reason (why this path, and any fallback)."""
        s = L.padded(L.IoStats)
        h = self._handle()
        L.stk_reader_io_stats_get(h.r, ctypes.addressof(s))
        d = {name: getattr(s, name) for name, _ in L.IoStats._fields_}
        d["io"] = L.IO_NAMES.get(s.io, str(s.io))
        d["engine"] = L.IO_ENGINE_NAMES.get(s.engine, str(s.engine))
        d["reason"] = s.reason.decode(errors="replace")
        return d

    def tune_stats(self, log=16):
        """The online tuner, as a dict: the fields of stk_reader_tune_stats (on, threads,
        prefetch, io_depth now; threads_max, prefetch_max, io_depth_max; cpu_budget,
        trainer_cpu in cores; memory_budget; decisions, changes, period, settled) and
        "log": the latest `log` changes (at most 256), oldest first, each a dict of
        batch, t_s, threads, prefetch, io_depth and reason."""
        s = L.padded(L.TuneStats)
        h = self._handle()
        L.stk_reader_tune_stats_get(h.r, ctypes.addressof(s))
        d = {name: getattr(s, name) for name, _ in L.TuneStats._fields_}
        d["on"], d["settled"] = bool(s.on), bool(s.settled)
        cap = max(0, min(int(log), 256))
        ev = (L.TuneEvent * max(cap, 1))()
        n = L.stk_reader_tune_log(h.r, ev, cap) if cap else 0
        d["log"] = [{"batch": e.batch, "t_s": e.t_s, "threads": e.threads, "prefetch": e.prefetch,
                     "io_depth": e.io_depth, "reason": e.reason.decode(errors="replace")} for e in ev[:n]]
        return d

    def remote_stats(self):
        """A remote dataset's requests and cache, as a dict (the fields of
        stk_reader_remote_stats: remote, requests, bytes_fetched, retries, retries_5xx,
        retries_network, failures, gets, get_bytes, cache_hits, cache_hit_bytes,
        cache_stored_bytes, cache_rejected_bytes, checksum_refetches, inflight_max);
        remote is False and the rest 0 for a local dataset."""
        s = L.padded(L.RemoteStats)
        h = self._handle()
        L.stk_reader_remote_stats_get(h.r, ctypes.addressof(s))
        d = {name: getattr(s, name) for name, _ in L.RemoteStats._fields_}
        d["remote"] = bool(s.remote)
        return d

    def _manifest(self):
        """The manifest of the dataset (a mixture: of its first source) as parsed JSON:
        a local one read from its file, a remote one from the copy libstoker fetched."""
        first = self.path if self.sources is None else self.path[0]
        if not _is_remote(first):
            return _manifest(first)
        h = self._handle()
        ds = L.stk_reader_dataset(h.r)
        part = L.stk_dataset_manifest(ds)  # a mixture's concatenation has the first source's
        if not part:
            return {}
        m = part.contents
        out = {"classes": [m.classes[i].decode() for i in range(m.nclasses)]}
        try:
            out["pack"] = json.loads(m.pack_json.decode()) if m.pack_json else {}
        except ValueError:
            out["pack"] = {}
        return out

    def _verdict(self, s):
        buf = ctypes.create_string_buffer(512)
        n = L.stk_reader_verdict(ctypes.addressof(s), buf, len(buf))
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            L.stk_reader_verdict(ctypes.addressof(s), buf, len(buf))
        return buf.value.decode()

    def verdict(self):
        """One line: "input-bound: 37% of wall time spent waiting for data (threads=2; try 4)" or "not input-bound: ...";
        for a mixture a second line with each source's share of the samples and of the workers' time."""
        v = self._verdict(self._stats_c())
        h = self._handle()
        buf = ctypes.create_string_buffer(1024)
        if L.stk_reader_verdict_sources(h.r, buf, len(buf)) > 0:
            v += "\n" + buf.value.decode(errors="replace")
        return v

    def diagnose(self):
        """What the numbers show, one line each (stk_reader_diagnose): "loader: ...", "workers: ..."
        (decode/crop, waiting for reads, copying), "trainer: ..." (or "no training step recorded"
        for a loop that never pauses between batches), "bound by: ..."."""
        h = self._handle()
        d = ctypes.create_string_buffer(4096)  # opaque: the library writes and reads this many bytes at most
        L.stk_reader_diag_get_sized(h.r, d, len(d))
        buf = ctypes.create_string_buffer(4096)
        n = L.stk_reader_diagnose_sized(d, len(d), buf, len(buf))
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            L.stk_reader_diagnose_sized(d, len(d), buf, len(buf))
        return buf.value.decode(errors="replace")

    def metrics(self):
        """The statistics as Prometheus text exposition (stk_reader_metrics)."""
        h = self._handle()
        n = L.stk_reader_metrics(h.r, None, 0)
        buf = ctypes.create_string_buffer(n + 512)
        L.stk_reader_metrics(h.r, buf, len(buf))
        return buf.value.decode()

    def reset_stats(self):
        h = self._handle()
        L.stk_reader_stats_reset(h.r)

    @property
    def classes(self):
        """The dataset's class names (the manifest's "classes"; label i is classes[i]), or [];
        a mixture's are its first source's (mix datasets of one label space)."""
        return list(self._manifest().get("classes") or [])

    def __repr__(self):
        state = "closed" if self._r is None else f"at epoch {self._epoch} batch {self._batch}"
        return (f"<stoker.Reader {self.path!r} batch_size={self.batch_size} order={self.order} "
                f"rank {self.rank}/{self.world_size} device={self.device} output={self.output}, {state}>")


def _is_remote(path):
    """A remote dataset's address (s3://, http://, https://), as libstoker tells them."""
    return isinstance(path, str) and path.startswith(("s3://", "http://", "https://"))


def _manifest(path):
    """The manifest of the dataset at `path` (its directory or manifest.json), as parsed JSON.
    libstoker has checked it when a reader opened; this reads what the binding shows beside it."""
    p = path if os.path.isfile(path) else os.path.join(path, "manifest.json")
    with open(p, "rb") as f:
        return json.load(f)


_open_readers = weakref.WeakSet()


@atexit.register
def _close_all():
    """Stop the workers of readers still open at exit, while the interpreter is whole."""
    for r in list(_open_readers):
        try:
            r.close()
        except Exception:
            pass


def _poison_host(raw, arr):
    def fill():
        raw.fill(0xFF)
        if arr is not None:
            arr.flags.writeable = False
    return fill


class _Handle:
    """Owns the C reader: stk_reader_close runs when the Reader is closed and no view
    (which holds a reference to this) remains."""
    __slots__ = ("r", "pid", "keep")

    def __init__(self, r, keep=None):
        self.r, self.pid = r, os.getpid()
        self.keep = keep  # the consumer's CUDA stream: it must outlive the C reader

    def __del__(self):
        r, self.r = self.r, None
        if r and os.getpid() == self.pid and L is not None:  # a forked child has no workers to join
            L.stk_reader_close(r)


class _CudaMemory:
    """Device memory of a batch field, for torch.as_tensor (__cuda_array_interface__
    version 2: no stream key, so torch does not synchronise; next() already made
    the consumer's stream wait for the batch's event). torch keeps this object
    alive as long as the tensor, and nothing calls back into Python."""
    __slots__ = ("__cuda_array_interface__", "_reader")

    def __init__(self, ptr, shape, typestr, reader):
        self._reader = reader  # the device buffers live while a tensor does
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "version": 2, "strides": None}



