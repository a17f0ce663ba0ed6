"""stoker: batches from packed datasets, for Python and PyTorch.

    import stoker
    reader = stoker.Reader("data/train", batch_size=256, order="shuffle", seed=1234,
                           fields="image,label", output="torch")
    for epoch in range(90):
        reader.set_epoch(epoch)
        for batch in reader:                      # one epoch, len(reader) batches
            x, y = batch["image"], batch["label"]   # [B, H, W, 3] uint8, [B] int64
            ...

A thin ctypes binding of libstoker (stoker/reader.h): the reader's worker
threads, the order, ranks, resume and the device upload are the C library's;
this package turns each batch into arrays without copying them.

The modules: reader.py (Reader, Batch, Transform, Source), writer.py (Writer and
the field kinds), _pack.py (pack, merge and their worker processes), torch.py
(stoker.torch.DataLoader, imported on first use), _lib.py (the C layouts and
the loading of libstoker). This file holds only the public names.

Lifetime of a batch. Arrays and tensors of a batch are views of memory the
reader owns (a slot of its ring, or the mapped shard itself for sequential
batches inside one shard). They are valid until the reader's next batch is
taken (the next step of the loop), or seek/set_epoch/load_state_dict/close.
After that the memory is reused for a later batch: an old view then shows
other records, silently. Keep what you need past the step with copy=True
(every batch owned), or `.copy()` (numpy) / `.clone()` (torch). Looking up a
field in an expired batch (`batch["image"]`) raises ExpiredBatchError. A
view holds a reference to the C reader, so after close() the reader is freed
when the last view goes: a stale view shows wrong records, never unmapped memory.
Views are read-only: numpy arrays are flagged so; torch has no read-only
tensors, and writing into a tensor of a zero-copy batch (memory mapped
read-only) crashes the process with SIGSEGV.
Reader(debug=True) catches use after expiry: every batch is copied into
buffers that are filled with 0xFF bytes when the batch expires (NaN in float
fields, -1 in signed integers, the maximum in unsigned ones; numpy arrays are
then read-only), on top of the ExpiredBatchError above; on CUDA it also checks
that the current stream is the one the reader was opened with.
"""
from ._lib import ArgumentError, Error
from ._lib import path as library_path
from ._lib import version as _version
from ._import import import_litdata, import_mds, import_webdataset
from ._pack import merge, pack
from .reader import Batch, CropBox, ExpiredBatchError, Reader, Source, Transform, cuda_available
from .writer import Bytes, Ragged, Scalar, String, Tensor, Writer

__version__ = _version()  # the release, written once: project(stoker VERSION ...) in CMakeLists.txt

__all__ = ["Reader", "Source", "Batch", "Transform", "CropBox", "Error", "ArgumentError", "ExpiredBatchError",
           "Writer", "Tensor", "Scalar", "Ragged", "Bytes", "String", "pack", "merge",
           "import_webdataset", "import_mds", "import_litdata",
           "cuda_available", "library_path", "__version__"]


def __getattr__(name):
    """stoker.torch (the DataLoader) is imported on first use: `import stoker` imports no torch."""
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
