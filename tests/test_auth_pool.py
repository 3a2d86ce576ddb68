"""auth_basic's slow hashes are verified off the zone (issue 35, point 9): while wrong
passwords are being verified, a plain request on the same zone is answered.

Before the auth pool the zone thread ran bcrypt itself, as nginx's worker does, and a plain
`return` request that arrived behind four wrong passwords waited for all four verifications
(here about 0.4 s each, bcrypt at cost 13). What is asserted is the order, not a speed: the
plain request's answer is in while none of the four has been answered, which needs the zone to
answer a request in less time than one bcrypt verification at cost 13 takes a core.

On both engines (the answers wake the zone with MSG_RING on io_uring, an eventfd on epoll).
Also: the verifications do finish (401 with the challenge, a right password 200, remembered),
`/metrics` counts them as done on the pool, and `[runtime] auth_threads = 0` (the zone
verifies, as nginx) still authenticates.
"""

from __future__ import annotations

import base64
import http.client
import re
import select
import socket
import time

import pytest

from conftest import free_port, runtime_section

# `htpasswd -nbB -C 13 alice right`: about 0.4 s per verification on the project's VM.
ALICE_13 = "alice:$2y$13$pjUrsTUZtopRpa58k8hvpe2XqMUygsGcKKmL/t3SSqoKzNDIK.ohG"
# `htpasswd -nbB -C 4 bob secret`: about 1 ms.
BOB_4 = "bob:$2y$04$PSP8EQ/tSO3IOd.ESMCCZOSVl7MNmbPFnP892W9X4fHnLGQe1p.RK"


def config(port, users, runtime_extra="", admin=None, engine=None):
    out = runtime_section(engine, 1, runtime_extra)
    if admin:
        out += f'[admin]\nlisten = "127.0.0.1:{admin}"\n'
    return out + (
        f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
        '  [[server.location]]\n  path = "/"\n  return = { status = 200, body = "open\\n" }\n'
        '  [[server.location]]\n  path = "/g/"\n  return = { status = 200, body = "in\\n" }\n'
        f'  auth_basic = {{ realm = "team", user_file = "{users}" }}\n')


def auth(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def get(port, path, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r, body


def read_response(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(4096)
        if not d:
            break
        data += d
    return data


def test_a_plain_request_is_answered_while_wrong_passwords_are_verified(ringx, tmp_path, engine):
    users = tmp_path / "users"
    users.write_text(ALICE_13 + "\n")
    port, admin = free_port(), free_port()
    ringx.make(config(port, users, admin=admin, engine=engine), engine=engine)
    wrong = []
    for i in range(4):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(f"GET /g/ HTTP/1.1\r\nHost: a\r\nAuthorization: {auth('alice', f'guess{i}')}"
                  "\r\n\r\n".encode())
        wrong.append(s)
    time.sleep(0.1)  # the zone has read them: four verifications of ~0.4 s are under way
    status, _, body = get(port, "/")
    answered_meanwhile = select.select(wrong, [], [], 0)[0]
    assert (status, body) == (200, b"open\n")
    assert not answered_meanwhile, (
        f"{len(answered_meanwhile)} of the 4 wrong passwords were answered before the plain "
        "request: the zone verified them itself instead of serving")
    # The verifications finish, each answered on its own connection.
    for s in wrong:
        head = read_response(s)
        s.close()
        assert head.startswith(b"HTTP/1.1 401"), head[:80]
        assert b'WWW-Authenticate: Basic realm="team"' in head
    assert get(port, "/g/", {"Authorization": auth("alice", "right")})[0] == 200
    _, _, m = get(admin, "/metrics")
    pool = re.search(rb'ringx_auth_verifications_total\{zone="0",where="pool"\} (\d+)', m)
    inline = re.search(rb'ringx_auth_verifications_total\{zone="0",where="zone"\} (\d+)', m)
    assert pool and int(pool.group(1)) == 5, m[-2000:]
    assert inline and int(inline.group(1)) == 0


@pytest.mark.parametrize("threads", [0, 2])
def test_auth_threads_verify_either_way(ringx, tmp_path, threads):
    users = tmp_path / "users"
    users.write_text(BOB_4 + "\n")
    port = free_port()
    ringx.make(config(port, users, f"auth_threads = {threads}\n"))
    st, r, _ = get(port, "/g/", {"Authorization": auth("bob", "nope")})
    assert st == 401 and r.getheader("WWW-Authenticate").startswith('Basic realm="team"')
    assert get(port, "/g/", {"Authorization": auth("bob", "secret")})[0] == 200
    assert get(port, "/")[0] == 200
