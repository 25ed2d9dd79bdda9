"""The agent's deployment files: deploy/planrunner.service (systemd-analyze verify, and
its command line parsed by planrunner's own parser) and the Kubernetes DaemonSet of
README.md ("Several plans, one agent"), parsed as YAML and checked for what the agent
needs of the host."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planrunner.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "planrunner.service"
INSTALLED = "/usr/local/bin/planrunner"  # where `pip install` puts the entry point


def _unit() -> dict[str, list[str]]:
    """`Key=value` lines of the unit, by key (a key may repeat)."""
    keys: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            keys.setdefault(key, []).append(value)
    return keys


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is missing (Debian package systemd; scripts/setup.sh "
                    "installs it)")
    text = UNIT.read_text()
    if not os.access(INSTALLED, os.X_OK):
        # verify checks that ExecStart's program exists: when planrunner is not installed
        # system-wide, a stand-in that runs this Python's (the rest is verified as written)
        entry = tmp_path / "planrunner"
        entry.write_text(f"#!/bin/sh\nexec {sys.executable} -m planrunner \"$@\"\n")
        entry.chmod(0o755)
        text = text.replace(INSTALLED, str(entry))
    unit = tmp_path / "planrunner.service"
    unit.write_text(text)
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "planrunner.service" not in proc.stderr, proc.stderr  # no warning either


def test_systemd_unit_runs_as_root_restarts_and_stops_on_sigterm() -> None:
    keys = _unit()
    assert keys["User"] == ["root"]
    assert keys["Restart"] == ["on-failure"]
    assert keys["KillSignal"] == ["SIGTERM"]
    # 143: a SIGTERM during start-up (session.py: 128 + the signal) is no failure
    assert keys["SuccessExitStatus"] == ["143"]
    assert keys["LimitMEMLOCK"] == ["infinity"]
    exec_start = keys["ExecStart"][0].split()
    assert exec_start[0] == INSTALLED
    default = next(v for v in keys["Environment"] if v.startswith("PLANRUNNER_ARGS="))
    argv = [*exec_start[1:-1], *default.partition("=")[2].split()]
    args = build_parser("run").parse_args(argv)
    assert args.plan == ["/etc/planrunner/plans"] and args.prometheus == ":9435"


def _daemonset() -> dict:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Kubernetes\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "one manifest in README's Kubernetes section"
    docs = list(yaml.safe_load_all(blocks[0]))
    assert len(docs) == 1
    return docs[0]


def test_readme_daemonset_has_what_the_agent_needs() -> None:
    ds = _daemonset()
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= \
        spec["template"]["metadata"]["labels"].items()
    assert pod["hostPID"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    args = build_parser("run").parse_args(container["args"])
    assert args.plan == ["/etc/planrunner/plans"]
    port = int(args.prometheus.rpartition(":")[2])
    assert [p["containerPort"] for p in container["ports"]] == [port]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert set(mounts) == set(volumes)
    host = {volumes[n]["hostPath"]["path"]: path for n, path in mounts.items()
            if "hostPath" in volumes[n]}
    for path in ("/sys/fs/bpf", "/sys/kernel/tracing", "/sys/kernel/debug",
                 "/lib/modules", "/usr/src"):
        assert host.get(path) == path, path  # where bcc and the kernel expect them
    plans = next(n for n, p in mounts.items() if p == "/etc/planrunner/plans")
    assert "configMap" in volumes[plans]
