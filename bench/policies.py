"""bench/run.py --policies: the batching policies side by side in one run.

Each policy is a server started alone (one after the other, same flags
otherwise) and swept over the same client concurrency levels. A policy is
written NAME[:DELAY]:
  fixed:2ms     --batching=fixed --max_queue_delay=2ms
  adaptive:5ms  --batching=adaptive --max_queue_delay=5ms (the bound)
  unbatched     --max_batch_size=1 (the reference for light load)
  target:20ms   --batching=adaptive --latency_target=20ms
Any of them may end in @PATH: that policy's server is the metalserve binary
at PATH instead of the build's (e.g. adaptive:2ms@/tmp/before/metalserve),
so that a change to a policy is measured against the binary before it in
the same run, interleaved round by round, labelled as written.
With --rates=R1,R2,... each policy is measured open loop instead: Poisson
arrivals at each rate (requests/s), latency from the intended send time.
With --rounds=N every policy is measured N times, the policies interleaved
round by round, and each level reports its median round (every round's
throughput kept beside it): on a shared machine the load drifts over the
minutes a sweep takes, and one policy measured alone at a busy moment can
lose 2x against another measured at a quiet one. The goal lines then add
the median of the round-by-round ratios and the best round against the
best round of any fixed delay (interference only slows a round, so the
fastest is the least disturbed), and the server's CPU per request.
--server_cpus=0 --client_cpus=1 pins the servers and metalserve-bench to
their own cores, so that on a 2-core machine they no longer take each
other's.
Writes <stem>-policies.json, prints the table and plots p99 against
throughput, one line per policy (bench/plot.py's plot_policies).
"""
import datetime
import json
import os
import re
import sys

DEFAULT = "unbatched,fixed:0ms,fixed:1ms,fixed:2ms,fixed:5ms,adaptive:5ms"


def parse(spec):
    """[(label, extra server flags, max_batch_size or None, binary or None)]
    for a spec string."""
    out = []
    for item in spec.split(","):
        label = item.strip()
        policy, at, binary = label.partition("@")
        if at and not binary:
            raise SystemExit(f"--policies: '{item}': '@' needs a metalserve binary after it")
        binary = binary or None
        name, _, delay = policy.partition(":")
        if name == "unbatched":
            out.append((label, ["--batching=fixed"], 1, binary))
        elif name == "target":
            if not delay:
                raise SystemExit(f"--policies: '{item}' needs a target, e.g. target:20ms")
            out.append((label, ["--batching=adaptive", f"--latency_target={delay}"], None, binary))
        elif name in ("fixed", "adaptive"):
            if not delay:
                raise SystemExit(f"--policies: '{item}' needs a delay, e.g. {name}:2ms")
            out.append((label, [f"--batching={name}", f"--max_queue_delay={delay}"], None, binary))
        else:
            raise SystemExit(f"--policies: '{item}': want unbatched, fixed:D, adaptive:D or target:D")
    return out


def goals(table, levels):
    """The issue's goals, checked on this run: adaptive p50 at c=1 against
    unbatched, adaptive throughput at the highest levels against the best
    fixed delay. {policy: [finding, ...]}."""
    found = {}
    fixed = [p for p in table if p.startswith("fixed")]

    def at(policy, c):
        return next(r for r in table[policy] if r["concurrency"] == c)

    for p in (p for p in table if p.startswith("adaptive")):
        lines = []
        by_c = {r["concurrency"]: r for r in table[p]}
        if 1 in by_c and "unbatched" in table:
            u = next(r for r in table["unbatched"] if r["concurrency"] == 1)
            ratio = by_c[1]["latency_us"]["p50"] / u["latency_us"]["p50"]
            lines.append(f"c=1 p50 {ratio:.3f}x unbatched (goal <= 1.05)")
        for c in levels:
            if c < 64 or c not in by_c or not fixed:
                continue
            best = max(fixed, key=lambda f: at(f, c)["requests_per_s"])
            b = at(best, c)
            line = f"c={c} {by_c[c]['requests_per_s'] / b['requests_per_s']:.3f}x best fixed ({best})"
            paired = paired_rounds(by_c[c], b)
            best = best_rounds(by_c[c], {f: at(f, c) for f in fixed})
            cpu = paired_rounds(by_c[c], b, key="rounds_server_cpu_us_per_request")
            lines.append(line + (f"; {paired}" if paired else "")
                         + (f"; {best}" if best else "") + " (goal >= 1)"
                         + (f"; server CPU per request {cpu}" if cpu else ""))
        found[p] = lines
    return found


def best_rounds(r, fixed):
    """With --rounds: `r`'s best round against the best round of any fixed
    delay ({label: level}). What slows a round on a shared machine (another
    process, the hypervisor, interrupts) only ever slows it, so a policy's
    fastest round is its figure least disturbed; the median mixes in how
    many of its rounds happened to be struck. "" without rounds."""
    mine = r.get("rounds_requests_per_s") or []
    theirs = {f: max(x.get("rounds_requests_per_s") or [0]) for f, x in fixed.items()}
    if len(mine) < 2 or not theirs:
        return ""
    label, top = max(theirs.items(), key=lambda kv: kv[1])
    if top <= 0:
        return ""
    return f"best round {max(mine) / top:.3f}x ({label}'s)"


def paired_rounds(r, against, key="rounds_requests_per_s"):
    """With --rounds: `r`'s throughput over `against`'s round by round (the
    policies ran interleaved, so each round's pair saw the same load): the
    median ratio, how many rounds reached 1, and the range. A shared
    machine's load moves both of a round's figures together, which the
    ratio of the two medians alone does not show. "" for one round. `key`
    picks another per-round figure (e.g. the server's CPU per request,
    where below 1 is better)."""
    a = r.get(key) or []
    b = against.get(key) or []
    if len(a) < 2 or len(a) != len(b) or None in a or None in b:
        return ""
    ratios = sorted(x / y for x, y in zip(a, b) if y > 0)
    if not ratios:
        return ""
    n = len(ratios)
    median = (ratios[(n - 1) // 2] + ratios[n // 2]) / 2
    wins = sum(x >= 1 for x in ratios)
    return (f"round by round {median:.3f}x, {wins}/{n} rounds >= 1, "
            f"range {ratios[0]:.3f}-{ratios[-1]:.3f}")


def open_sweep(a, server, rates, run):
    """metalserve-bench open loop, Poisson arrivals, one level per rate."""
    out = run([os.path.join(a.build, "metalserve-bench"), f"--target={server.target}",
               f"--rate={','.join(str(r) for r in rates)}", "--arrival=poisson",
               f"--duration={a.duration}s", f"--warmup={a.warmup}s", f"--input={a.input}",
               "--output=json", "--progress=off", "--max_error_rate=1"] + a.bench_args,
              cpus=getattr(a, "client_cpu_list", None))
    levels = json.loads(out)["runs"]
    for r in levels:
        r["realised_batch_rows_mean"] = 0.0  # not scraped per level in open loop
        print(f"  rate={r['rate']:<8g} {r['requests_per_s']:9.1f} req/s  p99 "
              f"{r['latency_us']['p99'] / 1e3:8.2f} ms  err {r['error_rate']:.4f}", file=sys.stderr)
    return levels


def median_rounds(rounds):
    """Per level, the round whose throughput is the median of the rounds
    (an odd count: the middle one; even: the lower middle), with every
    round's throughput and p99 kept beside it. Pure: tested by
    tests/client/bench_run_test.py."""
    out = []
    for level in zip(*rounds):
        ranked = sorted(level, key=lambda r: r["requests_per_s"])
        pick = dict(ranked[(len(ranked) - 1) // 2])
        pick["rounds_requests_per_s"] = [round(r["requests_per_s"], 1) for r in level]
        pick["rounds_p99_ms"] = [round(r["latency_us"]["p99"] / 1e3, 2) for r in level]
        cpu = [r.get("server_cpu_us_per_request") for r in level]
        pick["rounds_server_cpu_us_per_request"] = [
            None if x is None else round(x, 2) for x in cpu]
        out.append(pick)
    return out


def compare(a, server_cls, sweep, host_info, command, run=None):
    rounds = {}
    rounds_n = max(1, getattr(a, "rounds", 1))
    for n in range(rounds_n):
        for label, flags, max_batch, binary in parse(a.policies):
            print(f"[policy {label}, round {n + 1} of {rounds_n}]", file=sys.stderr)
            s = server_cls(a, max_batch or a.max_batch_size,
                           "" if max_batch else a.allowed_batch_sizes,
                           re.sub(r"[^A-Za-z0-9_.-]", "-", label), a.port, extra=flags,
                           binary=binary)
            try:
                if a.rates:
                    got = open_sweep(a, s, [float(r) for r in a.rates.split(",")], run)
                else:
                    got = sweep(a, s, a.sweep_levels)
            finally:
                s.stop()
            rounds.setdefault(label, []).append(got)
    table = {label: median_rounds(r) if rounds_n > 1 else r[0] for label, r in rounds.items()}
    result = {"command": command, "host_label": a.host_label, "machine": host_info(a),
              "model": a.model, "device": a.device, "threads": a.threads,
              "max_batch_size": a.max_batch_size, "duration_s": a.duration,
              "rates": a.rates, "rounds": rounds_n, "policies": table,
              "goals": {} if a.rates else goals(table, a.sweep_levels)}
    stem = f"{a.host_label}-{datetime.date.today().isoformat()}-{a.model}"
    stem += (f"-{a.tag}" if a.tag else "") + "-policies"
    path = os.path.join(a.out, stem + ".json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {path}", file=sys.stderr)
    print_table(result)
    try:
        import plot
        plot.plot_policies(path)
    except ImportError as e:
        print(f"(no plot: {e}; run bench/plot.py {path} where matplotlib is installed)")
    return result


def print_table(r):
    print(f"\n{r['model']} on {r['device']}, {r['threads']} threads, max_batch_size "
          f"{r['max_batch_size']}, {r['duration_s']:g} s per level, {r['machine']['date']}")
    print(f"command: {r['command']}")
    print(f"{'policy':>14} {'conc':>5} {'rate':>8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
          f" {'batch':>6} {'err':>7}")
    for p, rows in r["policies"].items():
        for x in rows:
            print(f"{p:>14} {x['concurrency']:>5} {x.get('rate', 0):>8g} {x['requests_per_s']:>9.1f}"
                  f" {x['latency_us']['p50'] / 1e3:>8.3f} {x['latency_us']['p99'] / 1e3:>8.3f}"
                  f" {x['realised_batch_rows_mean']:>6.2f} {x['error_rate']:>7.4f}")
    for p, lines in r["goals"].items():
        for line in lines:
            print(f"{p}: {line}")
