#!/usr/bin/env python3
"""Summarises bench/cluster.sh's outputs: a Markdown table (stdout) and
report.html with the scale-out run charted (throughput and p99 per window,
the migration shaded). Usage: cluster_report.py OUT_DIR T0"""
import json
import os
import sys

out, t0 = sys.argv[1], float(sys.argv[2])


def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None


def run_phase(rep):
    return [p for p in rep["phases"] if p["phase"] != "load"][-1]


def op(phase, name):
    return next((o for o in phase["ops"] if o["op"] == name), None)


lines = ["# Cluster benchmark", "", "## YCSB A and C through tern-client, by cluster size", "",
         "| nodes | A ops/s | A vs 1 node | A read p99 µs | A update p99 µs | C ops/s | C vs 1 node | C read p99 µs |",
         "|---|---|---|---|---|---|---|---|"]
base = {}
for n in (1, 2, 3):
    a, c = load(f"a-{n}.json"), load(f"c-{n}.json")
    if not a or not c:
        continue
    pa, pc = run_phase(a), run_phase(c)
    base.setdefault("a", pa["throughput"])
    base.setdefault("c", pc["throughput"])
    lines.append("| {} | {:.0f} | {:.2f}x | {:.0f} | {:.0f} | {:.0f} | {:.2f}x | {:.0f} |".format(
        n, pa["throughput"], pa["throughput"] / base["a"], op(pa, "READ")["p99_us"],
        op(pa, "UPDATE")["p99_us"], pc["throughput"], pc["throughput"] / base["c"],
        op(pc, "READ")["p99_us"]))

windows = []
tsv = os.path.join(out, "scale-windows.tsv")
if os.path.exists(tsv):
    for row in open(tsv):
        w, phase, start, end = row.split("\t")
        rep = load(f"scale-w{w}.json")
        p = run_phase(rep)
        windows.append({
            "w": int(w), "phase": phase, "start": float(start) - t0, "end": float(end) - t0,
            "tput": p["throughput"], "fail": p["ops_fail"],
            "read_p99": op(p, "READ")["p99_us"], "update_p99": op(p, "UPDATE")["p99_us"],
        })
mig = None
if os.path.exists(os.path.join(out, "scale-admin.end")):
    ms = float(open(os.path.join(out, "scale-admin.start")).read()) - t0
    me = float(open(os.path.join(out, "scale-admin.end")).read()) - t0
    mig = (ms, me)
if windows:
    lines += ["", "## Scale-out under YCSB A (10% of the slots to a fourth node)", ""]
    if mig:
        lines.append(f"Migration time (admin start to finish): {mig[1] - mig[0]:.1f} s")
        lines.append("")
    lines += ["| phase | windows | ops/s (mean) | read p99 µs (worst) | update p99 µs (worst) | failed ops |",
              "|---|---|---|---|---|---|"]
    for ph in ("before", "during", "after"):
        ws = [w for w in windows if w["phase"] == ph]
        if not ws:
            continue
        lines.append("| {} | {} | {:.0f} | {:.0f} | {:.0f} | {} |".format(
            ph, len(ws), sum(w["tput"] for w in ws) / len(ws), max(w["read_p99"] for w in ws),
            max(w["update_p99"] for w in ws), sum(w["fail"] for w in ws)))
print("\n".join(lines))


def chart(title, series, ylabel, shade):
    W, H, L, R, T, B = 720, 260, 60, 20, 30, 40
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    if not xs:
        return ""
    x0, x1 = 0, max(xs) * 1.02
    y1 = max(ys) * 1.1 or 1
    sx = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    sy = lambda y: H - B - y / y1 * (H - T - B)
    svg = [f'<svg width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="11">',
           f'<text x="{W/2}" y="16" text-anchor="middle" font-size="13">{title}</text>']
    if shade:
        svg.append(f'<rect x="{sx(shade[0]):.1f}" y="{T}" width="{max(sx(shade[1]) - sx(shade[0]), 1):.1f}" '
                   f'height="{H - T - B}" fill="#fde8c8"/><text x="{sx(shade[0]) + 3:.1f}" y="{T + 12}">migration</text>')
    svg.append(f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="#333"/><line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="#333"/>')
    for i in range(5):
        y = y1 * i / 4
        svg.append(f'<text x="{L-4}" y="{sy(y)+4:.1f}" text-anchor="end">{y:.0f}</text>')
    for i in range(6):
        x = x1 * i / 5
        svg.append(f'<text x="{sx(x):.1f}" y="{H-B+14}" text-anchor="middle">{x:.0f}</text>')
    svg.append(f'<text x="{W/2}" y="{H-6}" text-anchor="middle">seconds</text>')
    svg.append(f'<text x="14" y="{H/2}" transform="rotate(-90 14 {H/2})" text-anchor="middle">{ylabel}</text>')
    colors = ["#1f77b4", "#d62728", "#2ca02c"]
    for i, (name, pts) in enumerate(series):
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        svg.append(f'<polyline fill="none" stroke="{colors[i % 3]}" stroke-width="2" points="{path}"/>')
        for x, y in pts:
            svg.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colors[i % 3]}"/>')
        svg.append(f'<text x="{W-R-120}" y="{T+14+14*i}" fill="{colors[i % 3]}">{name}</text>')
    svg.append("</svg>")
    return "\n".join(svg)


mid = lambda w: (w["start"] + w["end"]) / 2
html = ["<!doctype html><meta charset=utf-8><title>Tern cluster benchmark</title>",
        "<body style='font-family:sans-serif;max-width:780px;margin:auto'>"]
import html as h
table = []


def flush_table():
    if not table:
        return
    html.append("<table border=1 style='border-collapse:collapse'>")
    for j, row in enumerate(table):
        tag = "th" if j == 0 else "td"
        cells = [h.escape(c.strip()) for c in row.strip("|").split("|")]
        html.append("<tr>" + "".join(f"<{tag} style='padding:2px 8px'>{c}</{tag}>" for c in cells) + "</tr>")
    html.append("</table>")
    table.clear()


for l in lines:
    if l.startswith("|"):
        if not l.startswith("|---"):
            table.append(l)
        continue
    flush_table()
    if l.startswith("# "):
        html.append(f"<h1>{h.escape(l[2:])}</h1>")
    elif l.startswith("## "):
        html.append(f"<h2>{h.escape(l[3:])}</h2>")
    elif l:
        html.append(f"<p>{h.escape(l)}</p>")
flush_table()
html = "\n".join(html)
if windows:
    html += chart("Throughput per window (YCSB A, ops/s)", [("ops/s", [(mid(w), w["tput"]) for w in windows])], "ops/s", mig)
    html += chart("p99 latency per window (µs)", [("read p99", [(mid(w), w["read_p99"]) for w in windows]),
                                                ("update p99", [(mid(w), w["update_p99"]) for w in windows])], "µs", mig)
open(os.path.join(out, "report.html"), "w").write(html + "</body>")
