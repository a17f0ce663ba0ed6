"""stoker.torch: PyTorch's DataLoader conventions over a packed dataset.

    import stoker.torch
    loader = stoker.torch.DataLoader("data/train", batch_size=256, shuffle=True, num_workers=8,
                                     drop_last=True, transform=stoker.Transform.imagenet(train=True))
    for epoch in range(start_epoch, 90):
        loader.sampler.set_epoch(epoch)          # optional, as with a DistributedSampler
        for image, label in loader:              # [B, 3, 224, 224] float32, [B] int64
            ...
        torch.save({"model": model.state_dict(), "loader": loader.state_dict()}, "ckpt.pt")

A stoker.Reader underneath does the work (C worker threads, the orders of
spec/ORDERS.md, ranks, the transform, the device upload); this module gives
it the DataLoader's surface: tuples of torch tensors, len() in batches,
.dataset / .sampler / .batch_sampler, collate_fn on the whole batch,
pin_memory, and each iter() a new epoch. Where the plain Reader continues
its stream (a `for` after a `break` finishes the old epoch), a DataLoader
starts a new epoch at every iter(); a loaded state is the one exception: the
next iter() continues from it.

Resume follows torchdata's StatefulDataLoader: state_dict() describes the
last iterator (or the next one, before any iter()), load_state_dict() the
next; {} loads nothing. checkpoint_dir= (or $STOKER_CHECKPOINT_DIR) makes the
loader save its own position where the script saves its model (at epoch
ends, or every checkpoint_every batches where the script says it saves
there) and restore it when it opens: see DataLoader's checkpoint_dir.

Batches are zero-copy views, as the Reader's: valid until the next batch is
taken (copy=True, pin_memory=True, a device, or a collate_fn that makes new
tensors give batches that stay valid). `import stoker.torch` imports torch
only when a DataLoader is made.
"""
import json
import os
import warnings

from ._lib import ArgumentError
from .reader import Reader, Transform, _manifest

__all__ = ["DataLoader", "Dataset", "ResumeWarning", "ENV_CHECKPOINT_DIR", "ENV_CHECKPOINT_EVERY"]

ENV_CHECKPOINT_DIR = "STOKER_CHECKPOINT_DIR"      # checkpoint_dir for loaders that shuffle
ENV_CHECKPOINT_EVERY = "STOKER_CHECKPOINT_EVERY"  # the script's model saves, in batches of an epoch (default: none)
STATE_VERSION = 1
_STATE_KEYS = ("stoker_loader_state", "epoch", "_num_yielded", "_iterator_finished", "reader")
CHECKPOINT_VERSION = 2   # the checkpoint_dir file: {"stoker_loader_checkpoint", "saved", "maybe", "every"}


class ResumeWarning(UserWarning):
    """A restart from checkpoint_dir that this loader cannot make exact for the
    model (or that drops the saved position because set_epoch() says so)."""


class Dataset:
    """What DataLoader.dataset is: the packed dataset as a torchvision-style
    dataset. len() is its record count (all ranks), `classes` the manifest's
    class names (label i is classes[i]), `class_to_idx` their inverse, `path`,
    `fields` (every field, in schema order). Records are read through the
    loader, not by index."""

    def __init__(self, reader):
        self.path = reader.path
        self.num_records = reader.num_records
        self.classes = reader.classes
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.fields = list(reader.field_names)

    def __len__(self):
        return self.num_records

    def __repr__(self):
        return f"<stoker.torch.Dataset {self.path!r}: {self.num_records} records, {len(self.classes)} classes>"


class _Sampler:
    """DataLoader.sampler: the shim scripts call set_epoch() on (as on a
    DistributedSampler). len() is the records this rank reads per epoch."""

    def __init__(self, loader):
        r = loader.reader
        self._loader = loader
        self.num_replicas, self.rank, self.seed = r.world_size, r.rank, r.seed
        self.shuffle, self.drop_last = r.order != "sequential", r.tail == "drop"
        n, b, g = r.epoch_records, r.batch_size, r.batch_size * r.world_size
        if r.tail == "drop":
            self._len = n // g * b
        elif r.tail == "pad":
            self._len = len(r) * b
        else:  # partial: this rank's slice of the short last global batch
            self._len = n // g * b + min(b, max(0, n - n // g * g - r.rank * b))

    def set_epoch(self, epoch):
        self._loader.set_epoch(epoch)

    @property
    def epoch(self):
        return self._loader.epoch

    def __len__(self):
        return self._len

    def __repr__(self):
        return f"<stoker.torch sampler shim: rank {self.rank}/{self.num_replicas}, {len(self)} records per epoch>"


class _BatchSampler:
    """DataLoader.batch_sampler: len() batches per epoch, batch_size, drop_last, sampler."""

    def __init__(self, loader):
        self.sampler, self.batch_size, self.drop_last = loader.sampler, loader.batch_size, loader.drop_last
        self._len = len(loader)

    def __len__(self):
        return self._len


class _Iter:
    """One epoch of the loader (what iter(loader) returns)."""
    __slots__ = ("_loader", "epoch", "_n", "_yielded", "_finished", "_k0")

    def __init__(self, loader, epoch, n, yielded):
        self._loader, self.epoch, self._n = loader, epoch, n
        self._yielded, self._finished, self._k0 = yielded, False, yielded

    def __iter__(self):
        return self

    def __len__(self):
        return self._n

    def __next__(self):
        return self._loader._next(self)


def _rank_batches(r):
    """Batches per epoch on this rank: the reader's, except that with tail "partial" across ranks a
    rank stops after its last non-empty batch (global batch j gives rank r positions from
    j*G + r*B; it is empty once that is >= N), so a rank may get one batch fewer than another
    (or none, when the dataset is smaller than r*B), never an empty one."""
    n = len(r)
    if r.tail != "partial" or r.world_size == 1:
        return n
    first = r.rank * r.batch_size
    g = r.batch_size * r.world_size
    return min(n, max(0, -(-(r.epoch_records - first) // g)))


def _pin(x, device):
    import torch
    if isinstance(x, torch.Tensor):
        return x.pin_memory(device) if device else x.pin_memory()
    if isinstance(x, tuple):
        return tuple(_pin(v, device) for v in x)
    if isinstance(x, list):
        return [_pin(v, device) for v in x]
    if isinstance(x, dict):
        return type(x)((k, _pin(v, device)) for k, v in x.items())
    return x


def _default_fields(path):
    """image,label when the dataset has both, else its first two fields (or its one)."""
    if isinstance(path, list):  # a mixture: its sources share the fields read
        path = path[0] if isinstance(path[0], (str, os.PathLike)) else path[0].path
    try:
        names = [f["name"] for f in _manifest(path)["schema"]]
    except Exception:  # no readable manifest: the Reader's open says what is wrong with it
        return None
    if "image" in names and "label" in names:
        return ("image", "label")
    return tuple(names[:2])


def _atomic_write(path, text):
    """Write `text` to `path` so that a crash at any moment leaves the old file or the new one, whole."""
    d = os.path.dirname(path) or "."
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DataLoader:
    """torch.utils.data.DataLoader's conventions over a packed dataset.

    dataset       a packed dataset (its directory or manifest.json), a list of
                  stoker.Source (a mixture, see stoker.Reader), or an open
                  stoker.Reader (output="torch"), whose options then rule: give
                  none of batch_size .. device below
    batch_size    records per batch on this rank (default 1)
    shuffle       True: order="shuffle", a new permutation per epoch, seeded by
                  (seed, epoch); default False (sequential)
    num_workers   the reader's worker threads (0 means 1: stoker always reads
                  on its own threads; None, the default: the online CPUs, at
                  most 8). No worker processes. With tuning on (the default,
                  see stoker.Reader) it is where the tuner starts and the most
                  threads it may run (threads_max).
    collate_fn    called on the whole batch (the tuple or dict this loader
                  would yield) and what it returns is yielded: mixup/cutmix,
                  casts. Default: none.
    pin_memory    copy each batch into pinned memory (where CUDA is available;
                  a no-op otherwise, as the batches then have nowhere to go)
    drop_last     drop the incomplete last global batch (tail="drop"); wins
                  over the tail default below
    generator     a torch.Generator: its initial_seed() is the seed unless
                  seed= is given
    prefetch_factor  batches prepared ahead per worker (needs num_workers;
                  default 2)
    persistent_workers, multiprocessing_context  accepted and ignored (the
                  threads persist; there are no processes). sampler,
                  batch_sampler, worker_init_fn and a timeout are refused:
                  stoker orders and shards the records itself.
    seed          seed of the shuffled orders (default 0)
    transform     a stoker.Transform (Transform.imagenet(train=True)): run by
                  the worker threads, or on the GPU with device="cuda"
    device        None/"cpu": host tensors; "cuda", "cuda:N", a torch.device:
                  the reader uploads (and transforms) on the device
    fields        the fields to yield, in this order: a tuple/list (a tuple
                  per batch) or one name (the tensor alone). Default: image and
                  label when the dataset has both, else its first two fields
                  (as_dict: every field)
    as_dict       yield {field: tensor} dicts instead of tuples
    copy          every batch's tensors owned (valid forever); default: views
                  valid until the next batch is taken
    tail          default: "drop" with drop_last, else "auto": "pad" across
                  ranks (world size > 1, as DistributedSampler), "partial" in
                  one process (the last batch short, as DataLoader).
                  "partial" across ranks: every record once over all ranks
                  (an exact distributed evaluation); a rank's last batch may
                  be short and a rank may get one batch fewer than another
                  (len() per rank), never an empty batch
    order, rank, world_size, verify, io, crop, debug, ... : as stoker.Reader
                  (rank and world size from torch.distributed when a process
                  group is initialised, else $RANK/$WORLD_SIZE)
    checkpoint_dir  keep the loader's position in DIR/stoker-NAME.rankR.json
                  (written atomically) at the points where the script saves
                  its model, and continue from it when a loader opens, so that
                  the restored model trains on every batch of every epoch once,
                  each under the epoch of the script's loop (README, "Resume").
                  Default: $STOKER_CHECKPOINT_DIR, for loaders that shuffle
                  (training, not evaluation); False: never.
    checkpoint_every  N: the script also saves its model after every N-th
                  batch of an epoch (when i + 1 is a multiple of N, i from
                  loader.enumerate()), not only after each epoch's loop.
                  Default $STOKER_CHECKPOINT_EVERY, else none: the script
                  saves after each epoch's loop (or never), and a restart
                  begins the epoch its model is in.
    checkpoint_name  NAME above (default: the dataset directory's name)

    Epochs: every iter() starts the next epoch (the first is 0), or the one
    named by set_epoch() / sampler.set_epoch() since the last iter(). After
    load_state_dict() the next iter() continues from that exact position
    instead, unless set_epoch() names another epoch; after a checkpoint_dir
    file found at open, from where the script's model was saved, set_epoch()
    deciding where only it can (a ResumeWarning says what was done where
    neither can tell). len(loader) is batches per epoch on this rank,
    len(loader.dataset) records in the dataset.
    """

    def __init__(self, dataset, batch_size=None, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=None, collate_fn=None, pin_memory=False, drop_last=None, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *, prefetch_factor=None,
                 persistent_workers=False, pin_memory_device="", seed=None, transform=None, device=None,
                 fields=None, as_dict=False, copy=None, checkpoint_dir=None, checkpoint_every=None,
                 checkpoint_name=None, **reader_options):
        import torch  # (here, not at `import stoker.torch`)
        # the wait for each batch, as a range of a PyTorch profiler trace
        # (next to the model's ops); without a profiler running it costs a
        # check of a flag
        self._record = torch.profiler.record_function
        self.reader = None
        self._own = False
        if sampler is not None or batch_sampler is not None:
            raise ValueError("stoker.torch.DataLoader: no sampler or batch_sampler: stoker orders the records "
                             "itself (shuffle=True, or order=) and shards them across ranks (rank and world "
                             "size from torch.distributed); loader.sampler.set_epoch() is still there")
        if worker_init_fn is not None:
            raise ValueError("stoker.torch.DataLoader: no worker_init_fn: the workers are C threads that run no "
                             "Python; the shuffle and the random crops are seeded by seed= and the epoch")
        if timeout:
            raise ValueError("stoker.torch.DataLoader: timeout is not supported (a batch is waited for)")
        if transform is not None and not isinstance(transform, Transform):
            raise TypeError("transform: a stoker.Transform (run by the reader's threads or the GPU); for "
                            "Python code on each batch use collate_fn")
        if prefetch_factor is not None and not num_workers:
            raise ValueError("prefetch_factor needs num_workers >= 1 (as DataLoader)")
        if seed is None and generator is not None:
            seed = generator.initial_seed()

        if isinstance(dataset, Reader):
            given = dict(batch_size=batch_size, shuffle=shuffle, num_workers=num_workers, drop_last=drop_last,
                         seed=seed, transform=transform, device=device, copy=copy,
                         prefetch_factor=prefetch_factor, **reader_options)
            named = [k for k, v in given.items() if v is not None]
            if named:
                raise ValueError(f"stoker.torch.DataLoader over an open Reader: {', '.join(named)} belong to "
                                 "the Reader: set them when opening it")
            if dataset.output != "torch":
                raise ValueError("stoker.torch.DataLoader over a Reader: open it with output='torch'")
            self.reader = dataset
        else:
            mix = isinstance(dataset, (list, tuple))  # a mixture: stoker.Source objects or paths
            self.reader = self._open(list(dataset) if mix else os.fspath(dataset), batch_size, shuffle, num_workers, drop_last, seed,
                                     transform, device, copy, prefetch_factor, fields, as_dict, reader_options)
            self._own = True
        r = self.reader
        if fields is None and not as_dict:
            fields = _default_fields(r.path) or tuple(r.field_names[:2])
        self._single = isinstance(fields, str) and "," not in fields
        if fields is None:
            fields = tuple(r.field_names) if r._fields_c is None else tuple(r._fields_c.decode().split(","))
        elif isinstance(fields, str):
            fields = tuple(fields.split(","))
        self.fields = tuple(fields)
        self.as_dict = bool(as_dict)
        self.collate_fn = collate_fn
        self.pin_memory = bool(pin_memory)
        self.pin_memory_device = pin_memory_device
        self._pin = self.pin_memory and not r._cuda and torch.cuda.is_available()
        self.batch_size, self.drop_last = r.batch_size, r.tail == "drop"
        self.num_workers = r.threads
        self.generator, self.persistent_workers = generator, bool(persistent_workers)
        self.multiprocessing_context, self.timeout, self.worker_init_fn = multiprocessing_context, 0, None
        self.prefetch_factor = prefetch_factor
        self.rank, self.world_size, self.tail = r.rank, r.world_size, r.tail
        self.dataset = Dataset(r)
        self._n = _rank_batches(r)
        self.sampler = _Sampler(self)
        self.batch_sampler = _BatchSampler(self)
        self._it = None          # the iterator state_dict() describes
        self._set = None         # set_epoch() since the last iter()
        e, b = r.position()      # the next iter() continues where the reader stands (epoch 0, batch 0)
        self._pending = (e, b, False)
        self._next_epoch = e + 1
        self._resume = None      # a checkpoint_dir file's open question, settled by the next iter()
        self._ck_saved = None    # the loader state of the last position the script surely saved at
        self._ck_text = None     # the checkpoint file's content as last written or read
        self._ckpt = self._checkpoint_path(checkpoint_dir, checkpoint_name)
        self._ckpt_every = self._checkpoint_every(checkpoint_every)
        if self._ckpt and os.path.exists(self._ckpt):
            self._restore_checkpoint()

    def _open(self, path, batch_size, shuffle, num_workers, drop_last, seed, transform, device, copy,
              prefetch_factor, fields, as_dict, opts):
        order = opts.pop("order", None)
        if order is None:
            order = "shuffle" if shuffle else "sequential"
        elif shuffle is not None and bool(shuffle) != (order != "sequential"):
            raise ValueError(f"shuffle={shuffle!r} contradicts order={order!r}")
        drop_last = bool(drop_last)
        tail = opts.pop("tail", None)
        if tail is None:
            tail = "drop" if drop_last else "auto"
        threads = 0 if num_workers is None else max(1, int(num_workers))
        if threads and "threads_max" not in opts:
            opts["threads_max"] = threads  # the user's upper bound: the tuner may use fewer
        prefetch = opts.pop("prefetch", 0)
        if prefetch_factor is not None:
            prefetch = int(prefetch_factor) * threads
        if fields is None and not as_dict:
            fields = _default_fields(path)
        if isinstance(fields, (list, tuple)):
            fields = ",".join(fields)
        return Reader(path, batch_size=1 if batch_size is None else batch_size, order=order,
                      seed=0 if seed is None else seed, threads=threads, prefetch=prefetch, drop_last=drop_last,
                      tail=tail, fields=fields, device=device, transform=transform, output="torch",
                      copy=bool(copy), **opts)

    # ------------------------------------------------------------ epochs
    def __len__(self):
        """Batches per epoch on this rank: the same on every rank, except with tail="partial"
        across ranks, where a rank whose share of the last global batch is empty has one fewer."""
        return self._n

    @property
    def epoch(self):
        """The epoch of the last iter(); after load_state_dict() or a restore, and
        before any iter(), the epoch the next iter() yields."""
        if self._it is None or self._pending is not None:
            return self._plan()[0]
        return self._it.epoch

    def set_epoch(self, epoch):
        """The next iter() starts `epoch` (DistributedSampler.set_epoch), unless a state
        was just loaded for that same epoch: then it continues from that position."""
        self._set = int(epoch)

    def _plan(self):
        """(epoch, batch, warning or None): where the next iter() starts."""
        p, want = self._pending, self._set
        if self._resume is not None:
            return self._plan_restart(p, want, self._resume[1])
        if p is not None and not p[2] and (want is None or want == p[0]):
            return p[0], p[1], None               # continue the loaded position
        if want is not None:
            return want, 0, None
        if p is not None:
            return p[0] + 1, 0, None              # a finished epoch was loaded
        return self._next_epoch, 0, None

    def _plan_restart(self, p, want, maybe):
        """The first iter() after a checkpoint_dir file was restored. The file holds
        `saved`, where the script surely saved its model (p), and `maybe`, a later
        save point it may or may not have reached: the end of epoch em's loop (its
        save comes after the loop) or its save after batch km - 1 (checkpoint_every).
        set_epoch() settles an epoch end; where nothing settles it, the earlier point
        is taken (a model that did save repeats batches; one that did not loses none)."""
        es, ks, f = p[0], p[1], self._ckpt
        if maybe is None:
            if want is None or want == es:
                return es, ks, None
        elif maybe[2] == "end":
            em = maybe[0]
            if want == em:               # the script repeats epoch em: its save of it was not written
                return es, ks, None
            if want == em + 1:           # the script's checkpoint of epoch em was written
                return em + 1, 0, None
            if want is None:
                return es, ks, (f"{f}: stopped after epoch {em}'s loop ended and before the next began; without "
                                f"set_epoch() this loader cannot tell whether the script saved its checkpoint of "
                                f"epoch {em}, so it repeats epoch {em} from batch {ks} (right if it did not): call "
                                "loader.set_epoch(epoch) before each epoch's loop to make restarts exact")
        else:
            em, km, _ = maybe
            if want is None or want == em:
                return es, ks, (f"{f}: stopped after batch {km - 1} of epoch {em} was handed out and before the "
                                f"loop asked for the next: this loader cannot tell whether the script's save after "
                                f"it (checkpoint_every={self._ckpt_every}) was written, so it continues from batch "
                                f"{ks} (if it was, the model trains on batches {ks}..{km - 1} twice): save "
                                "loader.state_dict() with the model, and call set_epoch(), for exact restarts")
        return want, 0, (f"{f}: set_epoch({want}) while the saved position is batch {ks} of epoch {es}: "
                         f"starting epoch {want} from its first batch, as set_epoch() asks (a script that "
                         "restarts without a checkpoint of its own); the saved position is dropped")

    def __iter__(self):
        r = self.reader
        e, k, msg = self._plan()
        self._pending = self._set = self._resume = None
        if msg:
            warnings.warn(f"stoker.torch.DataLoader: {msg}", ResumeWarning, stacklevel=2)
        if k < self._n and r.position() != (e, k):
            r.seek(e, k)
        self._next_epoch = e + 1
        self._it = _Iter(self, e, self._n, k)
        if self._ckpt:
            self._commit()   # the loop starts: the script is past any save before it
        return self._it

    def enumerate(self, start=0):
        """(batch index within the epoch + start, batch) pairs, counting a resumed
        epoch's batches from where it resumed (StatefulDataLoader.enumerate)."""
        it = iter(self)
        for batch in it:
            yield it._yielded - 1 + start, batch

    def _next(self, it):
        if it is not self._it:
            raise RuntimeError("stoker.torch.DataLoader: this iterator was replaced by a later iter(loader) or "
                               "load_state_dict(); the reader serves one epoch at a time")
        if it._finished:
            raise StopIteration
        k = it._yielded
        every = self._ckpt_every
        if every and self._ckpt and k % every == 0 and k > it._k0:
            self._commit()      # the loop asks for batch k: the script's save after batch k-1 is written
        if k >= it._n:
            it._finished = True
            if self._ckpt:
                self._commit((it.epoch, k, "end"))  # the loop is over; the script's save of the epoch comes next
            raise StopIteration
        with self._record("stoker.wait"):
            b = self.reader.next_batch()
        if b is None:                   # the Reader's set_epochs() ended the stream
            it._finished = True
            raise StopIteration
        if b.epoch != it.epoch or b.index != k:
            raise RuntimeError(f"stoker.torch.DataLoader: expected batch {k} of epoch {it.epoch}, the reader gave "
                               f"batch {b.index} of epoch {b.epoch}: was the Reader moved under the loader?")
        it._yielded = k + 1
        if every and self._ckpt and (k + 1) % every == 0:
            self._commit((it.epoch, k + 1, "step"))  # the script saves after this batch, or has not yet
        get = dict.__getitem__  # the batch is fresh: skip Batch's expiry check
        if self.as_dict:
            out = {f: get(b, f) for f in self.fields}
        elif self._single:
            out = get(b, self.fields[0])
        else:
            out = tuple(get(b, f) for f in self.fields)
        if self.collate_fn is not None:
            out = self.collate_fn(out)
        if self._pin:
            out = _pin(out, self.pin_memory_device)
        return out

    # ------------------------------------------------------------ state
    def state_dict(self):
        """Where the loader stands, as torchdata's StatefulDataLoader has it: the last
        iterator's epoch, "_num_yielded" batches of it and "_iterator_finished",
        plus the Reader's state (spec/ORDERS.md "State") at that position. Before any
        iter(), the state of the iterator that iter() will return. Plain ints, bools
        and strings: fine for torch.save and json."""
        if self._pending is not None:
            e, k, fin = self._pending
        elif self._it is not None:
            e, k, fin = self._it.epoch, self._it._yielded, self._it._finished
        else:
            e, k, fin = self._next_epoch, 0, False
        rs = self.reader.state_dict()
        rs["epoch"], rs["batch"] = (e + 1, 0) if k >= self._n else (e, k)
        return {"stoker_loader_state": STATE_VERSION, "epoch": e, "_num_yielded": k, "_iterator_finished": fin,
                "reader": rs}

    def load_state_dict(self, state):
        """The next iter() continues from `state` (a state_dict() of a loader over the
        same dataset, order, seed, global batch and tail; rank and world size may
        differ; or a stoker.Reader state_dict()). {} loads nothing. A finished
        epoch's state makes the next iter() start the epoch after it. It replaces
        a position restored from checkpoint_dir."""
        self._it = None
        self._resume = None
        if state == {}:
            self._pending = None
            return
        if not isinstance(state, dict):
            raise TypeError("load_state_dict: a dict from state_dict() (or a Reader's)")
        if "stoker_reader_state" in state:   # a plain Reader's state: a position mid-epoch
            self.reader.load_state_dict(state)
            e, b = self.reader.position()
            self._pending = (e, b, False)
            self._next_epoch = e + 1
            return
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"load_state_dict: not a stoker.torch.DataLoader state (no {', '.join(missing)})")
        if state["stoker_loader_state"] != STATE_VERSION:
            raise ValueError(f"load_state_dict: state version {state['stoker_loader_state']!r} "
                             f"(this stoker reads {STATE_VERSION})")
        e, k, fin = state["epoch"], state["_num_yielded"], state["_iterator_finished"]
        most = len(self.reader)  # a partial-tail state saved on another rank may count past this rank's end
        if not (isinstance(e, int) and isinstance(k, int) and e >= 0 and 0 <= k <= most
                and isinstance(fin, bool)):
            raise ValueError(f"load_state_dict: epoch {e!r}, _num_yielded {k!r} (0..{most}), "
                             f"_iterator_finished {fin!r}: out of range")
        rs = state["reader"]
        want = {(e + 1, 0)} if k >= most else {(e, k)} if k < self._n else {(e, k), (e + 1, 0)}
        if not isinstance(rs, dict) or (rs.get("epoch"), rs.get("batch")) not in want:
            raise ValueError(f"load_state_dict: the reader state's position is not batch {k} of epoch {e}")
        self.reader.load_state_dict(rs)  # refuses another dataset, order, seed, global batch or tail
        self._pending = (e, k, fin)
        self._next_epoch = e + 1

    # ------------------------------------------------------------ checkpoint_dir
    def _checkpoint_path(self, directory, name):
        if directory is False:
            return None
        if directory is None:
            directory = os.environ.get(ENV_CHECKPOINT_DIR) or None
            if directory is None or self.reader.order == "sequential":
                return None
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        if name is None:
            p = os.path.abspath(self.reader.path)
            name = os.path.basename(os.path.dirname(p) if os.path.isfile(p) else p) or "dataset"
        return os.path.join(directory, f"stoker-{name}.rank{self.rank}.json")

    def _checkpoint_every(self, every):
        if every is None:
            text = os.environ.get(ENV_CHECKPOINT_EVERY)
            if not text:
                return None
            try:
                every = int(text)
            except ValueError:
                every = 0
            if every < 1:
                raise ValueError(f"${ENV_CHECKPOINT_EVERY}={text!r}: a number of batches >= 1 (how often the "
                                 "script saves its model within an epoch), or unset")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint_every {every!r}: a number of batches >= 1 (how often the script saves "
                             "its model within an epoch), or None")
        return every

    def _commit(self, maybe=None):
        """Write the checkpoint file: `saved`, the loader state where the script has surely
        saved its model (this position when `maybe` is None), and `maybe`, (epoch, batch,
        "end" or "step") of a later save point the script is at: the end of the epoch's
        loop, or its save after batch - 1; it may or may not have saved there yet."""
        if maybe is None:
            self._ck_saved = self.state_dict()
        doc = {"stoker_loader_checkpoint": CHECKPOINT_VERSION, "saved": self._ck_saved,
               "maybe": None if maybe is None else {"epoch": maybe[0], "batch": maybe[1], "at": maybe[2]},
               "every": self._ckpt_every}
        text = json.dumps(doc, separators=(",", ":")) + "\n"
        if text != self._ck_text:
            _atomic_write(self._ckpt, text)
            self._ck_text = text

    def _restore_checkpoint(self):
        """Continue from the checkpoint file; a file that is not whole JSON or belongs to
        another run is an error naming it (never skipped)."""
        d, base = os.path.split(self._ckpt)
        for f in os.listdir(d):  # temporaries of writers killed mid-write
            if f.startswith(base + ".tmp"):
                os.unlink(os.path.join(d, f))
        try:
            with open(self._ckpt) as f:
                text = f.read()
            doc = json.loads(text)
            if isinstance(doc, dict) and "stoker_loader_checkpoint" in doc:
                self._restore_v2(doc)
                self._ck_text = text
            else:
                self.load_state_dict(doc)   # version 1: the loader's state alone
        except ArgumentError as e:
            raise ArgumentError(e.code, f"{self._ckpt}: {e}: it belongs to another run (delete it to start "
                                "afresh, or give this loader another checkpoint_name)") from e
        except (ValueError, TypeError) as e:
            raise ValueError(f"{self._ckpt}: {e}: delete it to start afresh") from e

    def _restore_v2(self, doc):
        if doc["stoker_loader_checkpoint"] != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint version {doc['stoker_loader_checkpoint']!r} "
                             f"(this stoker reads {CHECKPOINT_VERSION})")
        saved, maybe = doc.get("saved"), doc.get("maybe")
        self.load_state_dict(saved)
        if self._pending is None or self._pending[2]:
            raise ValueError("'saved' is not a position inside an epoch")
        e, k, _ = self._pending
        if maybe is not None:
            if not (isinstance(maybe, dict) and type(maybe.get("epoch")) is int and type(maybe.get("batch")) is int
                    and maybe["epoch"] == e and k <= maybe["batch"] <= self._n
                    and (maybe.get("at") == "step" or (maybe.get("at") == "end" and maybe["batch"] == self._n))):
                raise ValueError(f"'maybe' {maybe!r}: not the end of epoch {e} ({self._n} batches) nor a step save "
                                 f"from batch {k} to it")
            maybe = (maybe["epoch"], maybe["batch"], maybe["at"])
        self._resume = ("restart", maybe)
        self._ck_saved = saved

    @property
    def checkpoint_path(self):
        """The file checkpoint_dir= saves to (None without one)."""
        return self._ckpt

    # ------------------------------------------------------------ lifetime
    def close(self):
        """Close the reader (when this loader opened it)."""
        if self._own and self.reader is not None:
            self.reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        r = self.reader
        return (f"<stoker.torch.DataLoader {r.path!r} batch_size={self.batch_size} order={r.order} "
                f"tail={self.tail} rank {self.rank}/{self.world_size} fields={self.fields} "
                f"{len(self)} batches/epoch, epoch {self.epoch}>")
