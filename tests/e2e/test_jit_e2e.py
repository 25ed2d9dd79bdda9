"""JIT frames named from perf maps, end to end (issue 26 item 2): a profile of a JIT'd
program names its JIT-compiled functions and walks through their frames (frame
pointers) back into native code, down to the entry point.

- Node 20 (`--perf-basic-prof`): tests/e2e/workloads/js_spin.js's hotFunction and
  coldFunction share the CPU 3:1 (in rounds of tens of ms each, of varying length), as
  the workload measures itself (process.cpuUsage);
  the samples whose stack holds each are in that ratio (within 30%), in the default
  (`auto`) and the `dwarf` stack modes, and the stacks reach `_start`; its JIT frames
  are in pprof (a `[jit]` mapping), the flame graph and JSON (`"kind": "jit"`); in
  pid and mount namespaces with a /tmp of their own, its map is read all the same;
- Java 17 (`-XX:+PreserveFramePointer`, `jcmd PID Compiler.perfmap`): JitSpin's hot
  and cold methods, the same way, when java is installed;
- CPython 3.12 (`-X perf`): its trampolines, when a python3.12 runs from PATH.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, run_planrunner, write_plan

WORKLOADS = ROOT / "tests" / "e2e" / "workloads"
NODE = "/usr/bin/node"
# The share of hot among hot+cold samples; the issue asks for the ratio within 30%
# (3:1 -> 2.1..3.9). js_spin.js runs each function for tens of ms at a time, in rounds
# of varying length (it says why: its old fixed 2.5 ms cycle locked onto the 99 Hz
# sampler's phase and node's sampled ratio swung 1.4x-5.3x). On a loaded machine node
# is preempted at random and each sample is a draw (binomial): with 400 samples (4 CPU
# s) the high bound (3.9; the ratio is convex in the share) is 2.1 standard deviations
# away, failing ~1.7% of runs; with 800 (8 CPU s) 3.0, ~0.15%.
RATIO_TOLERANCE = 0.30
CPU_SECONDS = 8
DWARF_PROFILE = """
planrunner: 1
stack: {unwind: dwarf}
probes:
  sample:
    profile: {hz: 99}
    where: pid != 0
outputs:
  - count: sample
    by: [comm, ustack]
"""


def _said(stdout: str) -> dict[str, int]:
    """The workload's own `hot_ns N cold_ns N pid N ...` line."""
    (line,) = [ln.split() for ln in stdout.splitlines() if ln.startswith("hot_ns ")]
    return {line[i]: int(line[i + 1]) for i in range(0, len(line) - 1, 2)}


def _folded(stdout: str) -> list[tuple[list[str], int]]:
    out = []
    for line in stdout.splitlines():
        if ";" in line:
            stack, count = line.rsplit(" ", 1)
            out.append((stack.split(";"), int(count)))
    return out


def _samples_of(stacks: list[tuple[list[str], int]],
                names: dict[str, str]) -> dict[str, int]:
    """Samples whose stack holds a JIT frame (`_[j]`) naming each function."""
    got = dict.fromkeys(names, 0)
    for frames, count in stacks:
        for key, needle in names.items():
            if any(f.endswith("_[j]") and needle in f for f in frames):
                got[key] += count
    return got


def _check_ratio(samples: dict[str, int], measured: float, total: int) -> None:
    assert samples["hot"] + samples["cold"] >= 0.5 * total, (samples, total)
    sampled = samples["hot"] / max(samples["cold"], 1)
    assert abs(sampled / measured - 1) <= RATIO_TOLERANCE, (sampled, measured, samples)


@pytest.mark.parametrize("mode", ["auto", "dwarf"])
def test_node_profile_names_js_functions_in_their_cpu_ratio(mode: str,
                                                           tmp_path: Path) -> None:
    cmd = _node_command(tmp_path, CPU_SECONDS)
    plan = "cpu-profile" if mode == "auto" else write_plan(tmp_path, DWARF_PROFILE)
    res = run_planrunner(["run", plan, "-f", "folded", "-c", cmd], timeout=300)
    _forget_map(res.stdout)
    assert res.returncode == 0, res.stderr
    said = _said(res.stdout)
    stacks = [(f, n) for f, n in _folded(res.stdout) if f[0] == "node"]
    total = sum(n for _, n in stacks)
    samples = _samples_of(stacks, {"hot": "hotFunction ", "cold": "coldFunction "})
    _check_ratio(samples, said["hot_ns"] / said["cold_ns"], total)
    # the walk goes through the JIT frames down to the entry point
    js = [(f, n) for f, n in stacks if any("js_spin.js" in x for x in f)]
    whole = sum(n for f, n in js if f[1] == "_start")
    assert whole >= 0.9 * sum(n for _, n in js), js[:5]
    (hot_stack, _), = sorted(((f, n) for f, n in js if "hotFunction " in f[-2]),
                             key=lambda fn: -fn[1])[:1]
    assert hot_stack[-1].startswith("JS:*work ") and "Builtins_JSEntry" in hot_stack, \
        hot_stack


def test_node_in_a_container_is_named_from_the_map_in_its_own_tmp(tmp_path: Path) -> None:
    """A pid and mount namespace with a /tmp of its own: node is pid 1 there and writes
    /tmp/perf-1.map where the host cannot see it; planrunner reads it through
    /proc/PID/root under the namespace's pid."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make pid and mount namespaces")
    # the script is opened before /tmp is hidden (this checkout may be under /tmp) and
    # given to node on its stdin (`-`)
    inner = _node_command(tmp_path, 2).replace(f"env -C {tmp_path} ", "").replace(
        str(WORKLOADS / "js_spin.js"), "- <&3")
    cmd = ("unshare --pid --fork --mount --mount-proc sh -c "
           f"'exec 3<{WORKLOADS / 'js_spin.js'}; mount -t tmpfs none /tmp && cd /tmp && "
           f"exec {inner}'")
    res = run_planrunner(["run", write_plan(tmp_path, DWARF_PROFILE), "-f", "folded",
                          "--follow-children", "-c", cmd], timeout=300)
    assert res.returncode == 0, res.stderr
    assert _said(res.stdout)["pid"] == 1  # its own pid namespace
    assert not Path("/tmp/perf-1.map").exists()  # nor the host's /tmp
    stacks = [(f, n) for f, n in _folded(res.stdout) if f[0] == "node"]
    samples = _samples_of(stacks, {"hot": "hotFunction ", "cold": "coldFunction "})
    assert samples["hot"] + samples["cold"] >= 0.5 * sum(n for _, n in stacks), samples


def _java_tools() -> dict[str, str]:
    tools = {t: shutil.which(t) for t in ("java", "javac", "jcmd")}
    missing = [t for t, path in tools.items() if path is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian: openjdk-17-jdk-headless)")
    return {t: p for t, p in tools.items() if p is not None}


def test_java_profile_names_jit_methods_in_their_cpu_ratio(tmp_path: Path) -> None:
    tools = _java_tools()
    subprocess.run([tools["javac"], "-d", str(tmp_path), str(WORKLOADS / "JitSpin.java")],
                   check=True, capture_output=True, timeout=120)
    # -XX:-Inline keeps work() a frame of its own under hot() and cold(): a sample in
    # it is attributed to its caller only by walking the JIT frames
    java = subprocess.Popen([tools["java"], "-XX:+PreserveFramePointer", "-XX:-Inline",
                             "-cp", str(tmp_path), "JitSpin", "2", "20"],
                            cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    pid = java.pid
    try:
        assert java.stdout is not None
        ready = java.stdout.readline().split()
        assert ready == ["ready", str(pid)], ready
        dump = subprocess.run([tools["jcmd"], str(pid), "Compiler.perfmap"],
                              capture_output=True, text=True, timeout=60)
        assert dump.returncode == 0, dump.stdout + dump.stderr
        # 8 s: under load java may get half a CPU, and fewer than ~400 samples leave the
        # 30% bound a few standard deviations away at most (see the node test)
        res = run_planrunner(["run", "cpu-profile", "-f", "folded", "--pid", str(pid),
                              "--duration", "8s"], timeout=300)
        assert res.returncode == 0, res.stderr
        said = _said(java.communicate(timeout=120)[0])
    finally:
        if java.poll() is None:
            java.kill()
            java.wait()
        Path(f"/tmp/perf-{pid}.map").unlink(missing_ok=True)
    stacks = [(f, n) for f, n in _folded(res.stdout) if f[0] == "java"]
    total = sum(n for f, n in stacks if any("JitSpin." in x for x in f))
    samples = _samples_of(stacks, {"hot": "JitSpin.hot(", "cold": "JitSpin.cold("})
    _check_ratio(samples, said["hot_ns"] / said["cold_ns"], total)
    # through the JIT and interpreter frames down to the thread's start
    spun = [(f, n) for f, n in stacks if any("JitSpin.work(" in x for x in f)]
    whole = sum(n for f, n in spun if "start_thread" in f and "JavaMain" in f)
    assert whole >= 0.9 * sum(n for _, n in spun), spun[:5]


def _python312() -> str:
    path = shutil.which("python3.12")
    if path is None:
        pytest.skip("no python3.12 on PATH (CPython 3.12's -X perf trampolines)")
    probe = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0 or probe.stdout.strip() != "(3, 12)":
        pytest.skip(f"python3.12 on PATH ({path}) does not run: "
                    f"{(probe.stderr or probe.stdout).strip().splitlines()[:1]}")
    return path


def test_python312_perf_trampolines_name_python_functions(tmp_path: Path) -> None:
    python = _python312()
    script = tmp_path / "spin312.py"
    script.write_text(
        "import sys, time\n"
        "def hot_function():\n"
        "    x = 0\n"
        "    for i in range(200000):\n"
        "        x = (x * 31 + i) % 1000003\n"
        "    return x\n"
        "end = time.process_time() + float(sys.argv[1])\n"
        "while time.process_time() < end:\n"
        "    hot_function()\n"
        "open(sys.argv[2], 'w').write(str(__import__('os').getpid()))\n")
    said = tmp_path / "pid"
    res = run_planrunner(["run", "cpu-profile", "-f", "folded", "-c",
                          f"{python} -X perf {script} 3 {said}"], timeout=300)
    if said.exists():  # the interpreter leaves its map in /tmp
        Path(f"/tmp/perf-{said.read_text()}.map").unlink(missing_ok=True)
    assert res.returncode == 0, res.stderr
    stacks = [(f, n) for f, n in _folded(res.stdout) if f[0].startswith("python")]
    named = [(f, n) for f, n in stacks
             if any(x.startswith("py::hot_function:") and x.endswith("_[j]") for x in f)]
    assert sum(n for _, n in named) >= 0.5 * sum(n for _, n in stacks), stacks[:5]
    assert all(f[1] == "_start" for f, _ in named), named[:3]


def _node_command(tmp_path: Path, seconds: float) -> str:
    """js_spin.js under node with its perf map; node writes V8 logs into its current
    directory: the test's own."""
    if not os.path.exists(NODE):
        pytest.skip(f"{NODE} is not installed")
    return (f"env -C {tmp_path} {NODE} --perf-basic-prof --interpreted-frames-native-stack "
            f"--no-turbo-inlining {WORKLOADS / 'js_spin.js'} {seconds}")


def _forget_map(stdout: str) -> None:
    """Remove the perf map node left in /tmp (the workload says its pid)."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("hot_ns ")]
    if lines:
        Path(f"/tmp/perf-{_said(lines[0])['pid']}.map").unlink(missing_ok=True)


def test_node_jit_frames_in_pprof_and_the_flame_graph(tmp_path: Path) -> None:
    from tests.unit.test_output_pprof import read_profile

    profile, svg = tmp_path / "cpu.pb.gz", tmp_path / "cpu.svg"
    res = run_planrunner(["run", "cpu-profile", "-f", "pprof", "-o", str(profile),
                          "--flamegraph", str(svg), "-c", _node_command(tmp_path, 2)],
                         timeout=300)
    _forget_map(res.stdout)
    assert res.returncode == 0, res.stderr

    prof = read_profile(gzip.decompress(profile.read_bytes()))
    mappings = prof["mappings"]
    assert isinstance(mappings, dict)
    jit = [mid for mid, m in mappings.items() if m[3] == "[jit]"]
    assert len(jit) == 1, mappings
    locations = prof["locations"]
    assert isinstance(locations, dict)
    named = {name for mid, _, names in locations.values() if mid == jit[0] for name in names}
    assert any(n.startswith("JS:^hotFunction ") or n.startswith("JS:*hotFunction ")
               for n in named), sorted(named)[:20]
    text = svg.read_text()
    assert "hotFunction" in text and "coldFunction" in text


def test_node_jit_frames_in_json(tmp_path: Path) -> None:
    res = run_planrunner(["run", "cpu-profile", "-f", "json", "-c",
                          _node_command(tmp_path, 2)], timeout=300)
    _forget_map(res.stdout)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    frames = [f for row in rows for f in (row.get("ustack") or [])]
    jit = [f for f in frames if f["kind"] == "jit"]
    assert jit and all(f["module"] == "[jit]" and f["symbol"] for f in jit)
    assert any(f["symbol"].startswith(("JS:^hotFunction ", "JS:*hotFunction "))
               for f in jit), jit[:5]
