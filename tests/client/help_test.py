#!/usr/bin/python3
"""`PROGRAM --help` lists every flag its main file defines, with help text,
and exits 0; `--helpfull` names flag files relative to the source tree,
never by the build machine's path.

Usage: help_test.py --binary build/metalserve --main server/main.cc
           --source_dir . --expect 'max_queue_delay=Longest wait of the oldest'
"""

import argparse
import os
import re
import subprocess
import sys
import unittest

ARGS = None
# ABSL_FLAG(type, name, default, help...): the flag names a main file defines.
_DEFINED = re.compile(r"^ABSL_FLAG\(\s*[^,]+,\s*([A-Za-z0-9_]+)\s*,", re.M)


def run(*args):
    return subprocess.run([ARGS.binary, *args], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)


class Help(unittest.TestCase):

    def test_help_lists_every_flag_of_the_main_file_and_exits_0(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("No flags matched", r.stdout + r.stderr)
        with open(os.path.join(ARGS.source_dir, ARGS.main)) as f:
            defined = _DEFINED.findall(f.read())
        self.assertGreater(len(defined), 5, f"no ABSL_FLAG found in {ARGS.main}")
        listed = set(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", r.stdout, re.M))
        self.assertEqual(sorted(set(defined) - listed), [],
                         "flags --help leaves out:\n" + r.stdout)

    def test_help_shows_each_expected_flag_with_its_help_text(self):
        out = run("--help").stdout
        for expect in ARGS.expect:
            name, _, text = expect.partition("=")
            self.assertIn(f"--{name} ({text}", out)

    def test_helpfull_names_files_relative_to_the_source_tree(self):
        r = run("--helpfull")
        out = r.stdout + r.stderr
        self.assertIn(f"Flags from {ARGS.main}:", out)
        source_dir = os.path.realpath(ARGS.source_dir).lstrip("/")
        # Default values may name build paths (--model does); file names not.
        files = re.findall(r"^\s*Flags from (.*):$", out, re.M)
        self.assertEqual([f for f in files if source_dir in f or ".." in f], [])


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--main", required=True, help="main file, relative to --source_dir")
    p.add_argument("--source_dir", required=True)
    p.add_argument("--expect", action="append", default=[],
                   help="NAME=start of its help text; repeatable")
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
