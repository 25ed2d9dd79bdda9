"""`run --prometheus`, scraped by a real Prometheus (Debian's `prometheus`).

The test starts Prometheus on loopback with a temp config (scrape every 1 s) and data dir,
runs a plan over a private copy of the `agg` fixture (agg:value fires v = 1..1000 once
each; a copy, so no other process's events can reach these probes), and asserts what
Prometheus itself stored, through its HTTP API: the counters by key, every histogram
bucket, `_sum` and `_count`, a PromQL quantile, and the exporter's self-metrics.
Skipped with the reason printed where root/bcc (conftest) or Prometheus is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import PLANRUNNER, ROOT, json_records, write_plan
from tests.e2e.executor_helpers import stop_process

PROMETHEUS = "/usr/bin/prometheus"
PLAN = """planrunner: 1
name: e2e-prom
description: Values fired by the agg fixture.
targets:
  a: {{binary: {agg}}}
probes:
  value: {{usdt: "a:agg:value", args: [{{name: v}}]}}
outputs:
  - count: value
    name: by_mod
    by: [{{mod: "v % 3"}}]
  - hist: value
    name: values
    value: v
  - lhist: value
    name: linear
    value: v
    range: {{min: 0, max: 1000, step: 250}}
  - sum: value
    name: total
    value: v
  - max: value
    name: biggest
    value: v
    by: [{{odd: "v % 2 == 1"}}]
  - print: value
    name: hundreds
    fields: [v]
    where: v % 100 == 0
"""
# Prometheus' view of the log2 histogram of 1..1000: le = 2^k - 1 (integers in
# [2^(k-1), 2^k) are exactly those <= 2^k - 1), cumulative.
LOG2 = {"0": 0, "1": 1, "3": 3, "7": 7, "15": 15, "31": 31, "63": 63, "127": 127,
        "255": 255, "511": 511, "1023": 1000, "+Inf": 1000}
LINEAR = {"-1": 0, "249": 249, "499": 499, "749": 749, "999": 999, "+Inf": 1000}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check: Callable[[], Any], timeout: float, what: str, logs: list[Path]) -> Any:
    """Poll `check` until it returns something truthy, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name}:\n{p.read_text()[-3000:]}" for p in logs
                              if p.exists())
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tails}")
        time.sleep(0.2)


class Prom:
    """A Prometheus server on loopback scraping `target` every second."""

    def __init__(self, tmp: Path, target: str) -> None:
        self.port = _free_port()
        self.log = tmp / "prometheus.log"
        config = tmp / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: planrunner\n    static_configs: [{{targets: ['{target}']}}]\n")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=self.log.open("w"))

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body = json.load(resp)
        except OSError:
            return []  # not up yet
        assert body["status"] == "success", body
        return body["data"]["result"]

    def values(self, promql: str, label: str | None = None) -> dict[str | None, float]:
        """{label value (None without `label`): sample value} of an instant query."""
        return {(r["metric"].get(label) if label else None): float(r["value"][1])
                for r in self.query(promql)}

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture
def agg_copy(fixtures_built: Path, tmp_path: Path) -> Path:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip(f"needs Prometheus at {PROMETHEUS} (Debian package prometheus; "
                    "`make setup` installs it)")
    agg = tmp_path / "agg"
    shutil.copy(fixtures_built / "agg", agg)
    return agg


def _planrunner(tmp: Path, args: list[str],
                env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path, Path]:
    out, err = tmp / "planrunner.out", tmp / "planrunner.err"
    proc = subprocess.Popen([*PLANRUNNER, *args], cwd=ROOT, stdout=out.open("w"),
                            stderr=err.open("w"), env={**os.environ, **(env or {})})
    return proc, out, err


def _assert_scraped_values(prom: Prom, plan: str, fn: str = "") -> None:
    """Every aggregation as Prometheus stored it. `fn` wraps each selector (e.g.
    last_over_time(...[5m]) once the target is gone)."""
    def q(sel: str) -> str:
        return f"{fn}({sel}[5m])" if fn else sel

    base = f"planrunner_{plan}"
    assert prom.values(q(f"{base}_by_mod_total"), "mod") == {"0": 333, "1": 334, "2": 333}
    assert prom.values(q(f"{base}_values_bucket"), "le") == LOG2
    assert prom.values(q(f"{base}_values_sum")) == {None: 500500}
    assert prom.values(q(f"{base}_values_count")) == {None: 1000}
    assert prom.values(q(f"{base}_linear_bucket"), "le") == LINEAR
    assert prom.values(q(f"{base}_linear_sum")) == {None: 500500}
    assert prom.values(q(f"{base}_total")) == {None: 500500}  # sum output named `total`
    assert prom.values(q(f"{base}_biggest"), "odd") == {"true": 999, "false": 1000}


def test_prometheus_scrapes_counters_and_histograms(agg_copy: Path, tmp_path: Path) -> None:
    plan = write_plan(tmp_path, PLAN.format(agg=agg_copy))
    exporter = f"127.0.0.1:{_free_port()}"
    proc, out, err = _planrunner(tmp_path, ["run", plan, "--prometheus", exporter,
                                            "--format", "json"])
    prom = Prom(tmp_path, exporter)
    logs = [err, prom.log]
    try:
        _wait(lambda: "Tracing" in err.read_text(), 60, "planrunner to attach", logs)
        assert f"at http://{exporter}/metrics" in err.read_text()
        _wait(lambda: prom.values('up{job="planrunner"}') == {None: 1}, 30,
              "Prometheus to scrape planrunner", logs)
        # Nothing fired yet: the counter has no series, the self-metrics are there.
        assert prom.values("planrunner_e2e_prom_by_mod_total") == {}
        assert prom.values("planrunner_probes_attached") == {None: 1}

        subprocess.run([str(agg_copy), "1", "0", "values"], check=True, timeout=30)
        _wait(lambda: prom.values("planrunner_e2e_prom_values_count") == {None: 1000}, 30,
              "the final values in Prometheus", logs)
        _assert_scraped_values(prom, "e2e_prom")
        # The README's PromQL: the median of 1..1000 from the linear buckets.
        assert prom.values("histogram_quantile(0.5, planrunner_e2e_prom_linear_bucket)") \
            == {None: 500}
        assert prom.values("sum(planrunner_e2e_prom_by_mod_total)") == {None: 1000}
        assert prom.values("planrunner_map_full_drops_total", "output") == dict.fromkeys(
            ("by_mod", "values", "linear", "total", "biggest"), 0)
        assert prom.values("planrunner_aggregation_keys", "output") == {
            "by_mod": 3, "values": 1, "linear": 1, "total": 1, "biggest": 2}
        assert prom.values("planrunner_events_lost_total") == {None: 0}
        assert prom.values('planrunner_build_info{plan="e2e-prom",version="0.1.0"}') \
            == {None: 1}
        assert prom.values("planrunner_semaphore_mode", "mode") == {"refctr": 1}
    finally:
        stop_process(proc)
        prom.stop()
    assert proc.returncode == 0, err.read_text()
    # The print output still prints, in the --format view, beside the exporter.
    recs = json_records(out.read_text())
    assert [r["v"] for r in recs if r.get("output") == "hundreds"] == list(range(100, 1001, 100))
    counts = {r["mod"]: r["count"] for r in recs if r.get("output") == "by_mod"}
    assert counts == {0: 333, 1: 334, 2: 333}  # and the aggregations at exit, as ever


def test_prometheus_with_a_command(agg_copy: Path, tmp_path: Path) -> None:
    """-c: the exporter lives as long as the command; Prometheus keeps what it scraped.
    agg 20 300 all: values 0.3 s after the start, then ~5 s of other probes (not in the
    plan) before it exits, so at least four scrapes see the final values. `by_mod` has
    `every: 1s` here: with --prometheus nothing resets, so it still counts everything and
    prints once, at exit. Poke mode (forced) shows in planrunner_semaphore_mode."""
    text = PLAN.format(agg=agg_copy).replace("e2e-prom", "e2e-cmd")
    text = text.replace("    name: by_mod\n", "    name: by_mod\n    every: 1s\n")
    plan = write_plan(tmp_path, text)
    exporter = f"127.0.0.1:{_free_port()}"
    prom = Prom(tmp_path, exporter)
    logs = [tmp_path / "planrunner.err", prom.log]
    proc = None
    try:
        _wait(lambda: prom.query("up"), 30, "Prometheus to start", logs)
        proc, out, err = _planrunner(tmp_path, ["run", plan, "--prometheus", exporter,
                                                "-c", f"{agg_copy} 20 300 all", "-f", "json"],
                                     env={"PLANRUNNER_SEMAPHORE_MODE": "poke"})
        assert proc.wait(timeout=90) == 0, err.read_text()
        # The target is gone (its series are stale now): read the last value stored.
        _wait(lambda: prom.values("last_over_time(planrunner_e2e_cmd_values_count[5m])")
              == {None: 1000}, 20, "the final values in Prometheus", logs)
        _assert_scraped_values(prom, "e2e_cmd", fn="last_over_time")
        assert prom.values("last_over_time(planrunner_semaphore_mode[5m])", "mode") \
            == {"poke": 1}
    finally:
        if proc is not None:
            stop_process(proc)
        prom.stop()
    by_mod = [r for r in json_records(out.read_text()) if r.get("output") == "by_mod"]
    assert {r["mod"]: r["count"] for r in by_mod} == {0: 333, 1: 334, 2: 333}
    # printed once, at exit (--prometheus never resets): one interval, the whole run
    assert len(by_mod) == 3 and len({r["interval_start"] for r in by_mod}) == 1
    assert None not in {r["interval_start"] for r in by_mod}


def test_a_stack_keyed_output_is_served_with_its_symbolized_stack(tmp_path: Path) -> None:
    """A count by ustack served by --prometheus: the `ustack` label is the stack as the
    text view shows it (`handle+0x1c [demo]`), one series per stack. The live view's
    reader had no stack resolver: every stack was lost and served as ustack="" (all
    stacks one series)."""
    demo = tmp_path / "demo"
    shutil.copy(ROOT / "tests" / "fixtures" / "elf" / "build" / "demo", demo)
    plan = write_plan(tmp_path, f"""planrunner: 1
name: stk
targets:
  a: {{binary: {demo}}}
probes:
  sa: {{usdt: "a:demo:request__start", args: [{{name: id, type: uint64}}]}}
outputs:
  - count: sa
    by: [ustack]
""")
    exporter = f"127.0.0.1:{_free_port()}"
    proc, out, err = _planrunner(tmp_path, ["run", plan, "--prometheus", exporter, "-d",
                                            "20s", "-c", f"{demo} 100000"], env={})
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://{exporter}/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                time.sleep(0.3)
                continue
            lines = [x for x in body.splitlines() if x.startswith("planrunner_stk_sa_total")]
            if lines and sum(float(x.rsplit(" ", 1)[1]) for x in lines) >= 10:
                break
            time.sleep(0.3)
    finally:
        stop_process(proc)
    assert lines, err.read_text()
    assert len(lines) == 1, lines  # one stack: one series
    label = lines[0].split('ustack="', 1)[1].split('"', 1)[0]
    assert label.startswith("handle+0x") and "[demo]" in label, lines
