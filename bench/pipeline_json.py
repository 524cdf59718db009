#!/usr/bin/python3
"""The runs of a bench/pipeline_h200.sh or bench/executors_h200.sh log as JSON.

Each run's lines (bench/client_scaling.sh's, with BATCH_STATS=1 its batch
line too) become one entry: round, concurrency, set-up label, req/s, worst
p99, errors, server CPU us/request and, when printed, mean batch rows,
padding %, close reasons and device busy %. The JSON keeps the command and
host label so that README tables can name it (tests/bench/readme_figures_test.py).

  bench/pipeline_json.py --log=LOG --command=bench/pipeline_h200.sh \\
      --env='SETUPS="..." ROUNDS=2' --host_label=h200 --out=bench/results/h200-DATE-pipeline.json
"""
import argparse
import ast
import json
import re
import sys

RUN = re.compile(r"^round (\d+) c=(\d+) (.+?): clients=\d+ x c=\d+: total ([\d,]+) req/s .*?"
                 r"worst p99 ([\d.]+) ms, errors (\d+), server CPU [\d.]+ s over (\d+) answers = "
                 r"(\d+) us/request")
DONE = re.compile(r"^\[\d+ s\] (\S+) done$")
BATCH = re.compile(r"^\s+batches (\d+): mean ([\d.]+) rows, padding ([\d.]+) % of rows run, "
                   r"closed (\{.*\}), device busy (\d+) %"
                   r"(?:, cut back (\d+) \((\d+) rows left for later\))?")


def parse(lines):
    """The runs; a stamp "[N s] NAME done" names the model of the runs before it."""
    runs = []
    for line in lines:
        d = DONE.match(line)
        if d:
            for run in runs:
                run.setdefault("model", d[1])
            continue
        m = RUN.match(line)
        if m:
            runs.append({"round": int(m[1]), "concurrency": int(m[2]), "setup": m[3],
                         "requests_per_s": int(m[4].replace(",", "")), "p99_ms": float(m[5]),
                         "errors": int(m[6]), "answers": int(m[7]),
                         "server_cpu_us_per_request": int(m[8])})
            continue
        b = BATCH.match(line)
        if b and runs:
            runs[-1].update({"batches": int(b[1]), "mean_batch_rows": float(b[2]),
                             "padding_percent": float(b[3]),
                             "closed": ast.literal_eval(b[4]), "device_busy_percent": int(b[5])})
            if b[6] is not None:
                runs[-1].update({"batches_cut": int(b[6]), "cut_rows": int(b[7])})
    return runs


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", required=True)
    p.add_argument("--command", required=True, help="the command that wrote the log")
    p.add_argument("--env", default="", help="the environment it ran with (K=V ...)")
    p.add_argument("--host_label", default="h200")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    with open(a.log) as f:
        runs = parse(f)
    if not runs:
        sys.exit(f"no runs in {a.log}")
    with open(a.out, "w") as f:
        json.dump({"command": a.command, "env": a.env, "host_label": a.host_label, "log": a.log,
                   "runs": runs}, f, indent=1)
    print(f"{len(runs)} runs -> {a.out}")


if __name__ == "__main__":
    main()
