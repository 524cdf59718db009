#!/usr/bin/python3
"""Every figure in README.md's benchmark tables comes from a results file.

Each table under "## Benchmarks" must be preceded (since the previous table)
by the path of a bench/results/*.json that bench/run.py wrote; every number
in the table's cells (the first column is the row's label) must equal, at
the precision printed, a number stored in that file (latencies stored in
microseconds also count in milliseconds). A figure typed by hand, or left
over from a run whose file was not kept, fails here. Every results file
must hold the command that made it, and where it records a --host_label its
file name must start with that label.
"""

import argparse
import glob
import json
import os
import re
import sys
import unittest

ARGS = None
_RESULT = re.compile(r"bench/results/[\w.-]+\.json")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def benchmark_section(readme):
    with open(readme) as f:
        text = f.read()
    start = text.index("\n## Benchmarks")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def tables(section):
    """[(results path or None, [rows of cells])] for each table, in order."""
    found, source, rows = [], None, []
    for line in section.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r"-*", c) for c in cells):
                rows.append(cells)
            continue
        if rows:
            found.append((source, rows))
            source, rows = None, []
        paths = _RESULT.findall(line)
        if paths:
            source = paths[-1]
    if rows:
        found.append((source, rows))
    return found


def stored_numbers(value):
    """Every number in a JSON value, with microsecond fields also in ms."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else []
    out = []
    for key, v in items:
        nums = stored_numbers(v)
        out += nums
        if isinstance(key, str) and (key.endswith("_us") or key == "latency_us"
                                     or key.startswith("latency_us")):
            out += [n / 1e3 for n in nums]
        if isinstance(key, str) and key.isdigit():
            out.append(float(key))  # batch sizes are keys of "raw"
    return out


def matches(printed, stored):
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    x = float(printed.replace(",", ""))
    half = 0.5 * 10 ** -decimals + 1e-9
    return any(abs(v - x) <= half for v in stored)


class ReadmeFigures(unittest.TestCase):

    def test_every_table_names_its_results_file(self):
        found = tables(benchmark_section(ARGS.readme))
        self.assertGreater(len(found), 0, "no benchmark tables found")
        for source, rows in found:
            self.assertIsNotNone(source, f"table without a results file: {rows[0]}")
            self.assertTrue(os.path.isfile(os.path.join(ARGS.source_dir, source)),
                            f"{source} does not exist")

    def test_every_figure_is_in_its_results_file(self):
        for source, rows in tables(benchmark_section(ARGS.readme)):
            if source is None:
                continue
            with open(os.path.join(ARGS.source_dir, source)) as f:
                stored = stored_numbers(json.load(f))
            for row in rows[1:]:  # rows[0] is the header
                for cell in row[1:]:
                    for printed in _NUMBER.findall(cell.replace("**", "")):
                        with self.subTest(file=source, row=row[0], figure=printed):
                            self.assertTrue(matches(printed, stored),
                                            f"{printed} ({row[0]!r}) is not in {source}")

    def test_results_files_hold_their_command_and_host_label(self):
        paths = glob.glob(os.path.join(ARGS.source_dir, "bench/results/*.json"))
        self.assertGreater(len(paths), 0)
        for path in paths:
            with open(path) as f:
                result = json.load(f)
            name = os.path.basename(path)
            # The command that wrote it, starting with the bench/ script.
            script = result.get("command", "").split(" ")[0]
            self.assertTrue(script.startswith("bench/"), f"{name}: command {script!r}")
            self.assertTrue(os.path.isfile(os.path.join(ARGS.source_dir, script)),
                            f"{name}: {script} is not in the tree")
            label = result.get("host_label")
            if label is not None:  # files written before --host_label lack it
                self.assertTrue(name.startswith(label + "-"), f"{name}: label {label}")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--source_dir", required=True)
    ARGS, rest = p.parse_known_args()
    ARGS.readme = os.path.join(ARGS.source_dir, "README.md")
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
