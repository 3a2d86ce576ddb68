"""A gRPC server for tests/test_grpc.py, run as its own process so that a test can kill it
mid-stream: generic handlers on raw bytes (no generated code), the port given on the
command line, then a certificate and key to serve TLS (ALPN h2) instead of h2c. Methods of service `t.T`:

- Unary: answers the request reversed, with initial metadata `x-head: h` and trailing
  metadata `x-trail: t`.
- Fail: ends with status NOT_FOUND (5) and message "nope".
- BadTrailers: echoes the request, with trailing metadata `x-trail: t` and fields that may
  not be trailers (`set-cookie`, `authorization`, `x-forwarded-for`, `cache-control`).
- ServerStream: the request is "N SIZE"; answers N messages of SIZE bytes, message i made
  of the byte `i % 251`.
- ClientStream: answers the SHA-256 of the request messages concatenated, and their count.
- Bidi: answers each message with it uppercased.
- Hang: the request is "N": sends N messages of 1 byte, then waits forever (tests kill
  the server, or a deadline ends the call).
- Who: answers the port this server listens on (which upstream a call reached).
"""

import hashlib
import sys
import threading
from concurrent import futures

import grpc


def unary(req, ctx):
    ctx.send_initial_metadata((("x-head", "h"),))
    ctx.set_trailing_metadata((("x-trail", "t"),))
    return req[::-1]


def bad_trailers(req, ctx):
    ctx.set_trailing_metadata((("x-trail", "t"), ("set-cookie", "s=1"), ("authorization", "x"),
                               ("x-forwarded-for", "6.6.6.6"), ("cache-control", "no-store")))
    return req


def fail(req, ctx):
    ctx.abort(grpc.StatusCode.NOT_FOUND, "nope")


def server_stream(req, ctx):
    n, size = (int(x) for x in req.split())
    for i in range(n):
        yield bytes([i % 251]) * size


def client_stream(it, ctx):
    h = hashlib.sha256()
    n = 0
    for m in it:
        h.update(m)
        n += 1
    return h.hexdigest().encode() + b" %d" % n


def bidi(it, ctx):
    for m in it:
        yield m.upper()


def hang(req, ctx):
    for _ in range(int(req)):
        yield b"x"
    threading.Event().wait()


def main():
    port = int(sys.argv[1])
    h = grpc.method_handlers_generic_handler("t.T", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "BadTrailers": grpc.unary_unary_rpc_method_handler(bad_trailers),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Hang": grpc.unary_stream_rpc_method_handler(hang),
        "Who": grpc.unary_unary_rpc_method_handler(lambda req, ctx: str(port).encode()),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32),
                         options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((h,))
    if len(sys.argv) > 3:
        cert, key = (open(p, "rb").read() for p in sys.argv[2:4])
        creds = grpc.ssl_server_credentials(((key, cert),))
        server.add_secure_port(f"127.0.0.1:{port}", creds)
    else:
        server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
