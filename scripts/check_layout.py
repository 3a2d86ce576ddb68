#!/usr/bin/env python3
"""Checks the source layout rules of the workspace (issue 20), for `make lint`:

1. no import cycle between files of a crate: a file depends on another when it names an item
   of the other's module (`use crate::a::b::X`, `super::X`, or a path written inline), and
   following those dependencies must never lead back to where it started;
2. no type has `impl` blocks (inherent or trait) in more than two files;
3. no file is longer than 800 lines, other than tests.

Prints each violation and exits 1 if there is any. `--graph` prints every file's
dependencies.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 800
IMPLS_MAX_FILES = 2

PATH_RE = re.compile(r"(?<![\w:])([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_RE = re.compile(r"\buse\s+([A-Za-z_][^;]*);", re.S)
IMPL_RE = re.compile(
    r"^\s*(?:unsafe\s+)?impl\s*(?:<[^{]*?>)?\s*(?:(?:[A-Za-z_][\w:]*)(?:<[^{]*?>)?\s+for\s+)?"
    r"&?(?:'\w+\s+)?(?:mut\s+)?([A-Za-z_][\w:]*)",
    re.M,
)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        # Drop // comments (good enough: string literals holding // are rare in paths).
        i = line.find("//")
        out.append(line if i < 0 else line[:i])
    return "\n".join(out)


def expand_use(body: str) -> list[str]:
    """`crate::a::{b, c::{d, e}}` -> [crate::a::b, crate::a::c::d, crate::a::c::e]."""
    # `X as Y` aliases go first, while the words are still apart (a module named `ascii`
    # is not an alias).
    body = re.sub(r"\s+as\s+\w+", "", body)
    body = re.sub(r"\s+", "", body)

    def rec(prefix: str, s: str) -> list[str]:
        if "{" not in s:
            return [prefix + s] if s else [prefix.rstrip(":")]
        i = s.index("{")
        head, inner = s[:i], s[i + 1 : s.rindex("}")]
        parts, depth, cur = [], 0, ""
        for ch in inner:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        parts.append(cur)
        out = []
        for p in parts:
            if p:
                out += rec(prefix + head, p)
        return out

    return [p.rstrip(":") for p in rec("", body)]


class Crate:
    def __init__(self, src: Path):
        self.src = src
        root = src / "lib.rs"
        self.root = root if root.exists() else src / "main.rs"

    def module_of(self, f: Path) -> list[str]:
        rel = f.relative_to(self.src).with_suffix("")
        parts = list(rel.parts)
        if parts == ["lib"] or parts == ["main"]:
            return []
        if parts[-1] == "mod":
            parts = parts[:-1]
        return parts

    def file_of(self, module: list[str]) -> Path | None:
        if not module:
            return self.root
        base = self.src.joinpath(*module)
        for cand in (base.with_suffix(".rs"), base / "mod.rs"):
            if cand.exists():
                return cand
        return None

    def resolve(self, f: Path, path: str) -> Path | None:
        segs = path.split("::")
        here = self.module_of(f)
        if segs[0] == "crate":
            mod, rest = [], segs[1:]
        elif segs[0] == "self":
            mod, rest = here, segs[1:]
        elif segs[0] == "super":
            mod = here
            while segs and segs[0] == "super":
                mod = mod[:-1]
                segs = segs[1:]
            rest = segs
        elif self.file_of(here + [segs[0]]) is not None:
            # A path relative to this module (`use child::X`, `child::f()`).
            mod, rest = here, segs
        else:
            return None  # another crate, std, or a type's associated item
        # Descend as deep as modules exist; what remains names items of the last one.
        for s in rest:
            if self.file_of(mod + [s]) is None:
                break
            mod = mod + [s]
        return self.file_of(mod)


def is_test_file(f: Path) -> bool:
    return f.name in ("tests.rs",) or f.name.endswith("_tests.rs") or "tests" in f.parts[:-1]


def main() -> int:
    show_graph = "--graph" in sys.argv
    problems: list[str] = []
    impls: dict[str, set[str]] = defaultdict(set)
    for src in sorted(ROOT.glob("crates/*/src")):
        crate = Crate(src)
        files = sorted(src.rglob("*.rs"))
        deps: dict[Path, set[Path]] = {f: set() for f in files}
        for f in files:
            text = strip_comments(f.read_text())
            n = len(f.read_text().splitlines())
            if n > MAX_LINES and not is_test_file(f):
                problems.append(f"{f.relative_to(ROOT)}: {n} lines (at most {MAX_LINES} outside tests)")
            if is_test_file(f):
                continue
            # Test modules inside a file are the file's own business.
            text = re.split(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)[0]
            paths = set(PATH_RE.findall(text))
            for u in USE_RE.findall(text):
                paths.update(expand_use(u))
            for p in paths:
                d = crate.resolve(f, p)
                if d is not None and d != f and not is_test_file(d):
                    deps[f].add(d)
            for m in IMPL_RE.finditer(text):
                ty = m.group(1).split("::")[-1]
                if ty not in ("Self",):
                    impls[f"{src.parent.name}::{ty}"].add(str(f.relative_to(ROOT)))
        if show_graph:
            for f, ds in deps.items():
                print(f.relative_to(ROOT), "->", ", ".join(str(d.relative_to(ROOT)) for d in sorted(ds)))
        for cycle in cycles(deps):
            problems.append("import cycle: " + " -> ".join(str(c.relative_to(ROOT)) for c in cycle))
    for ty, fs in sorted(impls.items()):
        if len(fs) > IMPLS_MAX_FILES:
            problems.append(f"impl blocks of {ty} in {len(fs)} files: {', '.join(sorted(fs))}")
    for p in problems:
        print(p)
    print(f"layout: {len(problems)} problem(s)")
    return 1 if problems else 0


def cycles(deps: dict[Path, set[Path]]) -> list[list[Path]]:
    """One cycle per strongly connected component of more than one file (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on: set[Path] = set()
    out: list[list[Path]] = []
    counter = [0]

    def strong(v: Path) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in deps.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(path_in(comp, deps))

    sys.setrecursionlimit(10000)
    for v in deps:
        if v not in index:
            strong(v)
    return out


def path_in(comp: list[Path], deps: dict[Path, set[Path]]) -> list[Path]:
    """A concrete cycle through the component, for the message."""
    members = set(comp)
    start = min(comp)
    seen = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(deps[v] & members):
                if w == start:
                    path = [v]
                    while seen[path[-1]] is not None:
                        path.append(seen[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in seen:
                    seen[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


if __name__ == "__main__":
    sys.exit(main())
