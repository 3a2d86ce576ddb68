"""io_uring refused (seccomp makes io_uring_setup fail with EPERM) -> epoll fallback."""

import ctypes
import os
import platform
import struct

import pytest

from conftest import free_port, runtime_section
from util_http import Conn, request

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH_X86_64 = 0xC000003E
NR_IO_URING_SETUP = 425
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1

# classic BPF opcodes
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15     # BPF_JMP | BPF_JEQ | BPF_K
BPF_RET_K = 0x06     # BPF_RET | BPF_K


def _insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


PROGRAM = b"".join([
    _insn(BPF_LD_W_ABS, 0, 0, 4),                         # A = seccomp_data.arch
    _insn(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),            # arch == x86_64 ? skip 1 : next
    _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),            # other arch: allow
    _insn(BPF_LD_W_ABS, 0, 0, 0),                         # A = seccomp_data.nr
    _insn(BPF_JEQ_K, 0, 1, NR_IO_URING_SETUP),            # nr == io_uring_setup ?
    _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),    #   yes: fail with EPERM
    _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),            #   no: allow
])


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


# Everything the child needs is built here, in the parent: preexec_fn only calls prctl.
_filter_buf = ctypes.create_string_buffer(PROGRAM, len(PROGRAM))
_fprog = SockFprog(len(PROGRAM) // 8, ctypes.cast(_filter_buf, ctypes.c_void_p).value)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _install_seccomp():
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        os._exit(97)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(_fprog), 0, 0) != 0:
        os._exit(98)


def test_seccomp_refused_io_uring_falls_back_to_epoll(ringx):
    if platform.machine() != "x86_64":
        pytest.skip(f"seccomp filter uses x86_64 syscall numbers; machine is {platform.machine()}")
    p = free_port()
    cfg = runtime_section("uring") + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "fallback ok" }}
"""
    # engine=None: the fixture must not treat the fallback as a failure here
    srv = ringx.make(cfg, engine=None, start=False, preexec_fn=_install_seccomp)
    srv.start(wait=False)
    try:
        log = srv.wait_log("listening on", timeout=10)
    except AssertionError:
        if srv.proc.poll() in (97, 98):
            pytest.skip("could not install the seccomp filter (prctl refused) in this environment")
        raise
    lines = [ln for ln in log.splitlines() if "io_uring is unavailable" in ln]
    assert lines, "no fallback line in the log:\n" + log
    assert "using the epoll driver" in lines[0], lines[0]
    reason = lines[0].split("io_uring is unavailable", 1)[1].lower()
    assert any(w in reason for w in ("seccomp", "eperm", "not permitted", "refused", "permission")), (
        "fallback reason should name seccomp / the refusal: " + lines[0])
    listening = [ln for ln in log.splitlines() if "listening on" in ln][0]
    assert "engine epoll" in listening, listening
    for _ in range(5):
        with Conn(p) as c:
            c.send(request("GET", "/"))
            r = c.read_response()
            assert (r.status, r.body) == (200, b"fallback ok")
    with Conn(p) as c:  # keep-alive too
        for _ in range(5):
            c.send(request("GET", "/x"))
            assert c.read_response().status == 200


def test_epoll_engine_requested_logs_no_fallback(ringx):
    p = free_port()
    cfg = runtime_section("epoll") + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "e" }}
"""
    srv = ringx.make(cfg, engine="epoll")
    log = srv.log()
    assert "io_uring is unavailable" not in log
    assert "engine epoll" in [ln for ln in log.splitlines() if "listening on" in ln][0]


def test_uring_fixture_refuses_silent_fallback(ringx):
    """Guard for the suite itself: a server started for the uring variant that
    falls back to epoll must fail the test, not pass silently."""
    if platform.machine() != "x86_64":
        pytest.skip(f"seccomp filter uses x86_64 syscall numbers; machine is {platform.machine()}")
    p = free_port()
    cfg = runtime_section("uring") + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
"""
    srv = ringx.make(cfg, engine="uring", start=False, preexec_fn=_install_seccomp)
    with pytest.raises(pytest.fail.Exception, match="fell back to epoll"):
        srv.start()
