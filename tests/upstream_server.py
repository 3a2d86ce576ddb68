"""A programmable HTTP/1.1 upstream for the proxy tests, written on raw sockets so every
framing and failure can be produced on purpose.

Paths (query parameters in brackets):
  /echo            200, JSON of the request line, headers, body length and trailers (keep-alive)
  /slow[?ms=N]     sleeps N ms before answering
  /chunked[?n=K&size=S&ms=M]  K chunks of S bytes, chunked framing, M ms after each
  /big[?n=BYTES]   Content-Length body of BYTES bytes (a repeating pattern)
  /until-close[?n=BYTES]  HTTP/1.0-style body delimited by closing
  /http10          an HTTP/1.0 response with Content-Length, then close
  /status/CODE     answers CODE
  /reset           resets the connection without answering (RST)
  /reset-mid       sends half of a 1000-byte body, then resets
  /bad-trailers    a chunked body whose trailer section holds fields that may not be trailers
  /upload          reads the body (Content-Length or chunked) and answers its length and sha256
  /ws              101 Switching Protocols, then echoes bytes (and sends FIN after the peer's FIN)
  /name            answers the server's name (to see which server was picked)
  anything else    200 "ok"
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import threading
import time
from urllib.parse import parse_qs, urlsplit


# Trailer fields /bad-trailers sends: two that may be trailers, then many that may not.
BAD_TRAILERS = (b"X-Checksum: abc123\r\ngrpc-status: 0\r\nHost: evil.test\r\n"
                b"Authorization: Basic eDp5\r\nSet-Cookie: s=1\r\nCookie: s=1\r\n"
                b"Content-Length: 99\r\nContent-Type: text/evil\r\nTrailer: X-Checksum\r\n"
                b"Cache-Control: no-store\r\nX-Forwarded-For: 6.6.6.6\r\nLocation: /evil\r\n"
                b"WWW-Authenticate: Basic\r\nTransfer-Encoding: x\r\n")


def pattern(n: int) -> bytes:
    block = bytes(range(256)) * 64
    out = bytearray()
    while len(out) < n:
        out += block[: n - len(out)]
    return bytes(out)


class UpstreamServer:
    def __init__(self, name: str = "up", host: str = "127.0.0.1", port: int = 0):
        self.name = name
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.addr = f"{host}:{self.port}"
        self.requests: list[dict] = []
        self.connections = 0
        self.proxy_headers: list[bytes] = []
        self.expect_proxy = False
        self._stop = False
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Kills the server: the listener goes and every live connection is reset."""
        self._stop = True
        for s in (self.sock,):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        with self._lock:
            for c in list(self._conns):
                try:
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _accept_loop(self) -> None:
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._conns.add(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    # -- one connection -----------------------------------------------------------
    def _serve(self, c: socket.socket) -> None:
        buf = b""
        try:
            c.settimeout(30)
            if self.expect_proxy:
                while b"\r\n" not in buf and len(buf) < 16:
                    d = c.recv(4096)
                    if not d:
                        return
                    buf += d
                if buf.startswith(b"PROXY "):
                    i = buf.index(b"\r\n") + 2
                else:  # v2: 16-byte header + length
                    while len(buf) < 16:
                        buf += c.recv(4096)
                    ln = struct.unpack("!H", buf[14:16])[0]
                    while len(buf) < 16 + ln:
                        buf += c.recv(4096)
                    i = 16 + ln
                with self._lock:
                    self.proxy_headers.append(buf[:i])
                buf = buf[i:]
            while not self._stop:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                headers: list[tuple[str, str]] = []
                for ln in lines[1:]:
                    k, v = ln.split(":", 1)
                    headers.append((k.strip(), v.strip()))
                hmap = {k.lower(): v for k, v in headers}
                body, buf, ok, trailers = self._read_body(c, hmap, buf)
                if not ok:
                    return
                req = {"method": method, "target": target, "version": version,
                       "headers": headers, "body_len": len(body),
                       "sha256": hashlib.sha256(body).hexdigest(), "trailers": trailers}
                with self._lock:
                    self.requests.append(req)
                keep = self._respond(c, req, hmap, body)
                if not keep:
                    c.shutdown(socket.SHUT_WR)
                    # drain until the peer closes
                    try:
                        while c.recv(65536):
                            pass
                    except OSError:
                        pass
                    return
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                self._conns.discard(c)
            try:
                c.close()
            except OSError:
                pass

    def _read_body(self, c, hmap, buf):
        """The body, what follows it, whether it all came, and a chunked body's trailer
        fields ((name, value) as sent)."""
        if "content-length" in hmap:
            n = int(hmap["content-length"])
            body = bytearray(buf[:n])
            buf = buf[n:]
            while len(body) < n:
                d = c.recv(min(1 << 20, n - len(body)))
                if not d:
                    return b"", b"", False, []
                body += d
            return bytes(body), buf, True, []
        if hmap.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            trailers: list[tuple[str, str]] = []

            def line():
                nonlocal buf
                while b"\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return None
                    buf += d
                ln, buf = buf.split(b"\r\n", 1)
                return ln

            while True:
                ln = line()
                if ln is None:
                    return b"", b"", False, []
                size = int(ln.split(b";")[0], 16)
                if size == 0:
                    # The trailer section, up to its empty line.
                    while (ln := line()) != b"":
                        if ln is None:
                            return b"", b"", False, []
                        k, v = ln.decode("latin-1").split(":", 1)
                        trailers.append((k.strip(), v.strip()))
                    return bytes(body), buf, True, trailers
                while len(buf) < size + 2:
                    d = c.recv(1 << 20)
                    if not d:
                        return b"", b"", False, []
                    buf += d
                body += buf[:size]
                buf = buf[size + 2:]
        return b"", buf, True, []

    def _respond(self, c: socket.socket, req: dict, hmap: dict, body: bytes) -> bool:
        url = urlsplit(req["target"])
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        # Dispatch on the last path segment, so any location prefix can reach every mode.
        path = url.path if "/status/" in url.path else "/" + url.path.rsplit("/", 1)[-1]
        keep = hmap.get("connection", "").lower() != "close"

        def send(status: int, payload: bytes, extra: str = "", reason: str = "X") -> None:
            if status in (204, 304):
                c.sendall(f"HTTP/1.1 {status} {reason}\r\nX-Upstream: {self.name}\r\n\r\n".encode())
                return
            c.sendall((f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(payload)}\r\n"
                       f"X-Upstream: {self.name}\r\n{extra}\r\n").encode()
                      + (b"" if req["method"] == "HEAD" else payload))

        if path == "/echo":
            send(200, json.dumps(req).encode(), "Content-Type: application/json\r\n")
        elif path == "/name":
            send(200, self.name.encode())
        elif path == "/slow":
            time.sleep(int(q.get("ms", "500")) / 1000)
            send(200, b"slow")
        elif path == "/chunked":
            n, size = int(q.get("n", "5")), int(q.get("size", "100"))
            gap = int(q.get("ms", "0")) / 1000
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Upstream: "
                      + self.name.encode() + b"\r\n\r\n")
            data = pattern(size)
            for _ in range(n):
                c.sendall(b"%x\r\n" % size + data + b"\r\n")
                time.sleep(gap)
            c.sendall(b"0\r\n\r\n")
        elif path == "/trailers":
            # A chunked body ending in a trailer section (with a field that may not be one).
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
                      b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: abc123\r\n"
                      b"Grpc-Status: 0\r\nTransfer-Encoding: x\r\n\r\n")
        elif path == "/bad-trailers":
            # A trailer section full of fields that may not be trailers, and two that may.
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"5\r\nhello\r\n0\r\n" + BAD_TRAILERS + b"\r\n")
        elif path == "/big":
            n = int(q.get("n", "1000000"))
            c.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode())
            if req["method"] == "HEAD":
                return keep
            data = pattern(min(n, 1 << 20))
            sent = 0
            while sent < n:
                k = min(len(data), n - sent)
                c.sendall(data[:k])
                sent += k
        elif path == "/until-close":
            n = int(q.get("n", "5000"))
            c.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + pattern(n))
            return False
        elif path == "/http10":
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nhttp10")
            return False
        elif "/status/" in path:
            code = int(path.rsplit("/", 1)[1])
            send(code, f"status {code} from {self.name}".encode())
        elif path == "/reset":
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            raise OSError("reset on purpose")
        elif path == "/reset-mid":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + pattern(500))
            time.sleep(0.05)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            raise OSError("reset on purpose")
        elif path == "/upload":
            send(200, json.dumps({"len": len(body),
                                  "sha256": hashlib.sha256(body).hexdigest()}).encode())
        elif path == "/ws":
            c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\n\r\n")
            while True:
                d = c.recv(65536)
                if not d:
                    c.shutdown(socket.SHUT_WR)
                    return False
                c.sendall(d)
        else:
            send(200, b"ok")
        return keep
