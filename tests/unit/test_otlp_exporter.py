"""run --otlp's exporter process (planrunner/otlp/exporter.py): the run hands it rows
and it builds and sends the requests. It never outlives the run, ignores the stop
signals the run handles, fails in one line, and the run's process never imports
protobuf for it."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from planrunner.otlp.config import otlp_config
from planrunner.otlp.sender import Sender
from planrunner.render.layout import LayoutField, RecordLayout
from planrunner.render.model import PrintOutput, RenderedProgram, SpanShape
from planrunner.runtime.scope import is_planrunner
from tests.otlp_receiver import attrs, http_receiver

ROOT = Path(__file__).resolve().parents[2]

# a run's side of --otlp alone, in a process of its own (what the test kills, or looks
# into): a Sender for the print `request` (id, latency_ns)
SENDER = r"""
import io, json, sys, time
from planrunner.otlp.config import otlp_config
from planrunner.otlp.sender import Sender
from planrunner.render.layout import LayoutField, RecordLayout
from planrunner.render.model import PrintOutput, RenderedProgram, SpanShape
layout = RecordLayout(0, "pr_rec_0", (LayoutField("id", "int", "f0"),
                                      LayoutField("latency_ns", "int", "f1")))
out = PrintOutput("request", "request", layout, None, SpanShape("latency_ns", "", False))
sender = Sender(otlp_config(sys.argv[1], "plan", {}), RenderedProgram("", (), (out,), (), "p"),
                io.StringIO())
sender.start()
assert sender.wait_ready(60)
if sys.argv[2] == "wait":
    print(sender.exporter_pid, flush=True)
    time.sleep(120)
recs = [{"time": "", "ts_ns": 1_000_000 + i, "pid": 10, "tid": 11, "comm": "x",
         "probe": "request", "output": "request", "id": i, "latency_ns": 10}
        for i in range(1000)]
for i in range(0, 1000, 100):
    sender.offer(recs[i:i + 100])
counts = sender.close(30.0)
print(json.dumps({"sent": counts.records_sent, "lost": counts.lost_records,
                  "protobuf": sorted(m for m in sys.modules if m.startswith("google"))}))
"""


def _program() -> RenderedProgram:
    layout = RecordLayout(0, "pr_rec_0", (LayoutField("id", "int", "f0"),
                                          LayoutField("latency_ns", "int", "f1")))
    out = PrintOutput("request", "request", layout, None, SpanShape("latency_ns", "", False))
    return RenderedProgram("", (), (out,), (), "plan")


def _records(first: int, n: int) -> list[dict]:
    return [{"time": "", "ts_ns": 1_000_000 + i, "pid": 10, "tid": 11, "comm": "x",
             "probe": "request", "output": "request", "id": i, "latency_ns": 10}
            for i in range(first, first + n)]


def _started(url: str, err: io.StringIO, **kw: object) -> Sender:
    sender = Sender(otlp_config(url, "plan", {}), _program(), err, **kw)  # type: ignore[arg-type]
    sender.start()
    assert sender.wait_ready(60), err.getvalue()
    return sender


def _exporter_alive(pid: int) -> bool:
    """The exporter process `pid` runs (not a zombie, not another process since)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rpartition(")")[2].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return state != "Z" and b"planrunner.otlp.exporter" in argv


def test_the_exporter_dies_with_the_run() -> None:
    with http_receiver() as (url, _got):
        run = subprocess.Popen([sys.executable, "-c", SENDER, url, "wait"], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)
        try:
            assert run.stdout is not None
            pid = int(run.stdout.readline())
            assert _exporter_alive(pid)
            run.kill()  # SIGKILL: nothing of the run's own code runs after it
            run.wait()
            gone_by = time.monotonic() + 10
            while _exporter_alive(pid) and time.monotonic() < gone_by:
                time.sleep(0.02)
            assert not _exporter_alive(pid)
        finally:
            run.kill()
            run.wait()


def test_the_runs_process_never_imports_protobuf() -> None:
    with http_receiver() as (url, got):
        done = subprocess.run([sys.executable, "-c", SENDER, url, "send"], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["sent"] == 1000 and said["lost"] == 0
    assert sorted(attrs(s.attributes)["id"] for _, s in got.spans) == list(range(1000))
    assert said["protobuf"] == []  # built and sent in the exporter process only


def test_the_exporter_is_a_planrunner_process_to_every_run() -> None:
    with http_receiver() as (url, _got):
        sender = _started(url, io.StringIO())
        pid = sender.exporter_pid
        assert pid is not None
        with open(f"/proc/{pid}/comm", "rb") as fh:
            comm = fh.read().rstrip(b"\n")
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
        sender.close(0.0)
    assert is_planrunner(comm, argv)  # what the kernel side tests at its exec


def test_stop_signals_are_the_runs_not_the_exporters() -> None:
    err = io.StringIO()
    with http_receiver() as (url, got):
        sender = _started(url, err)
        pid = sender.exporter_pid
        assert pid is not None
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # Ctrl-C, systemd
            os.kill(pid, sig)
        sender.offer(_records(0, 100))
        counts = sender.close(30.0)
    assert counts.records_sent == 100 == len(got.spans)
    assert not _exporter_alive(pid)
    assert err.getvalue() == ""


def test_an_exporter_that_dies_is_one_line_and_its_records_are_counted() -> None:
    err = io.StringIO()
    with http_receiver() as (url, _got):
        sender = _started(url, err, exporters=1)
        pid = sender.exporter_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        sender.offer(_records(0, 10))
        t0 = time.monotonic()
        counts = sender.close(1.0)
        took = time.monotonic() - t0
    assert counts.records == 10 and counts.lost_records == 10
    assert took < 3.0, took
    assert err.getvalue() == ("warning: --otlp: the exporter process ended (signal 9); what "
                              "it had not sent is counted as not exported\n")


def test_close_ends_the_exporter_when_the_receiver_never_answers() -> None:
    with http_receiver(hang=True) as (url, got):
        sender = _started(url, io.StringIO())
        pid = sender.exporter_pid
        assert pid is not None
        sender.offer(_records(0, 10))
        deadline = time.monotonic() + 30
        while not got.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        counts = sender.close(1.0)
        took = time.monotonic() - t0
    assert took < 1.5, took
    assert counts.lost_records == 10
    assert not _exporter_alive(pid)


def test_a_slow_receiver_drops_what_the_queues_cannot_hold_and_counts_it() -> None:
    err = io.StringIO()
    with http_receiver(delay=0.2) as (url, got):
        sender = _started(url, err, queue_max=300, batch=100)
        for first in range(0, 2000, 100):
            sender.offer(_records(first, 100))
        counts = sender.close(30.0)
    assert counts.records == 2000
    assert counts.records_sent == len(got.spans) == counts.spans_sent
    assert 0 < counts.records_sent < 2000
    assert counts.lost_records == 2000 - counts.records_sent


def test_two_exporters_send_each_span_once_and_keep_each_tree_whole() -> None:
    """Batches go round robin, but a nested output's spans go by process, so that each
    tree is built in one exporter; a receiver down is said once, not per exporter."""
    from tests.unit.test_otlp import _print, _recursion

    call = _print("call", ("t", "level", "depth", "latency_ns"),
                  SpanShape("latency_ns", "depth", True))
    flat = _program().prints[0]
    program = RenderedProgram("", (), (flat, call), (), "plan")
    err = io.StringIO()
    with http_receiver(refuse=2) as (url, got):
        sender = Sender(otlp_config(url, "plan", {}), program, err, batch=50, exporters=2)
        sender.start()
        assert sender.wait_ready(60) and len(set(sender.exporter_pids)) == 2
        for pid in (10, 11, 12):
            recs = _records(pid * 1000, 120)
            for rec in recs:
                rec["pid"] = pid
            sender.offer(recs[:60])
            sender.offer(recs[60:])
            calls = _recursion(threads=2, depth=6)
            for rec in calls:
                rec["pid"] = pid
                rec["t"] += pid * 10
            sender.offer(calls)
        counts = sender.close(30.0)
    assert counts.records == counts.records_sent == 3 * (120 + 12)
    flat_ids = sorted(attrs(s.attributes)["id"] for _, s in got.spans if s.name == "request")
    assert flat_ids == sorted(pid * 1000 + i for pid in (10, 11, 12) for i in range(120))
    calls = [s for _, s in got.spans if s.name == "call"]
    assert len(calls) == 3 * 12
    by_id = {s.span_id: s for s in calls}
    for t in {attrs(s.attributes)["t"] for s in calls}:
        tree = sorted((s for s in calls if attrs(s.attributes)["t"] == t),
                      key=lambda s: attrs(s.attributes)["depth"])
        assert len(tree) == 6 and len({s.trace_id for s in tree}) == 1
        assert not tree[0].parent_span_id
        for outer, inner in zip(tree, tree[1:], strict=False):
            assert by_id[inner.parent_span_id] is outer
    assert counts.orphaned == 0
    # each outage is said once, whichever exporters saw it (the two refusals may reach
    # both exporters at once, one outage, or one after the other's recovery, two)
    said = ["down" if "retrying" in line else "up" for line in err.getvalue().splitlines()]
    assert said in (["down", "up"], ["down", "up"] * 2), err.getvalue()


def test_rows_are_handled_only_once_their_request_was_taken() -> None:
    """The exporter builds the next batch while a sending thread waits for the receiver
    (at most IN_FLIGHT requests built and not taken); what it reports keeps the order
    the run counts by: a batch's rows are "handled" after the receiver took them."""
    from planrunner.otlp import wire
    from planrunner.otlp.exporter import serve
    from planrunner.otlp.wire import rows_maker

    program = _program()
    out = program.prints[0]
    stdin = io.BytesIO()
    with http_receiver(delay=0.05) as (url, got):
        wire.write(stdin, wire.Setup(otlp_config(url, "plan", {}), program.prints, (),
                                     time.time_ns(), 100))
        for first in range(0, 500, 100):
            wire.write(stdin, ("rows", "request", rows_maker(out)(_records(first, 100))))
        wire.write(stdin, ("close", 30.0))
        stdin.seek(0)
        reports = io.BytesIO()
        assert serve(stdin, reports, 10_000) == 0
    reports.seek(0)
    said = []
    while (msg := wire.read(reports)) is not None:
        said.append(msg)
    assert said[0] == ("ready",) and said[-1][0] == "cpu"
    sent = handled = 0
    for msg in said:
        if msg[0] == "sent":
            sent += msg[1]
        elif msg[0] == "handled":
            handled += msg[1]
            assert handled <= sent, said  # never before the receiver took them
    assert sent == handled == len(got.spans) == 500
