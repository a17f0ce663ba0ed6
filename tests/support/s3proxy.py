#!/usr/bin/env python3
"""s3proxy.py: a fault-injecting HTTP/1.1 reverse proxy in front of the S3 test server.

    s3proxy.py --upstream 127.0.0.1:PORT [--port 0] [--faults SPEC] [--seed N]

Listens on 127.0.0.1 (--port 0: a free port) and prints "ready PORT" on stdout.
Requests pass through byte for byte (Host, path, query and signed headers are
never rewritten, so SigV4 signatures stay valid); one upstream connection per
client connection, kept alive while both sides allow.

Faults (--faults, comma-separated; or the admin endpoint below):
    503:P  500:P      answer "503 SlowDown" / "500 InternalError" (the request is
                      not forwarded) with probability P
    reset:P           forward, send the headers and part of the body, then RST
    truncate:P        forward, send the headers and part of the body, then FIN
                      (the Content-Length promised more)
    stall:P           forward, send the headers and part of the body, then
                      nothing: the connection stays open until the client goes
    latency:20ms      added before every request is forwarded (also 0.02s, 20)
    bw:200MB/s        the rate of response bytes to all clients together (token
                      bucket; MB = 10^6, MiB = 2^20; also KB, GB, KiB, GiB, B)
    cut:0.5           where reset/truncate/stall cut the body (fraction, default 0.5);
                      a response without a body (HEAD, PUT, 204) is cut before
                      its headers
    seed:7            the draw of each request is a hash of the seed, method,
                      target, Range and how often that same request came before:
                      the same requests get the same faults in any interleaving
Faults apply to every method (GET, HEAD, PUT, POST, DELETE) except the admin
paths. A retried request is a new occurrence and gets a new draw.

Admin, on the same port (no bucket name starts with "_"):
    GET    /__proxy/stats   JSON: requests, by method, faults by kind, bytes
                            (bytes_out: every byte sent to clients, body_bytes_out:
                            response bodies only, body_bytes_in: request bodies),
                            requests answered by the proxy itself
    DELETE /__proxy/stats   zero the counters
    POST   /__proxy/plan    JSON {"rules": [RULE...], "faults": SPEC, "append": bool}:
                            RULE = {"match": SUBSTR, "method": "GET", "fault": KIND,
                            "count": N, "cut": F, "code": "SlowDown"} fails the next
                            N requests (default 1) whose target contains SUBSTR
                            with KIND: 503, 500, any other status (403, 404, ...),
                            reset, truncate, stall, or "delay:500ms". Rules come
                            before the random faults. "faults" replaces the random
                            spec ("" turns it off). Without "append" the rules
                            replace the previous ones.
    GET    /__proxy/plan    the rules left (counts decremented as they fire)
    DELETE /__proxy/plan    no rules, no random faults

What the S3 test server (s3rver 4.0.4) lacks, the proxy answers itself, after
checking the SigV4 signature the same way (secret S3RVER): ListMultipartUploads
(GET /bucket?uploads), ListParts (GET /bucket/key?uploadId=X) and
AbortMultipartUpload (DELETE /bucket/key?uploadId=X), from the uploads it saw
initiated, filled and completed through it. A part upload or completion for an
aborted upload gets 404 NoSuchUpload. Uploads made past the proxy (the direct
port) are unknown to it. Python 3 standard library only.
"""
import argparse
import asyncio
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import struct
import sys
import time
import urllib.parse
from xml.sax.saxutils import escape as xml_escape

CHUNK = 256 * 1024
FAULT_KINDS = ("503", "500", "reset", "truncate", "stall")
ACCESS_KEYS = {"S3RVER": "S3RVER"}  # s3rver's one account


class SpecError(ValueError):
    pass


def parse_duration(text):
    """'20ms', '0.02s' or a bare number of milliseconds -> seconds."""
    m = re.fullmatch(r"([0-9.]+)\s*(ms|s)?", text.strip())
    if not m:
        raise SpecError(f"bad duration {text!r} (e.g. 20ms, 0.02s)")
    return float(m.group(1)) / (1.0 if m.group(2) == "s" else 1000.0)


def parse_rate(text):
    m = re.fullmatch(r"([0-9.]+)\s*(B|KB|MB|GB|KiB|MiB|GiB)(/s)?", text.strip())
    if not m:
        raise SpecError(f"bad rate {text!r} (e.g. 200MB/s)")
    mult = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)]
    return float(m.group(1)) * mult


def parse_faults(spec):
    """SPEC -> dict(probs={kind: p}, latency=s, bw=bytes/s or 0, cut=f, seed=n)."""
    out = {"probs": {}, "latency": 0.0, "bw": 0.0, "cut": 0.5, "seed": 0}
    for item in filter(None, (s.strip() for s in (spec or "").split(","))):
        key, sep, val = item.partition(":")
        if not sep:
            raise SpecError(f"fault {item!r} needs KIND:VALUE")
        if key in FAULT_KINDS:
            p = float(val)
            if not 0.0 <= p <= 1.0:
                raise SpecError(f"probability of {key} must be in [0, 1]")
            out["probs"][key] = p
        elif key == "latency":
            out["latency"] = parse_duration(val)
        elif key == "bw":
            out["bw"] = parse_rate(val)
        elif key == "cut":
            out["cut"] = float(val)
        elif key == "seed":
            out["seed"] = int(val)
        else:
            raise SpecError(f"unknown fault kind {key!r} (known: {', '.join(FAULT_KINDS)}, latency, bw, cut, seed)")
    if sum(out["probs"].values()) > 1.0:
        raise SpecError("fault probabilities add up to more than 1")
    return out


class Pacer:
    """A token bucket shared by every connection: each chunk reserves its slot."""

    def __init__(self, rate, burst_s=0.02):
        self.rate = rate
        self.burst = burst_s
        self.next = 0.0

    async def take(self, n):
        if self.rate <= 0:
            return
        now = time.monotonic()
        start = max(now - self.burst, self.next)
        self.next = start + n / self.rate
        wait = self.next - now - self.burst
        if wait > 0:
            await asyncio.sleep(wait)


# ---- SigV4 check for the requests the proxy answers itself ------------------

def _uri_encode(s):
    return urllib.parse.quote(s, safe="-_.~")


def canonical_query(raw):
    pairs = []
    for part in filter(None, raw.split("&")):
        k, _, v = part.partition("=")
        pairs.append((_uri_encode(urllib.parse.unquote(k)), _uri_encode(urllib.parse.unquote(v))))
    pairs = [p for p in pairs if p[0] != "X-Amz-Signature"]
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def sigv4_check(method, path, query, headers):
    """None when the Authorization header verifies, else (status, code, message)."""
    auth = headers.get("authorization", "")
    m = re.fullmatch(r"AWS4-HMAC-SHA256\s+Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
                     r"SignedHeaders=([^,]+),\s*Signature=([0-9a-f]{64})", auth.strip())
    if not m:
        return (403, "AccessDenied", "Access Denied")
    key_id, date, region, service, signed, signature = m.groups()
    secret = ACCESS_KEYS.get(key_id)
    if secret is None:
        return (403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
    names = signed.split(";")
    canon_headers = "".join(f"{n}:{' '.join(headers.get(n, '').split())}\n" for n in names)
    payload = headers.get("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
    creq = "\n".join([method, path, canonical_query(query), canon_headers, signed, payload])
    scope = f"{date}/{region}/{service}/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", headers.get("x-amz-date", ""), scope,
                     hashlib.sha256(creq.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    good = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(good, signature):
        return (403, "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.")
    return None


def s3_error(status, code, message, resource=""):
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{xml_escape(message)}</Message><Resource>{xml_escape(resource)}</Resource>"
            f"<RequestId>s3proxy</RequestId></Error>").encode()
    return status, [("Content-Type", "application/xml")], body


def xml_ok(body, status=200):
    return status, [("Content-Type", "application/xml")], ('<?xml version="1.0" encoding="UTF-8"?>\n' + body).encode()


REASONS = {200: "OK", 204: "No Content", 206: "Partial Content", 400: "Bad Request", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 412: "Precondition Failed",
           416: "Range Not Satisfiable", 429: "Too Many Requests", 500: "Internal Server Error",
           501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}

ERROR_CODES = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied", 404: "NoSuchKey",
               412: "PreconditionFailed", 400: "BadRequest", 429: "SlowDown"}


class Request:
    __slots__ = ("method", "target", "version", "headers", "raw_head", "path", "query", "body_len", "chunked")


class Response:
    __slots__ = ("status", "head", "length", "chunked", "until_close", "upstream", "local_body", "keep_alive")


class Proxy:
    def __init__(self, upstream, faults):
        host, _, port = upstream.rpartition(":")
        self.up_host, self.up_port = host or "127.0.0.1", int(port)
        self.set_faults(faults)
        self.rules = []
        self.seen = {}
        self.uploads = {}  # upload id -> {"bucket", "key", "initiated", "parts": {n: (etag, size, time)}}
        self.aborted = set()
        self.reset_stats()

    def set_faults(self, spec):
        f = parse_faults(spec)
        self.spec = spec or ""
        self.probs, self.latency, self.cut, self.seed = f["probs"], f["latency"], f["cut"], f["seed"]
        self.pacer = Pacer(f["bw"])

    def reset_stats(self):
        self.stats = {"requests": 0, "by_method": {}, "faults": {k: 0 for k in FAULT_KINDS},
                      "status": {}, "bytes_out": 0, "body_bytes_out": 0, "body_bytes_in": 0,
                      "handled": {"ListMultipartUploads": 0, "ListParts": 0, "AbortMultipartUpload": 0},
                      "connections": 0, "open_connections": getattr(self, "stats", {}).get("open_connections", 0)}

    def count_fault(self, kind):
        f = self.stats["faults"]
        f[kind] = f.get(kind, 0) + 1

    # ---- choosing a fault ----

    def choose(self, req):
        for rule in self.rules:
            if rule["count"] <= 0:
                continue
            if rule.get("method") and rule["method"].upper() != req.method:
                continue
            if rule.get("match", "") not in req.target:
                continue
            rule["count"] -= 1
            return rule["fault"], rule.get("cut", self.cut), rule.get("code")
        if not self.probs:
            return None, self.cut, None
        ident = (req.method, req.target, req.headers.get("range", ""))
        n = self.seen.get(ident, 0)
        self.seen[ident] = n + 1
        h = hashlib.sha256(f"{self.seed}|{ident[0]}|{ident[1]}|{ident[2]}|{n}".encode()).digest()
        u = int.from_bytes(h[:8], "big") / 2**64
        acc = 0.0
        for kind in FAULT_KINDS:
            acc += self.probs.get(kind, 0.0)
            if u < acc:
                return kind, self.cut, None
        return None, self.cut, None

    # ---- connections ----

    async def handle(self, reader, writer):
        self.stats["connections"] += 1
        self.stats["open_connections"] += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = {"up": None}
        try:
            while True:
                req = await read_request(reader)
                if req is None:
                    break
                keep = await self.serve(req, reader, writer, conn)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, BadMessage, OSError):
            pass
        finally:
            self.stats["open_connections"] -= 1
            await close_up(conn)
            if not writer.is_closing():
                writer.close()

    async def serve(self, req, reader, writer, conn):
        if req.path.startswith("/__proxy/"):
            status, headers, data = self.admin(req, await read_body(reader, req))
            writer.write(build_head(status, headers, len(data)) + data)  # not counted: admin traffic
            await writer.drain()
            return True
        self.stats["requests"] += 1
        bm = self.stats["by_method"]
        bm[req.method] = bm.get(req.method, 0) + 1
        if req.headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        fault, cut, code = self.choose(req)
        if fault and fault.startswith("delay:"):
            await asyncio.sleep(parse_duration(fault[6:]))
            fault = None
        if self.latency:
            await asyncio.sleep(self.latency)
        if fault and fault[:3].isdigit():
            body = await read_body(reader, req)
            self.stats["body_bytes_in"] += len(body)
            status = int(fault[:3])
            kind = fault if fault in FAULT_KINDS else None
            if kind:
                self.count_fault(kind)
            else:
                self.count_fault(fault)
            resp = s3_error(status, code or ERROR_CODES.get(status, "InternalError"),
                            f"injected by s3proxy ({fault})", req.path)
            await self.send_local(writer, req, resp, keep=True)
            return True
        local = self.local_answer(req)
        if local is not None:
            body = await read_body(reader, req)
            self.stats["body_bytes_in"] += len(body)
            resp = local(body)
            if fault:
                self.count_fault(fault)
                status, headers, data = resp
                await self.send_cut(writer, status, headers, data, fault, cut, reader)
                return False
            await self.send_local(writer, req, resp, keep=True)
            return True
        return await self.forward(req, reader, writer, conn, fault, cut)

    # ---- passing a request through ----

    async def forward(self, req, reader, writer, conn, fault, cut):
        up = conn["up"]
        if up is None or up[1].is_closing():
            up = await asyncio.open_connection(self.up_host, self.up_port, limit=1 << 22)
            s = up[1].get_extra_info("socket")
            if s is not None:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn["up"] = up
        ur, uw = up
        head = req.raw_head
        signed = req.headers.get("authorization", "")
        if "expect" in req.headers and "expect" not in signed.lower():
            head = drop_header(head, b"expect")
        uw.write(head)
        self.stats["body_bytes_in"] += await copy_body(reader, uw, req)
        await uw.drain()
        resp = await read_response_head(ur, req.method)
        if resp.status == 200:
            self.uploads_track(req, resp)
        self.stats["status"][str(resp.status)] = self.stats["status"].get(str(resp.status), 0) + 1
        if not resp.keep_alive:
            conn["up"] = None
        if fault:
            self.count_fault(fault)
            await close_up({"up": up})
            conn["up"] = None
            await self.pass_cut(writer, resp, ur, fault, cut, reader)
            return False
        if resp.local_body is not None or req.method == "HEAD":
            data = resp.local_body or b""
            head = resp.head
            if resp.chunked:
                head = with_length(drop_header(drop_header(head, b"transfer-encoding"), b"content-length"),
                                   len(data))
            await self.write_out(writer, head, data)
            if req.method == "POST" and "uploadid=" in req.query.lower() and resp.status == 200:
                self.uploads_complete(req, data)
            if req.method == "POST" and "uploads" in query_keys(req.query) and resp.status == 200:
                self.uploads_initiate(req, data)
            return resp.keep_alive and req_keep_alive(req)
        await self.write_out(writer, resp.head, b"")
        left = resp.length
        while left is None or left > 0:
            data = await ur.read(CHUNK if left is None else min(CHUNK, left))
            if not data:
                if left is not None:
                    return False  # upstream died mid-body: the client sees a short body
                break
            if left is not None:
                left -= len(data)
            await self.write_out(writer, b"", data)
        if resp.until_close:
            conn["up"] = None
            return False
        return resp.keep_alive and req_keep_alive(req)

    async def write_out(self, writer, head, data):
        if head:
            writer.write(head)
            self.stats["bytes_out"] += len(head)
        if data:
            await self.pacer.take(len(data))
            writer.write(data)
            self.stats["bytes_out"] += len(data)
            self.stats["body_bytes_out"] += len(data)
        await writer.drain()

    async def pass_cut(self, writer, resp, ur, fault, cut, reader):
        """Headers, then the first cut of the body from upstream, then the fault."""
        total = resp.length if resp.length is not None else len(resp.local_body or b"")
        keep = int(total * cut) if total else 0
        if total:  # a response without a body would be whole after its headers: cut before them
            await self.write_out(writer, resp.head, b"")
        if resp.local_body is not None:
            await self.write_out(writer, b"", resp.local_body[:keep])
        else:
            left = keep
            while left > 0:
                data = await ur.read(min(CHUNK, left))
                if not data:
                    break
                left -= len(data)
                await self.write_out(writer, b"", data)
        await self.finish_fault(writer, fault, reader)

    async def send_cut(self, writer, status, headers, data, fault, cut, reader):
        head = build_head(status, headers, len(data)) if data else b""
        await self.write_out(writer, head, data[: int(len(data) * cut)])
        await self.finish_fault(writer, fault, reader)

    async def finish_fault(self, writer, fault, reader):
        if fault == "reset":
            await asyncio.sleep(0.01)  # let the kernel deliver what was written
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        elif fault == "truncate":
            writer.close()
        elif fault == "stall":
            try:
                while await reader.read(65536):
                    pass  # hold the connection until the client gives up
            except (ConnectionError, OSError):
                pass
            writer.close()
        else:
            writer.close()

    async def send_local(self, writer, req, resp, keep):
        status, headers, data = resp
        self.stats["status"][str(status)] = self.stats["status"].get(str(status), 0) + 1
        head = build_head(status, headers, len(data))
        await self.write_out(writer, head, b"" if req.method == "HEAD" else data)

    # ---- admin ----

    def admin(self, req, body):
        path = req.path
        if path == "/__proxy/stats":
            if req.method == "DELETE":
                self.reset_stats()
                return 204, [], b""
            out = dict(self.stats, faults_spec=self.spec, rules_left=sum(r["count"] for r in self.rules))
            return 200, [("Content-Type", "application/json")], json.dumps(out).encode()
        if path == "/__proxy/plan":
            if req.method == "GET":
                return 200, [("Content-Type", "application/json")], json.dumps(
                    {"faults": self.spec, "rules": self.rules}).encode()
            if req.method == "DELETE":
                self.rules = []
                self.set_faults("")
                return 204, [], b""
            if req.method == "POST":
                try:
                    plan = json.loads(body or b"{}")
                    rules = [self.check_rule(r) for r in plan.get("rules", [])]
                    if "faults" in plan:
                        self.set_faults(plan["faults"])
                        self.seen = {}
                except (ValueError, TypeError, KeyError, SpecError) as e:
                    return 400, [("Content-Type", "text/plain")], f"bad plan: {e}\n".encode()
                self.rules = (self.rules if plan.get("append") else []) + rules
                return 200, [("Content-Type", "application/json")], json.dumps({"rules": self.rules}).encode()
        return 404, [("Content-Type", "text/plain")], b"admin paths: /__proxy/stats, /__proxy/plan\n"

    @staticmethod
    def check_rule(r):
        fault = str(r["fault"])
        if not (fault in FAULT_KINDS or re.fullmatch(r"[1-5][0-9][0-9]", fault) or fault.startswith("delay:")):
            raise SpecError(f"unknown fault {fault!r}")
        if fault.startswith("delay:"):
            parse_duration(fault[6:])
        out = {"match": str(r.get("match", "")), "fault": fault, "count": int(r.get("count", 1))}
        if r.get("method"):
            out["method"] = str(r["method"]).upper()
        if "cut" in r:
            out["cut"] = float(r["cut"])
        if r.get("code"):
            out["code"] = str(r["code"])
        return out

    # ---- multipart calls s3rver lacks ----

    def local_answer(self, req):
        keys = query_keys(req.query)
        parts = req.path.split("/", 2)
        bucket = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        key = urllib.parse.unquote(parts[2]) if len(parts) > 2 else ""
        if not bucket:
            return None
        upload = dict(urllib.parse.parse_qsl(req.query, keep_blank_values=True)).get("uploadId")
        name = None
        if req.method == "GET" and not key and "uploads" in keys:
            name = "ListMultipartUploads"
        elif req.method == "GET" and key and upload is not None:
            name = "ListParts"
        elif req.method == "DELETE" and key and upload is not None:
            name = "AbortMultipartUpload"
        elif upload is not None and upload in self.aborted and req.method in ("PUT", "POST"):
            name = "NoSuchUpload"
        if name is None:
            return None

        def answer(_body):
            bad = sigv4_check(req.method, req.path, req.query, req.headers)
            if bad:
                return s3_error(bad[0], bad[1], bad[2], req.path)
            if name == "NoSuchUpload":
                return s3_error(404, "NoSuchUpload", "The specified upload does not exist.", req.path)
            self.stats["handled"][name] += 1
            if name == "ListMultipartUploads":
                return self.list_uploads(bucket, req.query)
            u = self.uploads.get(upload)
            if u is None or u["bucket"] != bucket or u["key"] != key:
                return s3_error(404, "NoSuchUpload", "The specified upload does not exist.", req.path)
            if name == "AbortMultipartUpload":
                del self.uploads[upload]
                self.aborted.add(upload)
                return 204, [], b""
            return self.list_parts(bucket, key, upload, u)

        return answer

    def uploads_track(self, req, resp):
        """Record a part that s3rver accepted (PUT ?partNumber=N&uploadId=X)."""
        if req.method != "PUT":
            return False
        q = dict(urllib.parse.parse_qsl(req.query, keep_blank_values=True))
        u = self.uploads.get(q.get("uploadId"))
        if u is None or "partNumber" not in q:
            return False
        etag = header_value(resp.head, b"etag") or '""'
        u["parts"][int(q["partNumber"])] = (etag, req.body_len or 0, time.time())
        return True

    def uploads_initiate(self, req, data):
        m = re.search(rb"<UploadId>([^<]+)</UploadId>", data)
        if not m:
            return
        parts = req.path.split("/", 2)
        self.uploads[m.group(1).decode()] = {"bucket": urllib.parse.unquote(parts[1]),
                                             "key": urllib.parse.unquote(parts[2]) if len(parts) > 2 else "",
                                             "initiated": time.time(), "parts": {}}

    def uploads_complete(self, req, data):
        if b"<Error>" in data:
            return
        upload = dict(urllib.parse.parse_qsl(req.query, keep_blank_values=True)).get("uploadId")
        self.uploads.pop(upload, None)

    def list_uploads(self, bucket, query):
        q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        prefix = q.get("prefix", "")
        items = sorted((u["key"], uid, u["initiated"]) for uid, u in self.uploads.items()
                       if u["bucket"] == bucket and u["key"].startswith(prefix))
        body = "".join(f"<Upload><Key>{xml_escape(k)}</Key><UploadId>{uid}</UploadId>"
                       f"<Initiated>{iso(t)}</Initiated><StorageClass>STANDARD</StorageClass></Upload>"
                       for k, uid, t in items)
        return xml_ok(f'<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                      f"<Bucket>{xml_escape(bucket)}</Bucket><Prefix>{xml_escape(prefix)}</Prefix>"
                      f"<MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated>{body}"
                      f"</ListMultipartUploadsResult>")

    def list_parts(self, bucket, key, upload, u):
        body = "".join(f"<Part><PartNumber>{n}</PartNumber><LastModified>{iso(t)}</LastModified>"
                       f"<ETag>{xml_escape(etag)}</ETag><Size>{size}</Size></Part>"
                       for n, (etag, size, t) in sorted(u["parts"].items()))
        return xml_ok(f'<ListPartsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                      f"<Bucket>{xml_escape(bucket)}</Bucket><Key>{xml_escape(key)}</Key>"
                      f"<UploadId>{upload}</UploadId><MaxParts>1000</MaxParts>"
                      f"<IsTruncated>false</IsTruncated>{body}</ListPartsResult>")


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


def query_keys(query):
    return {p.partition("=")[0] for p in query.split("&") if p}


# ---- HTTP/1.1 framing ---------------------------------------------------------

class BadMessage(Exception):
    pass


async def read_head(reader):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise BadMessage("connection closed inside a header")
    except asyncio.LimitOverrunError:
        raise BadMessage("header too long")
    return head


def parse_headers(lines):
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadMessage(f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    return headers


async def read_request(reader):
    head = await read_head(reader)
    if head is None:
        return None
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadMessage(f"bad request line {lines[0]!r}")
    req = Request()
    req.method, req.target, req.version = parts
    req.headers = parse_headers(lines[1:])
    req.raw_head = head
    req.path, _, req.query = req.target.partition("?")
    req.chunked = "chunked" in req.headers.get("transfer-encoding", "").lower()
    req.body_len = None if req.chunked else int(req.headers.get("content-length", "0") or 0)
    return req


def req_keep_alive(req):
    c = req.headers.get("connection", "").lower()
    return c != "close" and not (req.version == "HTTP/1.0" and c != "keep-alive")


async def read_body(reader, req):
    if req.chunked:
        return await read_chunked(reader, None)
    return await reader.readexactly(req.body_len) if req.body_len else b""


async def read_chunked(reader, sink):
    """De-chunk (sink None: return the bytes) or copy the raw framing to sink."""
    out = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        if sink is not None:
            sink.write(line)
        size = int(line.split(b";")[0].strip(), 16)
        if size == 0:
            while True:  # trailers, then the empty line
                t = await reader.readuntil(b"\r\n")
                if sink is not None:
                    sink.write(t)
                if t == b"\r\n":
                    return bytes(out)
        data = await reader.readexactly(size + 2)
        if sink is not None:
            sink.write(data)
            await sink.drain()
        else:
            out += data[:-2]


async def copy_body(reader, sink, req):
    if req.chunked:
        before = 0
        data = await read_chunked(reader, None)
        # Forwarded raw would be better for huge bodies; chunked uploads are small here.
        sink.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n" if data else b"0\r\n\r\n")
        req.body_len = len(data)
        return before + len(data)
    left = req.body_len or 0
    n = 0
    while left > 0:
        data = await reader.read(min(CHUNK, left))
        if not data:
            raise BadMessage("client closed inside the body")
        left -= len(data)
        n += len(data)
        sink.write(data)
        await sink.drain()
    return n


async def read_response_head(reader, method):
    while True:
        head = await read_head(reader)
        if head is None:
            raise ConnectionError("upstream closed")
        lines = head.decode("latin-1").split("\r\n")[:-2]
        status = int(lines[0].split(" ")[1])
        if 100 <= status < 200:
            continue  # interim (100 Continue): the proxy sent its own
        break
    headers = parse_headers(lines[1:])
    resp = Response()
    resp.status = status
    resp.head = head
    resp.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    resp.keep_alive = headers.get("connection", "").lower() != "close"
    resp.local_body = None
    resp.until_close = False
    if method == "HEAD" or status in (204, 304):
        resp.length = 0
    elif resp.chunked:
        resp.local_body = await read_chunked(reader, None)
        resp.length = len(resp.local_body)
    elif "content-length" in headers:
        resp.length = int(headers["content-length"])
        if resp.length <= 64 * 1024 and "xml" in headers.get("content-type", ""):
            resp.local_body = await reader.readexactly(resp.length)
    else:
        resp.length = None
        resp.until_close = True
    return resp


def header_value(head, name):
    for line in head.split(b"\r\n")[1:]:
        n, _, v = line.partition(b":")
        if n.strip().lower() == name:
            return v.strip().decode("latin-1")
    return None


def drop_header(head, name):
    lines = head.split(b"\r\n")
    keep = [lines[0]] + [ln for ln in lines[1:] if ln.partition(b":")[0].strip().lower() != name]
    return b"\r\n".join(keep)


def with_length(head, n):
    return head[:-2] + f"Content-Length: {n}\r\n\r\n".encode()


def build_head(status, headers, length):
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    lines += [f"Content-Length: {length}", "Server: s3proxy", f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def close_up(conn):
    up = conn.get("up")
    conn["up"] = None
    if up is not None and not up[1].is_closing():
        up[1].close()


async def main_async(args):
    proxy = Proxy(args.upstream, args.faults)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.port, limit=1 << 20, backlog=256)
    port = server.sockets[0].getsockname()[1]
    print(f"ready {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    server.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the S3 server")
    ap.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one)")
    ap.add_argument("--faults", default="", help="fault spec, e.g. 503:0.05,reset:0.02,latency:20ms,bw:200MB/s,seed:7")
    args = ap.parse_args()
    try:
        parse_faults(args.faults)
    except (SpecError, ValueError) as e:
        print(f"s3proxy: --faults: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(main_async(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
