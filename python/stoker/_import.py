"""stoker.import_webdataset: WebDataset tar shards into a stoker dataset, and its command

    python3 -m stoker.import_wds 'shards/train-{000000..000099}.tar' packed/train

WebDataset's layout (github.com/webdataset/webdataset, "The format"): a shard is a POSIX tar whose
members are grouped into samples by their key, the member's path up to the first dot of its base
name (`dir/a.b.jpg` is key `dir/a`, extension `b.jpg`), the members of a sample next to each other.
The extension says what a value is: images (jpg, png, webp, ...), `cls` an integer label as text,
`json` a JSON document, `txt` text; anything else is bytes. Names go through WebDataset's brace
expansion (braceexpand: `{000000..000099}` ranges with their zero padding, `{a,b}` lists, nested,
`\\{` escapes) and then sorted globs.

The tars are read as streams (tarfile "r|*": gzip too), never extracted to disk. What cannot be
imported is never dropped in silence: a member that breaks the tar format ends that shard with a
line naming the shard, the member's number and byte offset; a sample without the fields of the
first sample (or with others), with a duplicated extension, a label that is no integer or an image
that does not decode is listed in OUT/skipped.tsv and counted (on_error="fail": the run stops).
"""
import io
import json
import os
import re
import sys
import tarfile
import time
import zlib

from . import _lib as L
from .writer import Bytes, Ragged, Scalar, String, Writer

__all__ = ["import_webdataset", "braceexpand", "main"]

IMAGE_EXTS = frozenset("jpg jpeg png webp ppm pgm pbm pnm bmp gif tif tiff".split())
INT_EXTS = frozenset("cls cls2 index inx id".split())     # WebDataset decodes these as int
TEXT_EXTS = frozenset("txt text".split())
JSON_EXTS = frozenset(["json"])
_KEY = re.compile(r"^((?:.*/|)[^./]+)[.]([^/]*)$")       # webdataset.tariterators.base_plus_ext
_META = re.compile(r"(^|/)__[^/]*__($|/)")               # WebDataset's meta members (__key__ ...)
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,31}$")            # a field name (spec/FORMAT.md)


# ------------------------------------------------------------------ brace expansion
_ESC = {"\\": "\ue000", "{": "\ue001", "}": "\ue002", ",": "\ue003"}
_UNESC = {v: k for k, v in _ESC.items()}
_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")
_CHR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?$")


def braceexpand(pattern):
    """The names `pattern` stands for, as WebDataset's braceexpand gives them, in order:
    `{a,b}` alternatives, `{1..3}` / `{a..c}` ranges (`..N` a step), zero padding when an end
    has a leading zero (`{08..10}`: 08 09 10), nesting, and `\\{` `\\}` `\\,` `\\\\` literal.
    A brace without its pair is a ValueError."""
    s = re.sub(r"\\(.)", lambda m: _ESC.get(m.group(1), m.group(1)), pattern, flags=re.S)
    try:
        out = _expand(s)
    except ValueError as e:
        raise ValueError(f"{pattern!r}: {e}") from None
    return ["".join(_UNESC.get(c, c) for c in x) for x in out]


def _close(s, i):
    """The index of the '}' that closes the '{' at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"the '{{' at {i} has no '}}'")


def _split_top(s):
    parts, depth, last = [], 0, 0
    for j, c in enumerate(s):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[last:j])
            last = j + 1
    return parts + [s[last:]]


def _range(inner):
    m = _INT_RANGE.match(inner)
    if m:
        a, b, step = m.groups()
        pad = max(len(a), len(b)) if any(x.startswith(("0", "-0")) for x in (a, b) if x not in ("0", "-0")) else 0
        step = abs(int(step)) if step and int(step) else 1
        lo, hi = int(a), int(b)
        r = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return [f"{i:0{pad}d}" for i in r]
    m = _CHR_RANGE.match(inner)
    if m:
        a, b, step = m.groups()
        step = abs(int(step)) if step and int(step) else 1
        lo, hi = ord(a), ord(b)
        r = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return [chr(i) for i in r]
    return None


def _expand(s):
    i = s.find("{")
    if "}" in s[:i if i >= 0 else len(s)]:
        raise ValueError(f"the '}}' at {s.index('}')} has no '{{'")
    if i < 0:
        return [s]
    j = _close(s, i)
    inner, head, tail = s[i + 1:j], s[:i], _expand(s[j + 1:])
    parts = _split_top(inner)
    if len(parts) > 1:
        items = [x for p in parts for x in _expand(p)]
    else:
        items = _range(inner)
        if items is None:  # "{x}": no list, no range: the braces stay, as braceexpand keeps them
            items = ["{" + x + "}" for x in _expand(inner)]
    return [head + x + t for x in items for t in tail]


# ------------------------------------------------------------------ the shards
def _shard_paths(sources):
    """The tar files `sources` name, in order: each brace-expanded, then a glob sorted, a directory's
    .tar/.tar.gz/.tgz files sorted; a name that matches nothing is an error naming it."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    import glob
    out = []
    for src in sources:
        src = os.fspath(src)
        if re.match(r"^[a-z][a-z0-9+.-]*:", src) and not os.path.exists(src):
            raise ValueError(f"stoker.import_webdataset: {src}: local .tar / .tar.gz files only (no URLs, "
                             "pipe: or s3:); fetch the shards first")
        for name in braceexpand(src):
            if any(c in name for c in "*?["):
                found = sorted(glob.glob(name))
                if not found:
                    raise FileNotFoundError(f"stoker.import_webdataset: {name}: no file matches")
            elif os.path.isdir(name):
                found = sorted(os.path.join(name, f) for f in os.listdir(name)
                               if f.endswith((".tar", ".tar.gz", ".tgz")))
                if not found:
                    raise FileNotFoundError(f"stoker.import_webdataset: {name}: a directory without .tar, "
                                            ".tar.gz or .tgz files")
            elif os.path.isfile(name):
                found = [name]
            else:
                raise FileNotFoundError(f"stoker.import_webdataset: {name}: no such file"
                                        + (f" (from {src})" if name != src else ""))
            out += found
    if not out:
        raise ValueError("stoker.import_webdataset: no shards given")
    return out


class _BrokenTar(Exception):
    pass


class _Info(tarfile.TarInfo):
    """tarfile's member header, except that a header block that is neither a header nor the zero
    block of the archive's end is an error: tarfile alone ends the archive there in silence, which
    would drop every member after it."""

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        if 0 < len(buf) < tarfile.BLOCKSIZE:
            raise _BrokenTar(f"the tar ends inside a member header ({len(buf)} of {tarfile.BLOCKSIZE} bytes)")
        try:
            return super().frombuf(buf, encoding, errors)
        except tarfile.EOFHeaderError:
            raise
        except tarfile.HeaderError as e:
            if len(buf) == 0:
                raise
            raise _BrokenTar(f"not a tar member header ({e})") from None


def _members(path):
    """(kind, ...) items of one shard, in order: ("sample", key, {ext: bytes}, error or None) and
    ("broken", what) for a tar that breaks off."""
    count, last, key, parts, err, offset, name = 0, None, None, {}, None, 0, None
    try:
        with open(path, "rb") as raw, tarfile.open(fileobj=raw, mode="r|*", tarinfo=_Info) as tf:
            while True:
                offset, name = tf.offset, None    # where member count + 1's header starts
                m = tf.next()
                if m is None:
                    break
                count += 1
                name = m.name
                if m.isdir() or _META.search(m.name):
                    continue
                if not m.isreg():
                    yield ("bad", m.name, f"member {count} ({m.name!r}) is a link or device, not a file")
                    continue
                data = tf.extractfile(m).read()
                last, name = m.name, None
                k = _KEY.match(m.name)
                if not k:
                    yield ("bad", m.name, f"member {count} ({m.name!r}) has no extension: it belongs to no "
                           "sample (WebDataset skips it)")
                    continue
                mk, ext = k.group(1), k.group(2).lower()
                if mk != key:
                    if key is not None:
                        yield ("sample", key, parts, err)
                    key, parts, err = mk, {}, None
                if ext in parts:
                    err = err or f"extension {ext!r} twice in one sample (member {count}, {m.name!r})"
                parts[ext] = data
    except (_BrokenTar, tarfile.TarError, EOFError, zlib.error, OSError) as e:
        no = count if name is not None else count + 1   # a member's data, or the next header
        where = (f"member {no}" + (f" ({name!r}, its data)" if name is not None else "")
                 + f", at byte {offset} of the tar" + (f", after {last!r}" if last else ""))
        why = f"{type(e).__name__}: {e}" if not isinstance(e, _BrokenTar) else str(e)
        yield ("broken", f"the tar breaks at {where}: {why}; nothing after it in this shard was read "
               f"({no - 1} members before it)")
        if key is not None:
            yield ("bad", key, "cut off by the broken tar listed before it (its members "
                   + ", ".join(f".{e}" for e in sorted(parts)) + " were read)")
        return
    if key is not None:
        yield ("sample", key, parts, err)


# ------------------------------------------------------------------ fields
def _kind(ext):
    last = ext.rsplit(".", 1)[-1]
    if last in IMAGE_EXTS:
        return "image"
    if last in INT_EXTS:
        return "int"
    if last in JSON_EXTS:
        return "json"
    if last in TEXT_EXTS:
        return "text"
    return "bytes"


def _plan(exts):
    """{extension: (field name, kind)} for a sample with these extensions: a sample's one image is
    "image" whatever its format (a .png among .jpg samples is the same field), cls is "label", any
    other extension its own field."""
    imgs = [e for e in exts if _kind(e) == "image"]
    return {e: ("label" if e == "cls" else "image" if len(imgs) == 1 and e == imgs[0] else e, _kind(e))
            for e in sorted(exts)}


def _fields_of(plan, images):
    """The stoker fields of a plan: key first, then the image, the label, the rest by name."""
    order = sorted(plan, key=lambda e: (plan[e][0] != "image", plan[e][0] != "label", plan[e][1] != "image",
                                        plan[e][0]))
    fields, seen = {"key": String()}, {"key": "__key__"}
    for e in order:
        n, k = plan[e]
        if not _NAME.match(n):
            raise ValueError(f"stoker.import_webdataset: extension {e!r} makes no field name (1..31 of "
                             "A-Z a-z 0-9 _ . -)")
        if n in seen:
            raise ValueError(f"stoker.import_webdataset: extensions {seen[n]!r} and {e!r} both make field {n!r}")
        seen[n] = e
        if k == "image":
            fields[n] = Ragged("uint8", (None, None, 3)) if images == "decode" else Bytes()
        elif k == "int":
            fields[n] = Scalar("int64")
        elif k in ("json", "text"):
            fields[n] = String()
        else:
            fields[n] = Bytes()
    return fields


def _decode_image(data):
    from PIL import Image
    import numpy as np
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        rgb = im if im.mode == "RGB" else im.convert("RGB")  # alpha dropped, palettes expanded: as pack does
    return np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8))


def _convert(job):
    """(sample dict, None) or (None, what is wrong) for one sample's parts."""
    key, parts, plan, images = job
    out = {"key": key}
    for ext, data in parts.items():
        name, kind = plan[ext]
        try:
            if kind == "image":
                out[name] = _decode_image(data) if images == "decode" else data
            elif kind == "int":
                v = int(data.decode("ascii").strip())
                if not -(1 << 63) <= v < (1 << 63):
                    raise ValueError("out of the int64 range")
                out[name] = v
            elif kind == "json":
                text = data.decode("utf-8")
                json.loads(text)
                out[name] = text
            elif kind == "text":
                out[name] = data.decode("utf-8")
            else:
                out[name] = data
        except Exception as e:
            what = {"image": "an image that does not decode", "int": "not an integer", "json": "not JSON",
                    "text": "not UTF-8 text"}.get(kind, "unreadable")
            return None, f"{key}.{ext}: {what} ({type(e).__name__}: {e})"[:500]
    return out, None


# ------------------------------------------------------------------ the import
def _run(who, target, items, start, prepare, convert, workers, on_error, progress, writer_args):
    """The import loop shared by the formats. `items` yields ("bad", where, why) and ("sample",
    where, payload) in order; start(payload, where) -> (fields, ctx) for the first sample (the
    dataset's fields); prepare(payload, ctx) -> (job, None) or (None, why), on this thread;
    convert(job) -> (sample dict, None) or (None, why), on `workers` threads (image decode).
    Samples are written in order; the bad ones are listed in OUT/skipped.tsv (or raise with
    on_error="fail"). Returns (writer closed, skipped count, ctx)."""
    if on_error not in ("skip", "fail"):
        raise ValueError(f"{who}: on_error={on_error!r}: 'skip' or 'fail'")
    n = (os.cpu_count() or 1) if workers is None else max(int(workers), 0)
    show = sys.stderr.isatty() if progress is None else progress
    skipped, st = [], {"w": None, "ctx": None, "index": 0, "items": 0}

    def bad(i, where, why):
        if on_error == "fail":
            raise L.Error(L.STK_E_FORMAT, f"{who}: {where}: {why}")
        skipped.append((i, where, why.replace("\t", " ").replace("\n", " ")))

    def jobs():
        for kind, where, x in items:
            i = st["index"]
            st["index"] += 1
            if kind == "bad":
                bad(i, where, x)
                continue
            if st["w"] is None:
                fields, st["ctx"] = start(x, where)
                st["w"] = Writer(target, fields, *writer_args, _tool=who)
            job, why = prepare(x, st["ctx"])
            if why:
                bad(i, where, why)
                continue
            yield i, where, job

    pool = None
    if n:
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(n)
    last_shown = 0.0
    try:
        import collections
        window = collections.deque()

        def drain(limit):
            nonlocal last_shown
            while len(window) > limit:
                i, where, fut = window.popleft()
                sample, why = fut.result() if pool else fut
                if why:
                    bad(i, where, why)
                else:
                    st["w"].write(sample)
                if show and time.monotonic() - last_shown > 0.2:
                    last_shown = time.monotonic()
                    sys.stderr.write(f"\r{who}: {st['w'].records:,} records, {len(skipped):,} skipped ")
                    sys.stderr.flush()

        for i, where, job in jobs():
            window.append((i, where, pool.submit(convert, job) if pool else convert(job)))
            drain(4 * max(n, 1))
        drain(0)
        if st["w"] is None:
            raise L.Error(L.STK_E_FORMAT, f"{who}: no sample could be imported" + (
                f"; the first problem: {skipped[0][1]}: {skipped[0][2]}" if skipped else " (the input holds none)"))
        skipped.sort()
        from ._pack import _write_skipped
        st["w"].close()
        _write_skipped(target, skipped)
    except BaseException:
        if st["w"] is not None:
            st["w"].abort()
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if show:
            sys.stderr.write("\n")
    return st["w"], len(skipped), st["ctx"]


def import_webdataset(sources, out, images="decode", workers=None, on_error="skip", shard_size=1 << 30,
                      records_per_shard=0, classes=None, metadata=None, force=False, progress=None):
    """Write the samples of WebDataset shards into a stoker dataset at `out`, in shard order.

    sources   a name or a list of them: local .tar / .tar.gz / .tgz files, brace patterns
              (`shards-{000000..000099}.tar`), globs (sorted), directories (their tars, sorted)
    images    "decode": image members decoded to RGB pixels, field u8[H, W, 3] of each image's own
              size (stoker.Transform crops them at load, as pack --resize keep); "bytes": the
              files' bytes as they are (a Bytes field)
    workers   threads converting samples (image decode); None: os.cpu_count()
    on_error  "skip": a sample that cannot be imported is listed in OUT/skipped.tsv (index, shard:key,
              why) and counted, and a shard whose tar breaks is listed there from the broken member
              on; "fail": the first one stops the run and no dataset is written
    shard_size, records_per_shard, classes, metadata, force: as stoker.Writer

    The fields are those of the first sample: `key` (WebDataset's __key__, a String), one per
    extension (`image` for a sample's one image, `label` for `cls`, an int64; `json` and `txt` as
    String, others Bytes). Returns a summary dict: records, skipped, shards, seconds, fields.
    """
    who = "stoker.import_webdataset"
    if images not in ("decode", "bytes"):
        raise ValueError(f"{who}: images={images!r}: 'decode' or 'bytes'")
    shards = _shard_paths(sources)
    t0 = time.monotonic()

    def items():
        for path in shards:
            for item in _members(path):
                if item[0] == "broken":
                    yield "bad", path, item[1]
                elif item[0] == "bad":
                    yield "bad", f"{path}:{item[1]}", item[2]
                else:
                    _, key, parts, err = item
                    if err:
                        yield "bad", f"{path}:{key}", err
                    else:
                        yield "sample", f"{path}:{key}", (key, parts)

    def start(payload, where):
        plan = _plan(payload[1])
        return _fields_of(plan, images), {"plan": plan, "first": where, "sig": {n: k for n, k in plan.values()}}

    def prepare(payload, ctx):
        key, parts = payload
        plan = _plan(parts)
        sig = {n: k for n, k in plan.values()}
        if sig == ctx["sig"]:
            return (key, parts, plan, images), None
        first = {n: e for e, (n, _) in ctx["plan"].items()}
        mine = {n: e for e, (n, _) in plan.items()}
        missing = [first[n] for n in sorted(first) if sig.get(n) != ctx["sig"][n]]
        extra = [mine[n] for n in sorted(mine) if ctx["sig"].get(n) != sig[n]]
        return None, ("; ".join((["no " + ", ".join(f".{e}" for e in missing)] if missing else [])
                                + (["also " + ", ".join(f".{e}" for e in extra)] if extra else []))
                      + f" (the fields are those of the first sample, {ctx['first']}: "
                      + ", ".join(f".{e}" for e in sorted(ctx["plan"])) + ")")

    w, nskip, ctx = _run(who, os.fspath(out), items(), start, prepare, _convert, workers, on_error, progress,
                         (shard_size, records_per_shard, classes, metadata, force))
    ext_of = {name: ext for ext, (name, _) in ctx["plan"].items()}
    fields = {name: ext_of.get(name, "__key__") for name in w.fields}  # in the dataset's field order
    return {"out": os.fspath(out), "shards": len(shards), "records": w.records, "skipped": nskip,
            "seconds": time.monotonic() - t0, "bytes": w.bytes, "fields": fields}


# ------------------------------------------------------------------ the command
def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(
        prog="python3 -m stoker.import_wds",
        description="Import WebDataset tar shards (local .tar/.tar.gz; brace patterns such as "
                    "'train-{000000..000099}.tar', globs, directories) into a stoker dataset in OUT. Fields: "
                    "key (__key__), image (decoded RGB, or the file's bytes with --images bytes), label (.cls), "
                    "and one per other extension (json/txt as text, the rest bytes).",
        epilog="Exit status: 0 all imported, 1 error (nothing written), 2 usage, 3 imported with some samples "
               "skipped (listed in OUT/skipped.tsv).")
    ap.add_argument("src", nargs="+", metavar="SRC", help="shard files, brace patterns, globs or directories")
    ap.add_argument("out", metavar="OUT", help="the dataset directory to write")
    ap.add_argument("--images", choices=("decode", "bytes"), default="decode",
                    help="decode (default): RGB pixels at each image's size; bytes: the files as they are")
    ap.add_argument("-j", "--threads", type=int, default=None, help="conversion threads (default: all cores)")
    ap.add_argument("--on-error", choices=("skip", "fail"), default="skip",
                    help="skip (default): list bad samples in OUT/skipped.tsv and go on; fail: stop")
    ap.add_argument("--shard-size", type=int, default=1 << 30, help="shard size limit in bytes (default 1G)")
    ap.add_argument("--records-per-shard", type=int, default=0, help="records per shard (instead)")
    ap.add_argument("--force", action="store_true", help="replace a dataset in OUT")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress line or summary")
    a = ap.parse_args(argv)
    try:
        s = import_webdataset(a.src, a.out, images=a.images, workers=a.threads, on_error=a.on_error,
                              shard_size=a.shard_size, records_per_shard=a.records_per_shard, force=a.force,
                              progress=False if a.quiet else None)
    except (L.Error, OSError, ValueError) as e:
        print(f"import_wds: {e}", file=sys.stderr)
        return 1
    if not a.quiet:
        print(f"import_wds: {s['shards']} shard{'s' if s['shards'] != 1 else ''} -> {s['out']}: "
              f"{s['records']:,} records, {s['skipped']:,} skipped, {s['seconds']:.1f} s; fields "
              + ", ".join(f"{k} ({e if k == 'key' else '.' + e})" for k, e in s["fields"].items()))
    if s["skipped"]:
        print(f"import_wds: {s['skipped']} not imported (samples, or a broken shard from its bad member on): "
              f"see {os.path.join(s['out'], 'skipped.tsv')}", file=sys.stderr)
        return 3
    return 0

