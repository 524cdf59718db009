#!/usr/bin/python3
"""deploy/launchd/com.metalserve.server.plist is a property list launchd can
load: it parses with two independent parsers (Python's plistlib, and
libplist's plistutil converting it to the binary format, which plistlib then
reads back to the same value), and carries the keys the daemon needs.
launchd itself does not run here; `plutil -lint` on a Mac is the next check.
"""

import argparse
import os
import plistlib
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_common  # noqa: E402

ARGS = None


class LaunchdPlist(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(ARGS.plist, "rb") as f:
            cls.plist = plistlib.load(f, fmt=plistlib.FMT_XML)
        cls.flags = deploy_common.parse_flags(cls.plist["ProgramArguments"][1:])

    def test_plistutil_reads_the_same_property_list(self):
        plistutil = shutil.which("plistutil")
        if plistutil is None:
            deploy_common.missing_tool(self, "plistutil (libplist-utils)")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "plist.bin")
            # plistutil 2.2 exits 0 even when it cannot parse; the binary it
            # writes is the evidence.
            subprocess.run([plistutil, "-i", ARGS.plist, "-o", out, "-f", "bin"],
                           check=True, timeout=30, capture_output=True)
            self.assertTrue(os.path.exists(out) and os.path.getsize(out) > 8,
                            "plistutil could not convert the plist")
            with open(out, "rb") as f:
                self.assertEqual(plistlib.load(f, fmt=plistlib.FMT_BINARY),
                                 self.plist)

    def test_label_matches_file_name(self):
        self.assertEqual(self.plist["Label"] + ".plist",
                         os.path.basename(ARGS.plist))

    def test_keeps_the_server_alive(self):
        keep = self.plist["KeepAlive"]
        # Either always, or restart on failure (SuccessfulExit false).
        self.assertTrue(keep is True or keep.get("SuccessfulExit") is False, keep)
        self.assertIs(self.plist["RunAtLoad"], True)

    def test_logs_to_files(self):
        for key in ("StandardOutPath", "StandardErrorPath"):
            self.assertTrue(os.path.isabs(self.plist[key]), key)

    def test_mps_environment_is_set_by_the_launcher(self):
        env = self.plist["EnvironmentVariables"]
        self.assertEqual(env["PYTORCH_ENABLE_MPS_FALLBACK"], "1")
        ratio = float(env["PYTORCH_MPS_HIGH_WATERMARK_RATIO"])
        self.assertGreater(ratio, 0)
        self.assertLessEqual(ratio, 2.0)
        for value in env.values():
            self.assertIsInstance(value, str)

    def test_program_arguments_serve_the_network_on_mps(self):
        args = self.plist["ProgramArguments"]
        self.assertTrue(os.path.isabs(args[0]) and args[0].endswith("/metalserve"))
        self.assertEqual(self.flags["device"], "mps")
        self.assertTrue(self.flags["address"].endswith(":8500"))
        self.assertTrue(self.flags["metrics_address"].endswith(":9464"))
        self.assertTrue(self.flags["http_address"].endswith(":8000"))
        self.assertTrue(os.path.isabs(self.flags["model"]))
        deploy_common.check_flags_known(self, self.flags, ARGS.server)

    def test_exit_timeout_outlasts_the_drain(self):
        drain = deploy_common.duration_s(self.flags.get("drain_grace", "0"))
        shutdown = deploy_common.duration_s(self.flags.get("shutdown_timeout", "30s"))
        self.assertGreater(self.plist["ExitTimeOut"], drain + shutdown)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--plist", required=True)
    p.add_argument("--server", default="",
                   help="metalserve binary; its --helpfull must define every flag")
    ARGS, rest = p.parse_known_args()
    deploy_common.run_tests([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
