#!/usr/bin/env python3
"""Tail latency per step and engine from a `tern bench compare --json` file.

    bench/latency_table.py DIR/compare.json > DIR/table.md

For runs at a fixed arrival rate (`-p target=N`), where the latencies are
what matters: per step and binding, the throughput (mean over rounds), the
main operation's p50, p99, p99.9 and p99.99 (ranges over rounds), the
slowest one-second sample (an engine that fell behind the target), space
amplification and stall time; then Tern's percentiles as a multiple of each
peer's (medians over rounds).
"""
import collections
import json
import statistics
import sys


def main(path):
    reports = json.load(open(path))
    rows = collections.defaultdict(list)
    for rep in reports:
        for ph in rep["phases"]:
            for o in ph["ops"]:
                inner = [s["ops_per_sec"] for s in ph["series"][1:-1]]
                # The report's binding names a variant (`tern@setting=value`);
                # its phases name only the engine.
                rows[(ph["phase"], rep.get("binding", ph["binding"]), o["op"])].append({
                    "tp": ph["throughput"],
                    "p50": o["p50_us"],
                    "p99": o["p99_us"] / 1000,
                    "p999": o["p999_us"] / 1000,
                    "p9999": o["p9999_us"] / 1000,
                    "slowest": min(inner) if inner else float("nan"),
                    "space": ph["space"]["space_amp"],
                    "stall": ph["engine"].get("stall_micros"),
                })

    def rng(v, k, fmt):
        xs = sorted(r[k] for r in v)
        return "–".join(fmt.format(x) for x in (xs if xs[0] != xs[-1] else xs[:1]))

    print("| step | binding | op | ops/s | p50 µs | p99 ms | p99.9 ms | p99.99 ms | slowest second, ops/s | space amp | stall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (phase, b, op), v in rows.items():
        stall = "n/a" if v[0]["stall"] is None else f"{max(r['stall'] for r in v) / 1e6:.2f}"
        print(f"| {phase.split('/')[-1]} | {b} | {op} | {statistics.mean(r['tp'] for r in v):,.0f} "
              f"| {rng(v, 'p50', '{:.0f}')} | {rng(v, 'p99', '{:.1f}')} | {rng(v, 'p999', '{:.1f}')} "
              f"| {rng(v, 'p9999', '{:.1f}')} | {rng(v, 'slowest', '{:,.0f}')} | {rng(v, 'space', '{:.2f}')} | {stall} |")
    print()
    print("Tern's percentile as a multiple of each peer's (medians over rounds):")
    print()
    print("| step | op | peer | p99 | p99.9 | p99.99 |")
    print("|---|---|---|---|---|---|")
    for (phase, b, op), v in rows.items():
        t = rows.get((phase, "tern", op))
        if b == "tern" or not t:
            continue
        cells = []
        for k in ("p99", "p999", "p9999"):
            cells.append(f"{statistics.median(r[k] for r in t) / statistics.median(r[k] for r in v):.2f}×")
        print(f"| {phase.split('/')[-1]} | {op} | {b} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
