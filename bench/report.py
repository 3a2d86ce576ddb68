"""Turns a bench/http_bench.py result into charts (PNG) and the results section of
bench/README.md (between its results markers); the chart helper is shared with echo.py and
proxy.py."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
PEER_COLORS = {"nginx": "#4d7ea8", "ringx-epoll": "#c9a227", "ringx-uring": "#c0392b", "yardstick": "#999999"}
METRICS = [
    ("cpu_us_per_req", "server CPU per request (µs, lower is better)"),
    ("capped_rps", "requests/s with the server capped at 40% of a core (higher is better)"),
    ("lat_avg_ms", "mean latency (ms, lower is better)"),
    ("lat_p99_ms", "p99 latency (ms, lower is better)"),
]


def host_noise(hs):
    """The report's line on host noise, from a result's `host_speed` (lib.host_speed before and
    after the run), or None if the result has none."""
    if not hs:
        return None
    b, a = hs["before"], hs["after"]
    return (f"Host noise: a fixed busy loop on the server's CPU took {b['loop_ms_min']}–{b['loop_ms_max']} ms "
            f"before the run and {a['loop_ms_min']}–{a['loop_ms_max']} ms after it (spread {b['spread']}× / "
            f"{a['spread']}×, 1.0× is steady). Absolute figures drift by about that much; "
            "ratios come from alternated runs.")


def fmt(s, m):
    if m not in s:
        return "–"
    v = s[m]
    digits = 2 if v["median"] < 100 else 0
    txt = f"{v['median']:.{digits}f} ({v['min']:.{digits}f}–{v['max']:.{digits}f})"
    if "ratio_to_nginx" in v:
        txt += f" **{v['ratio_to_nginx']:.2f}×**"
    return txt


def bar_charts(summary, name, metrics, peer_colors):
    """One PNG per metric: a panel per workload, a bar per peer (median, min–max whiskers).
    Shared by the HTTP and the echo benchmark. Returns [(file name, title)]."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    wls = [w for w in summary if summary[w]]
    files = []
    for m, title in metrics:
        peers = [p for p in peer_colors if any(m in summary[w].get(p, {}) for w in wls)]
        ws = [w for w in wls if any(m in summary[w].get(p, {}) for p in peers)]
        if not ws:
            continue
        fig, axes = plt.subplots(1, len(ws), figsize=(2.7 * len(ws), 3.2), squeeze=False)
        for ax, w in zip(axes[0], ws):
            vals, lo, hi, cols, labels = [], [], [], [], []
            for p in peers:
                s = summary[w].get(p, {}).get(m)
                if not s:
                    continue
                vals.append(s["median"])
                lo.append(s["median"] - s["min"])
                hi.append(s["max"] - s["median"])
                cols.append(peer_colors[p])
                labels.append(p.replace("ringx-", "").replace("go-", ""))
            ax.bar(range(len(vals)), vals, yerr=[lo, hi], color=cols, capsize=3)
            ax.set_xticks(range(len(vals)))
            ax.set_xticklabels(labels, fontsize=8)
            ax.set_title(w, fontsize=9)
            ax.tick_params(axis="y", labelsize=8)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fn = f"{name}-{m}.png"
        fig.savefig(os.path.join(HERE, "results", fn), dpi=90)
        plt.close(fig)
        files.append((fn, title))
    return files


def charts(result, name):
    return bar_charts(result["summary"], name, METRICS, PEER_COLORS)


def write(result, name):
    files = charts(result, name)
    s = result["summary"]
    v = result["versions"]
    mach = result["machine"]
    lines = [BEGIN, "", f"### Latest run: `{name}` ({result['mode']}, {result['rounds']} rounds of {result['duration_s']} s, {result['elapsed_s']} s in all)", ""]
    lines.append(f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['mem_kib'] // 1024} MiB, Linux {mach['kernel']}. "
                 f"Versions: {v.get('ringx')}; {v.get('nginx')}; {v.get('wrk')}; {v.get('ab')}; {v.get('rustc')}.")
    noise = host_noise(result.get("host_speed"))
    if noise:
        lines += ["", noise]
    lines.append("")
    lines.append("Median (min–max) over the rounds; **bold** is the ratio to nginx in the same run.")
    if any("yardstick" in peers for peers in s.values()):
        lines.append("`yardstick` is [`yardstick/http_uring.c`](yardstick/http_uring.c), a minimal io_uring responder "
                     "(no parsing, a canned reply without a Date header), measured alternately with the others on the "
                     "64-byte keep-alive workloads: what a server that does no HTTP work reaches on this machine.")
    lines.append("")
    for w, peers in s.items():
        if not peers:
            continue
        lines.append(f"#### {w}: {result['method']['workloads'].get(w, '')}")
        lines.append("")
        lines.append("| peer | CPU µs/request | capped req/s (40% core) | uncapped req/s | mean latency ms | p99 latency ms |")
        lines.append("|---|---|---|---|---|---|")
        for p, ms in peers.items():
            lines.append(f"| {p} | {fmt(ms, 'cpu_us_per_req')} | {fmt(ms, 'capped_rps')} | {fmt(ms, 'rps')} | {fmt(ms, 'lat_avg_ms')} | {fmt(ms, 'lat_p99_ms')} |")
        lines.append("")
    for fn, title in files:
        lines.append(f"![{title}](results/{fn})")
        lines.append("")
    import re
    cmds = sorted({re.sub(r"/tmp/\S+\.csv", "AB.csv", re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", r["cmd"]))
                   for r in result["rows"]})
    lines.append("<details><summary>Client commands of this run</summary>")
    lines.append("")
    for c in cmds:
        lines.append(f"    {c}")
    lines.append("")
    lines.append("</details>")
    lines.append("")
    lines.append(END)
    readme = os.path.join(HERE, "README.md")
    text = open(readme).read() if os.path.exists(readme) else BEGIN + "\n" + END + "\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + "\n".join(lines) + text[text.index(END) + len(END):]
    else:
        text += "\n" + "\n".join(lines) + "\n"
    open(readme, "w").write(text)
    print(f"bench: updated {readme}")
