#!/usr/bin/env python3
"""Server CPU per request under each malloc: glibc (with the thresholds
process_setup.cc sets), tcmalloc and jemalloc, side by side in one run.

Each allocator is put under the same binaries with LD_PRELOAD (the echo
server's too, so each allocator has its own gRPC floor), and bench/transport.py
measures echo, null and the model over TCP and a Unix socket, for the identity
model's [1,4] requests and image_head's 602 KB ones (3x224x224 float32 in,
its first 1,000 values out: the runtime's share at that size without a
network's compute). Rounds interleave the allocators, so that the machine's
drift falls on each alike.

  bench/allocators.py                                 # 2 rounds, server and client on cores 0 and 1
  bench/allocators.py --rounds=3 --allocators=glibc,tcmalloc
  bench/allocators.py --metalserve=/tmp/other/metalserve   # another build

Debian's libtcmalloc-minimal4 and libjemalloc2 give the libraries
(scripts/setup installs both). Prints the median over rounds of each row and
its ratio to glibc's (when glibc is among --allocators); --json writes every
row with its round and allocator. Linux only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBDIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
LIBRARIES = {"glibc": None, "tcmalloc": "libtcmalloc_minimal.so.4",
             "jemalloc": "libjemalloc.so.2"}


def library(name, libdirs=LIBDIRS):
    """The shared object to preload for `name` ('' for glibc), from the
    first of `libdirs` that has it."""
    if LIBRARIES[name] is None:
        return ""
    for d in libdirs:
        path = os.path.join(d, LIBRARIES[name])
        if os.path.exists(path):
            return path
    raise SystemExit(f"{name}: {LIBRARIES[name]} not found in {', '.join(libdirs)} "
                     "(apt-get install libtcmalloc-minimal4 libjemalloc2)")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--metalserve", default="", help="server binary (default <build>/metalserve)")
    p.add_argument("--allocators", default="glibc,tcmalloc,jemalloc")
    p.add_argument("--models", default="identity,image_head",
                   help="models in <build>/models, each with its own payload")
    p.add_argument("--servers", default="echo,null,model")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--server_cpus", default="0")
    p.add_argument("--client_cpus", default="1")
    p.add_argument("--libdirs", default=",".join(LIBDIRS),
                   help="folders searched for the allocators' libraries, in order (on the GPU "
                   "host, where .devtools/gpu-env.sh unpacks Debian's under /opt/deb: "
                   "/opt/deb/usr/lib/x86_64-linux-gnu)")
    p.add_argument("--json", default="")
    a = p.parse_args()
    allocators = [x for x in a.allocators.split(",") if x]
    for x in allocators:
        if x not in LIBRARIES:
            raise SystemExit(f"--allocators: unknown '{x}' ({', '.join(LIBRARIES)})")
    libdirs = [d for d in a.libdirs.split(",") if d]
    libs = {x: library(x, libdirs) for x in allocators}
    rows = []
    with tempfile.TemporaryDirectory(prefix="metalserve-allocators-") as tmp:
        for r in range(1, a.rounds + 1):
            for model in (m for m in a.models.split(",") if m):
                for alloc in allocators:
                    out = os.path.join(tmp, f"{model}-{alloc}-{r}.json")
                    pt = os.path.join(a.build, "models", model + ".pt")
                    cmd = [sys.executable, os.path.join(ROOT, "bench/transport.py"),
                           f"--build={a.build}", f"--payloads={os.path.splitext(pt)[0]}.json",
                           f"--model={pt}", f"--servers={a.servers}",
                           f"--duration={a.duration}", f"--concurrency={a.concurrency}",
                           f"--server_env=LD_PRELOAD={libs[alloc]}", f"--json={out}"]
                    if a.metalserve:
                        cmd.append(f"--metalserve={a.metalserve}")
                    if a.server_cpus:
                        cmd.append(f"--server_cpus={a.server_cpus}")
                    if a.client_cpus:
                        cmd.append(f"--client_cpus={a.client_cpus}")
                    print(f"== round {r} {model} {alloc}", flush=True)
                    subprocess.run(cmd, check=True)
                    with open(out) as f:
                        for row in json.load(f)["rows"]:
                            rows.append({**row, "allocator": alloc, "round": r})
    print("\nserver CPU us/request, median of rounds (ratio to glibc); requests/s")
    keys = []
    for row in rows:
        k = (row["payload"], row["server"], row["transport"])
        if k not in keys:
            keys.append(k)
    def medians(k, alloc):
        got = [x for x in rows if (x["payload"], x["server"], x["transport"]) == k
               and x["allocator"] == alloc]
        if not got:
            return None
        return (statistics.median(x["server_cpu_us_per_request"] for x in got),
                statistics.median(x["requests_per_s"] for x in got))

    for k in keys:
        line = f"{k[0]:>10} {k[1]:>6} {k[2]:>3}"
        base = medians(k, "glibc") if "glibc" in allocators else None
        for alloc in allocators:
            m = medians(k, alloc)
            if m is None:
                continue
            cpu, rps = m
            ratio = f" ({cpu / base[0]:.2f})" if base and alloc != "glibc" else ""
            line += f"  {alloc} {cpu:6.1f}{ratio} {rps:6.0f}/s"
        print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": " ".join(["bench/allocators.py", *sys.argv[1:]]),
                       "cores": os.cpu_count(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
