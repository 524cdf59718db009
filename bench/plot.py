#!/usr/bin/env python3
"""Plots throughput against p99 latency over a bench/run.py sweep.

  bench/plot.py bench/results/<host>-<date>-<model>.json [more.json ...]

Writes a PNG beside each JSON file (python3-matplotlib from Debian).
"""
import json
import os
import sys


def plot(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = json.load(open(path))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, style in (("batched", f"batching (max {r['max_batch_size']})", "o-"),
                              ("unbatched", "max_batch_size=1", "s--")):
        xs = [p["latency_us"]["p99"] / 1e3 for p in r[key]]
        ys = [p["rows_per_s"] for p in r[key]]
        ax.plot(xs, ys, style, label=label)
        for p, x, y in zip(r[key], xs, ys):
            ax.annotate(f"c={p['concurrency']}", (x, y), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
    best = r["summary"]["raw_best_items_per_s"]
    ax.axhline(best, color="gray", linestyle=":",
               label=f"raw forward, batch {r['summary']['raw_best_batch']}")
    ax.set_xscale("log")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (rows/s)")
    machine = r["machine"].get("gpu") or r["machine"].get("cpu_model", "")
    ax.set_title(f"{r['model']} {r['precision']} on {r['device']} - {machine[:40]}\n"
                 f"{r['machine']['date']}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    out = os.path.splitext(path)[0] + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return out


def plot_policies(path):
    """bench/run.py --policies output: p99 against throughput, one line per
    policy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = json.load(open(path))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, rows in r["policies"].items():
        xs = [p["latency_us"]["p99"] / 1e3 for p in rows]
        ys = [p["requests_per_s"] for p in rows]
        ax.plot(xs, ys, "o-", label=policy)
        for p, x, y in zip(rows, xs, ys):
            ax.annotate(f"c={p['concurrency']}", (x, y), textcoords="offset points",
                        xytext=(3, 3), fontsize=6)
    ax.set_xscale("log")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (requests/s)")
    ax.set_title(f"{r['model']} on {r['device']}: batching policies, {r['machine']['date']}",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    out = os.path.splitext(path)[0] + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        plot_policies(p) if "policies" in json.load(open(p)) else plot(p)
