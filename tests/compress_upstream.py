"""An upstream for the compression and rewriting tests: responses of chosen types, lengths,
framings and codings, and an echo of what the proxy sent.

Paths (query parameters in brackets):
  /text[?n=BYTES&type=T]   a compressible text body of BYTES bytes, Content-Length
  /chunked[?n=BYTES]       the same text, chunked framing, in 8 KiB chunks
  /stream?mb=N             N MiB of text, chunked, as fast as the socket takes it
  /trickle?n=K&ms=M        K short events, M ms apart, chunked (a server-sent event stream)
  /gzipped                 a body the upstream already gzip-encoded (Content-Encoding: gzip)
  /partial                 206 with a Content-Range
  /no-transform            text with Cache-Control: no-transform
  /status/CODE             answers CODE with a short text body
  anything else            200, JSON of the request line and headers (the echo)
"""

from __future__ import annotations

import gzip
import http.server
import json
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit


def text(n: int) -> bytes:
    """Deterministic, compressible text of exactly n bytes."""
    line = b"<p>ringx compresses this line, number %06d, as it flows.</p>\n"
    out = bytearray()
    i = 0
    while len(out) < n:
        out += line % i
        i += 1
    return bytes(out[:n])


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/html", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _chunks(self, pieces, ctype="text/html", delay=0.0):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for p in pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
            self.wfile.flush()
            if delay:
                time.sleep(delay)
        self.wfile.write(b"0\r\n\r\n")

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        u = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        self.server.seen.append({"path": self.path, "headers": dict(self.headers.items())})
        if u.path == "/text":
            self._send(200, text(int(q.get("n", 100000))), q.get("type", "text/html"),
                       [("ETag", '"v1"'), ("Accept-Ranges", "bytes")])
        elif u.path == "/chunked":
            body = text(int(q.get("n", 100000)))
            self._chunks([body[i:i + 8192] for i in range(0, len(body), 8192)])
        elif u.path == "/stream":
            piece = text(1 << 20)
            self._chunks(piece for _ in range(int(q["mb"])))
        elif u.path == "/trickle":
            n, ms = int(q.get("n", 3)), int(q.get("ms", 300))
            self._chunks((b"data: event %d\n\n" % i for i in range(n)), "text/event-stream",
                         ms / 1000)
        elif u.path == "/gzipped":
            self._send(200, gzip.compress(text(50000)), "text/html",
                       [("Content-Encoding", "gzip")])
        elif u.path == "/partial":
            self._send(206, text(1000), "text/html", [("Content-Range", "bytes 0-999/50000")])
        elif u.path == "/no-transform":
            self._send(200, text(50000), "text/html", [("Cache-Control", "public, no-transform")])
        elif u.path.startswith("/status/"):
            self._send(int(u.path.rsplit("/", 1)[1]), b"upstream says " + u.path.encode(),
                       "text/plain", [("X-Upstream-Error", "1")])
        else:
            body = json.dumps({"path": self.path, "headers": dict(self.headers.items())})
            self._send(200, body.encode(), "application/json", [("X-Powered-By", "up")])


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A pooled connection the proxy closed: not worth a traceback. Any other error (one
        # that closes a connection before its answer) is printed, for the test that fails.
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class Upstream:
    def __init__(self):
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.seen = []
        self.port = self.httpd.server_address[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def seen(self) -> list:
        return self.httpd.seen

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
