"""s3fixture: the S3 test server and the fault-injecting proxy, for tests and benches.

    import sys; sys.path.insert(0, "<repo>/tests/support")
    from s3fixture import S3Env, S3Unavailable

    with S3Env(buckets=["stoker-test"], faults="503:0.05,seed:7") as s3:
        s3.env            # AWS_ENDPOINT_URL (the proxy), AWS_ACCESS_KEY_ID/SECRET (S3RVER),
                          # AWS_REGION, STOKER_TEST_S3_BUCKET, STOKER_TEST_S3_DIRECT,
                          # STOKER_TEST_S3_PROXY_ADMIN: merge into a child's environment
        s3.upload_tree(local_dir, "prefix")   # curl PUTs, straight to the server
        s3.stats()        # the proxy's counters (dict); s3.reset_stats()
        s3.plan([{"match": "shard", "fault": "503", "count": 2}])

pytest: `s3 = s3fixture.pytest_fixture(scope="module")` in a conftest or test module
gives a fixture named s3 (name="..." for another); it skips the test with the reason when
Node or the package is missing. `tests/support/s3env -- CMD` is the same from a
shell or ctest (exit 77: skipped).

What it starts: `node tests/support/s3/start.js` (@20minutes/s3rver 4.0.4, SigV4
checked, path style, access key and secret S3RVER) on 127.0.0.1, a free port and a
temporary data folder, and `s3proxy.py` in front of it on another free port. Both
die with the process that started them (PR_SET_PDEATHSIG) and are stopped by pid
on close. Node >= 18 on PATH is required (s3rver 4.0.4 declares node >= 20, but
these tests pass on Debian 12's Node 18.20.4 as on Node 20); the
package is found in $STOKER_S3RVER_MODULES (a node_modules folder), else where
scripts/setup-deps installs it: ${XDG_CACHE_HOME:-~/.cache}/stoker/s3rver-HASH,
HASH the first 16 hex digits of sha256(tests/support/s3/package-lock.json).
Python 3 standard library only (and curl for the upload helpers).
"""
import ctypes
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
S3DIR = os.path.join(HERE, "s3")
NODE_MIN = 18
ACCESS_KEY = SECRET_KEY = "S3RVER"
REGION = "us-east-1"
DEFAULT_BUCKET = "stoker-test"
SKIP = 77


class S3Unavailable(RuntimeError):
    """Node or the s3rver package is missing: the reason is the message."""


def install_dir():
    """Where scripts/setup-deps puts the package (a folder holding node_modules)."""
    with open(os.path.join(S3DIR, "package-lock.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "stoker", f"s3rver-{digest}")


def find_server():
    """(node, node_modules folder), or raise S3Unavailable naming what is missing."""
    node = shutil.which("node")
    if node is None:
        raise S3Unavailable(f"node not found on PATH (Node >= {NODE_MIN} runs the S3 test server)")
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
        major = int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        raise S3Unavailable(f"{node} --version failed")
    if major < NODE_MIN:
        raise S3Unavailable(f"{node} is Node {out.strip()}; @20minutes/s3rver 4.0.4 needs Node >= {NODE_MIN}")
    modules = os.environ.get("STOKER_S3RVER_MODULES") or os.path.join(install_dir(), "node_modules")
    if not os.path.isfile(os.path.join(modules, "@20minutes", "s3rver", "package.json")):
        raise S3Unavailable(f"@20minutes/s3rver is not installed in {modules} (run scripts/setup-deps, "
                            "or set STOKER_S3RVER_MODULES to a node_modules folder holding it)")
    return node, modules


def available():
    """(True, "") or (False, the reason)."""
    try:
        find_server()
        return True, ""
    except S3Unavailable as e:
        return False, str(e)


def _die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _plain_env():
    """The environment for the fixture's own programs (node, the proxy, curl):
    without the sanitizer runtimes a sanitized build's tests preload into
    Python (node and curl stall under a preloaded ASan)."""
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
        env.pop(k, None)
    return env


def _start(argv, what, log, timeout=60.0):
    """Start argv, wait for its "ready PORT" line; (Popen, port)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                         preexec_fn=_die_with_parent, text=True, env=_plain_env())
    deadline = time.monotonic() + timeout
    line = ""
    import select
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            line = p.stdout.readline()
            if line.startswith("ready "):
                return p, int(line.split()[1])
            if line == "":
                break
        elif p.poll() is not None:
            break
    _stop(p)
    raise RuntimeError(f"{what} did not start (last line {line.strip()!r}); see {log.name}")


def _stop(p, grace=5.0):
    if p is None or p.poll() is not None:
        return
    try:
        p.terminate()
        p.wait(grace)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    except ProcessLookupError:
        pass


class S3Env:
    """The server and the proxy for the duration of a with block (or start()/close())."""

    def __init__(self, buckets=None, faults="", tmpdir=None, keep_logs=False):
        self.buckets = list(buckets or [DEFAULT_BUCKET])
        self.faults = faults or ""
        self.tmpdir = tmpdir
        self.keep_logs = keep_logs
        self.server = self.proxy = None
        self._own_tmp = None

    # ---- life ----

    def start(self):
        node, modules = find_server()
        if self.tmpdir is None:
            self._own_tmp = tempfile.mkdtemp(prefix="stoker-s3-")
            self.tmpdir = self._own_tmp
        os.makedirs(self.tmpdir, exist_ok=True)
        self.log_path = os.path.join(self.tmpdir, "s3env.log")
        self._log = open(self.log_path, "a")
        try:
            # the legacy provider: s3rver's ListObjectsV2 continuation tokens are DES
            argv = [node, "--openssl-legacy-provider", os.path.join(S3DIR, "start.js"), "--port", "0", "--dir",
                    os.path.join(self.tmpdir, "data"), "--modules", modules]
            for b in self.buckets:
                argv += ["--bucket", b]
            self.server, self.server_port = _start(argv, "s3rver", self._log)
            self.proxy, self.proxy_port = _start(
                [sys.executable, os.path.join(HERE, "s3proxy.py"), "--upstream", f"127.0.0.1:{self.server_port}",
                 "--faults", self.faults], "s3proxy", self._log)
        except BaseException:
            self.close()
            raise
        self.endpoint = f"http://127.0.0.1:{self.proxy_port}"
        self.direct = f"http://127.0.0.1:{self.server_port}"
        self.admin = f"{self.endpoint}/__proxy"
        self.bucket = self.buckets[0]
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "STOKER_TEST_S3_BUCKET": self.bucket,
            "STOKER_TEST_S3_DIRECT": self.direct,
            "STOKER_TEST_S3_PROXY_ADMIN": self.admin,
            "STOKER_TEST_S3_PIDS": " ".join(str(p) for p in self.pids()),
        }
        return self

    def close(self):
        _stop(self.proxy)
        _stop(self.server)
        for p in (self.proxy, self.server):
            if p is not None and p.stdout:
                p.stdout.close()
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None
        if self._own_tmp and not self.keep_logs:
            shutil.rmtree(self._own_tmp, ignore_errors=True)
            self._own_tmp = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False

    def pids(self):
        return [p.pid for p in (self.server, self.proxy) if p is not None]

    def environ(self, base=None):
        """base (default os.environ) with the fixture's variables."""
        e = dict(os.environ if base is None else base)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "S3_ENDPOINT_URL"):
            e.pop(name, None)
        e.update(self.env)
        for name in ("NO_PROXY", "no_proxy"):  # an HTTP proxy of the machine must not take loopback
            e[name] = ",".join(filter(None, [e.get(name, ""), "127.0.0.1", "localhost"]))
        return e

    # ---- the proxy's admin ----

    def _admin(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.admin}/{path}", data=data, method=method)
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no HTTP proxy
        with direct.open(req, timeout=30) as r:
            text = r.read()
        return json.loads(text) if text else None

    def stats(self):
        return self._admin("GET", "stats")

    def reset_stats(self):
        self._admin("DELETE", "stats")

    def plan(self, rules=(), faults=None, append=False):
        body = {"rules": list(rules), "append": append}
        if faults is not None:
            body["faults"] = faults
        return self._admin("POST", "plan", body)

    def clear_plan(self):
        self._admin("DELETE", "plan")

    # ---- objects, with curl's SigV4 (straight to the server unless via_proxy) ----

    def url(self, key, bucket=None, via_proxy=False):
        """The object's URL, the key percent-encoded as SigV4 signs it (RFC 3986)."""
        base = self.endpoint if via_proxy else self.direct
        return f"{base}/{bucket or self.bucket}/{urllib.parse.quote(key, safe='/-_.~')}"

    def curl(self, *args, secret=SECRET_KEY, check=True):
        argv = ["curl", "-sS", "--noproxy", "*", "--aws-sigv4", f"aws:amz:{REGION}:s3", "-u", f"{ACCESS_KEY}:{secret}",
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *args]
        p = subprocess.run(argv, capture_output=True, env=_plain_env())
        if check and p.returncode != 0:
            raise RuntimeError(f"curl {' '.join(args)}: exit {p.returncode}: {p.stderr.decode(errors='replace')}")
        return p

    def upload(self, path, key, bucket=None, via_proxy=False):
        p = self.curl("-f", "-T", path, self.url(key, bucket, via_proxy), "-o", os.devnull)
        return p.returncode

    def upload_tree(self, local_dir, prefix, bucket=None, via_proxy=False):
        """Every file under local_dir to prefix/relative/path; the keys, sorted."""
        keys = []
        for root, _, files in os.walk(local_dir):
            for name in sorted(files):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
                key = f"{prefix.rstrip('/')}/{rel}" if prefix else rel
                self.upload(path, key, bucket, via_proxy)
                keys.append(key)
        return sorted(keys)

    def get(self, key, bucket=None, via_proxy=False):
        return self.curl("-f", self.url(key, bucket, via_proxy)).stdout


def pytest_fixture(scope="module", buckets=None, faults="", name="s3"):
    """A pytest fixture NAME yielding a started S3Env (skips with the reason when
    unavailable). Plans set through it outlive the test that set them: clear them
    (env.clear_plan()) where a later test of the scope must not see them."""
    import pytest

    @pytest.fixture(scope=scope, name=name)
    def s3(tmp_path_factory):
        ok, why = available()
        if not ok:
            pytest.skip(why)
        with S3Env(buckets=buckets, faults=faults, tmpdir=str(tmp_path_factory.mktemp("s3"))) as env:
            yield env

    return s3
