"""Other loaders' datasets into stoker datasets, and their commands:

    python3 -m stoker.import_wds 'shards/train-{000000..000099}.tar' packed/train   # import_webdataset
    python3 -m stoker.import_mds mds/train packed/train                             # import_mds
    python3 -m stoker.import_litdata litdata/train packed/train                     # import_litdata

WebDataset's layout (github.com/webdataset/webdataset, "The format"): a shard is a POSIX tar whose
members are grouped into samples by their key, the member's path up to the first dot of its base
name (`dir/a.b.jpg` is key `dir/a`, extension `b.jpg`), the members of a sample next to each other.
The extension says what a value is: images (jpg, png, webp, ...), `cls` an integer label as text,
`json` a JSON document, `txt` text; anything else is bytes. Names go through WebDataset's brace
expansion (braceexpand: `{000000..000099}` ranges with their zero padding, `{a,b}` lists, nested,
`\\{` escapes) and then sorted globs. The tars are read as streams by the header reader here
(_tar_entries: ustar, pax and GNU names; gzip, bzip2, xz), never extracted to disk.
MosaicML Streaming (MDS) and LitData: their layouts are described above import_mds and
import_litdata.

What cannot be imported is never dropped in silence: a member that breaks the tar format ends that
shard with a line naming the shard, the member's number and byte offset; a sample without the fields
of the first sample (or with others), with a duplicated extension, a label that is no integer, an
image that does not decode, a truncated MDS sample or LitData item is listed in OUT/skipped.tsv and
counted (on_error="fail": the run stops, no dataset). One loop (_run) serves the three formats:
samples converted on threads in batches, written in input order through stoker.Writer.
"""
import io
import json
import os
import re
import sys
import time
import zlib

from . import _lib as L
from .writer import Bytes, Ragged, Scalar, String, Tensor, Writer, _jpeg_frame, _np_dtype

__all__ = ["import_webdataset", "import_mds", "import_litdata", "braceexpand", "main"]

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


_REG, _DIR, _PAX, _PAX_GLOBAL, _GNU_NAME, _GNU_LINK = b"07\0", b"5", b"x", b"g", b"L", b"K"


def _open_stream(raw):
    """The tar stream of an opened shard file: gzip, bzip2 and xz told by their magic bytes."""
    head = raw.peek(6)[:6] if hasattr(raw, "peek") else b""
    if head[:2] == b"\x1f\x8b":
        import gzip
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if head[:3] == b"BZh":
        import bz2
        return bz2.BZ2File(raw)
    if head[:6] == b"\xfd7zXZ\x00":
        import lzma
        return lzma.LZMAFile(raw)
    return raw


def _octal(field, what):
    if field[:1] and field[0] & 0x80:  # GNU base-256, for sizes of 8 GiB and more
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text or b"0", 8)
    except ValueError:
        raise _BrokenTar(f"not a tar member header ({what} {bytes(field)!r:.40} is not an octal number)") from None


def _tar_entries(f):
    """(offset, name, typeflag, data) of each member of the tar stream `f`, in order: the POSIX
    ustar/pax and GNU layouts (long names through pax 'path' and GNU 'L' members); data is None for
    members that are not regular files. A header block that is neither a header nor the archive's end
    (a bad checksum), or a stream that ends inside a header or a member's data, raises _BrokenTar:
    nothing after it can be trusted. Reads the stream once, front to back (no seeks)."""
    pos, name_next, size_next = 0, None, None
    while True:
        try:
            item, pos, name_next, size_next = _tar_entry(f, pos, name_next, size_next)
        except _BrokenTar as e:
            e.offset = getattr(e, "offset", pos)
            raise
        except (EOFError, zlib.error, OSError, ValueError) as e:  # the compressed stream (gzip, bz2, xz)
            b = _BrokenTar(f"{type(e).__name__}: {e}")
            b.offset = pos
            raise b from None
        if item is False:
            return
        if item is not None:
            yield item


def _tar_entry(f, pos, name_next, size_next):
    """One header (and its data) of _tar_entries: (item or None for a metadata member or False at the
    end, the position after it, the name and size a pax or GNU member gave the next one)."""
    buf = f.read(512)
    if not buf or buf.count(0) == 512:
        return False, pos, None, None  # the archive's end (its zero blocks, or none at all)
    if len(buf) < 512:
        raise _BrokenTar(f"the tar ends inside a member header ({len(buf)} of 512 bytes)")
    chk = _octal(buf[148:156], "checksum")
    unsigned = sum(buf) - sum(buf[148:156]) + 8 * 32
    if chk != unsigned:  # some old tars summed signed chars
        high = sum(1 for b in buf if b >= 128) - sum(1 for b in buf[148:156] if b >= 128)
        if chk != unsigned - 256 * high:
            raise _BrokenTar("not a tar member header (its checksum does not match)")
    typ = buf[156:157]
    size = _octal(buf[124:136], "size")
    name = buf[0:100].split(b"\0", 1)[0]
    if buf[257:262] == b"ustar":
        prefix = buf[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    if size_next is not None:
        size = size_next
    if name_next is not None:
        name = name_next
    start = pos
    pos += 512
    meta = typ in (_PAX, _PAX_GLOBAL, _GNU_NAME, _GNU_LINK)
    reg = typ in _REG and not name.endswith(b"/")
    data = None
    if reg or meta:
        data = f.read(size)
        if len(data) < size:
            raise _EndOfData(start, name, len(data), size)
    else:
        left = size if typ not in (b"1", b"2", b"3", b"4", b"5", b"6") else 0
        while left:
            got = len(f.read(min(left, 1 << 20)))
            if not got:
                raise _EndOfData(start, name, size - left, size)
            left -= got
    pos += size
    pad = -size % 512
    pos += len(f.read(pad)) if pad else 0
    if typ == _PAX:
        return (None, pos) + _pax(data, name_next, size_next)
    if typ == _GNU_NAME:
        return None, pos, data.split(b"\0", 1)[0], size_next
    if meta:
        return None, pos, name_next, size_next  # a global pax header, a GNU long link name
    return (start, name.decode("utf-8", "surrogateescape"), typ, data if reg else None), pos, None, None


class _EndOfData(_BrokenTar):
    def __init__(self, offset, name, got, size):
        super().__init__(f"the tar ends inside the data of {name.decode('utf-8', 'replace')!r} ({got} of {size} "
                         "bytes)")
        self.offset, self.name = offset, name.decode("utf-8", "surrogateescape")


def _pax(data, name, size):
    """The path and size a pax extended header gives the member after it."""
    at = 0
    while at < len(data):
        sp = data.find(b" ", at)
        if sp < 0:
            break
        try:
            n = int(data[at:sp])
        except ValueError:
            raise _BrokenTar(f"a pax header record at {at} has no length") from None
        rec = data[sp + 1:at + n - 1]
        key, _, value = rec.partition(b"=")
        if key == b"path":
            name = value
        elif key == b"size":
            size = int(value)
        at += n
    return name, size


def _members(path):
    """(kind, ...) items of one shard, in order: ("sample", key, {ext: bytes}, error or None),
    ("bad", name, why) for a member that belongs to no sample, and ("broken", what) for a tar that
    breaks off (then nothing after it in the shard)."""
    count, last, key, parts, err = 0, None, None, {}, None
    try:
        with open(path, "rb", buffering=4 << 20) as raw:  # members are small: read the file in big pieces
            for _, name, typ, data in _tar_entries(_open_stream(raw)):
                count += 1
                if typ == _DIR or name.endswith("/") or _META.search(name):
                    continue
                if data is None:
                    yield ("bad", name, f"member {count} ({name!r}) is a link or device, not a file")
                    continue
                last = name
                k = _KEY.match(name)
                if not k:
                    yield ("bad", name, f"member {count} ({name!r}) has no extension: it belongs to no "
                           "sample (WebDataset skips it)")
                    continue
                mk, ext = k.group(1), k.group(2).lower()
                if mk != key:
                    if key is not None:
                        yield ("sample", key, parts, err)
                    key, parts, err = mk, {}, None
                if ext in parts:
                    err = err or f"extension {ext!r} twice in one sample (member {count}, {name!r})"
                parts[ext] = data
    except (_BrokenTar, OSError) as e:  # OSError: the shard file itself (opened, read)
        no = count + 1
        where = (f"member {no}" + (f" ({e.name!r}, its data)" if isinstance(e, _EndOfData) else "")
                 + f", at byte {getattr(e, 'offset', 0)} of the tar" + (f", after {last!r}" if last else ""))
        why = str(e) if isinstance(e, _BrokenTar) else f"{type(e).__name__}: {e}"
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
            fields[n] = _image_field(images)
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


def _as_jpeg(data):
    """An image member for a codec="jpeg" field: a colour JPEG as it is, anything else (PNG, WebP, a
    greyscale or CMYK JPEG) decoded to RGB and encoded as JPEG at quality 90 (pack's default), and
    whether it was re-encoded."""
    frame = _jpeg_frame(data)
    if frame is not None and frame[2] == 3:
        return data, False
    from PIL import Image
    b = io.BytesIO()
    Image.fromarray(_decode_image(data)).save(b, "JPEG", quality=90)
    return b.getvalue(), True


class _Reencoded(bytes):
    """A JPEG encoded here (not the input's own bytes): counted in the summary's "reencoded"."""


def _image_value(data, images):
    """An encoded image as the field of `images` takes it: pixels, the bytes, or a colour JPEG."""
    if images == "decode":
        return _decode_image(data)
    if images == "jpeg":
        out, again = _as_jpeg(data)
        return _Reencoded(out) if again else out
    return data


def _image_field(images):
    return {"decode": Ragged("uint8", (None, None, 3)), "bytes": Bytes(),
            "jpeg": Ragged("uint8", (None, None, 3), codec="jpeg")}[images]


def _convert(job):
    """(sample dict, None) or (None, what is wrong) for one sample's parts."""
    key, parts, plan, images = job
    out = {"key": key}
    for ext, data in parts.items():
        name, kind = plan[ext]
        try:
            if kind == "image":
                out[name] = _image_value(data, images)
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
_BATCH = 16  # samples per task handed to a worker


def _convert_batch(convert, jobs):
    return [convert(j) for j in jobs]


def _run(who, target, items, start, prepare, convert, workers, on_error, progress, writer_args):
    """The import loop shared by the formats. `items` yields ("bad", where, why) and ("sample",
    where, payload) in order; start(payload, where) -> (fields, ctx) for the first sample (the
    dataset's fields); prepare(payload, ctx) -> (job, None) or (None, why), on this thread;
    convert(job) -> (sample dict, None) or (None, why), on `workers` threads (image decode: PIL
    releases the GIL), in batches of _BATCH.
    Samples are written in order; the bad ones are listed in OUT/skipped.tsv (or raise with
    on_error="fail"). Returns (writer closed, skipped count, ctx)."""
    if on_error not in ("skip", "fail"):
        raise ValueError(f"{who}: on_error={on_error!r}: 'skip' or 'fail'")
    n = (os.cpu_count() or 1) if workers is None else max(int(workers), 0)
    show = sys.stderr.isatty() if progress is None else progress
    skipped, st = [], {"w": None, "ctx": None, "index": 0, "reencoded": 0}

    def bad(i, where, why):
        if on_error == "fail":
            raise L.Error(L.STK_E_FORMAT, f"{who}: {where}: {why}")
        skipped.append((i, where, why.replace("\t", " ").replace("\n", " ")))

    def jobs():
        """(index, where, job, None) per sample to convert, (index, where, None, why) per bad one."""
        for kind, where, x in items:
            i = st["index"]
            st["index"] += 1
            if kind == "bad":
                yield i, where, None, x
                continue
            if st["w"] is None:
                fields, st["ctx"] = start(x, where)
                st["w"] = Writer(target, fields, *writer_args, _tool=who)
            job, why = prepare(x, st["ctx"])
            yield i, where, job, why

    pool = None
    if n:
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(n)
    last_shown = 0.0
    try:
        import collections
        window = collections.deque()  # (the batch's [(index, where)], its future or its results)
        batch, metas = [], []

        def drain(limit):
            nonlocal last_shown
            while len(window) > limit:
                ms, fut = window.popleft()
                for (i, where), (sample, why) in zip(ms, fut.result() if pool else fut):
                    if not why:
                        st["reencoded"] += sum(type(v) is _Reencoded for v in sample.values())
                        try:
                            st["w"].write(sample)
                        except (TypeError, ValueError) as e:  # the value refused (a JPEG that does not decode)
                            why = str(e)
                    if why:
                        bad(i, where, why)
                if show and st["w"] is not None and time.monotonic() - last_shown > 0.2:
                    last_shown = time.monotonic()
                    sys.stderr.write(f"\r{who}: {st['w'].records:,} records, {len(skipped):,} skipped ")
                    sys.stderr.flush()

        def flush():
            if batch:
                window.append((list(metas), pool.submit(_convert_batch, convert, list(batch)) if pool
                               else _convert_batch(convert, batch)))
                batch.clear()
                metas.clear()

        for i, where, job, why in jobs():
            if why:
                if on_error == "fail":
                    flush()
                    drain(0)  # the samples before it first: the error named is the input's first
                bad(i, where, why)
                continue
            batch.append(job)
            metas.append((i, where))
            if len(batch) >= _BATCH:
                flush()
                drain(4 * max(n, 1))
        flush()
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
    st["ctx"] = st["ctx"] or {}
    st["ctx"]["reencoded"] = st["reencoded"]
    return st["w"], len(skipped), st["ctx"]


def import_webdataset(sources, out, images="decode", workers=None, on_error="skip", shard_size=1 << 30,
                      records_per_shard=0, classes=None, metadata=None, force=False, progress=None):
    """Write the samples of WebDataset shards into a stoker dataset at `out`, in shard order.

    sources   a name or a list of them: local .tar / .tar.gz / .tgz files, brace patterns
              (`shards-{000000..000099}.tar`), globs (sorted), directories (their tars, sorted)
    images    "decode": image members decoded to RGB pixels, field u8[H, W, 3] of each image's own
              size (stoker.Transform crops them at load, as pack --resize keep); "bytes": the
              files' bytes as they are (a Bytes field); "jpeg": a JPEG field (codec="jpeg", as pack
              --image-format original writes), colour JPEGs stored as they are (checked whole by
              libstoker; one that does not decode is listed), other images encoded at quality 90
              (counted in the summary's "reencoded"); the reader decodes them at load
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
    if images not in ("decode", "bytes", "jpeg"):
        raise ValueError(f"{who}: images={images!r}: 'decode', 'bytes' or 'jpeg'")
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
            "seconds": time.monotonic() - t0, "bytes": w.bytes, "fields": fields, "reencoded": ctx["reencoded"]}


# ------------------------------------------------------------------ MosaicML Streaming (MDS)
# The layout of mosaicml/streaming (streaming/base/format/mds): DIR/index.json lists the shards
# ({"version": 2, "shards": [{"format": "mds", "column_names", "column_encodings", "column_sizes",
# "samples", "raw_data": {"basename"}, "zip_data": {"basename"} or null, "compression"}]}); a shard
# file is u32 n, u32 offsets[n + 1] (from the file's start), the shard's JSON config, the samples;
# a sample is a u32 size for each variable-size column, then the columns' bytes, in column order.
_MDS_SCALARS = {"int": "int64", **{t: t for t in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
                                                  "int64", "float16", "float32", "float64")}}
_MDS_TEXT = frozenset(["str", "str_int", "str_float", "str_decimal", "json"])
_MDS_NDARRAY_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32", 33: "int32",
                       34: "float32", 64: "uint64", 65: "int64", 66: "float64"}


def _zstd_decompress(data):
    """A zstd frame's content through the system's libzstd (Python's zstandard is not in Debian 12)."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("zstd")
    if not name:
        raise ValueError("zstd compression needs libzstd (apt-get install libzstd1)")
    z = ctypes.CDLL(name)
    z.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    z.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    z.ZSTD_decompress.restype = ctypes.c_size_t
    z.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    z.ZSTD_isError.argtypes = [ctypes.c_size_t]
    z.ZSTD_getErrorName.restype = ctypes.c_char_p
    z.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
    size = z.ZSTD_getFrameContentSize(data, len(data))
    if size >= (1 << 63):  # ZSTD_CONTENTSIZE_UNKNOWN / _ERROR
        raise ValueError("not a zstd frame with its content size")
    out = ctypes.create_string_buffer(max(size, 1))
    got = z.ZSTD_decompress(out, size, data, len(data))
    if z.ZSTD_isError(got):
        raise ValueError(f"zstd: {z.ZSTD_getErrorName(got).decode()}")
    return out.raw[:got]


def _mds_index(src):
    """(directory, shards) of an MDS dataset: its index.json checked, every shard in the MDS format
    with the first's columns."""
    src = os.fspath(src)
    path = src if os.path.basename(src) == "index.json" else os.path.join(src, "index.json")
    who = "stoker.import_mds"
    try:
        with open(path) as f:
            index = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{who}: {path}: no such file (an MDS dataset is a directory with "
                                "index.json)") from None
    except ValueError as e:
        raise ValueError(f"{who}: {path}: not JSON ({e})") from None
    shards = index.get("shards") if isinstance(index, dict) else None
    if not isinstance(shards, list) or not shards:
        raise ValueError(f"{who}: {path}: no 'shards' list: not a Streaming index")
    cols = None
    for k, sh in enumerate(shards):
        if not isinstance(sh, dict) or sh.get("format") != "mds":
            raise ValueError(f"{who}: {path}: shard {k} is format {sh.get('format') if isinstance(sh, dict) else sh!r}:"
                             " stoker imports MDS shards only (xsv/json shards: read them with Streaming)")
        c = (sh.get("column_names"), sh.get("column_encodings"), sh.get("column_sizes"))
        if not all(isinstance(x, list) for x in c) or not len(c[0]) == len(c[1]) == len(c[2]) or not c[0]:
            raise ValueError(f"{who}: {path}: shard {k}: column_names, column_encodings and column_sizes are not "
                             "lists of one length")
        if cols is None:
            cols = c
        elif c != cols:
            raise ValueError(f"{who}: {path}: shard {k} has other columns than shard 0 ({c[0]} {c[1]} against "
                             f"{cols[0]} {cols[1]})")
    return os.path.dirname(path), shards


def _mds_shard(root, sh):
    """The bytes of one shard: the raw file where it is there, else the compressed one decompressed."""
    raw = (sh.get("raw_data") or {}).get("basename")
    if raw and os.path.exists(os.path.join(root, raw)):
        with open(os.path.join(root, raw), "rb") as f:
            return os.path.join(root, raw), f.read()
    z = (sh.get("zip_data") or {}).get("basename")
    if not z:
        raise FileNotFoundError(f"{os.path.join(root, raw or '?')}: no such file")
    path = os.path.join(root, z)
    algo = (sh.get("compression") or "").split(":")[0]
    with open(path, "rb") as f:
        data = f.read()
    if algo == "zstd":
        return path, _zstd_decompress(data)
    if algo == "gz":
        import gzip
        return path, gzip.decompress(data)
    if algo == "bz2":
        import bz2
        return path, bz2.decompress(data)
    raise ValueError(f"{path}: compression {sh.get('compression')!r}: stoker reads zstd, gz and bz2 (or the "
                     "uncompressed shard beside it)")


def _mds_samples(root, shards):
    """("sample", where, bytes) / ("bad", where, why) for every sample of every shard, in order."""
    for k, sh in enumerate(shards):
        name = (sh.get("raw_data") or {}).get("basename") or f"shard {k}"
        try:
            path, data = _mds_shard(root, sh)
        except Exception as e:
            yield "bad", os.path.join(root, name), f"the shard cannot be read: {type(e).__name__}: {e}"
            continue
        head = int.from_bytes(data[:4], "little") if len(data) >= 4 else -1
        if head < 0 or 4 + 4 * (head + 1) > len(data):
            yield "bad", path, (f"not an MDS shard: its {len(data)} bytes cannot hold the sample count and "
                                "offsets it starts with")
            continue
        import numpy as np
        off = np.frombuffer(data, "<u4", head + 1, 4).astype(np.int64)
        if head != sh.get("samples"):
            yield "bad", path, f"the shard holds {head} samples, index.json says {sh.get('samples')}"
        for i in range(head):
            a, b = int(off[i]), int(off[i + 1])
            if not 4 + 4 * (head + 1) <= a <= b <= len(data):
                yield "bad", f"{path}:{i}", (f"sample {i} spans bytes {a}..{b} of a {len(data)}-byte shard: "
                                             + ("truncated" if b > len(data) else "bad offsets"))
                continue
            yield "sample", f"{path}:{i}", memoryview(data)[a:b]


def _mds_columns(sample, sizes):
    """The columns' bytes of one sample, or a ValueError saying why they do not fit."""
    nvar = sum(s is None for s in sizes)
    if len(sample) < 4 * nvar:
        raise ValueError(f"{len(sample)} bytes cannot hold the sizes of its {nvar} variable columns")
    var = iter(int.from_bytes(sample[4 * j:4 * j + 4], "little") for j in range(nvar))
    lens = [next(var) if s is None else int(s) for s in sizes]
    if 4 * nvar + sum(lens) != len(sample):
        raise ValueError(f"the column sizes add up to {4 * nvar + sum(lens)} bytes, the sample holds {len(sample)}")
    out, at = [], 4 * nvar
    for n in lens:
        out.append(sample[at:at + n])
        at += n
    return out


def _mds_ndarray(enc, v):
    """(array) of an MDS ndarray value under encoding 'ndarray[:dtype[:shape]]'."""
    import numpy as np
    args = enc.split(":")[1:]
    dtype = args[0] if args else None
    shape = tuple(int(d) for d in args[1].split(",")) if len(args) > 1 else None
    v, at = bytes(v), 0
    if dtype is None:
        dtype = _MDS_NDARRAY_DTYPES.get(v[0])
        if dtype is None:
            raise ValueError(f"ndarray dtype code {v[0]} unknown")
        at = 1
    if shape is None:
        byte = v[at]
        ndim, sdt = byte >> 2, ("uint8", "uint16", "uint32", "uint64")[byte & 3]
        w = 1 << (byte & 3)
        shape = tuple(int(d) for d in np.frombuffer(v, "<" + np.dtype(sdt).str[1:], ndim, at + 1))
        at += 1 + ndim * w
    a = np.frombuffer(v, "<" + np.dtype(dtype).str[1:], offset=at)
    return np.ascontiguousarray(a.reshape(shape).astype(dtype, copy=False))


def _mds_pil(v):
    import numpy as np
    from PIL import Image
    v = bytes(v)
    w, h, m = (int(x) for x in np.frombuffer(v, "<u4", 3))
    im = Image.frombytes(v[12:12 + m].decode(), (w, h), v[12 + m:])
    return np.ascontiguousarray(np.asarray(im if im.mode == "RGB" else im.convert("RGB"), dtype=np.uint8))


def _mds_value(enc, v, images):
    base = enc.split(":")[0]
    if base in _MDS_SCALARS:
        import numpy as np
        return np.frombuffer(v, "<" + np.dtype(_MDS_SCALARS[base]).str[1:], 1)[0].item()
    if base in _MDS_TEXT:
        text = bytes(v).decode("utf-8")
        if base == "json":
            json.loads(text)
        return text
    if base in ("jpeg", "png"):
        return _image_value(bytes(v), images)
    if base == "pil":
        return _mds_pil(v)
    if base == "ndarray":
        return _mds_ndarray(enc, v)
    return bytes(v)  # bytes, pkl (kept as the pickle's bytes: never unpickled)


def _mds_field(name, enc, first, images):
    """The stoker field of MDS column `name` (`first`: its value in the first sample)."""
    base = enc.split(":")[0]
    if base in _MDS_SCALARS:
        return Scalar(_MDS_SCALARS[base])
    if base in _MDS_TEXT:
        return String()
    if base in ("jpeg", "png"):
        return _image_field(images)
    if base == "pil":
        return Ragged("uint8", (None, None, 3))
    if base == "ndarray":
        args = enc.split(":")[1:]
        if len(args) > 1:
            return Tensor(first.dtype.name, first.shape)
        return Ragged(first.dtype.name, (None,) * first.ndim)
    if base in ("bytes", "pkl"):
        return Bytes()
    raise ValueError(f"stoker.import_mds: column {name!r}: encoding {enc!r} unknown")


def import_mds(src, out, images="decode", workers=None, on_error="skip", shard_size=1 << 30, records_per_shard=0,
               classes=None, metadata=None, force=False, progress=None):
    """Write the samples of a MosaicML Streaming (MDS) dataset into a stoker dataset at `out`, in the
    index's order. `src`: the local directory holding index.json (or that file); shards compressed
    with zstd, gz or bz2 are decompressed in memory where the raw shard is not there.

    One field per column, under the column's name: int and int8..float64 scalars, str / json (and
    str_int, str_float, str_decimal, as their text) as String, jpeg / png images decoded to RGB
    pixels u8[H, W, 3] (images="bytes": the encoded bytes; "jpeg": a JPEG field, as
    import_webdataset), pil as pixels, ndarray as a Tensor (a
    fixed shape) or a Ragged field (the dtype and rank of the first sample), bytes and pkl as Bytes
    (a pickle is kept as its bytes, never unpickled). A sample that does not decode, or whose array
    has another dtype or rank than the first's, is listed in OUT/skipped.tsv (input: shard file and
    sample number); other arguments as import_webdataset. Returns a summary dict."""
    who = "stoker.import_mds"
    if images not in ("decode", "bytes", "jpeg"):
        raise ValueError(f"{who}: images={images!r}: 'decode', 'bytes' or 'jpeg'")
    t0 = time.monotonic()
    root, shards = _mds_index(src)
    names, encs, sizes = shards[0]["column_names"], shards[0]["column_encodings"], shards[0]["column_sizes"]
    for n in names:
        if not isinstance(n, str) or not _NAME.match(n):
            raise ValueError(f"{who}: column {n!r} makes no stoker field name (1..31 of A-Z a-z 0-9 _ . -)")

    def convert(sample):
        try:
            vals = _mds_columns(sample, sizes)
        except ValueError as e:
            return None, str(e)
        out = {}
        for name, enc, v in zip(names, encs, vals):
            try:
                out[name] = _mds_value(enc, v, images)
            except Exception as e:
                return None, f"column {name!r} ({enc}): {type(e).__name__}: {e}"[:500]
        return out, None

    def start(sample, where):
        first, why = convert(sample)
        if why:
            raise L.Error(L.STK_E_FORMAT, f"{who}: {where}: the first sample does not decode: {why}")
        return {n: _mds_field(n, e, first[n], images) for n, e in zip(names, encs)}, None

    arrays = [n for n, e in zip(names, encs) if e.split(":")[0] == "ndarray"]
    fields = {}

    def convert_checked(sample):
        """convert(), and an ndarray of another dtype or rank than the first sample's refused here,
        with the column named (the writer would refuse it with less to say)."""
        s, why = convert(sample)
        for name in arrays if s is not None else ():
            a, f = s[name], fields[name]
            want = _np_dtype(f.dtype)
            fixed = f.kind == L.STK_KIND_TENSOR
            if a.dtype != want or a.ndim != len(f.shape) or (fixed and a.shape != f.shape):
                shape = ", ".join(str(d) for d in f.shape) if fixed else ", ".join("*" * len(f.shape))
                return None, (f"column {name!r}: {a.dtype.name}{list(a.shape)}, not the first sample's "
                              f"{want.name}[{shape}]")
        return s, why

    def start_keep(sample, where):
        f, ctx = start(sample, where)
        fields.update(f)
        return f, ctx

    w, nskip, ctx = _run(who, os.fspath(out), _mds_samples(root, shards), start_keep, lambda x, ctx: (x, None),
                       convert_checked, workers, on_error, progress,
                       (shard_size, records_per_shard, classes, metadata, force))
    return {"out": os.fspath(out), "shards": len(shards), "records": w.records, "skipped": nskip,
            "seconds": time.monotonic() - t0, "bytes": w.bytes, "fields": dict(zip(names, encs)),
            "reencoded": ctx["reencoded"]}


# ------------------------------------------------------------------ LitData chunks
# The layout of Lightning-AI/litdata (src/litdata/streaming/writer.py): DIR/index.json holds
# {"chunks": [{"filename": "chunk-R-N.bin", "chunk_size": samples, ...}], "config": {"data_format":
# [a serializer name per leaf], "data_spec": torch pytree spec (treespec_dumps), "compression"}};
# a chunk file is u32 n, u32 offsets[n + 1] (from the file's start), the items; an item is a u32 size
# per leaf, then the leaves' bytes (an item that is one 1-D torch tensor: its bytes alone, no sizes).
_LD_NUMPY = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
             "float64"]                                   # litdata.constants._NUMPY_DTYPES_MAPPING 0..10
_LD_TORCH = {0: "float32", 1: "float32", 2: "float64", 3: "float64", 8: "float16", 9: "float16", 11: "uint8",
             12: "int8", 13: "int16", 14: "int16", 15: "int32", 16: "int32", 17: "int64", 18: "int64",
             19: "bool"}                                  # litdata.constants._TORCH_DTYPES_MAPPING


def _ld_names(spec, n):
    """The field names of the n leaves of a LitData item: dict keys (nested: joined by '.'), tuple
    and list positions; a lone leaf is 'data'."""
    try:
        node = json.loads(spec)
        node = node[1] if isinstance(node, list) else node
    except (TypeError, ValueError):
        node = None

    def walk(x, prefix):
        kids = x.get("children_spec") or []
        if not kids:
            return [prefix or "data"]
        ctx = json.loads(x["context"]) if x.get("type") == "builtins.dict" else list(range(len(kids)))
        out = []
        for k, c in zip(ctx, kids):
            out += walk(c, f"{prefix}.{k}" if prefix else str(k))
        return out

    try:
        names = walk(node, "") if isinstance(node, dict) else None
    except (KeyError, TypeError, ValueError):
        names = None
    if not names or len(names) != n:
        names = [str(i) for i in range(n)] if n > 1 else ["data"]
    return names


def _ld_array(fmt, v):
    import numpy as np
    base = fmt.split(":")[0]
    v = bytes(v)
    if base.startswith("no_header_"):
        idx = int(fmt.split(":")[1])
        dt = _LD_NUMPY[idx] if base == "no_header_numpy" else _LD_TORCH[idx]
        return np.frombuffer(v, "<" + np.dtype(dt).str[1:]).astype(dt if dt != "bool" else "uint8")
    idx, ndim = (int(x) for x in np.frombuffer(v, "<u4", 2))
    dt = _LD_NUMPY[idx] if base == "numpy" else _LD_TORCH[idx]
    shape = tuple(int(d) for d in np.frombuffer(v, "<u4", ndim, 8))
    a = np.frombuffer(v, "<" + np.dtype(dt).str[1:], offset=8 + 4 * ndim).reshape(shape)
    return np.ascontiguousarray(a.astype("uint8") if dt == "bool" else a)


def _ld_value(fmt, v, images):
    import numpy as np
    base = fmt.split(":")[0]
    if base == "int":
        return int(np.frombuffer(v, "<i8", 1)[0])
    if base == "float":
        return float(np.frombuffer(v, "<f8", 1)[0])
    if base == "bool":
        return int(bytes(v)[0] != 0)
    if base == "str":
        return bytes(v).decode("utf-8")
    if base == "jpeg":
        return _image_value(bytes(v), images)
    if base == "pil":
        return _mds_pil(v)  # the same layout: u32 width, height, mode length, mode, raw pixels
    if base in ("numpy", "tensor", "no_header_numpy", "no_header_tensor"):
        return _ld_array(fmt, v)
    return bytes(v)  # bytes, pickle (never unpickled), file:EXT, video:EXT, tiff


def _ld_field(fmt, first, images):
    base = fmt.split(":")[0]
    if base == "int":
        return Scalar("int64")
    if base == "float":
        return Scalar("float64")
    if base == "bool":
        return Scalar("uint8")
    if base == "str":
        return String()
    if base == "jpeg":
        return _image_field(images)
    if base == "pil":
        return Ragged("uint8", (None, None, 3))
    if base in ("numpy", "tensor", "no_header_numpy", "no_header_tensor"):
        return Ragged(first.dtype.name, (None,) * first.ndim)
    return Bytes()


def import_litdata(src, out, images="decode", workers=None, on_error="skip", shard_size=1 << 30,
                   records_per_shard=0, classes=None, metadata=None, force=False, progress=None):
    """Write the items of a LitData optimized dataset (a local directory with index.json and its
    chunk-*.bin files, raw or zstd-compressed) into a stoker dataset at `out`, in the index's order.

    One field per leaf of the item's pytree, named by its dict key (nested keys joined by '.', tuple
    positions as numbers, a lone leaf 'data'): int (int64), float (float64), bool (uint8), str as
    String, jpeg decoded to RGB pixels (images="bytes": the JPEG's bytes; "jpeg": a JPEG field, as
    import_webdataset), pil as pixels, numpy and
    tensor arrays as variable-shape fields of the first item's dtype and rank, bytes, pickle (never
    unpickled), file and video leaves as Bytes. Items that do not decode, or whose arrays have another
    dtype or rank than the first's, are listed in OUT/skipped.tsv; other arguments as
    import_webdataset. Returns a summary dict."""
    who = "stoker.import_litdata"
    if images not in ("decode", "bytes", "jpeg"):
        raise ValueError(f"{who}: images={images!r}: 'decode', 'bytes' or 'jpeg'")
    t0 = time.monotonic()
    src = os.fspath(src)
    path = src if os.path.basename(src) == "index.json" else os.path.join(src, "index.json")
    try:
        with open(path) as f:
            index = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{who}: {path}: no such file (a LitData dataset is a directory with "
                                "index.json)") from None
    except ValueError as e:
        raise ValueError(f"{who}: {path}: not JSON ({e})") from None
    cfg = index.get("config") if isinstance(index, dict) else None
    chunks = index.get("chunks") if isinstance(index, dict) else None
    if not isinstance(cfg, dict) or not isinstance(chunks, list) or not chunks:
        raise ValueError(f"{who}: {path}: no 'config' and 'chunks': not a LitData index")
    fmts = cfg.get("data_format")
    if not isinstance(fmts, list) or not fmts or not all(isinstance(x, str) for x in fmts):
        raise ValueError(f"{who}: {path}: config.data_format is {fmts!r:.80}, not a list of serializer names")
    if cfg.get("encryption"):
        raise ValueError(f"{who}: {path}: the chunks are encrypted; decrypt them with LitData first")
    comp = (cfg.get("compression") or "").split(":")[0]
    if comp not in ("", "zstd"):
        raise ValueError(f"{who}: {path}: compression {cfg.get('compression')!r}: stoker reads zstd")
    names = _ld_names(cfg.get("data_spec"), len(fmts))
    for n in names:
        if not _NAME.match(n):
            raise ValueError(f"{who}: leaf {n!r} makes no stoker field name (1..31 of A-Z a-z 0-9 _ . -)")
    lone = len(fmts) == 1 and fmts[0].startswith("no_header_tensor")  # a lone 1-D tensor: stored without sizes
    root = os.path.dirname(path)

    def items():
        for k, ch in enumerate(chunks):
            name = ch.get("filename") if isinstance(ch, dict) else None
            where = os.path.join(root, name or f"chunk {k}")
            try:
                with open(where, "rb") as f:
                    data = f.read()
                if comp == "zstd":
                    data = _zstd_decompress(data)
            except Exception as e:
                yield "bad", where, f"the chunk cannot be read: {type(e).__name__}: {e}"
                continue
            n = int.from_bytes(data[:4], "little") if len(data) >= 4 else -1
            if n < 0 or 4 + 4 * (n + 1) > len(data):
                yield "bad", where, (f"not a LitData chunk: its {len(data)} bytes cannot hold the item count and "
                                     "offsets it starts with")
                continue
            import numpy as np
            off = np.frombuffer(data, "<u4", n + 1, 4).astype(np.int64)
            if ch.get("chunk_size") not in (None, n):
                yield "bad", where, f"the chunk holds {n} items, index.json says {ch.get('chunk_size')}"
            for i in range(n):
                a, b = int(off[i]), int(off[i + 1])
                if not 4 + 4 * (n + 1) <= a <= b <= len(data):
                    yield "bad", f"{where}:{i}", (f"item {i} spans bytes {a}..{b} of a {len(data)}-byte chunk: "
                                                  + ("truncated" if b > len(data) else "bad offsets"))
                    continue
                yield "sample", f"{where}:{i}", memoryview(data)[a:b]

    fields = {}

    def convert(item):
        try:
            vals = [item] if lone else _mds_columns(item, [None] * len(fmts))
        except ValueError as e:
            return None, str(e).replace("variable columns", "leaves").replace("column sizes", "leaf sizes")
        out = {}
        for name, fmt, v in zip(names, fmts, vals):
            try:
                out[name] = _ld_value(fmt, v, images)
            except Exception as e:
                return None, f"leaf {name!r} ({fmt}): {type(e).__name__}: {e}"[:500]
            f = fields.get(name)
            a = out[name]
            if f is not None and f.codec is None and f.kind == L.STK_KIND_ARRAY and (
                    a.dtype != _np_dtype(f.dtype) or a.ndim != len(f.shape)):
                return None, (f"leaf {name!r}: {a.dtype.name}{list(a.shape)}, not the first item's "
                              f"{_np_dtype(f.dtype).name}[{', '.join('*' * len(f.shape))}]")
        return out, None

    def start(item, where):
        first, why = convert(item)
        if why:
            raise L.Error(L.STK_E_FORMAT, f"{who}: {where}: the first item does not decode: {why}")
        fields.update({n: _ld_field(f, first[n], images) for n, f in zip(names, fmts)})
        return dict(fields), None

    w, nskip, ctx = _run(who, os.fspath(out), items(), start, lambda x, ctx: (x, None), convert, workers, on_error,
                       progress, (shard_size, records_per_shard, classes, metadata, force))
    return {"out": os.fspath(out), "shards": len(chunks), "records": w.records, "skipped": nskip,
            "seconds": time.monotonic() - t0, "bytes": w.bytes, "fields": dict(zip(names, fmts)),
            "reencoded": ctx["reencoded"]}


# ------------------------------------------------------------------ the command
def main(argv=None, fmt="wds"):
    """The commands: python3 -m stoker.import_wds SRC... OUT, python3 -m stoker.import_mds DIR OUT,
    python3 -m stoker.import_litdata DIR OUT."""
    import argparse
    prog = f"import_{fmt}"
    if fmt == "wds":
        ap = argparse.ArgumentParser(
            prog="python3 -m stoker.import_wds",
            description="Import WebDataset tar shards (local .tar/.tar.gz; brace patterns such as "
                        "'train-{000000..000099}.tar', globs, directories) into a stoker dataset in OUT. Fields: "
                        "key (__key__), image (decoded RGB, or the file's bytes with --images bytes), label (.cls), "
                        "and one per other extension (json/txt as text, the rest bytes).",
            epilog="Exit status: 0 all imported, 1 error (nothing written), 2 usage, 3 imported with some samples "
                   "skipped (listed in OUT/skipped.tsv).")
        ap.add_argument("src", nargs="+", metavar="SRC", help="shard files, brace patterns, globs or directories")
    elif fmt == "litdata":
        ap = argparse.ArgumentParser(
            prog="python3 -m stoker.import_litdata",
            description="Import a LitData optimized dataset (a local directory with index.json and chunk-*.bin, raw "
                        "or zstd) into a stoker dataset in OUT: one field per leaf of the items (jpeg/pil images "
                        "decoded to RGB, or kept as bytes with --images bytes).",
            epilog="Exit status: 0 all imported, 1 error (nothing written), 2 usage, 3 imported with some items "
                   "skipped (listed in OUT/skipped.tsv).")
        ap.add_argument("src", metavar="DIR", help="the LitData dataset's directory (with index.json)")
    else:
        ap = argparse.ArgumentParser(
            prog="python3 -m stoker.import_mds",
            description="Import a MosaicML Streaming (MDS) dataset (a local directory with index.json; shards raw, "
                        "or compressed with zstd, gz or bz2) into a stoker dataset in OUT: one field per column "
                        "(jpeg/png/pil images decoded to RGB, or kept as bytes with --images bytes).",
            epilog="Exit status: 0 all imported, 1 error (nothing written), 2 usage, 3 imported with some samples "
                   "skipped (listed in OUT/skipped.tsv).")
        ap.add_argument("src", metavar="DIR", help="the MDS dataset's directory (with index.json)")
    ap.add_argument("out", metavar="OUT", help="the dataset directory to write")
    ap.add_argument("--images", choices=("decode", "bytes", "jpeg"), default="decode",
                    help="decode (default): RGB pixels at each image's size; bytes: the encoded images as they are; "
                         "jpeg: a JPEG field the reader decodes at load (colour JPEGs kept as they are, other "
                         "images encoded at quality 90)")
    ap.add_argument("-j", "--threads", type=int, default=None, help="conversion threads (default: all cores)")
    ap.add_argument("--on-error", choices=("skip", "fail"), default="skip",
                    help="skip (default): list bad samples in OUT/skipped.tsv and go on; fail: stop")
    ap.add_argument("--shard-size", type=int, default=1 << 30, help="shard size limit in bytes (default 1G)")
    ap.add_argument("--records-per-shard", type=int, default=0, help="records per shard (instead)")
    ap.add_argument("--force", action="store_true", help="replace a dataset in OUT")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress line or summary")
    a = ap.parse_args(argv)
    try:
        run = {"wds": import_webdataset, "mds": import_mds, "litdata": import_litdata}[fmt]
        s = run(a.src, a.out, images=a.images, workers=a.threads, on_error=a.on_error, shard_size=a.shard_size,
                records_per_shard=a.records_per_shard, force=a.force, progress=False if a.quiet else None)
    except (L.Error, OSError, ValueError) as e:
        msg = str(e)  # most already name the function they come from
        print(msg if msg.startswith("stoker.") else f"{prog}: {msg}", file=sys.stderr)
        return 1
    if not a.quiet:
        desc = (f"{k} ({e if k == 'key' or fmt != 'wds' else '.' + e})" for k, e in s["fields"].items())
        again = f", {s['reencoded']:,} images re-encoded as JPEG" if s.get("reencoded") else ""
        print(f"{prog}: {s['shards']} shard{'s' if s['shards'] != 1 else ''} -> {s['out']}: "
              f"{s['records']:,} records, {s['skipped']:,} skipped{again}, {s['seconds']:.1f} s; fields "
              + ", ".join(desc))
    if s["skipped"]:
        print(f"{prog}: {s['skipped']} not imported (samples, or a broken shard from its bad member on): "
              f"see {os.path.join(s['out'], 'skipped.tsv')}", file=sys.stderr)
        return 3
    return 0

