"""The differential script of tests/test_preload.py: socket calls whose every visible outcome
(results, errno, data, addresses other than port numbers) is printed, one line each. Run with
and without libringx_preload.so, the transcripts must be identical.

Usage: preload_diff.py IPV4 TCP_PORT CLOSED_PORT TCP6_PORT UNIX_DIR
"""

import ctypes
import errno
import os
import select
import socket
import sys

ip, port, closed, port6, udir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
libc = ctypes.CDLL(None, use_errno=True)


def say(*a):
    print(*a, flush=True)


def err(e):
    return errno.errorcode.get(e, str(e))


def echo_pair(listener, client):
    a, _ = listener.accept()
    client.sendall(b"ping")
    got = a.recv(16)
    a.sendall(got.upper())
    back = client.recv(16)
    a.close()
    return back


# Two reuseport listeners on one address (a steered group), and one plain listener.
group = []
for _ in range(2):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((ip, port))
    s.listen(64)
    group.append(s)
say("reuseport listeners:", [g.getsockname() == (ip, port) for g in group])

# Non-blocking accept with nothing queued.
group[0].setblocking(False)
try:
    group[0].accept()
except BlockingIOError as e:
    say("non-blocking accept, nothing queued:", err(e.errno))
group[0].setblocking(True)

# epoll on a listener, then a connection to the group.
ep = select.epoll()
for g in group:
    ep.register(g.fileno(), select.EPOLLIN)
c = socket.create_connection((ip, port))
ready = [fd for fd, _ in ep.poll(2)]
who = [g for g in group if g.fileno() in ready]
say("epoll readiness on one listener:", len(who) == 1)
say("echo:", echo_pair(who[0], c))
say("local address is", "ip" if c.getsockname()[0] == ip else c.getsockname()[0])
c.close()

# Non-blocking connect to a table destination.
c = socket.socket()
c.setblocking(False)
r = c.connect_ex((ip, port))
say("non-blocking connect:", err(r))
select.select([], [c], [], 2)
say("SO_ERROR:", c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
c.setblocking(True)
ready = [fd for fd, _ in ep.poll(2)]
say("echo:", echo_pair([g for g in group if g.fileno() in ready][0], c))
r = c.connect_ex((ip, port))
say("connect again:", err(r))
c.close()

# Bind before connect: the program's address is kept.
c = socket.socket()
c.bind((ip, 0))
bound = c.getsockname()
c.connect((ip, port))
say("bind before connect keeps the bound port:", c.getsockname() == bound)
ready = [fd for fd, _ in ep.poll(2)]
say("echo:", echo_pair([g for g in group if g.fileno() in ready][0], c))
c.close()

# Refused, blocking and not, to a destination with a table.
c = socket.socket()
say("refused:", err(c.connect_ex((ip, closed))))
c.close()
c = socket.socket()
c.setblocking(False)
say("non-blocking refused:", err(c.connect_ex((ip, closed))))
select.select([], [c], [], 2)
say("SO_ERROR:", err(c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)))
c.close()

# IPv6.
l6 = socket.socket(socket.AF_INET6)
l6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
l6.bind(("::1", port6))
l6.listen(8)
c = socket.create_connection(("::1", port6))
say("ipv6 echo:", echo_pair(l6, c), c.getsockname()[0])
c.close()

# UNIX stream and datagram sockets.
path = os.path.join(udir, "s")
lu = socket.socket(socket.AF_UNIX)
lu.bind(path)
lu.listen(4)
c = socket.socket(socket.AF_UNIX)
c.connect(path)
say("unix echo:", echo_pair(lu, c))
c.close()
c = socket.socket(socket.AF_UNIX)
say("unix connect to nothing:", err(c.connect_ex(os.path.join(udir, "none"))))
dpath = os.path.join(udir, "d")
du = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
du.bind(dpath)
c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
c.connect(dpath)
c.send(b"dgram")
say("unix datagram:", du.recv(16))

# UDP connected to the same address and port as the TCP table destination.
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((ip, port))
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c.connect((ip, port))
c.send(b"udp")
say("udp:", u.recv(16), "peer matches:", u.getsockname() == c.getpeername())

# Raw calls through the C library: results and errno exactly as the real calls leave them.
sa = (ctypes.c_ubyte * 16)()
say("connect(-1):", libc.connect(-1, sa, 16), err(ctypes.get_errno()))
fd = os.open(os.devnull, os.O_RDONLY)
say("connect(not a socket):", libc.connect(fd, sa, 16), err(ctypes.get_errno()))
os.close(fd)
say("close(-1):", libc.close(-1), err(ctypes.get_errno()))
say("listen(udp):", libc.listen(u.fileno(), 1), err(ctypes.get_errno()))
say("accept4(-1):", libc.accept4(-1, None, None, 0), err(ctypes.get_errno()))
say("epoll_ctl(-1):", libc.epoll_ctl(-1, 1, group[0].fileno(), None), err(ctypes.get_errno()))
# errno is left alone by a successful steered connect.
c = socket.socket()
ctypes.set_errno(errno.ENOENT)
import struct  # noqa: E402
sin = struct.pack("!HH4s8x", socket.AF_INET, port, socket.inet_aton(ip))
sin = sin[:2][::-1] + sin[2:] if sys.byteorder == "little" else sin
buf = ctypes.create_string_buffer(sin, 16)
say("connect:", libc.connect(c.fileno(), buf, 16), "errno after:", err(ctypes.get_errno()))
c.close()
say("done")
