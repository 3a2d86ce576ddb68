"""io_uring with kernel submission polling (`sqpoll = true`): same answers, one shared SQ
thread for all zones."""
import os
import re
import subprocess
import time

from conftest import free_port, runtime_section


def test_sqpoll_serves_and_shares_one_sq_thread(ringx):
    port = free_port()
    body = "x" * 64
    cfg = runtime_section("uring", zones=2, extra="sqpoll = true\n") + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{body}" }}
"""
    r = ringx.make(cfg, engine="uring")
    out = subprocess.run(["ab", "-n", "3000", "-c", "10", "-k", f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"Complete requests:\s+3000", out), out
    assert re.search(r"Failed requests:\s+0", out), out
    assert "Non-2xx" not in out, out
    # One kernel SQ thread, attached to by both zones (IORING_SETUP_ATTACH_WQ).
    names = []
    for tid in os.listdir(f"/proc/{r.pid}/task"):
        try:
            names.append(open(f"/proc/{r.pid}/task/{tid}/comm").read().strip())
        except OSError:
            pass
    sq = [n for n in names if n.startswith("iou-sqp")]
    assert len(sq) == 1, names
