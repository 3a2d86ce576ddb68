"""A minimal HTTP/3 client over Python's aioquic, for the tests: GET (or any method, with
any header fields and body) one or more URLs on one QUIC connection, concurrently, and
return each response's status, headers, body and trailers."""
import asyncio
import socket
import ssl

from aioquic import tls
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import Buffer, BufferReadError
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived, StreamReset

# HTTP/3's control stream type and GOAWAY frame type (RFC 9114 §6.2.1, §7.2.6).
CONTROL_STREAM = 0x0
GOAWAY = 0x7


class Response:
    def __init__(self):
        self.status = None
        self.headers = []
        self.body = bytearray()
        # The trailing HEADERS frame's fields, where the response has one.
        self.trailers = []
        self.reset = None
        # The connection's error code, where the server closed it before this response.
        self.closed = None
        # The stream ID of the server's GOAWAY, where one had come when this response ended.
        self.goaway = None

    def header(self, name):
        return self._field(self.headers, name)

    def trailer(self, name):
        return self._field(self.trailers, name)

    @staticmethod
    def _field(fields, name):
        name = name.lower().encode()
        for k, v in fields:
            if k == name:
                return v.decode()
        return None


class _H3(H3Connection):
    """aioquic's HTTP/3 connection, told which streams carry HEAD: it checks every response's
    Content-Length against its body, which a response to HEAD does not have (RFC 9110
    §9.3.2)."""

    head_streams: set = set()
    # The stream ID of the server's last GOAWAY: aioquic reads the frame and drops it, so
    # the server's unidirectional streams are read here too, and its control stream's
    # frames parsed.
    goaway = None
    uni: dict = {}

    def _check_content_length(self, stream):
        if stream.stream_id not in self.head_streams:
            super()._check_content_length(stream)

    def handle_event(self, event):
        if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
            data = self.uni.setdefault(event.stream_id, bytearray())
            data += event.data
            self._read_control(data)
        return super().handle_event(event)

    def _read_control(self, data):
        buf = Buffer(data=bytes(data))
        try:
            if buf.pull_uint_var() != CONTROL_STREAM:
                return
            while not buf.eof():
                kind, size = buf.pull_uint_var(), buf.pull_uint_var()
                payload = buf.pull_bytes(size)
                if kind == GOAWAY:
                    self.goaway = Buffer(data=payload).pull_uint_var()
        except BufferReadError:
            pass  # the rest of a frame is still to come


class _Client(QuicConnectionProtocol):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.h3 = _H3(self._quic)
        self.h3.head_streams = set()
        self.h3.uni = {}
        self.waiting = {}
        self.responses = {}
        # The size of each datagram the server sent, in order.
        self.sizes = []

    def datagram_received(self, data, addr):
        self.sizes.append(len(data))
        super().datagram_received(data, addr)

    def request(self, method, authority, path, headers=(), body=None, body_after=0.0,
                trailers=()):
        """Sends a request (its body `body_after` seconds after its head, then `trailers`
        if any) and returns the future of its response."""
        sid = self._quic.get_next_available_stream_id()
        if method == "HEAD":
            self.h3.head_streams.add(sid)
        fields = [(b":method", method.encode()), (b":scheme", b"https"),
                  (b":authority", authority.encode()), (b":path", path.encode())]
        fields += [(k.encode(), v.encode()) for k, v in headers]
        self.h3.send_headers(sid, fields, end_stream=body is None)
        loop = asyncio.get_running_loop()
        if body is not None:
            def send_body():
                self.h3.send_data(sid, body, end_stream=not trailers)
                if trailers:
                    self.h3.send_headers(sid, [(k.encode(), v.encode()) for k, v in trailers],
                                         end_stream=True)
                self.transmit()
            if body_after > 0:
                loop.call_later(body_after, send_body)
            else:
                send_body()
        fut = loop.create_future()
        self.waiting[sid] = fut
        self.responses[sid] = Response()
        self.transmit()
        return fut

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            for sid in list(self.waiting):
                self.responses[sid].closed = event.error_code
                self._done(sid)
            return
        if isinstance(event, StreamReset) and event.stream_id in self.waiting:
            r = self.responses[event.stream_id]
            r.reset = event.error_code
            self._done(event.stream_id)
            return
        for e in self.h3.handle_event(event):
            r = self.responses.get(e.stream_id)
            if r is None:
                continue
            if isinstance(e, HeadersReceived):
                if r.status is None:
                    r.headers = e.headers
                    r.status = int(dict(e.headers)[b":status"])
                else:
                    r.trailers = e.headers
            elif isinstance(e, DataReceived):
                r.body += e.data
            if getattr(e, "stream_ended", False):
                self._done(e.stream_id)

    def _done(self, sid):
        fut = self.waiting.pop(sid, None)
        self.responses[sid].goaway = self.h3.goaway
        if fut is not None and not fut.done():
            fut.set_result(self.responses[sid])


def _config(host, cafile, **kw):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=host, **kw)
    if cafile is None:
        cfg.verify_mode = ssl.CERT_NONE
    else:
        cfg.load_verify_locations(cafile)
    return cfg


async def _fetch(port, paths, host, method, headers, body, timeout, cafile, body_after,
                 trailers=()):
    cfg = _config(host, cafile)
    async with connect("127.0.0.1", port, configuration=cfg, create_protocol=_Client,
                       wait_connected=True) as client:
        bodies = body if isinstance(body, list) else [body] * len(paths)
        futs = [client.request(method, host, p, headers, b, body_after, trailers)
                for p, b in zip(paths, bodies)]
        return await asyncio.wait_for(asyncio.gather(*futs), timeout)


class _Forward(asyncio.DatagramProtocol):
    """The new socket of a client that moved: what it receives goes to the connection."""

    def __init__(self, client):
        self.client = client

    def datagram_received(self, data, addr):
        self.client.datagram_received(data, addr)


async def _move(client, local_ip, new_cid):
    """Moves the connection to a new socket on `local_ip` (a new port: a NAT rebinding; a
    new address: the client changed networks), with one of the server's other connection
    IDs when `new_cid`; the old socket closes."""
    # aioquic's socket is a dual-stack IPv6 one and names the server v4-mapped: so is this.
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::ffff:" + local_ip, 0))
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: _Forward(client), sock=sock)
    old, client._transport = client._transport, transport
    old.close()
    if new_cid:
        client._quic.change_connection_id()
    return transport.get_extra_info("sockname")[0].removeprefix("::ffff:")


async def _migrate(port, before, after, local_ip, new_cid, timeout, cafile, server, act):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
    cfg.load_verify_locations(cafile)
    async with connect(server, port, configuration=cfg, create_protocol=_Client,
                       wait_connected=True) as client:
        first = [client.request("GET", "localhost", p) for p in before]
        first = await asyncio.wait_for(asyncio.gather(*first), timeout)
        if act is not None:
            await asyncio.get_running_loop().run_in_executor(None, act)
        moved_to = await _move(client, local_ip, new_cid)
        then = [client.request("GET", "localhost", p) for p in after]
        then = await asyncio.wait_for(asyncio.gather(*then), timeout)
        return first, then, moved_to


def migrate(port, before, after, cafile, local_ip="127.0.0.1", new_cid=False, timeout=10,
            server="127.0.0.1", act=None):
    """The responses to `before` on one connection to `server`, then, once `act()` (a
    blocking call, if given: a reload, say) has returned and the client moved to a new
    socket on `local_ip` (see `_move`), the responses to `after` on the same connection; and
    the address it moved to."""
    return asyncio.run(_migrate(port, before, after, local_ip, new_cid, timeout, str(cafile),
                                server, act))


async def _around(port, before, after, act, timeout, cafile):
    async with connect("127.0.0.1", port, configuration=_config("localhost", cafile),
                       create_protocol=_Client, wait_connected=True) as client:
        first = [client.request("GET", "localhost", p) for p in before]
        first = await asyncio.wait_for(asyncio.gather(*first), timeout)
        # In a thread: the connection goes on answering the server meanwhile.
        await asyncio.get_running_loop().run_in_executor(None, act)
        then = [client.request("GET", "localhost", p) for p in after]
        then = await asyncio.wait_for(asyncio.gather(*then), timeout)
        return first, then


def around(port, before, after, act, cafile, timeout=10):
    """The responses to `before` on one connection, then, once `act()` (a blocking call:
    a reload, say) has returned, the responses to `after` on the same connection."""
    return asyncio.run(_around(port, before, after, act, timeout, str(cafile)))


def get(port, paths, host="localhost", method="GET", headers=(), body=None, timeout=20,
        cafile=None, body_after=0.0, trailers=()):
    """The responses to `paths` (a list), requested at once on one connection, each with
    `body` (or its own: a list of bodies, one per path); the server's certificate checked
    against `cafile` (None: not checked); `body_after`: the bodies go that many seconds
    after the heads; `trailers`: fields sent after each body."""
    return asyncio.run(_fetch(port, paths, host, method, headers, body, timeout,
                              None if cafile is None else str(cafile), body_after, trailers))


async def _sized(port, paths, cafile, until, timeout):
    cfg = _config("localhost", cafile)
    async with connect("127.0.0.1", port, configuration=cfg, create_protocol=_Client,
                       wait_connected=True) as client:
        futs = [client.request("GET", "localhost", p) for p in paths]
        got = await asyncio.wait_for(asyncio.gather(*futs), timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # `until` may block (it asks the server's admin port): off the loop, which goes on
        # answering the server's packets meanwhile.
        while until is not None and not await loop.run_in_executor(None, until):
            assert loop.time() < deadline, "the condition never held"
            await asyncio.sleep(0.02)
        return got, list(client.sizes)


def get_sized(port, paths, cafile, until=None, timeout=20):
    """The responses to `paths` on one connection, and the size of each datagram the server
    sent on it; the connection stays open (its client answering the server) until `until()`
    is true, when given."""
    return asyncio.run(_sized(port, paths, str(cafile), until, timeout))


class Session:
    """What one connection of `session` got: the responses, the session tickets the server
    sent, whether the handshake resumed the ticket it was given, whether the server accepted
    the requests sent as 0-RTT, the cipher suite, and the 1-RTT key updates from the one
    asked for on (`"local_update"`: the client's; `"remote_update"`: the server's)."""

    def __init__(self):
        self.responses = []
        self.tickets = []
        self.resumed = False
        self.early_accepted = False
        self.cipher = None
        self.key_updates = []


async def _session(port, paths, o):
    out = Session()
    kw = {}
    if o["ticket"] is not None:
        kw["session_ticket"] = o["ticket"]
    if o["cipher_suites"] is not None:
        kw["cipher_suites"] = o["cipher_suites"]
    cfg = _config(o["host"], o["cafile"], **kw)
    early = o["early"]
    async with connect("127.0.0.1", port, configuration=cfg, create_protocol=_Client,
                       session_ticket_handler=out.tickets.append,
                       wait_connected=not early) as client:
        # Without waiting for the handshake, the requests go in 0-RTT packets when the
        # ticket allows it (aioquic sends them then; the server may refuse them, and aioquic
        # sends them again in 1-RTT).
        ask = lambda ps: [client.request(o["method"], o["host"], p, o["headers"], o["body"])
                          for p in ps]
        futs = ask(paths)
        out.responses = list(await asyncio.wait_for(asyncio.gather(*futs), o["timeout"]))
        quic = client._quic
        if o["after_key_update"]:
            pair = quic._cryptos[tls.Epoch.ONE_RTT]
            update = pair._update_key

            def spy(trigger):
                out.key_updates.append(trigger)
                update(trigger)

            pair._update_key = spy
            quic.request_key_update()
            client.transmit()
            futs = ask(o["after_key_update"])
            out.responses += await asyncio.wait_for(asyncio.gather(*futs), o["timeout"])
        # The server sends its tickets once the handshake is done, which a response to a
        # 0-RTT request may precede.
        deadline = asyncio.get_running_loop().time() + o["timeout"]
        while o["want_ticket"] and not out.tickets:
            assert asyncio.get_running_loop().time() < deadline, "no session ticket came"
            await asyncio.sleep(0.01)
        out.resumed = quic.tls.session_resumed
        out.early_accepted = quic.tls.early_data_accepted
        out.cipher = quic.tls.key_schedule.cipher_suite if quic.tls.key_schedule else None
    return out


def session(port, paths, host="localhost", method="GET", headers=(), body=None, cafile=None,
            ticket=None, early=False, cipher_suites=None, after_key_update=(), want_ticket=False,
            timeout=20):
    """One connection that requests `paths` at once, resuming `ticket` (a session ticket an
    earlier `session` got) if given; with `early`, the requests are sent without waiting for
    the handshake (0-RTT, where the ticket allows it). `cipher_suites`: the only TLS suites
    offered. `after_key_update`: paths requested once the first responses came and the
    client updated its 1-RTT keys (RFC 9001 §6). `want_ticket`: wait for the server's
    session ticket before closing. Returns a `Session`."""
    o = dict(host=host, method=method, headers=headers, body=body,
             cafile=None if cafile is None else str(cafile), ticket=ticket, early=early,
             cipher_suites=cipher_suites, after_key_update=list(after_key_update),
             want_ticket=want_ticket, timeout=timeout)
    return asyncio.run(_session(port, paths, o))


if __name__ == "__main__":
    import sys
    for r in get(int(sys.argv[1]), sys.argv[2:] or ["/"]):
        print(r.status, r.headers, bytes(r.body[:200]))
