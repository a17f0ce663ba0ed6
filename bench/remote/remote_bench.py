"""bench/remote/run's body: see the head of bench/remote/run (or --help).

Python 3 standard library; curl, the built shardgen and shardread, Node and the
s3rver package (scripts/setup-deps), and s3fs for its part.
"""
import argparse
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time

BUCKET = "bench"
PREFIX = "ds"
JOIN_MAX = 4 << 20  # adjacent records joined into one range GET up to this many bytes
SMALL = 4096  # tensor values under this many bytes: their column is fetched whole


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(argv, **kw):
    return subprocess.run([str(a) for a in argv], **kw)


def proc_cpu(pid):
    """CPU seconds (user + system) process pid has used so far; 0 where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def server_cpu(s3):
    """CPU seconds the S3 test server and the proxy have used so far."""
    return proc_cpu(s3.server.pid) + proc_cpu(s3.proxy.pid)


# ---- the dataset ----------------------------------------------------------------

def make_dataset(tools, path, gb, shards):
    rec = 256 * 256 * 3 + 8
    n = int(gb * 1e9 / rec)
    per = -(-n // shards)
    man = os.path.join(path, "manifest.json")
    if os.path.exists(man):
        try:
            m = json.load(open(man))
            if m["record_count"] == n and len(m["shards"]) == -(-n // per):
                return m
        except (ValueError, KeyError):
            pass
    log(f"making {gb} GB ({n} records, {per} per shard) in {path} ...")
    sh([f"{tools}/shardgen", "-q", "--force", "-n", n, "--size", 256, "--records-per-shard", per, path],
       check=True)
    return json.load(open(man))


def shard_layout(path):
    """[(kind, stride, data_off, heap_off, offsets or None)] per field, and the record count."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:8] != b"STKSHARD":
            raise ValueError(f"{path}: not a shard")
        nfields, records = struct.unpack_from("<IQ", head, 20)
        desc = f.read(128 * nfields)
        fields = []
        for i in range(nfields):
            d = desc[128 * i:128 * (i + 1)]
            kind, _dtype, codec = d[32], d[33], d[34]
            stride, data_off, _data_len, heap_off = struct.unpack_from("<QQQQ", d, 88)
            if codec not in (0, 2) or (codec == 2 and kind != 3):
                raise ValueError(f"{path}: compressed fields are not measured by this bench")
            offsets = None
            if kind in (2, 3):
                f.seek(data_off)
                offsets = struct.unpack(f"<{records + 1}Q", f.read(8 * (records + 1)))
            fields.append((kind, stride, data_off, heap_off, offsets))
    return fields, records


def record_ranges(layout, i):
    """The (offset, length) of each field's value of record i of one shard."""
    out = []
    for kind, stride, data_off, heap_off, offsets in layout:
        if kind == 1:
            out.append((data_off + i * stride, stride))
        else:
            out.append((heap_off + offsets[i], offsets[i + 1] - offsets[i]))
    return out


class Dataset:
    def __init__(self, path, manifest):
        self.path = path
        self.shards = []  # (name, first global record, records, layout)
        first = 0
        for s in manifest["shards"]:
            layout, n = shard_layout(os.path.join(path, s["path"]))
            self.shards.append((s["path"], first, n, layout))
            first += n
        self.records = first
        self.bytes = sum(s["bytes"] for s in manifest["shards"])

    def locate(self, g):
        for name, first, n, layout in self.shards:
            if g < first + n:
                return name, g - first, layout
        raise IndexError(g)

    def epoch_ranges(self, order_lines, block=0):
        """The range GETs of an epoch in order: per record each field's value,
        adjacent ones (same shard, contiguous, in order) joined up to JOIN_MAX.
        block K > 0 (quasi): the first record of a block of K (spec/ORDERS.md)
        brings the block's records in, as a quasi reader reads them.
        A tensor field of values under SMALL bytes (a label) is one GET of its
        whole column per shard, when the shard is first touched: no reader
        fetches 8 bytes a request."""
        out = []
        touched = set()
        blocks = set()
        seq = []
        for line in order_lines:
            for g in map(int, line.split()):
                if block:
                    if g // block in blocks:
                        continue
                    blocks.add(g // block)
                    seq.extend(range(g // block * block, min(self.records, (g // block + 1) * block)))
                else:
                    seq.append(g)
        for g in seq:
            name, i, layout = self.locate(g)
            if name not in touched:
                touched.add(name)
                n = next(s[2] for s in self.shards if s[0] == name)
                for kind, stride, data_off, _h, _o in layout:
                    if kind == 1 and stride < SMALL:
                        out.append([name, data_off, stride * n])
            for (off, ln), (kind, stride, *_rest) in zip(record_ranges(layout, i), layout):
                if ln == 0 or (kind == 1 and stride < SMALL):
                    continue
                if out and out[-1][0] == name and out[-1][1] + out[-1][2] == off and out[-1][2] + ln <= JOIN_MAX:
                    out[-1][2] += ln
                else:
                    out.append([name, off, ln])
        return out


def upload_with_writer(tools, s3, ds_path, manifest, scratch):
    """shardgen the same dataset into s3://BUCKET/PREFIX (the project's writer); None, or why it failed.
    It runs in scratch: a writer without s3:// makes a local folder "s3:" there."""
    env = s3.environ()
    env["AWS_ENDPOINT_URL"] = s3.direct
    n = manifest["record_count"]
    per = manifest["shards"][0]["records"]
    p = sh([f"{tools}/shardgen", "-q", "-n", n, "--size", 256, "--records-per-shard", per,
            f"s3://{BUCKET}/{PREFIX}"], capture_output=True, text=True, env=env, cwd=scratch)
    if p.returncode:
        return (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
    try:
        got = json.loads(s3.get(f"{PREFIX}/manifest.json", bucket=BUCKET))
    except RuntimeError:
        return "no manifest in the bucket after shardgen (a writer without s3://)"
    if got["fingerprint"] != manifest["fingerprint"]:
        return "the uploaded dataset differs from the local copy (fingerprint)"
    return None


def dump_order(tools, ds_path, order, threads, epochs=1):
    p = sh([f"{tools}/shardread", "-q", "--dump-order", "--order", order, "-j", threads, "-e", epochs, ds_path],
           capture_output=True, text=True, check=True)
    return [ln for ln in p.stdout.splitlines() if ln.strip()]


# ---- the limit: parallel curl ------------------------------------------------------

def curl_limit(s3, ranges, n, work):
    """Fetch ranges with n curl processes (round-robin split, order kept); (GB/s, bytes by the proxy)."""
    cfgs = []
    for w in range(n):
        path = os.path.join(work, f"curl-{w}.cfg")
        with open(path, "w") as f:
            f.write('silent\nshow-error\n')
            for k, (name, off, ln) in enumerate(ranges[w::n]):
                if k:
                    f.write("next\n")
                f.write(f'url = "{s3.endpoint}/{BUCKET}/{PREFIX}/{name}"\nrange = "{off}-{off + ln - 1}"\n'
                        f'output = "/dev/null"\nfail\naws-sigv4 = "aws:amz:us-east-1:s3"\n'
                        f'user = "S3RVER:S3RVER"\nheader = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n')
        cfgs.append(path)
    s3.reset_stats()
    c0 = server_cpu(s3)
    t0 = time.monotonic()
    procs = [subprocess.Popen(["curl", "--noproxy", "*", "-K", c]) for c in cfgs]
    bad = [p.wait() for p in procs]
    dt = time.monotonic() - t0
    cpu = server_cpu(s3) - c0
    for c in cfgs:
        os.unlink(c)
    if any(bad):
        raise RuntimeError(f"curl failed (exit codes {sorted(set(bad))})")
    got = s3.stats()["body_bytes_out"]
    return got / dt / 1e9, got, cpu


# ---- stoker ------------------------------------------------------------------------

def shardread_json(argv, env):
    t0 = time.monotonic()
    p = sh(argv, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    try:
        j = json.loads(last)
    except ValueError:
        j = None
    if p.returncode != 0 or j is None or not j.get("ok"):
        err = (j or {}).get("error") or (p.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"shardread exit {p.returncode}: {err}")
    j["wall"] = wall
    return j


def stoker_epochs(tools, s3, order, threads, epochs, cache_dir, cache_limit, cache_env, work):
    """Per epoch: (GB/s over the reader's wall, seconds, bytes delivered, bytes fetched, requests,
    CPU seconds of the server and proxy, CPU seconds of the reader)."""
    shutil.rmtree(cache_dir, ignore_errors=True)
    env = s3.environ()
    env[cache_env[0]] = cache_dir
    env[cache_env[1]] = str(cache_limit)
    state = os.path.join(work, f"state-{order}")
    out = []
    for e in range(epochs):
        argv = [f"{tools}/shardread", "-q", "--json", "--order", order, "-j", threads, "-e", 1,
                "--state-out", state + f".{e}"]
        if e:
            argv += ["--state-in", state + f".{e - 1}"]
        argv.append(f"s3://{BUCKET}/{PREFIX}")
        s3.reset_stats()
        c0 = server_cpu(s3)
        j = shardread_json(argv, env)
        st = s3.stats()
        out.append((j["bytes"] / j["wall"] / 1e9, j["wall"], j["bytes"], st["body_bytes_out"], st["requests"],
                    server_cpu(s3) - c0, j.get("cpu_s", 0.0)))
    return out


def first_batches(tools, path, order, threads, n, env):
    """GB/s of the first n batches of an epoch, open included (wall clock of the process)."""
    j = shardread_json([f"{tools}/shardread", "-q", "--json", "--order", order, "-j", threads, "-e", 1,
                        "--stop-after", n, path], env)
    return j["bytes"] / j["wall"] / 1e9


def local_epoch(tools, ds_path, order, threads, warm=True):
    argv = [f"{tools}/shardread", "-q", "--json", "--order", order, "-j", threads, "-e", 1, ds_path]
    if warm:
        shardread_json(argv, None)
    j = shardread_json(argv, None)
    return j["bytes"] / j["wall"] / 1e9


# ---- s3fs ----------------------------------------------------------------------------

class S3fs:
    def __init__(self, s3, mnt, work):
        self.mnt, self.proc = mnt, None
        why = self.unavailable()
        if why:
            raise RuntimeError(why)
        os.makedirs(mnt, exist_ok=True)
        pw = os.path.join(work, "s3fs.passwd")
        with open(pw, "w") as f:
            f.write("S3RVER:S3RVER\n")
        os.chmod(pw, 0o600)
        self.log = open(os.path.join(work, "s3fs.log"), "w")
        self.proc = subprocess.Popen(
            ["s3fs", BUCKET, mnt, "-f", "-o", f"url={s3.endpoint},use_path_request_style,passwd_file={pw},"
             f"endpoint=us-east-1,dbglevel=err"], stdout=self.log, stderr=self.log, env=s3.environ())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"s3fs exited {self.proc.returncode} (see {self.log.name})")
            if os.path.exists(os.path.join(mnt, PREFIX, "manifest.json")):
                return
            time.sleep(0.2)
        self.close()
        raise RuntimeError("s3fs mounted nothing readable in 30 s")

    @staticmethod
    def unavailable():
        if shutil.which("s3fs") is None:
            return "s3fs not found (apt-get install s3fs)"
        if not os.path.exists("/dev/fuse"):
            return "/dev/fuse missing (no FUSE in this machine or container)"
        if not (shutil.which("fusermount") or shutil.which("fusermount3")):
            return "fusermount not found"
        return None

    def close(self):
        if self.proc is None:
            return
        um = shutil.which("fusermount") or shutil.which("fusermount3")
        sh([um, "-u", self.mnt], capture_output=True)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            sh([um, "-uz", self.mnt], capture_output=True)
        self.proc = None
        self.log.close()


# ---- the whole-shard-download reader ------------------------------------------------

def whole_shard_epoch(tools, s3, ds, order, threads, work):
    """Download every shard whole (one curl per shard, all at once), then read locally."""
    d = os.path.join(work, "whole")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    s3.reset_stats()
    t0 = time.monotonic()
    procs = []
    for name in [s[0] for s in ds.shards] + ["manifest.json"]:
        dst = os.path.join(d, name)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        procs.append(subprocess.Popen(["curl", "-sSf", "--noproxy", "*", "--aws-sigv4", "aws:amz:us-east-1:s3",
                                       "-u", "S3RVER:S3RVER", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                                       "-o", dst, f"{s3.endpoint}/{BUCKET}/{PREFIX}/{name}"]))
    if any(p.wait() for p in procs):
        raise RuntimeError("curl failed downloading a shard")
    j = shardread_json([f"{tools}/shardread", "-q", "--json", "--order", order, "-j", threads, "-e", 1, d], None)
    dt = time.monotonic() - t0
    fetched = s3.stats()["body_bytes_out"]
    shutil.rmtree(d, ignore_errors=True)
    return j["bytes"] / dt / 1e9, fetched


# ---- main -------------------------------------------------------------------------------

def machine(work):
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    df = sh(["df", "-PT", work], capture_output=True, text=True).stdout.splitlines()[-1].split()
    return cpu, os.cpu_count(), mem, f"{df[0]} ({df[1]})"


def main():
    ap = argparse.ArgumentParser(prog="bench/remote/run")
    ap.add_argument("--root", required=True)
    ap.add_argument("--build")
    ap.add_argument("--work", default="/var/tmp/stoker-bench-remote")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gb", type=float)
    ap.add_argument("--shards", type=int)
    ap.add_argument("--latency", default="20ms")
    ap.add_argument("--bw", default="400MB/s")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--orders", default="shuffle quasi sequential")
    ap.add_argument("--curl")
    ap.add_argument("--only", default="limit,stoker,big,s3fs,whole")
    ap.add_argument("--cache-env", default="STOKER_CACHE_DIR,STOKER_CACHE_LIMIT")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--upload", choices=("curl", "writer"), default="curl")
    a = ap.parse_args()
    gb = a.gb or (0.25 if a.quick else 1.2)
    shards = a.shards or (4 if a.quick else 5)
    epochs = a.epochs or (2 if a.quick else 3)
    ns = [int(x) for x in (a.curl or ("8 32" if a.quick else "4 8 16 32")).split()]
    orders = a.orders.split()
    only = set(a.only.split(","))
    cache_env = a.cache_env.split(",")
    build = a.build or os.path.join(a.root, "build")
    tools = os.path.join(build, "tools")

    sys.path.insert(0, os.path.join(a.root, "tests", "support"))
    import s3fixture
    ok, why = s3fixture.available()
    if not ok:
        log(f"bench/remote/run: {why}")
        return 2
    for t in ("shardgen", "shardread"):
        if not os.access(os.path.join(tools, t), os.X_OK):
            r = sh(["cmake", "--build", build, "--target", t], capture_output=True)
            if r.returncode:
                log(f"bench/remote/run: {tools}/{t} missing and could not be built")
                return 2
    if shutil.which("curl") is None:
        log("bench/remote/run: curl not found")
        return 2
    os.makedirs(a.work, exist_ok=True)
    ds_path = os.path.join(a.work, f"ds-{gb}-{shards}")
    manifest = make_dataset(tools, ds_path, gb, shards)
    ds = Dataset(ds_path, manifest)
    scratch = tempfile.mkdtemp(prefix="run-", dir=a.work)

    cpu, ncpu, mem, storage = machine(a.work)
    node = sh(["node", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"cpu:     {cpu}, {ncpu} cores, {mem:.0f} GiB; kernel {platform.release()}; "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    print(f"storage: {storage} (dataset, caches, downloads)")
    print(f"server:  @20minutes/s3rver 4.0.4 on Node {node}, loopback, behind tests/support/s3proxy.py: "
          f"+{a.latency} per request, {a.bw} shared")
    print(f"dataset: {ds.records} records (image u8[256,256,3] + label), {len(ds.shards)} shards, "
          f"{ds.bytes / 1e9:.3f} GB; stoker at {a.threads} threads, cache limit {ds.bytes // 4 / 1e9:.3f} GB "
          f"(a quarter), epochs 1..{epochs}")
    print(flush=True)

    res = {"limit": {}, "stoker": {}, "first": {}, "big": {}, "s3fs": {}, "whole": {}, "local": {}}
    nfirst = {}
    failures = []
    s3 = s3fixture.S3Env(buckets=[BUCKET], faults=f"latency:{a.latency},bw:{a.bw}",
                         tmpdir=os.path.join(scratch, "s3"))
    try:
        s3.start()
        log("uploading ...")
        uploaded = "curl PUTs, straight to the server"
        if a.upload == "writer":
            why = upload_with_writer(tools, s3, ds_path, manifest, scratch)
            if why is None:
                uploaded = "shardgen writing s3:// itself, straight to the server"
            else:
                uploaded = f"curl PUTs (the writer failed: {why})"
        if uploaded.startswith("curl"):
            s3.upload_tree(ds_path, PREFIX, bucket=BUCKET)
        print(f"upload:  {uploaded}", flush=True)

        for order in orders:
            lines = dump_order(tools, ds_path, order, a.threads)
            k = max(1, (4 << 20) // (ds.bytes // ds.records)) if order == "quasi" else 0
            ranges = ds.epoch_ranges(lines, k)
            sel = sum(r[2] for r in ranges)
            if "limit" in only:
                best = (0, 0, 0, 0)
                for n in ns:
                    log(f"limit {order}: {len(ranges)} range GETs with {n} curl ...")
                    gbs, got, cpu = curl_limit(s3, ranges, n, scratch)
                    best = max(best, (gbs, n, got, cpu))
                res["limit"][order] = (best[0], best[1], len(ranges), sel, best[2], best[3])
            nfirst[order] = max(2, len(lines) // 10)
            if "stoker" in only:
                log(f"stoker {order}: the first {nfirst[order]} batches from an empty cache ...")
                try:
                    env = s3.environ()
                    env[cache_env[0]] = os.path.join(scratch, f"cache-first-{order}")
                    env[cache_env[1]] = str(ds.bytes // 4)
                    res["first"][order] = first_batches(tools, f"s3://{BUCKET}/{PREFIX}", order, a.threads,
                                                        nfirst[order], env)
                except RuntimeError as e:
                    res["first"][order] = str(e)
                shutil.rmtree(os.path.join(scratch, f"cache-first-{order}"), ignore_errors=True)
                log(f"stoker {order}: {epochs} epochs ...")
                try:
                    res["stoker"][order] = stoker_epochs(tools, s3, order, a.threads, epochs,
                                                         os.path.join(scratch, f"cache-{order}"), ds.bytes // 4,
                                                         cache_env, scratch)
                except RuntimeError as e:
                    res["stoker"][order] = str(e)
            if "big" in only:
                log(f"big cache {order} ...")
                try:
                    ep = stoker_epochs(tools, s3, order, a.threads, 2, os.path.join(scratch, f"cache-big-{order}"),
                                       4 * ds.bytes, cache_env, scratch)
                    res["big"][order] = ep[1]
                except RuntimeError as e:
                    res["big"][order] = str(e)
                res["local"][order] = local_epoch(tools, ds_path, order, a.threads)
            if "whole" in only:
                log(f"whole-shard download {order} ...")
                res["whole"][order] = whole_shard_epoch(tools, s3, ds, order, a.threads, scratch)
            for kind in ("stoker", "big"):
                if order in res[kind] and isinstance(res[kind][order], str):
                    shutil.rmtree(os.path.join(scratch, f"cache-{order}"), ignore_errors=True)

        if "s3fs" in only:
            why = S3fs.unavailable()
            if why:
                res["s3fs"] = why
            for order in orders if not why else []:
                mnt = os.path.join(scratch, f"mnt-{order}")
                try:
                    fs = S3fs(s3, mnt, scratch)  # a fresh mount per order: nothing of another order's kept
                except RuntimeError as e:
                    res["s3fs"] = str(e)
                    break
                try:
                    log(f"s3fs {order} ...")
                    path = os.path.join(mnt, PREFIX)
                    first = first_batches(tools, path, order, a.threads, nfirst[order], None)
                    s3.reset_stats()
                    j = shardread_json([f"{tools}/shardread", "-q", "--json", "--order", order, "-j", a.threads,
                                        "-e", 1, path], None)
                    res["s3fs"][order] = (j["bytes"] / j["wall"] / 1e9, s3.stats()["body_bytes_out"], first)
                except RuntimeError as e:
                    res["s3fs"] = f"reading failed: {e}"
                    break
                finally:
                    fs.close()
    finally:
        s3.close()
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)

    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    with open(os.path.join(a.work, "results.json"), "w") as f:
        json.dump(res, f)  # the raw figures of the last run, whatever the report makes of them
    return report(res, orders, epochs, a, failures)


def report(res, orders, epochs, a, failures):
    ok = True
    lim = res["limit"]
    if lim:
        print("limit: the same range GETs of one epoch from N parallel curl (best N)")
        for o in orders:
            gbs, n, count, sel, got, cpu = lim[o]
            print(f"  {o:10s} {gbs:6.3f} GB/s  (N={n}, {count} GETs, {sel / 1e9:.3f} GB selected, "
                  f"{got / 1e9:.3f} GB sent; server + proxy {cpu / (got / 1e9) if got else 0:.1f} CPU s per GB)")
        print()
    if res["stoker"]:
        print(f"stoker s3:// at {a.threads} threads, cache limit a quarter: GB/s (/ limit), fetched / delivered, "
              "requests (all kinds, by the proxy)")
        for o in orders:
            r = res["stoker"].get(o)
            if isinstance(r, str):
                print(f"  {o:10s} not measured: {r}")
                ok = False
                continue
            cells, cpus = [], []
            for e, (gbs, wall, got, fetched, nreq, scpu, rcpu) in enumerate(r):
                amp = fetched / got if got else 0
                of = f" ({gbs / lim[o][0]:4.2f})" if o in lim and lim[o][0] else ""
                cells.append(f"e{e + 1} {gbs:6.3f}{of} x{amp:4.2f} {nreq} req")
                cpus.append(f"e{e + 1} {scpu / (fetched / 1e9) if fetched else 0:4.1f} + "
                            f"{rcpu / (got / 1e9) if got else 0:4.1f}")
                if o in lim and (gbs < 0.8 * lim[o][0] or amp > 1.05):
                    ok = False
            print(f"  {o:10s} " + "   ".join(cells))
            print(f"  {'':10s} CPU s per GB, server + proxy (per GB fetched) + reader (per GB delivered): "
                  + "   ".join(cpus))
        for o in orders:
            f = res["first"].get(o)
            if f is not None:
                print(f"  {o:10s} first tenth of the batches from an empty cache, open included: "
                      + (f"{f:6.3f} GB/s" if isinstance(f, float) else f"not measured: {f}"))
        print("  targets: every epoch >= 0.80 of the limit, fetched <= 1.05 x the selected fields' bytes")
        print()
    if res["big"]:
        print("cache larger than the dataset: the second epoch against the local copy (page cache warm)")
        for o in orders:
            r = res["big"].get(o)
            loc = res["local"].get(o, 0)
            if isinstance(r, str):
                print(f"  {o:10s} not measured: {r} (local {loc:.3f} GB/s)")
                continue
            gbs, wall, got, fetched = r[:4]
            print(f"  {o:10s} {gbs:6.3f} GB/s, local {loc:6.3f}: {gbs / loc if loc else 0:4.2f}; "
                  f"{fetched / 1e9:.3f} GB fetched")
        print()
    if res["s3fs"] or "s3fs" in a.only:
        print("s3fs mount (through the proxy, fresh per order) read by shardread as a local path: the first tenth "
              "of the batches, then one epoch")
        if isinstance(res["s3fs"], str):
            print(f"  skipped: {res['s3fs']}")
        else:
            for o in orders:
                if o not in res["s3fs"]:
                    continue
                gbs, fetched, first = res["s3fs"][o]
                st, sf = res["stoker"].get(o), res["first"].get(o)
                ahead = ""
                if isinstance(st, list):
                    worst = min(x[0] for x in st)
                    ahead = f"; stoker's slowest epoch / s3fs {worst / gbs:4.2f}"
                    ok &= worst > gbs
                if isinstance(sf, float):
                    ahead += f"; first batches: stoker / s3fs {sf / first:4.2f}"
                    ok &= sf > first
                of = f" ({gbs / lim[o][0]:4.2f} of the limit)" if o in lim else ""
                print(f"  {o:10s} {gbs:6.3f} GB/s{of}, {fetched / 1e9:.3f} GB fetched; first batches {first:6.3f} GB/s"
                      f"{ahead}")
        print()
    if res["whole"]:
        print("whole-shard download (curl, one process per shard, all at once), then a local epoch")
        for o in orders:
            gbs, fetched = res["whole"][o]
            of = f" ({gbs / lim[o][0]:4.2f} of the limit)" if o in lim else ""
            print(f"  {o:10s} {gbs:6.3f} GB/s over download + read{of}, {fetched / 1e9:.3f} GB fetched")
        print()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
