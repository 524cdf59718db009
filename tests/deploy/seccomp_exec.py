#!/usr/bin/python3
"""Runs a command under the seccomp filter a systemd unit's SystemCallFilter=
lines describe, as systemd 252 would install it, for hosts (CI containers)
where systemd does not run services.

    seccomp_exec.py --unit deploy/systemd/metalserve.service -- CMD ARGS...
    seccomp_exec.py --filter @system-service --filter '~@privileged' -- ...

Semantics (systemd.exec(5)): the first assignment decides the mode. Not
inverted: an allow list, seeded with @default, and every other call kills
the process (SIGSYS). Inverted ("~"): a deny list, everything else allowed.
Later assignments add to the list or, when their inversion differs from
the first, take away from it. @groups are resolved, recursively, with
`systemd-analyze syscall-filter`, so the sets are the installed systemd's.
Names this architecture lacks are skipped, as systemd skips them.

Needs /usr/bin/python3 with the seccomp module (Debian python3-seccomp).
Exit 77 when it or systemd-analyze is absent; otherwise the command's exec.
"""

import argparse
import os
import shutil
import subprocess
import sys

SKIP = 77


def unit_filter_lines(unit_path):
    """The values of every SystemCallFilter= line of the unit, in order."""
    with open(unit_path) as f:
        text = f.read().replace("\\\n", " ")
    values = []
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "SystemCallFilter":
            values.append(value.strip())
    return values


def expand(name, analyze, cache):
    """The system calls `name` stands for: itself, or a group's members."""
    if not name.startswith("@"):
        return {name}
    if name not in cache:
        out = subprocess.run([analyze, "syscall-filter", "--no-pager", name],
                             capture_output=True, text=True, timeout=30,
                             check=True).stdout
        members = set()
        for line in out.splitlines()[1:]:
            item = line.strip()
            if item and not item.startswith("#"):
                members |= expand(item, analyze, cache)
        cache[name] = members
    return cache[name]


def resolve(lines, analyze):
    """(allow_list, calls): the filter's mode and its set of system calls."""
    cache, calls, allow_list = {}, set(), None
    for value in lines:
        invert = value.startswith("~")
        names = value.lstrip("~").split()
        if allow_list is None:
            allow_list = not invert
            if allow_list:
                calls |= expand("@default", analyze, cache)
        members = set().union(*(expand(n, analyze, cache) for n in names))
        if invert == (not allow_list):
            calls |= members
        else:
            calls -= members
    return bool(allow_list), calls


def install(allow_list, calls, seccomp):
    default = seccomp.KILL_PROCESS if allow_list else seccomp.ALLOW
    action = seccomp.ALLOW if allow_list else seccomp.KILL_PROCESS
    f = seccomp.SyscallFilter(defaction=default)
    for name in sorted(calls):
        try:
            f.add_rule(action, name)
        except (RuntimeError, ValueError, OSError):
            pass  # not a system call on this architecture
    f.load()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--unit", help="take the SystemCallFilter= lines from here")
    p.add_argument("--filter", action="append", default=[],
                   help="one SystemCallFilter= value; repeatable, in order")
    p.add_argument("--print", action="store_true",
                   help="print the resolved mode and set, run nothing")
    p.add_argument("--systemd_analyze", default=shutil.which("systemd-analyze"))
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    try:
        import seccomp  # noqa: PLC0415 (optional: skip when absent)
    except ImportError:
        print("SKIP: python3 module seccomp (python3-seccomp) is absent")
        return SKIP
    if not args.systemd_analyze:
        print("SKIP: systemd-analyze is absent")
        return SKIP
    lines = (unit_filter_lines(args.unit) if args.unit else []) + args.filter
    if not lines:
        p.error("no SystemCallFilter= lines given")
    allow_list, calls = resolve(lines, args.systemd_analyze)
    if args.print:
        print("allow" if allow_list else "deny", " ".join(sorted(calls)))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given")
    install(allow_list, calls, seccomp)
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
