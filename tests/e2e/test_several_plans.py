"""Several plans in one run (`planrunner run A.yaml B.yaml`): one program, one session,
one exporter; each plan's outputs named `PLAN.OUTPUT`, with its own params and counts.

The workload is tests/fixtures/elf/demo.c: `demo N` fires request__start(id, path) and
request__done(id, status) for id = 1..N, path = PATHS[(id - 1) % 4], status =
STATUS[(id - 1) % 4] = 200, 200, 404, 500. Every count below follows from that."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

from tests.e2e.conftest import PLANRUNNER, ROOT, json_records, run_planrunner, write_plan

PATHS = ("/index.html", "/api/users", "/static/app.js", "/api/orders/42")
STATUS = (200, 200, 404, 500)
N = 12


def _plans(tmp_path: Path, demo: Path) -> tuple[str, str]:
    """Two plans on the same probes, with the same output and param names."""
    head = (f"planrunner: 1\nparams:\n  min_id: {{type: int, default: 0}}\n"
            f"targets:\n  d: {{binary: {demo}}}\nprobes:\n"
            "  start: {usdt: d:demo:request__start, args: [{name: id}, "
            "{name: path, type: string}]}\n"
            "  done: {usdt: d:demo:request__done, args: [{name: id}, {name: status}]}\n")
    reqs = write_plan(tmp_path, head.replace("planrunner: 1\n", "planrunner: 1\nname: reqs\n")
                      + "outputs:\n"
                      "  - {print: start, name: seen, fields: [id, path], "
                      "where: 'id > min_id'}\n"
                      "  - {count: done, name: by, by: [status]}\n", "reqs.yaml")
    lat = write_plan(tmp_path, head.replace("planrunner: 1\n", "planrunner: 1\nname: lat\n")
                     + "outputs:\n"
                     "  - {print: done, name: seen, fields: [id, status]}\n"
                     "  - {count: start, name: by, by: [path], where: 'id > min_id'}\n",
                     "lat.yaml")
    return reqs, lat


def _demo(fixtures_built: Path, tmp_path: Path) -> Path:
    demo = tmp_path / "demo"  # a copy: no other run's probes fire in it
    shutil.copy(fixtures_built / "demo", demo)
    return demo


def test_two_plans_json_each_output_named_and_exact(tmp_path, fixtures_built) -> None:
    demo = _demo(fixtures_built, tmp_path)
    reqs, lat = _plans(tmp_path, demo)
    proc = run_planrunner(["run", reqs, lat, "-f", "json", "-c", f"{demo} {N}",
                           "--set", "reqs.min_id=3", "--set", "lat.min_id=6"], timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "Tracing 4 probe sites" in proc.stderr  # both plans in one session
    recs = json_records(proc.stdout)
    prints = [r for r in recs if "ts_ns" in r]
    aggs = [r for r in recs if "count" in r]
    # each plan's prints, under its own name, filtered by its own min_id
    assert [(r["probe"], r["id"], r["path"]) for r in prints if r["output"] == "reqs.seen"] \
        == [("reqs.start", i, PATHS[(i - 1) % 4]) for i in range(4, N + 1)]
    assert [(r["probe"], r["id"], r["status"]) for r in prints if r["output"] == "lat.seen"] \
        == [("lat.done", i, STATUS[(i - 1) % 4]) for i in range(1, N + 1)]
    assert {r["output"] for r in prints} == {"reqs.seen", "lat.seen"}
    by_status = {r["status"]: r["count"] for r in aggs if r["output"] == "reqs.by"}
    assert by_status == dict(Counter(STATUS[(i - 1) % 4] for i in range(1, N + 1)))
    by_path = {r["path"]: r["count"] for r in aggs if r["output"] == "lat.by"}
    assert by_path == dict(Counter(PATHS[(i - 1) % 4] for i in range(7, N + 1)))
    assert {r["output"] for r in aggs} == {"reqs.by", "lat.by"}


def test_two_plans_text_sections_name_their_plan(tmp_path, fixtures_built) -> None:
    demo = _demo(fixtures_built, tmp_path)
    reqs, lat = _plans(tmp_path, demo)
    # a folder of plans: both, in name order
    proc = run_planrunner(["run", str(tmp_path), "-c", f"{demo} 4"], timeout=90)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"^\[[0-9:]+\] reqs\.by: count by status$", out, re.M), out
    assert re.search(r"^\[[0-9:]+\] lat\.by: count by path$", out, re.M), out
    assert len(re.findall(r" reqs\.start +id=\d+ path=", out)) == 4, out
    assert len(re.findall(r" lat\.done +id=\d+ status=", out)) == 4, out


def test_a_bad_plan_among_good_ones_stops_everything(tmp_path, fixtures_built) -> None:
    demo = _demo(fixtures_built, tmp_path)
    reqs, lat = _plans(tmp_path, demo)
    bad = write_plan(tmp_path, (
        f"planrunner: 1\nname: bad\ntargets:\n  d: {{binary: {demo}}}\nprobes:\n"
        "  start: {usdt: d:demo:no_such_probe}\n"
        "outputs:\n  - {count: strat}\n"), "bad.yaml")
    worse = write_plan(tmp_path, "planrunner: 1\nprobes: {x: {usdt: 1}}\n"
                                 "outputs:\n  - {count: x, by: [nope]}\n", "worse.yaml")
    marker = tmp_path / "ran"
    proc = run_planrunner(["run", reqs, bad, lat, worse, "-c", f"touch {marker}"], timeout=90)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert f"{bad}:8:" in err and "strat" in err, err  # the unknown probe, located
    assert f"{worse}:" in err, err
    assert "Traceback" not in err
    assert "Tracing" not in err  # nothing attached
    assert not marker.exists()  # the command never started
    assert proc.stdout == ""


def test_prometheus_serves_both_plans(tmp_path, fixtures_built) -> None:
    """No -c: the plans trace every process of the demo copy; the test runs it, then
    reads /metrics until both plans' final counts are served."""
    demo = _demo(fixtures_built, tmp_path)
    reqs, lat = _plans(tmp_path, demo)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err_path = tmp_path / "err"
    with err_path.open("w") as err:
        proc = subprocess.Popen([*PLANRUNNER, "run", reqs, lat, "--set", "lat.min_id=2",
                                 "--prometheus", f"127.0.0.1:{port}", "-f", "json",
                                 "-o", str(tmp_path / "out")],
                                cwd=ROOT, stderr=err, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while "Tracing" not in err_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.1)
        subprocess.run([str(demo), "8"], check=True, timeout=60)
        want = {
            'planrunner_reqs_by_total{status="200"}': 4.0,
            'planrunner_reqs_by_total{status="404"}': 2.0,
            'planrunner_reqs_by_total{status="500"}': 2.0,
            'planrunner_lat_by_total{path="/static/app.js"}': 2.0,
            'planrunner_lat_by_total{path="/api/orders/42"}': 2.0,
            'planrunner_lat_by_total{path="/index.html"}': 1.0,
            'planrunner_lat_by_total{path="/api/users"}': 1.0,
        }
        got: dict[str, float] = {}
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            got = {line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
                   for line in text.splitlines()
                   if line.startswith(("planrunner_reqs_", "planrunner_lat_"))}
            if got == want:
                break
            time.sleep(0.2)
        assert got == want
        assert "# HELP planrunner_reqs_by_total events at probe reqs.done by status " \
               "(plan reqs, output by)" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, err_path.read_text()
    assert os.path.exists(tmp_path / "out")


def test_scope_options_narrow_every_plan(tmp_path, fixtures_built) -> None:
    """--comm scopes the one program, so both plans: a name no thread has, nothing."""
    demo = _demo(fixtures_built, tmp_path)
    reqs, lat = _plans(tmp_path, demo)
    args = ["run", reqs, lat, "-f", "json", "-c", f"{demo} 4"]
    proc = run_planrunner([*args, "--comm", "no-such-comm"], timeout=90)
    assert proc.returncode == 0, proc.stderr
    recs = json_records(proc.stdout)
    assert [r for r in recs if "ts_ns" in r] == []
    assert [r for r in recs if r.get("count")] == []
    proc = run_planrunner([*args, "--comm", "demo"], timeout=90)
    assert proc.returncode == 0, proc.stderr
    outputs = Counter(r["output"] for r in json_records(proc.stdout) if "ts_ns" in r)
    assert outputs == {"reqs.seen": 4, "lat.seen": 4}
