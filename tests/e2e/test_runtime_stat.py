"""The bundled runtime-stat plan against real runtimes: one system-wide tracer (JSON
lines, 500 ms intervals) while a Python, a Ruby, a PHP and a Java workload run at once,
each started after the tracer attached. Ground truth from the workloads: each row's
rate times its interval, added over the intervals, gives the events of that process
(at least the workload's own N calls, objects, collections, threads), and the command
line is the workload's. A runtime that is not installed is skipped, saying so (the
plan's targets are optional: the others are traced all the same)."""

from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.conftest import run_planrunner
from tests.e2e.workloads.helpers import tracing

WORKLOADS = Path(__file__).resolve().parent / "workloads"
PYTHON = "/usr/bin/python3.11"
RUBY = shutil.which("ruby3.1")
PHP = shutil.which("php8.2")
JDK = Path("/usr/lib/jvm/java-17-openjdk-amd64")
LIBJVM = JDK / "lib" / "server" / "libjvm.so"
N = 20_000
N_RUBY = 100_000
SLEEP = 1.5  # stay alive past an interval's end, so the table reads the command line


def _missing() -> dict[str, str]:
    why = {}
    if not os.path.exists(PYTHON):
        why["python"] = f"{PYTHON} is not installed"
    if RUBY is None:
        why["ruby"] = "ruby3.1 is not installed (apt-get install ruby3.1)"
    if PHP is None:
        why["php"] = "php8.2 is not installed (apt-get install php8.2-cli)"
    if not LIBJVM.exists() or not (JDK / "bin" / "javac").exists():
        why["java"] = f"OpenJDK 17 is not at {JDK} (apt-get install openjdk-17-jdk-headless)"
    return why


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def stat(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Per runtime: its pid, command line(s) seen, and totals per column."""
    missing = _missing()
    commands: dict[str, tuple[list[str], dict[str, str]]] = {}
    if "python" not in missing:
        commands["python"] = ([PYTHON, str(WORKLOADS / "stat_workload.py"), str(N),
                               str(SLEEP)], {})
    if "ruby" not in missing:
        commands["ruby"] = ([str(RUBY), str(WORKLOADS / "stat_workload.rb"), str(N_RUBY),
                             str(SLEEP)], {})
    if "php" not in missing:
        commands["php"] = ([str(PHP), str(WORKLOADS / "stat_workload.php"), str(N),
                            str(SLEEP)], {"USE_ZEND_DTRACE": "1"})
    if "java" not in missing:
        classes = tmp_path_factory.mktemp("jvm")
        subprocess.run([str(JDK / "bin" / "javac"), "-d", str(classes),
                        str(WORKLOADS / "JvmWorkload.java")], check=True, timeout=120)
        commands["java"] = ([str(JDK / "bin" / "java"), "-XX:+ExtendedDTraceProbes",
                             "-cp", str(classes), "JvmWorkload", "4", "3",
                             str(int(SLEEP * 1000))], {})
    if not commands:
        pytest.skip("; ".join(missing.values()))
    with tracing("runtime-stat", "--set", "every=500ms", "--set", f"libjvm={LIBJVM}") as t:
        procs = {name: subprocess.Popen(cmd, env={**os.environ, **env},
                                        stdout=subprocess.DEVNULL)
                 for name, (cmd, env) in commands.items()}
        for proc in procs.values():
            assert proc.wait(timeout=120) == 0
        time.sleep(0.6)  # one more interval
        recs = t.stop()
    out: dict[str, object] = {"missing": missing}
    for name, proc in procs.items():
        rows = [r for r in recs if r.get("output") == "stat" and r["pid"] == proc.pid]
        totals: dict[str, float] = defaultdict(float)
        for r in rows:
            span = _seconds(r["interval_end"]) - _seconds(r["interval_start"])
            assert 0 < span < 2.0, r
            for col in ("calls", "objects", "gcs", "threads", "loads"):
                assert r[col] >= 0
                totals[col] += r[col] * span  # a rate per second over that interval
        out[name] = {"rows": rows, "totals": dict(totals),
                     "cmdlines": {r["cmdline"] for r in rows}}
    return out


def _runtime(stat: dict[str, object], name: str) -> dict:  # type: ignore[type-arg]
    missing = stat["missing"]
    assert isinstance(missing, dict)
    if name in missing:
        pytest.skip(missing[name])
    got = stat[name]
    assert isinstance(got, dict) and got["rows"], f"no row for the {name} workload"
    return got


def _at_least(total: float, expected: int) -> bool:
    """Rates times their intervals give back whole counts (to the error of the µs the
    JSON times keep), at least `expected`."""
    return round(total) >= expected and abs(total - round(total)) < 0.01 + total * 1e-5


def test_python_calls_collections_and_imports(stat: dict[str, object]) -> None:
    got = _runtime(stat, "python")
    totals = got["totals"]
    # every return of f, plus the interpreter's own start-up functions (a few thousand)
    assert _at_least(totals["calls"], N) and totals["calls"] < N + 20_000, totals
    assert round(totals["gcs"]) >= 5 and round(totals["loads"]) >= 1, totals
    assert totals["objects"] == totals["threads"] == 0
    assert any("stat_workload.py" in (c or "") for c in got["cmdlines"]), got["cmdlines"]


def test_ruby_calls_objects_and_collections(stat: dict[str, object]) -> None:
    got = _runtime(stat, "ruby")
    totals = got["totals"]
    # f, under the TracePoint: methods written in Ruby (C methods are not counted)
    assert _at_least(totals["calls"], N_RUBY), totals
    assert totals["calls"] < N_RUBY + 5_000, totals
    assert _at_least(totals["objects"], N_RUBY), totals  # Object.new, and start-up's
    assert totals["objects"] < N_RUBY + 60_000, totals  # start-up: ~34,000 strings...
    assert round(totals["gcs"]) >= 3, totals
    assert any("stat_workload.rb" in (c or "") for c in got["cmdlines"]), got["cmdlines"]


def test_php_calls_and_compiled_files(stat: dict[str, object]) -> None:
    got = _runtime(stat, "php")
    totals = got["totals"]
    assert _at_least(totals["calls"], N), totals
    assert round(totals["loads"]) >= 1, totals  # the script itself is compiled
    assert totals["gcs"] == totals["objects"] == 0
    assert any("stat_workload.php" in (c or "") for c in got["cmdlines"]), got["cmdlines"]


def test_java_methods_allocations_collections_threads_classes(
        stat: dict[str, object]) -> None:
    got = _runtime(stat, "java")
    totals = got["totals"]
    assert round(totals["calls"]) > 1000, totals  # -XX:+ExtendedDTraceProbes
    assert round(totals["objects"]) > 100, totals
    assert round(totals["gcs"]) >= 4, totals  # 4 System.gc()
    assert round(totals["threads"]) >= 3, totals  # 3 workers, and the JVM's own
    assert round(totals["loads"]) > 100, totals  # classes, JvmWorkload's among them
    assert any("JvmWorkload" in (c or "") for c in got["cmdlines"]), got["cmdlines"]


def test_csv_of_a_command_is_one_table_with_its_row() -> None:
    """-c: the table of one process, as CSV on stdout (the joined outputs get no table
    of their own, so one stream holds it)."""
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")
    proc = run_planrunner(["run", "runtime-stat", "-f", "csv", "--set", "every=500ms",
                           "-c", f"{PYTHON} {WORKLOADS / 'stat_workload.py'} {N} 0.7"],
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    assert rows[0] == ["output", "interval_start", "interval_end", "pid", "cmdline",
                       "calls", "objects", "gcs", "threads", "loads"]
    body = rows[1:]
    assert body and all(r[0] == "stat" for r in body) and len({r[3] for r in body}) == 1
    assert "stat_workload.py" in body[0][4]
    total = sum(float(r[5]) * (_seconds(r[2]) - _seconds(r[1])) for r in body)
    assert _at_least(total, N), total


def test_prometheus_serves_each_runtimes_counters_by_pid() -> None:
    """--prometheus: the joined outputs are counters labelled by pid (Prometheus takes
    the rates), scraped while a workload of known size runs."""
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tracing("runtime-stat", "--prometheus", f"127.0.0.1:{port}") as t:
        work = subprocess.Popen([PYTHON, str(WORKLOADS / "stat_workload.py"), str(N), "1.5"])
        time.sleep(1.0)  # the calls are done, the process sleeps
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert work.wait(timeout=60) == 0
        t.stop()
    want = f'planrunner_runtime_stat_py_calls_total{{pid="{work.pid}"}} '
    (line,) = [li for li in text.splitlines() if li.startswith(want)]
    assert N <= float(line.split()[-1]) < N + 20_000, line
    assert "# TYPE planrunner_runtime_stat_py_calls_total counter" in text
    assert "planrunner_runtime_stat_stat" not in text  # the table adds no family
