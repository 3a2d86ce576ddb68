"""Raw-socket HTTP/1.x helpers for the ringx integration tests.

Everything here is bounded by timeouts: no helper can block forever.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

DEFAULT_TIMEOUT = 5.0


class Closed(Exception):
    """The peer closed (or reset) the connection before a full response arrived."""


@dataclass
class Response:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    raw_head: bytes = b""

    def header(self, name: str, default: str | None = None) -> str | None:
        """The first value of header `name` (case-insensitive)."""
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return default

    def header_all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def has_header(self, name: str) -> bool:
        return self.header(name) is not None

    def connection_tokens(self) -> set[str]:
        vals = ",".join(self.header_all("Connection"))
        return {t.strip().lower() for t in vals.split(",") if t.strip()}

    def __repr__(self) -> str:  # compact, useful in assertion messages
        return (f"Response({self.version} {self.status} {self.reason!r}, "
                f"headers={self.headers!r}, body={self.body[:200]!r}"
                f"{'...' if len(self.body) > 200 else ''})")


def connect(port: int, host: str = "127.0.0.1", timeout: float = DEFAULT_TIMEOUT) -> socket.socket:
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(timeout)
    return s


class Conn:
    """A client connection with a receive buffer, so several responses can be
    parsed from one stream (pipelining, 1xx interim responses)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = DEFAULT_TIMEOUT):
        self.sock = connect(port, host, timeout)
        self.timeout = timeout
        self.buf = b""
        self.eof = False

    # -- context manager -------------------------------------------------
    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- sending ------------------------------------------------------------
    def send(self, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    # -- receiving ----------------------------------------------------------
    def _fill(self, deadline: float) -> bool:
        """Read more bytes into the buffer. Returns False on EOF/reset.
        Raises socket.timeout when the deadline passes."""
        if self.eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("deadline passed")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
            self.eof = True
            return False
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def _read_until(self, marker: bytes, deadline: float) -> bytes:
        while True:
            i = self.buf.find(marker)
            if i >= 0:
                out, self.buf = self.buf[: i + len(marker)], self.buf[i + len(marker):]
                return out
            if not self._fill(deadline):
                raise Closed(f"connection closed while waiting for {marker!r}; buffered={self.buf[:200]!r}")

    def _read_exact(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise Closed(f"connection closed with {len(self.buf)}/{n} body bytes")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, head: bool = False, timeout: float | None = None,
                      skip_1xx: bool = True) -> Response:
        """Parse one response. `head=True` when the request was HEAD (no body).
        With skip_1xx, interim 1xx responses are consumed and ignored; they are
        still recorded in `self.interim`."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        self.interim: list[Response] = []
        while True:
            resp = self._read_one(head, deadline)
            if 100 <= resp.status < 200 and resp.status != 101 and skip_1xx:
                self.interim.append(resp)
                continue
            return resp

    def _read_one(self, head: bool, deadline: float) -> Response:
        raw = self._read_until(b"\r\n\r\n", deadline)
        lines = raw[:-4].split(b"\r\n")
        status_line = lines[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise AssertionError(f"malformed status line: {status_line!r}")
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for ln in lines[1:]:
            name, sep, value = ln.decode("latin-1").partition(":")
            if not sep:
                raise AssertionError(f"malformed header line {ln!r} in {raw!r}")
            headers.append((name, value.strip()))
        resp = Response(version, status, reason, headers, b"", raw)
        if head or 100 <= status < 200 or status in (204, 304):
            return resp
        te = ",".join(resp.header_all("Transfer-Encoding")).lower()
        if "chunked" in te:
            resp.body = self._read_chunked(deadline)
        elif resp.has_header("Content-Length"):
            resp.body = self._read_exact(int(resp.header("Content-Length")), deadline)
        else:  # read until close
            while self._fill(deadline):
                pass
            resp.body, self.buf = self.buf, b""
        return resp

    def _read_chunked(self, deadline: float) -> bytes:
        body = b""
        while True:
            line = self._read_until(b"\r\n", deadline)
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                # trailers until the empty line
                while self._read_until(b"\r\n", deadline) != b"\r\n":
                    pass
                return body
            body += self._read_exact(size, deadline)
            assert self._read_exact(2, deadline) == b"\r\n", "chunk not followed by CRLF"

    def wait_closed(self, timeout: float = 3.0) -> bool:
        """True when the peer closes/resets the connection within `timeout`
        and sends nothing more. False if it stays open (timeout) or sends
        more bytes (those are left in self.buf for inspection)."""
        if self.buf:
            return False
        deadline = time.monotonic() + timeout
        try:
            while True:
                if not self._fill(deadline):
                    return not self.buf
                if self.buf:
                    # extra data: drain until close or timeout, then report
                    try:
                        while self._fill(deadline):
                            pass
                    except (socket.timeout, TimeoutError):
                        pass
                    return False
        except (socket.timeout, TimeoutError):
            return False

    def still_open(self, wait: float = 0.3) -> bool:
        """True when nothing arrives and the connection is not closed within `wait`."""
        if self.buf or self.eof:
            return False
        deadline = time.monotonic() + wait
        try:
            return self._fill(deadline) and False
        except (socket.timeout, TimeoutError):
            return True


def request(method: str, path: str, host: str = "localhost", version: str = "HTTP/1.1",
            headers: dict | list | None = None, body: bytes = b"") -> bytes:
    """Build a request; adds Content-Length when a body is given and no
    length/TE header is present."""
    hdrs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    lines = [f"{method} {path} {version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    names = {k.lower() for k, _ in hdrs}
    if body and "content-length" not in names and "transfer-encoding" not in names:
        hdrs.append(("Content-Length", str(len(body))))
    lines += [f"{k}: {v}" for k, v in hdrs]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def roundtrip(port: int, raw: bytes, head: bool = False, timeout: float = DEFAULT_TIMEOUT,
              close_wait: float | None = None) -> tuple[Response, bool | None]:
    """Send raw bytes on a fresh connection, read one response, and (if
    close_wait is given) report whether the server then closed the connection."""
    with Conn(port, timeout=timeout) as c:
        c.send(raw)
        resp = c.read_response(head=head)
        closed = c.wait_closed(close_wait) if close_wait is not None else None
        return resp, closed


def get(port: int, path: str = "/", host: str = "localhost", **kw) -> Response:
    return roundtrip(port, request("GET", path, host=host, **kw))[0]
