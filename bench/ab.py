#!/usr/bin/env python3
"""A/B of this tree against an earlier commit: builds the commit's release binary in a
temporary git worktree (its own target directory, kept under target/ab/<rev> so a second run
reuses it), then runs, one after the other:

  bench/instructions.py --base BIN   user-space instructions and system calls per request
                                     (does not drift with the host; about 6 minutes)
  bench/http_bench.py --base BIN     with --timed: CPU per request, capped throughput and
  bench/proxy.py --base BIN          latency, both builds alternated in one run (15 minutes)

On a shared VM the timed figures of one build swing by 10-20% between rounds, so a change that
must cost nothing is judged first by the instruction counts; the timed runs say whether
something the counts cannot see (cache misses, kernel work, batching) moved beyond that noise.

Usage: bench/ab.py --rev REV [--timed] [--rounds N]     (make bench-ab REV=...)
"""
import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402


def build_rev(rev):
    """The release binary of commit `rev`, built in a worktree of this repository."""
    sha = subprocess.run(["git", "-C", lib.ROOT, "rev-parse", "--verify", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if sha.returncode != 0:
        sys.exit(f"bench/ab: {rev!r} is not a commit of {lib.ROOT}: {sha.stderr.strip()}")
    sha = sha.stdout.strip()
    out = os.path.join(lib.ROOT, "target", "ab", sha[:12])
    binary = os.path.join(out, "target", "release", "ringx")
    if os.path.exists(binary):
        return binary
    tree = os.path.join(out, "src")
    if os.path.exists(tree):
        subprocess.run(["git", "-C", lib.ROOT, "worktree", "remove", "--force", tree], capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    # A run killed mid-build leaves the worktree registered without its folder.
    subprocess.run(["git", "-C", lib.ROOT, "worktree", "prune"], check=True)
    subprocess.run(["git", "-C", lib.ROOT, "worktree", "add", "--detach", tree, sha], check=True)
    try:
        subprocess.run(["cargo", "build", "--release", "--bin", "ringx",
                        "--target-dir", os.path.join(out, "target")], cwd=tree, check=True)
    finally:
        subprocess.run(["git", "-C", lib.ROOT, "worktree", "remove", "--force", tree], check=False)
    return binary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", required=True, help="the commit to compare with (a hash, tag or branch)")
    ap.add_argument("--timed", action="store_true", help="also the timed A/B (http_bench.py, proxy.py)")
    ap.add_argument("--rounds", type=int, help="rounds of each script (their defaults otherwise)")
    args = ap.parse_args()
    if not os.path.exists(lib.RINGX):
        sys.exit(f"bench/ab: {lib.RINGX} missing: run `make release`")
    base = build_rev(args.rev)
    rounds = ["--rounds", str(args.rounds)] if args.rounds else []
    scripts = ["instructions.py"] + (["http_bench.py", "proxy.py"] if args.timed else [])
    for script in scripts:
        cmd = [sys.executable, os.path.join(lib.BENCH, script), "--base", base, *rounds]
        print("bench/ab:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
