"""The transport floors of bench/h3.py: what this machine takes to move what ringx-h3 and
ringx-h2 move with no protocol work at all (bench/yardstick/bulk_floor.c), and what AES-GCM
alone costs on the server's CPU. Each floor is offered what ringx-h3 received and sent in the
same round (its row): the method is in bench/h3.py's docstring and bench/README.md."""
import os
import re
import subprocess

import lib

# The transport floor (bench/yardstick/bulk_floor.c): the 1 MB download sent with no protocol
# work at all, as UDP datagrams the size ringx-h3's were (1,452 bytes, 44 to a GSO send, the
# client acknowledging every 26th as quic-go did against ringx: ringx_quic_datagrams_total,
# 741 out and 29 in per MB, 2026-12-03) and over TCP; offered ringx-h3's rate.
FLOORS = ("floor-udp", "floor-tcp")
FLOOR_SEG, FLOOR_SEGS, FLOOR_WINDOW, FLOOR_ACK_EVERY = 1452, 44, 1 << 20, 26

# The 64-byte workloads' floors are offered datagrams of the mean size ringx-h3 received and
# sent in the same round (`ringx_quic_bytes_total` over `ringx_quic_datagrams_total`:
# requests and acknowledgements in, responses out), on the connections h3load used: `floor-udp`
# in bursts of what ringx-h3 took per wake-up, FLOOR_IRQ in bursts of what reached it per
# interrupt to its CPU (floor_chat).
FLOOR_IRQ = "floor-udp-irq"
UDP_FLOORS = ("floor-udp", FLOOR_IRQ)
SEAL_SMALL = "seal-small"
# What sealing costs alone on CPU 0 (`openssl speed -aead`, AES-128-GCM as quic-go and h2load
# negotiate): per QUIC packet (1,452 bytes) and per TLS record (16 KB). OpenSSL, not ringx's
# aws-lc: a second opinion on the machine, not ringx's own figure.
SEALS = {"seal-packet": 1452, "seal-record": 16384}


def floor_binary(work):
    """bench/yardstick/bulk_floor.c, built once per run."""
    out = os.path.join(work, "bulk_floor")
    if not os.path.exists(out) and not lib.build_c("yardstick/bulk_floor.c", out):
        raise RuntimeError("bench/h3: bench/yardstick/bulk_floor.c did not build")
    return out


def floor_env(host):
    """The floors' environment: the server's address `host` (bench/yardstick/bulk_floor.c's
    FLOOR_ADDR), the veth pair's server end under --veth."""
    return {**os.environ, "FLOOR_ADDR": host}


def floor_client(srv, secs, args, pattern):
    """Runs bulk_floor's client `args` on CPU 1 against floor `srv` for `secs` seconds: the
    match of `pattern` in what it printed."""
    cmd = ["taskset", "-c", lib.CLIENT_CPU, floor_binary(srv.work), *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 30,
                         env=floor_env(srv.host)).stdout
    m = re.search(pattern, out)
    if not m:
        raise RuntimeError(f"bench/h3: {srv.name} client output not understood: {out[-400:]}")
    return m


def floor_fetch(srv, secs, size, rate):
    """The floor's client on CPU 1: 4 connections fetching `size` bytes at `rate` a second."""
    m = floor_client(srv, secs, ["fetch", "udp" if srv.name in UDP_FLOORS else "tcp", srv.port,
                                 4, secs, size, FLOOR_ACK_EVERY, rate or 0],
                     r"transfers (\d+) bytes (\d+) retries (\d+)")
    n = int(m.group(1))
    return {"requests": n, "succeeded": n, "failed": int(m.group(3)), "bytes": int(m.group(2)),
            "lat_p50_ms": None, "lat_p99_ms": None}


def upload_shape(h3):
    """What ringx-h3 received in its upload row `h3`: the mean datagram's size, datagrams per
    receive (the client's GSO batches, which GRO kept whole; at most a UDP datagram's 65,507
    bytes), and datagrams per datagram it sent back (its acknowledgements; at most half the
    push's window, which would otherwise wait for them)."""
    din = max(h3["dgrams_in"], 1)
    seg = max(64, min(1472, round(h3["dgram_bytes_in"] / din)))
    return (seg,
            max(1, min(65507 // seg, round(din / max(h3["batches_in"], 1)))),
            max(1, min(FLOOR_WINDOW // 4 // (2 * seg), round(din / max(h3["dgrams_out"], 1)))))


def floor_push(srv, secs, size, rate, h3):
    """The upload floor's client on CPU 1: 4 connections sending `size` bytes at `rate` a
    second, over UDP in the datagrams and batches of ringx-h3's row `h3`."""
    seg, segs, _ = upload_shape(h3)
    m = floor_client(srv, secs, ["push", "udp" if srv.name in UDP_FLOORS else "tcp", srv.port,
                                 4, secs, size, seg, segs, FLOOR_WINDOW // 4, rate or 0],
                     r"transfers (\d+) bytes (\d+) retries (\d+) seconds \S+ received (\d+)")
    n = int(m.group(1))
    # `received`: what the sink took in (and so the bytes its CPU is per), lost ones left out.
    return {"requests": n, "succeeded": n, "failed": int(m.group(3)), "bytes": None,
            "lat_p50_ms": None, "lat_p99_ms": None, "seg": seg, "segs": segs,
            "received": int(m.group(4))}


def small_sizes(h3):
    """The mean UDP payload of a datagram ringx-h3 received and sent in its row `h3`."""
    return tuple(max(3, min(1500, round(h3[f"dgram_bytes_{d}"] / max(h3[f"dgrams_{d}"], 1))))
                 for d in ("in", "out"))


def floor_chat(srv, secs, conns, h3):
    """The small-request floor's client on CPU 1: what ringx-h3 received in this round (`h3`,
    its row) offered again on `conns` sockets. Its figures are requests as ringx-h3 counted
    them per datagram received.

    The datagrams go in bursts, one burst per time ringx-h3 was handed some: for `floor-udp`
    per wake-up of ringx-h3, for FLOOR_IRQ per interrupt to its CPU that brought them (or
    wake-up, were those more). The two differ under --veth, where RPS hands each datagram to
    the server's CPU with an interrupt unless one is pending there already: quic-go's
    connections send their requests one datagram at a time, apart, and ringx-h3, busy
    between them, takes each by an interrupt without waking. `floor-udp` gets them a
    wake-up's worth at once, so it is interrupted more than ten times less than ringx-h3 was:
    the bound from below of what moving them costs the machine. FLOOR_IRQ is interrupted as
    often as ringx-h3 was, but wakes at each burst, having nothing to do between them where
    ringx-h3 had: the bound from above."""
    din, dout, wakes = h3["dgrams_in"], h3["dgrams_out"], h3["wakes"]
    deliveries = max(wakes, h3.get("ipis", 0) if srv.name == FLOOR_IRQ else 0)
    in_size, out_size = small_sizes(h3)
    burst = max(1, min(64, round(din / max(deliveries, 1))))
    permille = min(1000, round(1000 * dout / max(din, 1)))
    m = floor_client(srv, secs, ["chat", srv.port, conns, secs, din / secs, in_size, permille,
                                 out_size, burst], r"sent (\d+) answers (\d+)")
    sent = int(m.group(1))
    n = round(sent * h3["succeeded"] / max(din, 1))
    return {"requests": n, "succeeded": n, "failed": 0, "bytes": None, "lat_p50_ms": None,
            "lat_p99_ms": None, "dgrams_in": sent, "answers": int(m.group(2)), "burst": burst,
            "in_size": in_size, "out_size": out_size}


def seal_small(h3):
    """µs per request that AES-128-GCM takes, alone, over the datagrams of ringx-h3's row
    `h3` (each sealed once and opened once: the same work either way)."""
    in_size, out_size = small_sizes(h3)
    per = {size: seal_cost(size) for size in (in_size, out_size)}
    if None in per.values():
        return None
    ns = h3["dgrams_in"] * per[in_size] * in_size / 1024 + h3["dgrams_out"] * per[out_size] * out_size / 1024
    return ns / 1000 / max(h3["succeeded"], 1)


def seal_cost(size):
    """ns per KB that AES-128-GCM takes to seal `size`-byte messages on the server's CPU."""
    out = lib.sh(["taskset", "-c", lib.SERVER_CPU, "openssl", "speed", "-seconds", "1", "-aead",
                  "-bytes", str(size), "-evp", "aes-128-gcm"]).stdout
    m = re.search(r"AES-128-GCM\s+([\d.]+)k", out)
    return 1024 / (float(m.group(1)) * 1000) * 1e9 if m else None
