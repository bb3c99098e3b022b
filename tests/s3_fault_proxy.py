"""A fault-injecting HTTP proxy on loopback, in front of a real S3 server (the moto fixture).

Each request is forwarded unless a scheduled fault matches it: `reset` (the connection is reset), `503`
(S3's SlowDown), `stall` (no answer for longer than the client's read timeout), `truncate` (the upstream's
200 response with half its body, then the connection closes). Faults are consumed in order; `always`
makes one fault match every request until cleared.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time
from dataclasses import dataclass, field

SLOWDOWN = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
            b"<Message>Please reduce your request rate.</Message></Error>")


@dataclass
class Fault:
    kind: str  # reset, 503, stall, truncate
    method: str | None = None  # only requests with this method (GET, PUT, HEAD, ...)


@dataclass
class Proxy:
    upstream: tuple[str, int]
    stall_s: float = 3.0
    queue: list[Fault] = field(default_factory=list)
    always: Fault | None = None
    injected: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, method: str, status_ok: bool | None = None) -> Fault | None:
        with self.lock:
            for fault in ([self.always] if self.always else []) + self.queue:
                if fault.method in (None, method):
                    if fault is not self.always:
                        self.queue.remove(fault)
                    return fault
        return None

    def count(self, kind: str) -> None:
        with self.lock:
            self.injected[kind] = self.injected.get(kind, 0) + 1


def _read_request(rfile, wfile) -> tuple[bytes, str] | None:
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = rfile.readline()
        if not line:
            return None
        head += line
    lines = head.split(b"\r\n")
    method = lines[0].split(b" ", 1)[0].decode()
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines[1:] if ln)}
    body = b""
    # botocore asks before it sends a PUT's body, and waits a second for an answer it never gets from a
    # server that does not give one: answer as S3 does (and forward the request without the question)
    expect = headers.get(b"expect", b"").lower() == b"100-continue"
    if expect:
        wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        wfile.flush()
    if b"content-length" in headers:
        body = rfile.read(int(headers[b"content-length"]))
    elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        while True:
            size_line = rfile.readline()
            size = int(size_line.split(b";")[0], 16)
            chunk = rfile.read(size + 2)
            body += size_line + chunk
            if size == 0:
                body += rfile.readline() if chunk != b"\r\n" else b""
                break
    # one request per connection: the upstream closes after answering, and so do we
    kept = [ln for ln in lines[1:] if ln and not ln.lower().startswith((b"connection:", b"expect:"))]
    raw = b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""]) + body
    return raw, method


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        proxy: Proxy = self.server.proxy
        request = _read_request(self.rfile, self.wfile)
        if request is None:
            return
        raw, method = request
        fault = proxy.take(method)
        if fault is not None and fault.kind == "reset":
            proxy.count("reset")
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        if fault is not None and fault.kind == "503":
            proxy.count("503")
            self.wfile.write(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: "
                             + str(len(SLOWDOWN)).encode() + b"\r\nConnection: close\r\n\r\n" + SLOWDOWN)
            return
        if fault is not None and fault.kind == "stall":
            proxy.count("stall")
            time.sleep(proxy.stall_s)
            return
        with socket.create_connection(proxy.upstream) as up:
            up.sendall(raw)
            response = b""
            while chunk := up.recv(1 << 16):
                response += chunk
        head, _, body = response.partition(b"\r\n\r\n")
        if fault is not None and fault.kind == "truncate" and b" 200 " in head.split(b"\r\n")[0] and len(body) > 1:
            proxy.count("truncate")
            self.wfile.write(head + b"\r\n\r\n" + body[: len(body) // 2])
            return
        if fault is not None and fault.kind == "truncate":  # nothing to cut: keep it for the next body
            with proxy.lock:
                if fault is not proxy.always:
                    proxy.queue.insert(0, fault)
        self.wfile.write(response)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def start(upstream_url: str, stall_s: float = 3.0) -> tuple[Proxy, str, _Server]:
    host, port = upstream_url.removeprefix("http://").split(":")
    proxy = Proxy((host, int(port)), stall_s=stall_s)
    server = _Server(("127.0.0.1", 0), _Handler)
    server.proxy = proxy
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return proxy, f"http://127.0.0.1:{server.server_address[1]}", server
