#!/usr/bin/python3
"""A light lint of docker/Dockerfile.cpu and docker/Dockerfile.cuda (the
images themselves are built and run by container_test.py; docker/README.md
says which images were built where):
  - every instruction is a Dockerfile instruction and every ${ARG} used
    outside RUN is declared (Dockerfile.fast too);
  - multi-stage: a builder stage that runs scripts/setup, the script CI
    (.ci/run) runs, and a runtime stage FROM a different base;
  - the runtime stage runs as a non-root numeric user (the uid the
    Kubernetes Deployment sets), exposes 8500, 8000 (REST) and 9464, has a HEALTHCHECK,
    and its ENTRYPOINT/CMD name files it copied and flags the server has;
  - the CPU image is Debian 12.
With --server and --model, the HEALTHCHECK command itself runs against a
real server on a free loopback port: it must fail while nothing listens and
pass once the server is ready.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
import deploy_common  # noqa: E402
from proc_util import Process, free_port, tail  # noqa: E402

ARGS = None
DOCKERFILES = ("Dockerfile.cpu", "Dockerfile.cuda")
# Every instruction the Dockerfile reference defines.
KNOWN_INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY",
    "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD",
    "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER"}


def instructions(path):
    """[(INSTRUCTION, arguments)] with continuations joined, comments dropped."""
    out, buf = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not buf and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.lstrip().startswith("#"):
                continue  # a comment inside a continued instruction
            if line.endswith("\\"):
                buf += line[:-1] + " "
                continue
            buf += line
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def stages(instrs):
    """[{'from': image, 'name': alias, 'body': [(INSTR, args)...]}]."""
    result = []
    for word, rest in instrs:
        if word == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
            result.append({"from": m.group(1), "name": m.group(2), "body": []})
        elif result:
            result[-1]["body"].append((word, rest))
    return result


def exec_form(text):
    return json.loads(text) if text.startswith("[") else shlex.split(text)


class Dockerfiles(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        docker_dir = os.path.join(ARGS.source_dir, "docker")
        cls.files = {}
        for name in DOCKERFILES:
            st = stages(instructions(os.path.join(docker_dir, name)))
            cls.files[name] = st
        with open(os.path.join(ARGS.source_dir, "deploy/k8s/deployment.yaml")) as f:
            cls.k8s_pod = yaml.safe_load(f)["spec"]["template"]["spec"]

    def test_every_instruction_is_known_and_args_are_declared(self):
        docker_dir = os.path.join(ARGS.source_dir, "docker")
        for name in (*DOCKERFILES, "Dockerfile.fast"):
            instrs = instructions(os.path.join(docker_dir, name))
            declared = set()
            for word, rest in instrs:
                self.assertIn(word, KNOWN_INSTRUCTIONS, f"{name}: {word}")
                if word == "ARG":
                    declared.add(rest.split("=")[0].strip())
                for used in re.findall(r"\$\{(\w+)\}", rest if word != "RUN" else ""):
                    self.assertIn(used, declared | {"PATH"}, f"{name}: {word} {rest}")

    def final(self, name):
        return self.files[name][-1]

    def body(self, stage, word):
        return [rest for w, rest in stage["body"] if w == word]

    def test_cpu_image_is_debian_12(self):
        for stage in self.files["Dockerfile.cpu"]:
            self.assertRegex(stage["from"], r"^debian:12(-slim)?$")

    def test_multi_stage_builder_runs_the_ci_setup_script(self):
        with open(os.path.join(ARGS.source_dir, ".ci/run")) as f:
            self.assertRegex(f.read(), r"(?m)^scripts/setup\b",
                             "CI no longer runs scripts/setup")
        for name, st in self.files.items():
            self.assertGreaterEqual(len(st), 2, name)
            builder = st[0]
            self.assertTrue(builder["name"], f"{name}: the builder stage is unnamed")
            runs = " ".join(self.body(builder, "RUN"))
            self.assertRegex(runs, r"(^|\s)scripts/setup(\s|$)", name)
            self.assertIn(". /src", self.body(builder, "COPY"),
                          f"{name}: the builder must see the repository")
            self.assertNotEqual(self.final(name)["from"], builder["from"],
                                f"{name}: runtime stage reuses the build image")
            for copy in self.body(self.final(name), "COPY"):
                m = re.match(r"--from=(\S+)", copy)
                if m:
                    self.assertIn(m.group(1), [s["name"] for s in st[:-1]], name)

    def test_runtime_runs_as_the_non_root_uid_kubernetes_expects(self):
        k8s_uid = self.k8s_pod["securityContext"]["runAsUser"]
        for name in self.files:
            stage = self.final(name)
            words = [w for w, _ in stage["body"]]
            users = self.body(stage, "USER")
            self.assertTrue(users, f"{name}: no USER")
            user = users[-1].split(":")[0]
            self.assertNotIn(user, ("root", "0"), name)
            self.assertEqual(int(user), k8s_uid, name)
            last_user = max(i for i, w in enumerate(words) if w == "USER")
            self.assertNotIn("RUN", words[last_user:], f"{name}: RUN after USER")

    def test_runtime_exposes_ports_and_has_a_healthcheck(self):
        for name in self.files:
            stage = self.final(name)
            ports = " ".join(self.body(stage, "EXPOSE")).split()
            self.assertEqual(sorted(ports), ["8000", "8500", "9464"], name)
            self.assertEqual(len(self.body(stage, "HEALTHCHECK")), 1, name)

    def test_entrypoint_and_cmd_serve_the_network_with_known_flags(self):
        ports = {p["name"]: p["containerPort"]
                 for p in self.k8s_pod["containers"][0]["ports"]}
        k8s_flags = deploy_common.parse_flags(self.k8s_pod["containers"][0]["args"])
        for name in self.files:
            stage = self.final(name)
            [entry] = self.body(stage, "ENTRYPOINT")
            [cmd] = self.body(stage, "CMD")
            binary = exec_form(entry)[0]
            flags = deploy_common.parse_flags(exec_form(cmd))
            copied = " ".join(self.body(stage, "COPY"))
            self.assertTrue(binary.startswith("/opt/metalserve/"), name)
            self.assertIn("/opt/metalserve", copied, name)
            self.assertEqual(flags["address"], f"0.0.0.0:{ports['grpc']}", name)
            self.assertEqual(flags["metrics_address"], f"0.0.0.0:{ports['metrics']}",
                             name)
            self.assertEqual(flags["http_address"], f"0.0.0.0:{ports['http']}", name)
            # The Deployment's --model must name a file the image holds.
            self.assertEqual(os.path.dirname(flags["model"]),
                             os.path.dirname(k8s_flags["model"]), name)
            deploy_common.check_flags_known(self, flags, ARGS.server)

    def healthcheck_command(self, name, metrics_port):
        [hc] = self.body(self.final(name), "HEALTHCHECK")
        argv = exec_form(hc[hc.index("CMD") + 3:].strip())
        return [a.replace("/9464", f"/{metrics_port}") for a in argv]

    def test_healthcheck_command_against_a_real_server(self):
        if not (ARGS.server and ARGS.model):
            self.skipTest("needs --server and --model")
        port, grpc_port = free_port(), free_port()
        cmd = self.healthcheck_command("Dockerfile.cpu", port)
        probe = subprocess.run(cmd, timeout=10, capture_output=True, text=True)
        self.assertNotEqual(probe.returncode, 0,
                            f"healthy with nothing listening on {port}: {probe.stdout!r}")
        with tempfile.TemporaryDirectory(prefix="metalserve-docker-") as tmp:
            log = os.path.join(tmp, "server.log")
            proc = Process([ARGS.server, f"--model={ARGS.model}",
                            f"--address=127.0.0.1:{grpc_port}", "--http_address=",
                            f"--metrics_address=127.0.0.1:{port}",
                            "--device=cpu", "--threads=1",
                            "--monitor_log_interval=0"], log_path=log)
            try:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    self.assertIsNone(proc.poll(), "server exited:\n" + tail(log))
                    probe = subprocess.run(cmd, timeout=10, capture_output=True, text=True)
                    if probe.returncode == 0:
                        break
                    time.sleep(0.2)
                else:
                    self.fail(f"HEALTHCHECK never passed against a ready server (last "
                              f"probe: exit {probe.returncode}, {probe.stdout!r}, "
                              f"{probe.stderr!r}):\n"
                              + tail(log))
                # Both images use the same probe.
                self.assertEqual(self.healthcheck_command("Dockerfile.cuda", port), cmd)
            finally:
                proc.stop(grace=20)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--source_dir", required=True)
    p.add_argument("--server", default="")
    p.add_argument("--model", default="")
    ARGS, rest = p.parse_known_args()
    deploy_common.run_tests([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
