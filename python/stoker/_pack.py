"""stoker.pack and stoker.merge: fn over the inputs in worker processes (or threads), the samples
written in input order through stoker.Writer, a killed run resumed from its state file.

    stoker.pack(make_sample, inputs, "out/train", fields, workers=8)

The state file (OUT/stoker-pack.state.json) is rewritten each time a shard is committed. It names the
committed shards, the records they hold and the position in the inputs that follows them; a resumed run
checks all of it against the shards on disk before it trusts it (_check_state).

OUT may be s3://bucket/prefix. The shards are then written in the local staging directory of that address
(libstoker's: $STOKER_CACHE_DIR/staging/H, else $TMPDIR/stoker-staging/H), uploaded as they complete and kept
there until the dataset is committed, and the state file lives there too, not as an object: it is rewritten
at every shard and checked against the shards it names, which a resumed run reads back locally (the staged
copies; the upload log there lets the writer skip the uploads that completed). skipped.tsv is uploaded before
the manifest, which the writer uploads last.
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
import warnings

from . import _lib as L
from .writer import Writer, _class_names, _field_spec

_STATE = "stoker-pack.state.json"
_SKIPPED = "skipped.tsv"


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


class _BadState(Exception):
    """What is wrong with a state file (the field and why); _load_state names the file and the fix."""


def _int(v, what, low=0):
    if type(v) is not int or v < low:  # bool is no count
        raise _BadState(f"{what} is {v!r:.60}, not an integer >= {low}")
    return v


def _position(v, what, first, end):
    """[input, sample]: the input inside [first, end), the sample within its results."""
    if not isinstance(v, list) or len(v) != 2:
        raise _BadState(f"{what} is {v!r:.60}, not [input, sample]")
    i, j = _int(v[0], f"{what}[0]"), _int(v[1], f"{what}[1]")
    if not first <= i < end:
        raise _BadState(f"{what} is {v!r}: input {i} is outside this run's inputs {first}..{end - 1}")
    return i, j


def _read_shard(path):
    """(records, index hash) of the shard at `path` as libstoker opens it, or (None, why)."""
    err = L.Error_()
    h = L.stk_shard_open(os.fsencode(path), ctypes.byref(err))
    if not h:
        return None, err.msg.decode("utf-8", "replace")
    try:
        return L.stk_shard_records(h), L.stk_shard_index_hash(h)
    finally:
        L.stk_shard_close(h)


def _shard_entry(target, prefix, k, nxt):
    """The state file's line for committed shard k, read back from the shard itself."""
    name = L.shard_file_name(k, prefix)
    records, index_hash = _read_shard(os.path.join(target, name))
    if records is None:
        raise L.Error(L.STK_E_IO, f"stoker.pack: {target}: the shard just committed cannot be read back: "
                      f"{index_hash}")
    return {"file": name, "records": records, "index_hash": f"{index_hash:016x}", "next": list(nxt)}


def _seal(st):
    """The state's own check value: a hash over every other field, so that an edit no check against the
    shards can see (a skipped input's entry, where an earlier shard ended) is refused too."""
    keys = ("params", "shards", "records", "next", "skipped", "committed")
    text = json.dumps([st[k] for k in keys], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _check_state(st, params, target, first, end):
    """The state a killed run left, checked against itself and against the shards it names as they are on
    disk: returns it normalised, None when it is another run's (other params), or raises _BadState."""
    if not isinstance(st, dict):
        raise _BadState(f"it holds a JSON {type(st).__name__}, not an object")
    for key in ("params", "shards", "records", "next", "skipped", "committed", "check"):
        if key not in st:
            raise _BadState(f"field {key!r} is missing")
    if not isinstance(st["params"], str):
        raise _BadState(f"field 'params' is {st['params']!r:.60}, not a string")
    if st["params"] != params:
        return None  # a run with other arguments: this one starts over and replaces it
    shards, records = _int(st["shards"], "field 'shards'", 1), _int(st["records"], "field 'records'")
    nxt = _position(st["next"], "field 'next'", first, end)
    committed = st["committed"]
    if not isinstance(committed, list) or not committed:
        raise _BadState(f"field 'committed' is {committed!r:.60}, not a list of the committed shards")
    ends, total, last = [], 0, (first, 0)
    for k, e in enumerate(committed):
        what = f"field 'committed'[{k}]"
        if not isinstance(e, dict) or set(e) != {"file", "records", "index_hash", "next"}:
            raise _BadState(f"{what} is {e!r:.80}, not {{file, records, index_hash, next}}")
        name = L.shard_file_name(k)
        if e["file"] != name:
            raise _BadState(f"{what} names {e['file']!r:.60}; shard {k} is {name}")
        n = _int(e["records"], f"{what}.records", 1)
        h = e["index_hash"]
        if not isinstance(h, str) or len(h) != 16 or h.strip("0123456789abcdef"):
            raise _BadState(f"{what}.index_hash is {h!r:.60}, not 16 hex digits")
        pos = _position(e["next"], f"{what}.next", first, end)
        if pos <= last:
            raise _BadState(f"{what}.next is {list(pos)}, not after where the shard ahead of it ended "
                            f"({list(last)})")
        last = pos
        on_disk, disk_hash = _read_shard(os.path.join(target, name))
        if on_disk is None:
            raise _BadState(f"{what}: {name} cannot be read ({disk_hash})")
        if on_disk != n:
            raise _BadState(f"{what}.records is {n}, but {name} on disk holds {on_disk} records")
        if f"{disk_hash:016x}" != h:
            raise _BadState(f"{what}: {name} on disk is not the shard the state recorded (index hash "
                            f"{disk_hash:016x}, the state says {h})")
        total += n
        ends.append(pos)
    if shards != len(committed):
        raise _BadState(f"field 'shards' is {shards}, but the state lists {len(committed)} committed shards, "
                        f"{L.shard_file_name(0)} .. {L.shard_file_name(len(committed) - 1)}")
    if records != total:
        raise _BadState(f"field 'records' is {records}, but the {shards} committed shards on disk hold {total}")
    if nxt != ends[-1]:
        raise _BadState(f"field 'next' is {list(nxt)}, but {L.shard_file_name(shards - 1)} (as on disk) ended "
                        f"before input {ends[-1][0]} sample {ends[-1][1]}, which is where the run goes on")
    skipped = st["skipped"]
    if not isinstance(skipped, list):
        raise _BadState(f"field 'skipped' is {skipped!r:.60}, not a list")
    prev = first - 1
    for k, s in enumerate(skipped):
        if (not isinstance(s, list) or len(s) != 3 or type(s[0]) is not int or not isinstance(s[1], str)
                or not isinstance(s[2], str)):
            raise _BadState(f"field 'skipped'[{k}] is {s!r:.80}, not [index, input, error]")
        if not prev < s[0] < nxt[0]:
            raise _BadState(f"field 'skipped'[{k}] names input {s[0]}: not after {prev} and before 'next' "
                            f"({nxt[0]})")
        prev = s[0]
    if st["check"] != _seal(st):
        raise _BadState(f"field 'check' is {st['check']!r:.40}, not the hash of the other fields: the file was "
                        "edited after stoker.pack wrote it")
    return {"params": params, "shards": shards, "records": records, "next": list(nxt),
            "skipped": [tuple(s) for s in skipped], "committed": committed}


def _load_state(target, params, first, end):
    """The state of this run's killed predecessor in `target` (checked: _check_state), or None when there
    is none or it is another run's. A state that is malformed or disagrees with the shards on disk is
    refused (stoker.Error naming the file, the field and what to delete), never used: a resume from it
    would drop or repeat inputs."""
    path = os.path.join(target, _STATE)
    fix = (f"; delete {path} to start this run over (the shards it names are then written again), or "
           f"the directory {target} with it")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise L.Error(L.STK_E_IO, f"stoker.pack: {path}: cannot read the state of the interrupted run: "
                      f"{e.strerror}") from None
    try:
        st = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError too; RecursionError: nested too deep
        raise L.Error(L.STK_E_FORMAT, f"stoker.pack: {path}: not a state file (bad JSON: {e})" + fix) from None
    try:
        return _check_state(st, params, target, first, end)
    except _BadState as e:
        raise L.Error(L.STK_E_FORMAT, f"stoker.pack: {path}: {e}" + fix) from None


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


class _Remote:
    """The objects of an s3:// dataset that stoker.pack and stoker.merge handle beside the writer's: the
    manifest and skipped.tsv read back, skipped.tsv written, the names listed (libstoker's stk_upload)."""

    def __init__(self, url):
        self.url, err = url, L.Error_()
        self.h = L.stk_upload_open(url.encode(), ctypes.byref(err))
        if not self.h:
            L.raise_error(err)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        h, self.h = self.h, None
        if h:
            L.stk_upload_close(h)

    def staging(self):
        buf, err = ctypes.create_string_buffer(4096), L.Error_()
        if L.stk_upload_staging_dir(self.url.encode(), buf, len(buf), ctypes.byref(err)):
            L.raise_error(err)
        return os.fsdecode(buf.value)

    def fetch(self, name, path):
        """Object `name` into the file `path`; False (and no file) when there is no such object."""
        missing, err = ctypes.c_int(0), L.Error_()
        if L.stk_upload_fetch(self.h, name.encode(), os.fsencode(path), 1 << 31, ctypes.byref(missing),
                              ctypes.byref(err)):
            if missing.value:
                _unlink(path)
                return False
            L.raise_error(err)
        return True

    def put(self, name, data):
        err = L.Error_()
        if L.stk_upload_put(self.h, name.encode(), data, len(data), ctypes.byref(err)):
            L.raise_error(err)

    def names(self):
        names, sizes, n, err = L.P(L.c_char_p)(), L.P(L.c_u64)(), L.c_size_t(0), L.Error_()
        if L.stk_upload_list(self.h, ctypes.byref(names), ctypes.byref(sizes), ctypes.byref(n), ctypes.byref(err)):
            L.raise_error(err)
        try:
            return [names[i].decode() for i in range(n.value)]
        finally:
            L.stk_upload_list_free(names, sizes, n)


def _is_remote(path):
    return bool(L.stk_path_is_remote(os.fsencode(path)))


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
    and kept, and fn runs again only on the inputs after them. Its state file is checked against those
    shards first: one that is malformed or disagrees is refused (stoker.Error naming the file, the field
    and what to delete), never used. "The same arguments" are the fields, the
    inputs (their repr), the shard settings, classes, metadata, part and fn's module and name: a changed fn
    body under the same name is not seen (pass force=True, or another out, after changing what fn makes).
    Returns a summary dict.
    """
    if on_error not in ("skip", "fail"):
        raise ValueError(f"stoker.pack: on_error={on_error!r}: 'skip' or 'fail'")
    if mode not in ("process", "thread"):
        raise ValueError(f"stoker.pack: mode={mode!r}: 'process' or 'thread'")
    if classes is not None and hasattr(classes, "__iter__") and not isinstance(classes, (str, bytes, list, tuple)):
        classes = list(classes)  # an iterator: read once, here
    _class_names(classes, "stoker.pack")  # a bad name is refused here, before any worker starts
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
    rm = _Remote(target) if _is_remote(target) else None
    try:
        return _pack(fn, inputs, target, fields, workers, mode, shard_size, records_per_shard, classes, metadata,
                     on_error, progress, chunk, force, first, end, params, whole, rm)
    finally:
        if rm:
            rm.close()


def _pack(fn, inputs, target, fields, workers, mode, shard_size, records_per_shard, classes, metadata, on_error,
          progress, chunk, force, first, end, params, whole, rm):
    local = target  # where the state file, skipped.tsv and (s3://) the staged shards are
    if rm:
        local = rm.staging()
        rm.fetch("manifest.json", os.path.join(local, "manifest.json"))
        rm.fetch(_SKIPPED, os.path.join(local, _SKIPPED))
    done = _manifest_params(local)
    if done == whole:  # finished before (a run killed after its manifest may have left its state file)
        _unlink(os.path.join(local, _STATE))
        summary = _summary_of(local)
        if rm:
            _clear_staging(local)
        return {"out": target, "resumed": True, "complete": True, **summary}
    if rm:  # the writer reads the old dataset itself
        _unlink(os.path.join(local, "manifest.json"))
    if done is not None and not force:
        raise L.Error(L.STK_E_EXISTS, f"stoker.pack: {target} already holds a dataset made with other "
                      "arguments; pass force=True to replace it")
    st = _load_state(local, params, first, end) if done is None else None
    t0 = time.monotonic()
    skipped = list(st["skipped"]) if st else []
    committed = list(st["committed"]) if st else []  # the state file's line for each committed shard
    nxt, sub = (st["next"] if st else (first, 0))
    pool = _Workers(fn, inputs, workers, mode)  # before the writer: workers hold none of its files
    try:
        try:
            w = Writer(target, fields, shard_size, records_per_shard, classes, metadata, force=done is not None,
                       _tool="stoker.pack", _pack_params=whole, _resume_shards=st["shards"] if st else None,
                       _keep_staged=rm is not None)
        except Exception as e:
            if not st:
                raise
            warnings.warn(f"stoker.pack: {target}: the interrupted run's shards do not verify ({e}); "
                          "starting over")
            st, skipped, committed, nxt, sub = None, [], [], first, 0
            w = Writer(target, fields, shard_size, records_per_shard, classes, metadata, force=done is not None,
                       _tool="stoker.pack", _pack_params=whole, _keep_staged=rm is not None)
        if st and w.records != st["records"]:  # _load_state read the same shards: changed since
            w.abort()
            raise L.Error(L.STK_E_FORMAT, f"stoker.pack: {target}: the kept shards hold {w.records} records, "
                          f"the state says {st['records']}; delete {os.path.join(local, _STATE)} to start over")
    except BaseException:
        pool.close(kill=True)
        raise
    resumed = st is not None
    bar = _Progress(end - first, nxt - first, sys.stderr.isatty() if progress is None else progress)
    try:
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
                    if w.shards != shards:  # the shard before this record is on disk
                        shards = w.shards
                        while len(committed) < shards:
                            committed.append(_shard_entry(local, w.prefix, len(committed), (i, j)))
                        state = {"params": params, "shards": shards, "records": w.records - 1, "next": [i, j],
                                 "skipped": [list(s) for s in skipped if s[0] < i], "committed": committed}
                        state["check"] = _seal(state)
                        _write_atomic(os.path.join(local, _STATE), json.dumps(state))
            bar.update(i + 1 - first, len(skipped))
        pool.close()
        _write_skipped(local, skipped)
        if rm:  # before the manifest, which the writer uploads last
            with open(os.path.join(local, _SKIPPED), "rb") as f:
                rm.put(_SKIPPED, f.read())
        w.close()
    except BaseException:
        pool.close(kill=True)
        w.abort()  # replacing: the new shards go, the old dataset stays as it was
        bar.end()
        if done is not None:  # no resume of a replace: nothing of it is kept
            _unlink(os.path.join(local, _STATE))
        raise
    bar.end()
    _unlink(os.path.join(local, _STATE))
    if rm:
        _clear_staging(local)
    return {"out": target, "resumed": resumed, "complete": True, "inputs": end - first, "records": w.records,
            "skipped": len(skipped), "seconds": time.monotonic() - t0, "bytes": w.bytes}


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _clear_staging(stage):
    """The staging directory of a committed s3:// dataset: what stoker.pack put there, then the directory
    when it is empty (the writer removed its own files)."""
    for name in ("manifest.json", _SKIPPED, _STATE):
        _unlink(os.path.join(stage, name))
    try:
        os.rmdir(stage)
    except OSError:
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
    if _is_remote(out):
        with _Remote(out) as rm:
            return _merge_remote(out, rm)
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
    if L.stk_dataset_merge(out.encode(), arr, n, ctypes.byref(err)):
        L.raise_error(err)
    return {"out": out, "parts": n, **_summary_of(out)}


def _merge_remote(out, rm):
    """stoker.merge of parts under s3://: the same checks and skipped.tsv (uploaded), then stk_dataset_merge,
    which uploads the manifest last."""
    names = set(rm.names())
    dirs = {x.split("/", 1)[0] for x in names if "/" in x}
    found = sorted(d for d in dirs if d.startswith("part-") and "-of-" in d)
    counts = {d.rsplit("-of-", 1)[1] for d in found}
    if not found or len(counts) != 1:
        raise ValueError(f"stoker.merge: {out}: " + ("no part-K-of-N directories" if not found else
                         f"parts of different counts ({', '.join(sorted(counts))})"))
    n = int(counts.pop())
    want = [f"part-{k:05d}-of-{n:05d}" for k in range(1, n + 1)]
    missing = [d for d in want if f"{d}/manifest.json" not in names]
    if missing:
        raise ValueError(f"stoker.merge: {out}: {len(missing)} of {n} parts missing or unfinished: "
                         + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
    stage = rm.staging()
    lines = ["index\tinput\terror\n"]
    tmp = os.path.join(stage, "part-skipped.tsv")
    for d in want:
        if rm.fetch(f"{d}/{_SKIPPED}", tmp):
            with open(tmp) as f:
                lines += f.readlines()[1:]
    _unlink(tmp)
    rm.put(_SKIPPED, "".join(lines).encode())
    arr = (L.c_char_p * n)(*[d.encode() for d in want])
    err = L.Error_()
    if L.stk_dataset_merge(out.encode(), arr, n, ctypes.byref(err)):
        L.raise_error(err)
    stage = rm.staging()  # made again: the merge removed it, empty
    rm.fetch("manifest.json", os.path.join(stage, "manifest.json"))
    rm.fetch(_SKIPPED, os.path.join(stage, _SKIPPED))
    summary = _summary_of(stage)
    _clear_staging(stage)
    return {"out": out, "parts": n, **summary}
