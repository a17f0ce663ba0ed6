"""The S3 test fixture itself: the server, the proxy's faults and stats, s3env's life.

ctest runs it as s3_fixture (label remote); by hand:
    python3 -m pytest -q tests/support/s3/test_fixture.py
Every test skips with the reason when Node >= 18 or the s3rver package is missing.
"""
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse

import pytest

SUPPORT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, SUPPORT)
import s3fixture  # noqa: E402

S3ENV = os.path.join(SUPPORT, "s3env")
s3 = s3fixture.pytest_fixture(scope="module", buckets=["stoker-test", "other"])

BODY = bytes((i * 7919 + (i >> 8)) & 0xFF for i in range(1 << 20))  # 1 MiB, not repetitive at 4 KiB


@pytest.fixture(scope="module")
def obj(s3, tmp_path_factory):
    path = tmp_path_factory.mktemp("obj") / "blob"
    path.write_bytes(BODY)
    s3.upload(str(path), "dir/blob")  # straight to the server: no fault touches it
    return "dir/blob"


@pytest.fixture(autouse=True)
def clean_plan(request):
    yield
    if "s3" in request.fixturenames:
        request.getfixturevalue("s3").clear_plan()


def curl_proxy(s3, key, *args, secret=s3fixture.SECRET_KEY):
    """curl through the proxy: (exit code, http status, body)."""
    p = s3.curl("-o", "-", "-w", "\n%{http_code}", *args, s3.url(key, via_proxy=True), secret=secret, check=False)
    body, _, code = p.stdout.rpartition(b"\n")
    return p.returncode, int(code or 0), body


def test_get_through_the_proxy(s3, obj):
    rc, code, body = curl_proxy(s3, obj)
    assert (rc, code) == (0, 200) and body == BODY
    rc, code, body = curl_proxy(s3, obj, "-r", "1000-1999")
    assert (rc, code) == (0, 206) and body == BODY[1000:2000]
    st = s3.stats()
    assert st["requests"] >= 2 and st["by_method"]["GET"] >= 2
    assert st["body_bytes_out"] >= len(BODY) + 1000 and st["bytes_out"] > st["body_bytes_out"]


def test_wrong_secret_is_403(s3, obj):
    rc, code, body = curl_proxy(s3, obj, secret="not-the-secret")
    assert code == 403 and b"SignatureDoesNotMatch" in body
    p = s3.curl("-o", "/dev/null", "-w", "%{http_code}", s3.url(obj), secret="not-the-secret", check=False)
    assert p.stdout == b"403"


def test_bucket_listing_signed_with_the_trailing_slash(s3, obj):
    # "GET /bucket/?list-type=2" signed over "/bucket/", as S3 and s3fs sign it:
    # s3rver 4.0.4 unpatched answers 403 (tests/support/s3/start.js patches it).
    for path in (f"{s3.bucket}/?list-type=2&prefix=dir%2F", f"{s3.bucket}?list-type=2&prefix=dir%2F"):
        p = s3.curl("-w", "\n%{http_code}", f"{s3.endpoint}/{path}", check=False)
        body, _, code = p.stdout.rpartition(b"\n")
        assert code == b"200", body
        assert b"<Key>dir/blob</Key>" in body


def test_patched_s3rver_quirks(s3, obj, tmp_path):
    """What start.js patches: a 1-byte range at 0, If-Match, keys with & < > in
    listings; and the DES continuation tokens (node --openssl-legacy-provider)."""
    rc, code, body = curl_proxy(s3, obj, "-r", "0-0")
    assert (code, body) == (206, BODY[:1])
    h = s3.curl("-sS", "-I", s3.url(obj, via_proxy=True)).stdout
    etag = re.search(rb"(?i)etag: *(\S+)", h).group(1).decode()
    rc, code, body = curl_proxy(s3, obj, "-r", "10-19", "-H", f"If-Match: {etag}")
    assert (code, body) == (206, BODY[10:20])
    rc, code, body = curl_proxy(s3, obj, "-r", "10-19", "-H", 'If-Match: "0123456789abcdef0123456789abcdef"')
    assert code == 412 and b"PreconditionFailed" in body
    src = tmp_path / "amp"
    src.write_bytes(b"&")
    s3.upload(str(src), "odd/a&b<c>.bin")
    s3.upload(str(src), "odd/plain")
    base = f"{s3.endpoint}/{s3.bucket}"
    page = s3.curl("-f", f"{base}?list-type=2&max-keys=1&prefix=odd%2F")
    assert xml(page, "Key") == [b"odd/a&amp;b&lt;c&gt;.bin"] and xml(page, "IsTruncated") == [b"true"]
    (token,) = xml(page, "NextContinuationToken")
    q = urllib.parse.quote(token.decode(), safe="")
    page = s3.curl("-f", f"{base}?continuation-token={q}&list-type=2&max-keys=1&prefix=odd%2F")
    assert xml(page, "Key") == [b"odd/plain"] and xml(page, "IsTruncated") == [b"false"]


@pytest.mark.parametrize("status", ["503", "500", "404"])
def test_planned_status(s3, obj, status):
    s3.reset_stats()
    s3.plan([{"match": obj, "method": "GET", "fault": status, "count": 2}])
    for _ in range(2):
        rc, code, body = curl_proxy(s3, obj)
        assert code == int(status)
        assert b"<Error><Code>" in body
    assert b"SlowDown" in body if status == "503" else True
    rc, code, body = curl_proxy(s3, obj)
    assert (code, body) == (200, BODY)
    assert s3.stats()["faults"][status] == 2


def test_planned_reset(s3, obj):
    s3.reset_stats()
    s3.plan([{"match": obj, "fault": "reset"}])
    rc, code, body = curl_proxy(s3, obj)
    assert rc == 56  # CURLE_RECV_ERROR: connection reset by peer
    assert len(body) < len(BODY)
    assert s3.stats()["faults"]["reset"] == 1
    assert curl_proxy(s3, obj)[2] == BODY


def test_planned_truncate(s3, obj):
    s3.reset_stats()
    s3.plan([{"match": obj, "fault": "truncate", "cut": 0.25}])
    rc, code, body = curl_proxy(s3, obj)
    assert rc == 18  # CURLE_PARTIAL_FILE: the Content-Length promised more
    assert body.endswith(b"200") or True
    assert 0 < len(body) < len(BODY) and BODY.startswith(body[: len(BODY) // 4])
    assert s3.stats()["faults"]["truncate"] == 1


def test_planned_stall_is_given_up_by_the_client(s3, obj):
    s3.reset_stats()
    s3.plan([{"match": obj, "fault": "stall"}])
    rc, code, body = curl_proxy(s3, obj, "--speed-time", "1", "--speed-limit", "1")
    assert rc == 28  # CURLE_OPERATION_TIMEDOUT: below 1 B/s for 1 s
    assert 0 < len(body) < len(BODY)
    st = s3.stats()
    assert st["faults"]["stall"] == 1
    assert curl_proxy(s3, obj)[2] == BODY  # the proxy serves others meanwhile


@pytest.mark.parametrize("fault,rc", [("reset", 56), ("truncate", 52), ("stall", 28)])
def test_faults_on_a_response_without_body(s3, obj, tmp_path, fault, rc):
    """HEAD and PUT: the fault comes before the headers, or it would not be one."""
    src = tmp_path / "small"
    src.write_bytes(b"y" * 100)
    s3.plan([{"match": "small/", "fault": fault, "count": 2}])
    for args in (["-I"], ["-T", str(src)]):
        p = s3.curl("-o", "/dev/null", "--max-time", "1", *args, s3.url("small/x", via_proxy=True), check=False)
        assert p.returncode in (rc, 28 if fault == "stall" else rc), p.stderr
    assert s3.stats()["faults"][fault] >= 2


def test_planned_delay_and_put(s3, tmp_path):
    src = tmp_path / "up"
    src.write_bytes(b"x" * 5000)
    s3.reset_stats()
    s3.plan([{"match": "up/", "method": "PUT", "fault": "503"}, {"match": "up/", "fault": "delay:10ms"}],
            append=False)
    url = s3.url("up/one", via_proxy=True)
    assert s3.curl("-o", "/dev/null", "-w", "%{http_code}", "-T", str(src), url, check=False).stdout == b"503"
    assert s3.curl("-o", "/dev/null", "-w", "%{http_code}", "-T", str(src), url, check=False).stdout == b"200"
    assert s3.get("up/one") == b"x" * 5000
    st = s3.stats()
    assert st["faults"]["503"] == 1 and st["body_bytes_in"] >= 10000


def test_random_faults_follow_the_seed(s3, obj):
    def run():
        s3.plan(faults="503:0.3,500:0.1,seed:7")
        return [curl_proxy(s3, f"nokey-{i}")[1] for i in range(30)]

    first = run()
    assert run() == first  # the same requests, the same faults
    assert {503, 500, 404} <= set(first)
    s3.plan(faults="503:0.3,500:0.1,seed:8")
    assert [curl_proxy(s3, f"nokey-{i}")[1] for i in range(30)] != first
    st = s3.stats()
    assert st["faults"]["503"] > 0 and st["faults"]["500"] > 0
    assert st["faults_spec"] == "503:0.3,500:0.1,seed:8"


def test_bad_plan_is_refused(s3):
    p = subprocess.run(["curl", "-s", "--noproxy", "*", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "--data",
                        '{"rules": [{"fault": "explode"}]}', f"{s3.admin}/plan"], capture_output=True)
    assert p.stdout == b"400"
    p = subprocess.run(["curl", "-s", "--noproxy", "*", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "--data",
                        '{"faults": "503:2"}', f"{s3.admin}/plan"], capture_output=True)
    assert p.stdout == b"400"


def xml(p, tag):
    return re.findall(rf"<{tag}>([^<]*)</{tag}>".encode(), p.stdout)


def test_multipart_calls_s3rver_lacks(s3, tmp_path):
    """ListMultipartUploads, ListParts and AbortMultipartUpload, answered by the proxy."""
    part = tmp_path / "part"
    part.write_bytes(b"p" * 6000)
    base = f"{s3.endpoint}/{s3.bucket}"

    def start(key):
        (uid,) = xml(s3.curl("-f", "-X", "POST", f"{base}/{key}?uploads="), "UploadId")
        return uid.decode()

    uid = start("mp/a")
    s3.curl("-f", "-T", str(part), f"{base}/mp/a?partNumber=1&uploadId={uid}", "-o", "/dev/null")
    s3.curl("-f", "-T", str(part), f"{base}/mp/a?partNumber=2&uploadId={uid}", "-o", "/dev/null")
    listing = s3.curl("-f", f"{base}/mp/a?uploadId={uid}")
    assert xml(listing, "PartNumber") == [b"1", b"2"] and xml(listing, "Size") == [b"6000", b"6000"]
    assert xml(s3.curl("-f", f"{base}?prefix=mp%2F&uploads="), "UploadId") == [uid.encode()]
    assert xml(s3.curl("-f", f"{base}?prefix=zz&uploads="), "UploadId") == []
    bad = s3.curl("-w", "\n%{http_code}", f"{base}/mp/a?uploadId={uid}", secret="wrong", check=False)
    assert bad.stdout.endswith(b"403") and b"SignatureDoesNotMatch" in bad.stdout

    p = s3.curl("-X", "DELETE", "-o", "/dev/null", "-w", "%{http_code}", f"{base}/mp/a?uploadId={uid}")
    assert p.stdout == b"204"
    for args in ([f"{base}/mp/a?uploadId={uid}"],
                 ["-T", str(part), f"{base}/mp/a?partNumber=3&uploadId={uid}"],
                 ["-X", "DELETE", f"{base}/mp/a?uploadId={uid}"]):
        p = s3.curl("-w", "\n%{http_code}", *args, check=False)
        assert p.stdout.endswith(b"404") and b"NoSuchUpload" in p.stdout
    assert xml(s3.curl("-f", f"{base}?uploads="), "UploadId") == []

    # completed through the proxy: the object is whole, the upload gone
    uid = start("mp/b")
    etags = []
    for n in (1, 2):
        h = s3.curl("-f", "-D", "-", "-T", str(part), f"{base}/mp/b?partNumber={n}&uploadId={uid}", "-o",
                    "/dev/null").stdout
        etags.append(re.search(rb"(?i)etag: *(\S+)", h).group(1).decode())
    done = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in zip((1, 2), etags))
    s3.curl("-f", "-X", "POST", "--data-binary", f"<CompleteMultipartUpload>{done}</CompleteMultipartUpload>",
            f"{base}/mp/b?uploadId={uid}", "-o", "/dev/null")
    assert s3.get("mp/b") == b"p" * 12000
    assert xml(s3.curl("-f", f"{base}?uploads="), "UploadId") == []
    assert s3.stats()["handled"]["AbortMultipartUpload"] == 2  # the second: NoSuchUpload


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def test_s3env_passes_the_exit_status_and_stops_both(tmp_path):
    ok, why = s3fixture.available()
    if not ok:
        pytest.skip(why)
    out = tmp_path / "env"
    script = (f'env > {out}; curl -sf -o /dev/null "$STOKER_TEST_S3_PROXY_ADMIN/stats" || exit 9; exit 3')
    p = subprocess.run([sys.executable, S3ENV, "--bucket", "b1", "--", "sh", "-c", script])
    assert p.returncode == 3
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["STOKER_TEST_S3_BUCKET"] == "b1" and env["AWS_SECRET_ACCESS_KEY"] == "S3RVER"
    assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:") and env["AWS_REGION"] == "us-east-1"
    pids = [int(x) for x in env["STOKER_TEST_S3_PIDS"].split()]
    assert len(pids) == 2 and not any(alive(x) for x in pids)


def test_s3env_stops_both_on_sigterm(tmp_path):
    ok, why = s3fixture.available()
    if not ok:
        pytest.skip(why)
    out = tmp_path / "pids"
    p = subprocess.Popen([sys.executable, S3ENV, "--", "sh", "-c", f'echo $STOKER_TEST_S3_PIDS > {out}; exec sleep 60'])
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(x) for x in out.read_text().split()]
    assert all(alive(x) for x in pids)
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 128 + signal.SIGTERM
    assert not any(alive(x) for x in pids)


def test_s3env_skips_without_node_or_package():
    p = subprocess.run([sys.executable, S3ENV, "--", "true"], env={"PATH": "/nonexistent"},
                       capture_output=True, text=True)
    assert p.returncode == 77 and "node not found" in p.stderr
    env = dict(os.environ, STOKER_S3RVER_MODULES="/nonexistent")
    p = subprocess.run([sys.executable, S3ENV, "--", "true"], env=env, capture_output=True, text=True)
    assert p.returncode == 77 and "s3rver is not installed" in p.stderr


def test_bandwidth_cap_paces_all_connections_together(monkeypatch):
    """The token bucket on a fake clock: chunks from two "connections" share one rate."""
    import asyncio

    import s3proxy

    now = 100.0  # a clock that stands still: every sleep is a wake-up time
    wakes = []
    monkeypatch.setattr(s3proxy.time, "monotonic", lambda: now)

    async def fake_sleep(dt):
        wakes.append(now + dt)

    monkeypatch.setattr(s3proxy.asyncio, "sleep", fake_sleep)
    pacer = s3proxy.Pacer(s3proxy.parse_rate("1MB/s"), burst_s=0.0)

    async def conn(n):
        for _ in range(n):
            await pacer.take(100_000)

    async def both():
        await asyncio.gather(conn(5), conn(5))

    asyncio.run(both())
    # 1 MB at 1 MB/s: the last chunk, whichever connection sent it, goes out
    # 1 s after the first (0.5 s if each connection had its own bucket)
    assert abs(max(wakes) - 101.0) < 1e-6 and len(wakes) == 10
    assert s3proxy.parse_faults("latency:20ms,bw:2MiB/s")["latency"] == 0.02
    assert s3proxy.parse_faults("latency:20ms,bw:2MiB/s")["bw"] == 2 * 2**20
    with pytest.raises(s3proxy.SpecError):
        s3proxy.parse_faults("503:0.7,500:0.6")
