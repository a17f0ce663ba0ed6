"""Writing s3:// datasets: pack, pack --part/--merge, stoker.Writer, stoker.pack and stoker.merge against the
S3 test server behind the fault-injecting proxy (tests/support/s3fixture.py; skipped with the reason when
Node or the s3rver package is missing).

What is checked: the objects of an s3:// pack are byte for byte the files of a local pack of the same inputs
(shards, manifest, listings); no manifest.json exists before the commit; a pack killed while an upload is held
(a single PUT, and a multipart upload) resumes to the same bytes without sending the shards that were in place
again; parts written into s3:// merge in place into the records of a one-machine pack, twice to the same
manifest, and a missing or foreign part is refused by name; a rerun part touches its own objects only; an
aborted Writer leaves no manifest and no shard; 503s and resets from the proxy are survived.

Run by ctest as remote_write (labels remote, packer, python, faults), or:
    /usr/bin/python3 -m pytest tests/remote/test_remote_write.py
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
sys.path.insert(0, os.path.join(ROOT, "python"))
if not os.environ.get("STOKER_LIB"):
    os.environ["STOKER_LIB"] = os.path.join(ROOT, "build", "reader", "libstoker.so")

import s3fixture  # noqa: E402

np = pytest.importorskip("numpy")
import stoker  # noqa: E402

TOOLS = os.environ.get("STOKER_TOOLS") or os.path.join(ROOT, "build", "tools")
PACK = os.environ.get("STOKER_PACK") or os.path.join(os.path.dirname(TOOLS), "packer", "pack")

s3 = s3fixture.pytest_fixture(scope="module")


# ---------------------------------------------------------------- helpers

@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    """A small ImageFolder tree (rawgen): 48 images, small enough for an ASan build."""
    d = tmp_path_factory.mktemp("raw") / "raw"
    subprocess.run([os.path.join(TOOLS, "rawgen"), "-q", "-n", "48", "--min-side", "40", "--max-side", "80",
                    "--classes", "4", str(d)], check=True)
    return str(d)


@pytest.fixture
def env(s3, tmp_path, monkeypatch):
    """The S3 variables for this process (stoker.Writer) and for children (pack), a staging root of this
    test's own (TMPDIR), no faults planned and the proxy's counters at zero."""
    stage = tmp_path / "tmp"
    stage.mkdir()
    e = s3.environ(dict(os.environ))
    e["TMPDIR"] = str(stage)
    e.pop("STOKER_CACHE_DIR", None)
    for k, v in e.items():
        if k.startswith(("AWS_", "STOKER_TEST_S3")):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("TMPDIR", str(stage))
    monkeypatch.delenv("STOKER_CACHE_DIR", raising=False)
    s3.clear_plan()
    s3.reset_stats()
    yield e
    s3.clear_plan()


def url(s3, prefix):
    return f"s3://{s3.bucket}/{prefix}"


def keys(s3, prefix):
    """Every object under prefix/ as the server stores them (its data folder), relative names, sorted."""
    base = os.path.join(s3.tmpdir, "data", s3.bucket, prefix)
    out = []
    for root, _, files in os.walk(base):
        for f in files:
            if f.endswith("._S3rver_object"):
                out.append(os.path.relpath(os.path.join(root, f[:-len("._S3rver_object")]), base))
    return sorted(out)


def obj(s3, prefix, name):
    return s3.get(f"{prefix}/{name}")


def exists(s3, prefix, name):
    return os.path.exists(os.path.join(s3.tmpdir, "data", s3.bucket, prefix, name + "._S3rver_object"))


def download(s3, prefix, dest):
    """The dataset under prefix/ into the folder dest (to read it with stoker.Reader)."""
    for k in keys(s3, prefix):
        p = os.path.join(dest, k)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(obj(s3, prefix, k))
    return str(dest)


def local_files(d):
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs
                  if not f.startswith(".stoker-lock"))


def same_as_local(s3, prefix, local):
    """Every file of the local dataset is an object with the same bytes, and nothing else is there."""
    assert keys(s3, prefix) == local_files(local)
    for name in local_files(local):
        with open(os.path.join(local, name), "rb") as f:
            assert obj(s3, prefix, name) == f.read(), f"{prefix}/{name} differs from {local}/{name}"


def pack(env, *args, check=True):
    p = subprocess.run([PACK, "-j2", "--size", "32", "--records-per-shard", "6", *args], env=env,
                       capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def pack_json(env, *args):
    p = pack(env, "--json", *args)
    return json.loads(p.stdout)


def staging_empty(env):
    root = env["TMPDIR"]
    left = [os.path.join(r, f) for r, _, fs in os.walk(root) for f in fs]
    assert not left, f"staging files left behind: {left}"


def records(path, field="source"):
    with stoker.Reader(path, batch_size=16, tail="partial") as r:
        return [x for b in r for x in np.asarray(b[field]).tolist()]


def wait_fired(s3, timeout=60.0):
    """Until every planned rule has fired (its request reached the proxy and is being held)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        plan = s3._admin("GET", "plan") or {}
        rules = plan.get("rules", plan if isinstance(plan, list) else [])
        if all(r.get("count", 1) <= 0 for r in rules):
            return
        time.sleep(0.05)
    raise AssertionError("the held request never came")


# ---------------------------------------------------------------- pack

def test_pack_equals_local_pack(s3, env, raw, tmp_path):
    local = tmp_path / "local"
    pack(env, raw, str(local))
    out = pack_json(env, raw, url(s3, "plain"))
    same_as_local(s3, "plain", str(local))
    assert out["output"] == url(s3, "plain")
    assert out["uploaded"] == len(local_files(str(local)))
    staging_empty(env)
    # a second run is refused: the prefix holds a dataset
    p = pack(env, raw, url(s3, "plain"), check=False)
    assert p.returncode != 0 and "already holds a dataset" in p.stderr and url(s3, "plain") in p.stderr


def test_pack_force_replaces_beside(s3, env, raw, tmp_path):
    pack(env, raw, url(s3, "force"))
    old = set(keys(s3, "force"))
    p = subprocess.run([PACK, "-q", "-j2", "--size", "32", "--records-per-shard", "5", "--force", raw,
                        url(s3, "force")], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m = json.loads(obj(s3, "force", "manifest.json"))
    named = {s["path"] for s in m["shards"]}
    assert all(n.startswith("shard.g1-") for n in named)
    shards = {k for k in keys(s3, "force") if k.endswith(".stk")}
    assert shards == named, "the old generation's shards are deleted after the commit"
    assert old & shards == set()
    local = tmp_path / "l5"
    subprocess.run([PACK, "-q", "-j2", "--size", "32", "--records-per-shard", "5", raw, str(local)], env=env,
                   check=True)
    assert records(download(s3, "force", tmp_path / "dl")) == records(str(local))


def test_pack_killed_resumes_without_sending_kept_shards(s3, env, raw, tmp_path):
    """The upload of shard 3 is held by the proxy: shards 0-2 are in place, pack is killed, no manifest
    exists; the resumed run sends neither of them again and ends with the bytes of a local pack."""
    local = tmp_path / "local"
    pack(env, raw, str(local))
    s3.plan([{"match": "resume/shard-00003.stk", "method": "PUT", "fault": "delay:30s", "count": 1}])
    child = subprocess.Popen([PACK, "-q", "-j2", "--size", "32", "--records-per-shard", "6", raw,
                              url(s3, "resume")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_fired(s3)
        for k in range(3):
            assert exists(s3, "resume", f"shard-{k:05d}.stk")
        assert not exists(s3, "resume", "manifest.json"), "a manifest before the commit"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    s3.clear_plan()
    assert not exists(s3, "resume", "manifest.json")
    s3.reset_stats()
    out = pack_json(env, raw, url(s3, "resume"))
    assert out["upload_skipped"] >= 3, out
    assert out["uploaded"] == len(local_files(str(local))) - out["upload_skipped"]
    assert s3.stats()["by_method"].get("PUT", 0) == out["uploaded"] + 1  # and the lock object
    same_as_local(s3, "resume", str(local))
    staging_empty(env)


def test_pack_survives_503_and_resets(s3, env, raw, tmp_path):
    local = tmp_path / "local"
    pack(env, raw, str(local))
    s3.plan(faults="503:0.15,reset:0.05,seed:11")
    pack(env, raw, url(s3, "faults"))
    s3.clear_plan()
    st = s3.stats()
    assert st["faults"]["503"] + st["faults"]["reset"] > 0, st
    same_as_local(s3, "faults", str(local))


def test_pack_refuses_a_live_lock_object(s3, env, raw):
    lock = "host some-other-host pid 4242 token 1: pack\n"
    p0 = os.path.join(env["TMPDIR"], "lock")
    with open(p0, "w") as f:
        f.write(lock)
    s3.upload(p0, "locked/.stoker-lock")
    p = pack(env, raw, url(s3, "locked"), check=False)
    assert p.returncode != 0
    assert ".stoker-lock" in p.stderr and "some-other-host" in p.stderr, p.stderr
    assert keys(s3, "locked") == [".stoker-lock"]


def test_requeued_slurm_job_takes_its_lock_over(s3, env, raw):
    """A Slurm job requeued after a kill runs again under its job id, on any node: its own lock object (of
    another host) is taken over; another job's is not."""
    p0 = os.path.join(env["TMPDIR"], "lock")
    with open(p0, "w") as f:
        f.write("host node-7 pid 4242 token 1 job 777: pack --part 2/2\n")
    s3.upload(p0, "requeue/.stoker-lock-part-0002-of-0002")
    p = pack(dict(env, SLURM_JOB_ID="778"), "--part", "2/2", raw, url(s3, "requeue"), check=False)
    assert p.returncode != 0 and "node-7" in p.stderr, p.stderr
    pack(dict(env, SLURM_JOB_ID="777"), "--part", "2/2", raw, url(s3, "requeue"))
    assert exists(s3, "requeue", "pack-part-0002-of-0002.json")
    assert not exists(s3, "requeue", ".stoker-lock-part-0002-of-0002"), "released at the end"


# ---------------------------------------------------------------- parts and merge

def test_parts_merge_in_place(s3, env, raw, tmp_path):
    whole = tmp_path / "whole"
    pack(env, raw, str(whole))
    local = tmp_path / "parts"
    for k in (1, 2):
        pack(env, "--part", f"{k}/2", raw, str(local))
    pack(env, "--merge", str(local))
    for k in (1, 2):
        pack(env, "--part", f"{k}/2", raw, url(s3, "parts"))
    assert not exists(s3, "parts", "manifest.json")
    p = pack(env, "--merge", url(s3, "parts"))
    m1 = obj(s3, "parts", "manifest.json")
    with open(local / "manifest.json", "rb") as f:
        assert m1 == f.read()
    for name in ("listing.tsv", "skipped.tsv"):
        with open(local / name, "rb") as f:
            assert obj(s3, "parts", name) == f.read()
    got = download(s3, "parts", tmp_path / "dl")
    assert records(got) == records(str(whole))
    assert records(got, "label") == records(str(whole), "label")
    pack(env, "--merge", url(s3, "parts"))  # idempotent
    assert obj(s3, "parts", "manifest.json") == m1
    staging_empty(env)
    # a rerun part (requeued job, --force) replaces its own objects only
    before = {k: obj(s3, "parts", k) for k in keys(s3, "parts") if k.startswith("part-0001")}
    pack(env, "--force", "--part", "2/2", raw, url(s3, "parts"))
    assert {k: obj(s3, "parts", k) for k in keys(s3, "parts") if k.startswith("part-0001")} == before
    pack(env, "--merge", url(s3, "parts"))
    assert obj(s3, "parts", "manifest.json") == m1
    del p


def test_merge_refuses_missing_and_foreign_parts(s3, env, raw, tmp_path):
    pack(env, "--part", "1/2", raw, url(s3, "miss"))
    p = pack(env, "--merge", url(s3, "miss"), check=False)
    assert p.returncode != 0 and "parts missing" in p.stderr and ": 2" in p.stderr, p.stderr
    assert not exists(s3, "miss", "manifest.json")
    # part 2 of another pack (other flags: another parameters hash)
    subprocess.run([PACK, "-q", "-j2", "--size", "32", "--records-per-shard", "5", "--part", "2/2", raw,
                    url(s3, "miss")], env=env, check=True)
    p = pack(env, "--merge", url(s3, "miss"), check=False)
    assert p.returncode != 0 and "part 2" in p.stderr, p.stderr
    assert not exists(s3, "miss", "manifest.json")


# ---------------------------------------------------------------- the Python binding

FIELDS = {"i": stoker.Scalar("int64"), "blob": stoker.Bytes()}


def make(i):
    return {"i": i, "blob": bytes([i % 251]) * (100 + 37 * i)}


def test_writer_equals_local_and_abort_leaves_nothing(s3, env, tmp_path):
    local = tmp_path / "w"
    for out in (str(local), url(s3, "writer")):
        with stoker.Writer(out, FIELDS, records_per_shard=7) as w:
            for i in range(30):
                w.write(make(i))
    same_as_local(s3, "writer", str(local))
    with pytest.raises(RuntimeError):
        with stoker.Writer(url(s3, "aborted"), FIELDS, records_per_shard=7) as w:
            for i in range(30):
                w.write(make(i))
            raise RuntimeError("stop")
    assert keys(s3, "aborted") == [], "an aborted Writer leaves no manifest and deletes its shards"
    staging_empty(env)


def test_stoker_pack_and_merge(s3, env, tmp_path):
    local = tmp_path / "p"
    stoker.pack(make, list(range(40)), str(local), FIELDS, workers=0, records_per_shard=6)
    r = stoker.pack(make, list(range(40)), url(s3, "spack"), FIELDS, workers=0, records_per_shard=6)
    assert r["records"] == 40
    same_as_local(s3, "spack", str(local))
    staging_empty(env)
    for k in (1, 2):
        stoker.pack(make, list(range(40)), url(s3, "sparts"), FIELDS, workers=0, records_per_shard=6,
                    part=(k, 2))
    m = stoker.merge(url(s3, "sparts"))
    assert m["records"] == 40
    m1 = obj(s3, "sparts", "manifest.json")
    stoker.merge(url(s3, "sparts"))
    assert obj(s3, "sparts", "manifest.json") == m1
    assert records(download(s3, "sparts", tmp_path / "dl"), "i") == list(range(40))
    staging_empty(env)


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import stoker
F = {"i": stoker.Scalar("int64"), "blob": stoker.Bytes()}
def make(i):
    return {"i": i, "blob": bytes([i % 251]) * (1 << 20)}
stoker.pack(make, list(range(24)), sys.argv[2], F, workers=0, shard_size=6 << 20)
"""


def test_stoker_pack_killed_in_a_multipart_upload_resumes(s3, env, tmp_path):
    """Shards of ~6 MiB go up in 5 MiB parts; the second part of shard 1 is held and the packer killed:
    the resumed run keeps shard 0 without sending it, and ends with a local pack's bytes."""
    env = dict(env, STOKER_UPLOAD_PART_BYTES=str(5 << 20))
    local = tmp_path / "local"
    subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "python"), str(local)], env=env, check=True)
    s3.plan([{"match": "mp/shard-00001.stk?partNumber=2", "method": "PUT", "fault": "delay:30s", "count": 1}])
    child = subprocess.Popen([sys.executable, "-c", CHILD, os.path.join(ROOT, "python"), url(s3, "mp")], env=env)
    try:
        wait_fired(s3)
        assert exists(s3, "mp", "shard-00000.stk")
        assert not exists(s3, "mp", "shard-00001.stk") and not exists(s3, "mp", "manifest.json")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    s3.clear_plan()
    s3.reset_stats()
    subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "python"), url(s3, "mp")], env=env,
                   check=True)
    same_as_local(s3, "mp", str(local))
    st = s3.stats()
    sent = st.get("body_bytes_in", 0)
    with open(local / "shard-00000.stk", "rb") as f:
        first = len(f.read())
    total = sum(os.path.getsize(os.path.join(local, n)) for n in local_files(str(local)))
    assert sent < total - first + (1 << 20), f"shard 0 was sent again ({sent} bytes up, total {total})"
    staging_empty(env)
