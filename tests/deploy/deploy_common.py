"""Helpers shared by the deployment checks: the server's flag names (read
from `metalserve --helpfull`, so a renamed flag breaks the check) and
duration parsing for flag values such as 5s or 250ms; and the skip rules
every Python test follows (run_tests, missing_tool): a skipped check makes
the ctest entry exit 77 (SKIP_RETURN_CODE), so ctest reports it as skipped,
never as passed."""

import os
import re
import subprocess
import sys
import unittest

_FLAG_LINE = re.compile(r"^\s+--([A-Za-z0-9_]+) \(", re.M)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|ns|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def server_flags(server):
    """Every flag name `server --helpfull` lists (without dashes)."""
    out = subprocess.run([server, "--helpfull"], capture_output=True, text=True,
                         timeout=30)
    names = set(_FLAG_LINE.findall(out.stdout + out.stderr))
    if "model" not in names:
        raise AssertionError(f"{server} --helpfull lists no --model flag:\n"
                             f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return names


def parse_flags(args):
    """{'name': 'value'} from ['--name=value', ...]; a bare --name is 'true'."""
    flags = {}
    for a in args:
        if not a.startswith("--"):
            raise AssertionError(f"argument {a!r} is not a --flag=value")
        name, _, value = a[2:].partition("=")
        flags[name] = value if "=" in a else "true"
    return flags


def duration_s(text):
    """Seconds in an absl duration such as 30s, 1m30s, 250ms or 0."""
    if text in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise AssertionError(f"not a duration: {text!r}")
    return total


SKIP_EXIT = 77  # the SKIP_RETURN_CODE of every Python ctest entry


def tools_required():
    """True where a tool that scripts/setup installs must be present: CI
    (scripts/test sets METALSERVE_REQUIRE_TOOLS=1 when CI is set)."""
    return os.environ.get("METALSERVE_REQUIRE_TOOLS") == "1"


def missing_tool(testcase, what):
    """Skips `testcase` because `what` (a tool scripts/setup installs) is
    absent; fails it instead where tools are required."""
    if tools_required():
        testcase.fail(f"{what}: absent, and METALSERVE_REQUIRE_TOOLS=1 "
                      "(scripts/setup installs it)")
    testcase.skipTest(what)


def run_tests(argv):
    """unittest.main, then exit 1 on any failure, 77 (ctest: skipped) when
    nothing failed but a test was skipped, naming each skip, else 0."""
    result = unittest.main(argv=argv, exit=False, verbosity=2).result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.skipped:
        print(f"SKIPPED: {len(result.skipped)} of {result.testsRun} tests")
        for test, why in result.skipped:
            print(f"  skipped {test.id()}: {why}")
        sys.exit(SKIP_EXIT)
    sys.exit(0)


def check_flags_known(testcase, flags, server):
    """Fails `testcase` for any flag the server binary does not define;
    skips it (after its other checks) when no --server was given, as in a
    torch-free build."""
    if not server:
        testcase.skipTest("no --server (torch-free build): flag names not "
                          "checked against the binary")
    known = server_flags(server)
    unknown = sorted(set(flags) - known)
    testcase.assertEqual(unknown, [], f"flags that {server} does not define")
