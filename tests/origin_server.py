"""A scriptable HTTP/1.1 origin for the cache and auth tests: each path answers what the
test set for it (status, header fields, body, a delay), and every request is recorded.

    o = Origin()                       # listens on 127.0.0.1:<free port>
    o.route("/a", body=b"hi", headers={"Cache-Control": "max-age=60"})
    o.route("/slow", body=b"x", delay=0.3)
    o.count("/a")                      # requests seen for /a
    o.close()

A path without a route answers 404. Keep-alive, Content-Length framing.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def token_decision(method, target, headers):
    """An `auth_request` service's answer by the request's X-Token: "good" lets it through
    (204), "banned" is refused (403), anything else must authenticate (401 with a Bearer
    challenge). For `Origin.route(path, fn=token_decision)`."""
    tok = headers.get("X-Token")
    if tok == "good":
        return {"status": 204}
    if tok == "banned":
        return {"status": 403}
    return {"status": 401, "headers": {"WWW-Authenticate": 'Bearer realm="api"'}}


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A pooled connection the proxy (ringx or nginx) reset: not worth a traceback. Any
        # other error in a handler is still printed.
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class Origin:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        routes: dict[str, dict] = {}
        seen: list[tuple[str, str, dict]] = []
        lock = threading.Lock()
        conns: set = set()
        # Per accepted connection, in order: the client's port, requests answered, how it
        # ended, its socket's descriptor (what a test reports when a proxy says the
        # connection failed).
        lives: list[list] = []
        self._routes, self._seen, self._lock, self._conns = routes, seen, lock, conns
        self._lives = lives

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                self.life = [self.client_address[1], 0, "open", self.connection.fileno()]
                with lock:
                    conns.add(self.connection)
                    lives.append(self.life)

            def handle(self):
                try:
                    super().handle()
                    self.life[2] = "closed"
                except Exception as e:
                    self.life[2] = repr(e)
                    raise

            def finish(self):
                with lock:
                    conns.discard(self.connection)
                super().finish()

            def log_message(self, *a):  # quiet
                pass

            def _answer(self):
                path = self.path.split("?", 1)[0]
                with lock:
                    seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                    r = routes.get(path) or routes.get("*")
                if r is None:
                    r = {"status": 404, "headers": {}, "body": b"no route\n", "delay": 0}
                if callable(r.get("fn")):
                    r = {**r, **r["fn"](self.command, self.path, self.headers)}
                if r.get("delay"):
                    time.sleep(r["delay"])
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                body = r.get("body", b"")
                self.send_response(r.get("status", 200))
                for k, v in r.get("headers", {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                self.life[1] += 1

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _answer

        self.server = _Server((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.addr = f"{host}:{self.port}"
        self._closed = False
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def route(self, path: str, status: int = 200, body: bytes = b"", headers=None,
              delay: float = 0, fn=None) -> None:
        """What `path` answers; `fn(method, target, headers) -> dict` may override per request."""
        with self._lock:
            self._routes[path] = {"status": status, "body": body, "headers": headers or {},
                                  "delay": delay, "fn": fn}

    def count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(1 for _, t, _ in self._seen if path is None or t.split("?", 1)[0] == path)

    def requests(self, path: str | None = None) -> list[tuple[str, str, dict]]:
        with self._lock:
            return [r for r in self._seen if path is None or r[1].split("?", 1)[0] == path]

    def accepted(self) -> int:
        """How many connections it has accepted so far."""
        with self._lock:
            return len(self._lives)

    def connections(self, start: int = 0, end: int | None = None) -> str:
        """The connections accepted (from the `start`th to before the `end`th), in order:
        `PORT: N answered, how it ended, fd N` (the descriptor its socket had here, in hex as
        the kernel's syscall trace prints it)."""
        with self._lock:
            return "\n".join(f"{port}: {n} answered, {how}, fd {fd:#x}"
                             for port, n, how, fd in self._lives[start:end])

    def close(self) -> None:
        """Stops listening and cuts every open connection (the origin is down)."""
        if self._closed:
            return
        self._closed = True
        self.server.shutdown()
        self.server.server_close()
        import socket
        with self._lock:
            for c in list(self._conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
