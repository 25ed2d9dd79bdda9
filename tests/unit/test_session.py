"""runtime/session.py's loop on a fake backend (tests/fakes/backend.py), without root:
every stop reason, draining the tail after detaching, loss accounting, exit codes,
`every:` ticks, live views, and what is set up before the loop (config slots, distinct
sites, the "Tracing" line). Real signals are sent to this process; the session must
put the previous handlers back, and each test checks it did."""

from __future__ import annotations

import ctypes as ct
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from planrunner.errors import BackendError, ResolveError
from planrunner.output.base import LiveView
from planrunner.records import AggSnapshot, SnapshotSource
from planrunner.render.layout import KeyLayout, LayoutField, RecordLayout
from planrunner.render.model import (
    FORK_SITE,
    OWN_BTF_VARIANTS,
    AggregateOutput,
    AttachSite,
    ConfigSlot,
    Counter,
    FileIdentity,
    PrintOutput,
    RenderedProgram,
    ScopeFlag,
    TargetFile,
)
from planrunner.runtime import session as session_mod
from planrunner.runtime.scope import Scope, own_sites
from planrunner.runtime.session import POLL_MS, RunOptions, Session, StopReason, run_session
from tests.fakes.backend import HELPER_FUNCTIONS, FakeBackend, FakeClock, Turn, pack_record

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LAYOUT = RecordLayout(0, "pr_rec_0", (LayoutField("i", "int", "f0"),
                                      LayoutField("name", "str", "f1", size=16)))
PRINT = PrintOutput("hits", "hit", LAYOUT, None)
TRUE = TargetFile("/bin/true", "/bin/true", None)
SITE = AttachSite("uprobe", "pr_fn_0", "hit", 0, TRUE, file_offset=0x100)
TRACEPOINT = AttachSite("tracepoint", "pr_fn_1", "sched", 0, category="sched",
                        event="sched_process_exec")


def program(*, sites: Sequence[AttachSite] = (SITE,),
            aggregates: Sequence[AggregateOutput] = ()) -> RenderedProgram:
    return RenderedProgram("/* C */", tuple(sites), (PRINT,), tuple(aggregates), "plan")


def rec(i: int, name: str = "x") -> bytes:
    return pack_record(LAYOUT, {"i": i, "name": name}, ts_ns=i + 1)


class RecordingView:
    """A View that keeps what it is given; `broken_after` records calls, the next one
    raises BrokenPipeError like a write to a closed stdout."""

    def __init__(self, broken_after: int | None = None) -> None:
        self.recs: list[dict[str, object]] = []
        self.snaps: list[AggSnapshot] = []
        self.losses: list[tuple[int, str]] = []
        self.broken_after = broken_after
        self.calls = 0

    def record(self, rec: dict[str, object]) -> None:
        self.records((rec,))

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        if self.broken_after is not None and self.calls >= self.broken_after:
            raise BrokenPipeError(32, "Broken pipe")
        self.calls += 1
        self.recs.extend(batch)

    def aggregate(self, snap: AggSnapshot) -> None:
        self.snaps.append(snap)

    def lost(self, count: int, reason: str) -> None:
        self.losses.append((count, reason))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def hermetic(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """No state-dir recovery (it belongs to real runs: /run/planrunner is shared), the
    refctr semaphore mode, and the signal handlers checked unchanged afterwards."""
    recovered: list[str] = []
    monkeypatch.setattr(session_mod, "recover", lambda _stderr: recovered.append("x"))
    monkeypatch.delenv("PLANRUNNER_SEMAPHORE_MODE", raising=False)
    before = {sig: signal.getsignal(sig) for sig in (*SIGNALS, signal.SIGALRM)}
    yield recovered
    assert {sig: signal.getsignal(sig) for sig in (*SIGNALS, signal.SIGALRM)} == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no alarm left armed


def run(backend: FakeBackend, opts: RunOptions, prog: RenderedProgram | None = None,
        view: RecordingView | None = None, live: Sequence[LiveView] = ()
        ) -> tuple[int, RecordingView, str]:
    """One session; time is the backend's FakeClock (a frozen one when it has none:
    those tests wait for a real process, the fake sleeps for real when idle)."""
    view = view or RecordingView()
    err = io.StringIO()
    clock = backend.clock or FakeClock()
    status = run_session(prog or program(), opts, view, err, backend, live=live,
                         wall=clock.wall, monotonic=clock.monotonic)
    return status, view, err.getvalue()


def ids(view: RecordingView) -> list[object]:
    return [r["i"] for r in view.recs]


# --- stop reasons ---------------------------------------------------------------------


def test_max_events_stops_after_exactly_n_records_and_skips_the_tail() -> None:
    backend = FakeBackend(turns=[Turn([rec(0), rec(1), rec(2)]), Turn([rec(3), rec(4)]),
                                 Turn([rec(5)])], tail=[rec(9)], clock=FakeClock())
    status, view, err = run(backend, RunOptions(max_events=4))
    assert (status, ids(view)) == (0, [0, 1, 2, 3])
    assert backend.calls[-3:] == ["read", "detach", "close"]  # no tail read: N reached
    assert backend.turns_left == 1
    assert err.startswith("Tracing 1 probe site in all processes. Hit Ctrl-C to end.\n")


def test_max_events_counts_the_tail_too() -> None:
    stop = Turn([rec(0)], then=lambda: os.kill(os.getpid(), signal.SIGINT))
    backend = FakeBackend(turns=[stop], tail=[rec(1), rec(2), rec(3)], clock=FakeClock())
    _status, view, _err = run(backend, RunOptions(max_events=3))
    assert ids(view) == [0, 1, 2]


def test_duration_stops_on_the_deadline_then_drains_the_tail() -> None:
    clock = FakeClock()
    backend = FakeBackend(turns=[Turn([rec(0)])], tail=[rec(1), rec(2)], clock=clock)
    start = clock.t
    status, view, _err = run(backend, RunOptions(duration_s=1.0))
    assert (status, ids(view)) == (0, [0, 1, 2])
    assert 1.0 <= clock.t - start < 1.0 + 2 * POLL_MS / 1000
    # detached first, so that the tail holds every event that fired
    assert backend.calls[-4:] == ["read", "detach", "tail", "close"]


def test_the_whole_tail_is_drained_in_as_many_reads_as_it_takes() -> None:
    """A read returns a bounded batch (runtime/ringbuf.py READ_BYTES): the tail after
    the stop is read until the ring is empty, or records were silently left in it."""
    stop = Turn([rec(0)], then=lambda: os.kill(os.getpid(), signal.SIGINT))
    backend = FakeBackend(turns=[stop], tail=[rec(i) for i in range(1, 11)], tail_batch=3,
                          clock=FakeClock())
    status, view, _err = run(backend, RunOptions())
    assert (status, ids(view)) == (0, list(range(11)))
    assert backend.calls.count("tail") == 4


def test_after_a_signal_the_tail_is_read_for_tail_s_then_the_rest_is_counted_lost() -> None:
    """A full ring under a flood would hold the stop for its whole print (issue 28:
    0.3 s here): reads go on for TAIL_S after the stop, then what is left is released
    unread and counted, on stderr, to the view and in the status."""
    stop = Turn([rec(0)], then=lambda: os.kill(os.getpid(), signal.SIGINT))
    backend = FakeBackend(turns=[stop], tail=[rec(i) for i in range(1, 11)], tail_batch=3,
                          tail_read_s=session_mod.TAIL_S / 2 + 0.001, clock=FakeClock())
    status, view, err = run(backend, RunOptions())
    assert ids(view) == list(range(7))  # two reads of 3 fit in TAIL_S, the third not
    assert backend.calls[-5:] == ["detach", "tail", "tail", "discard", "close"]
    assert backend.detached_all
    assert status == session_mod.EXIT_INCOMPLETE
    assert "4 events not printed: still in the ring buffer or not yet printed 0.1 s after " \
        "the stop\n" in err
    assert view.losses == [(4, "left in the ring at the stop")]


def test_a_detach_slower_than_tail_s_still_prints_one_read_of_the_tail() -> None:
    """On a busy machine the detach alone may outlast TAIL_S: a small tail (one read)
    is printed all the same; only what a flood leaves beyond it is counted."""
    stop = Turn([rec(0)], then=lambda: os.kill(os.getpid(), signal.SIGINT))
    backend = FakeBackend(turns=[stop], tail=[rec(1), rec(2)],
                          detach_s=2 * session_mod.TAIL_S, clock=FakeClock())
    status, view, err = run(backend, RunOptions())
    assert (status, ids(view)) == (0, [0, 1, 2])
    assert "not printed" not in err and view.losses == []
    flood = FakeBackend(turns=[stop], tail=[rec(i) for i in range(1, 11)], tail_batch=4,
                        detach_s=2 * session_mod.TAIL_S, clock=FakeClock())
    status, view, err = run(flood, RunOptions())
    assert (status, ids(view)) == (session_mod.EXIT_INCOMPLETE, [0, 1, 2, 3, 4])
    assert "6 events not printed" in err


class SlowView(RecordingView):
    """Each write of records takes `seconds` on `clock` (a flood's batch being printed)."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        super().records(batch)
        self.clock.advance(self.seconds)


@pytest.mark.parametrize("how", ["signal", "duration"])
def test_a_batch_being_printed_at_the_stop_is_cut_at_tail_s_by_the_chunk(how: str) -> None:
    """A flooded ring's read is up to ~0.15 s of decoding and printing: a stop asked while
    it is printed (a signal, the deadline) waited for all of it, then for one more read
    of the tail. Now the loop leaves the rest of the batch at once (the detach comes
    first), its chunks are printed for TAIL_S after the request, the rest is counted,
    and the ring's tail is released unread."""
    chunk = session_mod.OUTPUT_CHUNK
    clock = FakeClock()
    batch = [rec(i) for i in range(3 * chunk)]
    then = (lambda: os.kill(os.getpid(), signal.SIGINT)) if how == "signal" else None
    backend = FakeBackend(turns=[Turn(batch, then=then, advance_s=1.0)],
                          tail=[rec(9), rec(9)], clock=clock)
    view = SlowView(clock, session_mod.TAIL_S / 2 + 0.001)
    opts = RunOptions(duration_s=1.0) if how == "duration" else RunOptions()
    status, view, err = run(backend, opts, view=view)
    assert ids(view) == list(range(2 * chunk))  # two chunks fit in TAIL_S, the third not
    assert backend.calls[-3:] == ["detach", "discard", "close"]  # no read of the tail
    assert status == session_mod.EXIT_INCOMPLETE
    assert f"{chunk + 2} events not printed" in err
    assert view.losses == [(chunk + 2, "left in the ring at the stop")]


def test_after_the_command_ended_the_tail_is_read_to_its_end() -> None:
    """No one asked for a prompt stop: the tail is printed whatever it takes."""
    backend = FakeBackend(tail=[rec(i) for i in range(10)], tail_batch=3,
                          tail_read_s=session_mod.TAIL_S, clock=FakeClock())
    status, view, err = run(backend, RunOptions(command=["sh", "-c", "exit 0"]))
    assert (status, ids(view)) == (0, list(range(10)))
    assert "discard" not in backend.calls and "not printed" not in err


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_stops_the_loop_and_what_arrived_is_still_printed(sig: int) -> None:
    backend = FakeBackend(turns=[Turn([rec(0)]),
                                 Turn([rec(1)], then=lambda: os.kill(os.getpid(), sig)),
                                 Turn([rec(7)])],
                          tail=[rec(2)], clock=FakeClock())
    status, view, err = run(backend, RunOptions())
    assert (status, ids(view)) == (0, [0, 1, 2])
    assert backend.turns_left == 1  # stopped on the turn the signal came in
    assert "Traceback" not in err


def test_child_exit_ends_the_run_with_its_status() -> None:
    backend = FakeBackend()
    status, _view, err = run(backend, RunOptions(command=["sh", "-c", "exit 3"]))
    assert status == 3
    ((site, pid, ref_ctr),) = backend.attached
    assert pid is not None and ref_ctr and site is SITE
    assert f"in process {pid}." in err
    # a copy of planrunner until its exec (runtime_helpers.h pr_on_exec clears the slot)
    assert backend.config[ConfigSlot.COMMAND] == pid


def test_a_child_killed_by_a_signal_gives_128_plus_n() -> None:
    status, _view, _err = run(FakeBackend(),
                              RunOptions(command=["sh", "-c", "kill -TERM $$"]))
    assert status == 128 + signal.SIGTERM


def test_pid_exit_ends_the_run() -> None:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        backend = FakeBackend(turns=[Turn([rec(0)])], tail=[rec(1)])
        status, view, err = run(backend, RunOptions(pid=target.pid))
    finally:
        target.wait()
    assert (status, ids(view)) == (0, [0, 1])
    assert err.endswith(f"process {target.pid} exited\n")
    assert backend.attached[0][1] == target.pid


def test_closed_stdout_ends_quietly_with_status_0(monkeypatch: pytest.MonkeyPatch) -> None:
    silenced: list[bool] = []
    monkeypatch.setattr(session_mod, "_silence_stdout", lambda: silenced.append(True))
    backend = FakeBackend(turns=[Turn([rec(0)]), Turn([rec(1)]), Turn([rec(2)])],
                          counters={Counter.LOST_RINGBUF: 5}, clock=FakeClock())
    status, view, err = run(backend, RunOptions(), view=RecordingView(broken_after=1))
    assert (status, ids(view), silenced) == (0, [0], [True])
    assert backend.calls[-2:] == ["detach", "close"]
    assert err.count("\n") == 1 and view.losses == []  # only the "Tracing" line


def test_a_crash_inside_the_loop_still_detaches_and_closes() -> None:
    def crash() -> None:
        raise RuntimeError("simulated crash")

    backend = FakeBackend(turns=[Turn([rec(0)]), Turn(then=crash)], clock=FakeClock())
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(backend, RunOptions())
    assert backend.calls[-2:] == ["detach", "close"]


def test_an_attach_failure_closes_the_backend_and_ends_the_child() -> None:
    backend = FakeBackend(attach_error=BackendError("could not attach probe 'hit'"))
    with pytest.raises(BackendError):
        run(backend, RunOptions(command=["sleep", "30"]))
    assert backend.calls == ["load", "detach", "close"]


# --- setup ------------------------------------------------------------------------------


def test_config_slots_and_distinct_sites() -> None:
    twin = AttachSite("uprobe", "pr_fn_2", "hit", 1, TRUE, file_offset=0x100)
    other = AttachSite("uretprobe", "pr_fn_3", "hit", 2, TRUE, file_offset=0x100)
    prog = program(sites=(SITE, twin, other, TRACEPOINT))
    backend = FakeBackend(clock=FakeClock())
    _status, _view, err = run(backend, RunOptions(duration_s=0.1), prog)
    # the same probe at the same byte of the same file is one attach
    assert [s for s, _pid, _ref in backend.attached] == [SITE, other, TRACEPOINT]
    cpus = session_mod.possible_cpus()
    # registry upkeep, planrunner processes kept out before they register
    assert [s for s, _pid, _ref in backend.helpers] == own_sites(prog, False, True)
    # exit and fork raw tracepoints; exec a perf event, as the plan has one there, which
    # reads the new program's argv itself (no execve programs)
    assert [s.fn_name for s, _pid, _ref in backend.helpers] == [
        "pr_on_exit_raw", "pr_on_fork_raw", "pr_on_exec_argv"]
    # no --pid: no scope filter
    assert backend.config == {ConfigSlot.SELF: os.getpid(), ConfigSlot.NR_CPUS: cpus}
    assert "Tracing 3 probe sites in all processes." in err
    assert backend.calls[:5] == ["load", "attach hit#0", "attach hit#2",
                                 "attach sched#0", "open_ring"]


def test_one_pid_is_filtered_at_attach_for_uprobes_and_in_bpf_for_tracepoints() -> None:
    me = os.getpid()  # alive throughout: the duration ends the run
    backend = FakeBackend(clock=FakeClock())
    run(backend, RunOptions(pid=me, duration_s=0.1), program(sites=(SITE, TRACEPOINT)))
    cpus = session_mod.possible_cpus()
    assert backend.config == {ConfigSlot.SELF: me, ConfigSlot.SCOPE_TRACEPOINT: ScopeFlag.PIDS,
                              ConfigSlot.NR_CPUS: cpus}
    assert backend.scope_pids == [me]
    assert {pid for _site, pid, _ref in backend.attached} == {me}


def test_several_pids_comm_and_cgroup_attach_system_wide_and_filter_in_bpf() -> None:
    me, parent = os.getpid(), os.getppid()
    backend = FakeBackend(clock=FakeClock())
    scope = Scope(pids=(me, parent), comms=("nginx",), cgroups=("/sys/fs/cgroup/a",))
    _status, _view, err = run(backend, RunOptions(duration_s=0.1, scope=scope),
                              program(sites=(SITE, TRACEPOINT)))
    every = ScopeFlag.PIDS | ScopeFlag.COMM | ScopeFlag.CGROUP
    assert backend.config == {ConfigSlot.SELF: me, ConfigSlot.SCOPE_UPROBE: every,
                              ConfigSlot.SCOPE_TRACEPOINT: every, ConfigSlot.CGROUPS: 1,
                              ConfigSlot.NR_CPUS: session_mod.possible_cpus()}
    assert (backend.scope_pids, backend.scope_comms, backend.scope_cgroups) == \
        ([me, parent], [b"nginx"], ["/sys/fs/cgroup/a"])
    assert {pid for _site, pid, _ref in backend.attached} == {None}
    assert (f"Tracing 2 probe sites in processes {me}, {parent}, named nginx, in cgroup "
            "/sys/fs/cgroup/a.") in err


def test_follow_children_attaches_the_fork_programs_first() -> None:
    me = os.getpid()
    backend = FakeBackend(clock=FakeClock())
    scope = Scope(pids=(me,), follow_children=True)
    prog = program(sites=(SITE,))
    run(backend, RunOptions(duration_s=0.1, scope=scope), prog)
    assert [s for s, _pid, _ref in backend.helpers] == own_sites(prog, True, True)
    assert backend.helpers[-1][0] == OWN_BTF_VARIANTS[FORK_SITE][1]
    assert {pid for _site, pid, _ref in backend.attached} == {None}  # children: any pid
    assert backend.config[ConfigSlot.SCOPE_UPROBE] == ScopeFlag.PIDS


def test_the_run_ends_when_every_pid_has_exited() -> None:
    short = subprocess.Popen(["sleep", "0.2"])
    longer = subprocess.Popen(["sleep", "0.6"])
    backend = FakeBackend()
    t0 = time.monotonic()
    _status, _view, err = run(backend, RunOptions(
        scope=Scope(pids=(short.pid, longer.pid)), duration_s=20))
    short.wait()
    longer.wait()
    assert 0.5 < time.monotonic() - t0 < 10
    assert f"processes {short.pid}, {longer.pid} exited" in err


def test_without_kernel_reference_counters_sites_attach_without_them() -> None:
    from planrunner.runtime.features import KernelFeatures

    backend = FakeBackend(clock=FakeClock(),
                          feature_set=KernelFeatures(True, True, ref_ctr=False,
                                                     sleepable=False))
    _status, _view, err = run(backend, RunOptions(duration_s=0.1))
    assert backend.attached[0][2] is False
    assert "Tracing 1 probe site" in err


def test_stale_semaphores_are_recovered_first(hermetic: list[str]) -> None:
    run(FakeBackend(clock=FakeClock()), RunOptions(duration_s=0.1))
    assert hermetic == ["x"]


# --- losses -------------------------------------------------------------------------------


def test_losses_are_reported_on_stderr_and_to_the_view() -> None:
    backend = FakeBackend(turns=[Turn([rec(0)], counters={Counter.LOST_RINGBUF: 7,
                                                          Counter.LOST_MAPFULL: 3,
                                                          Counter.SUBMITS: 99})],
                          clock=FakeClock())
    status, view, err = run(backend, RunOptions(duration_s=0.2))
    assert status == session_mod.EXIT_INCOMPLETE  # the exit status says the trace has gaps
    assert view.losses == [(7, "ringbuf full")]
    assert err.splitlines()[1:] == [
        "7 events lost (ring buffer full)",
        "3 aggregation updates dropped (map full: raise settings.map_size)",
        "incomplete trace: 7 events lost, 3 aggregation updates dropped"]


def test_no_losses_no_report() -> None:
    backend = FakeBackend(turns=[Turn([rec(0)], counters={Counter.SUBMITS: 99})],
                          clock=FakeClock())
    _status, view, err = run(backend, RunOptions(duration_s=0.2))
    assert view.losses == [] and len(err.splitlines()) == 1


# --- aggregations ---------------------------------------------------------------------------


class NoKey(ct.Structure):
    _fields_ = [("pr_none", ct.c_uint64)]


def counts(*per_cpu: int) -> list[tuple[object, object]]:
    return [(NoKey(0), (ct.c_uint64 * len(per_cpu))(*per_cpu))]


def lost(n: int) -> list[tuple[object, object]]:
    return [(0, (ct.c_uint64 * 2)(n, 0))]


EVERY = AggregateOutput(name="calls", probe="hit", kind="count", map_name="pr_agg_0",
                        key=KeyLayout(), value_label="count", unit=None,
                        every_ns=100_000_000, top=None, lhist=None, map_size=10,
                        lost_map="pr_agg_0_lost")


def test_every_prints_and_resets_each_interval_then_the_partial_last_one() -> None:
    clock = FakeClock()
    start = clock.t
    turns = [Turn(maps={"pr_agg_0": counts(1, 2), "pr_agg_0_lost": lost(0)}, advance_s=0.06),
             Turn(advance_s=0.06),  # 0.12: the first interval is printed
             Turn(maps={"pr_agg_0": counts(0, 4)}, advance_s=0.1),  # 0.22: second
             Turn(advance_s=0.06),  # 0.28
             # the C counts a full map's update in LOST_MAPFULL and the output's own map
             Turn(maps={"pr_agg_0": counts(5, 0), "pr_agg_0_lost": lost(2)},
                  counters={Counter.LOST_MAPFULL: 2},
                  then=lambda: os.kill(os.getpid(), signal.SIGTERM))]
    backend = FakeBackend(turns=turns, clock=clock)
    _status, view, _err = run(backend, RunOptions(), program(aggregates=(EVERY,)))
    got = [(round(s.interval_start - start, 2) if s.interval_start is not None else None,
            round(s.interval_end - start, 2), [r.count for r in s.rows], s.dropped)
           for s in view.snaps]
    assert got == [(0.0, 0.12, [3], 0), (0.12, 0.22, [4], 0), (0.22, 0.28, [5], 2)]
    assert set(backend.map_reads) == {("pr_agg_0", True)}  # each read deletes


def test_without_every_one_cumulative_snapshot_at_the_end() -> None:
    once = AggregateOutput(name="calls", probe="hit", kind="count", map_name="pr_agg_0",
                           key=KeyLayout(), value_label="count", unit=None, every_ns=None,
                           top=None, lhist=None, map_size=10)
    turns = [Turn(maps={"pr_agg_0": counts(1, 1)}), Turn(maps={"pr_agg_0": counts(2, 3)})]
    backend = FakeBackend(turns=turns, clock=FakeClock())
    _status, view, _err = run(backend, RunOptions(duration_s=0.5),
                              program(aggregates=(once,)))
    ((interval_start, rows),) = [(s.interval_start, s.rows) for s in view.snaps]
    # without `every`, the interval is the whole run: from the start (the fake wall clock)
    assert (interval_start, [r.count for r in rows]) == (1000.0, [5])
    assert backend.map_reads == [("pr_agg_0", False)]


# --- live views -------------------------------------------------------------------------------


class RecordingLive:
    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend
        self.events: list[str] = []
        self.source: SnapshotSource | None = None
        self.started_with: tuple[int, str] | None = None

    def start(self, source: SnapshotSource, probes_attached: int,
              semaphore_mode: str) -> None:
        self.events.append(f"start after {self.backend.calls[-1]}")
        self.source = source
        self.started_with = (probes_attached, semaphore_mode)

    def close(self) -> None:
        self.events.append(f"close after {self.backend.calls[-1]}")


def test_a_live_view_pulls_cumulative_snapshots_and_maps_are_never_reset() -> None:
    turns = [Turn(maps={"pr_agg_0": counts(1, 2), "pr_agg_0_lost": lost(4)},
                  counters={Counter.LOST_RINGBUF: 6, Counter.LOST_MAPFULL: 4},
                  advance_s=0.15),
             Turn(maps={"pr_agg_0": counts(3, 2)}, advance_s=0.15)]
    backend = FakeBackend(turns=turns, clock=FakeClock())
    live = RecordingLive(backend)
    _status, view, err = run(backend, RunOptions(duration_s=0.5),
                             program(aggregates=(EVERY,)), live=[live])
    assert live.started_with == (1, "refctr")
    # started once attached and reading; closed after the probes went and the tail
    # was drained
    assert live.events == ["start after open_ring", "close after tail"]
    assert live.source is not None
    snap = live.source.cumulative("calls")
    assert ([r.count for r in snap.rows], snap.dropped, snap.interval_start) == ([5], 4,
                                                                                  1000.0)
    assert live.source.events_lost() == 6
    # `every:` prints once, at exit, from a map nothing deleted from
    assert [[r.count for r in s.rows] for s in view.snaps] == [[5]]
    assert all(not delete for _name, delete in backend.map_reads)
    assert err.startswith("Tracing")


# --- stopping when told (issue 15 items 11-13, 15) ---------------------------------------


class SignalDuringAttach(FakeBackend):
    """Sends `sig` to this process while attaching site number `at` (start-up is slow:
    3000 sites took 82 s)."""

    def __init__(self, sig: int, at: int, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.sig, self.at, self.n = sig, at, 0

    def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
        super().attach(site, pid, ref_ctr)
        if site.fn_name in HELPER_FUNCTIONS:  # the run's own exit program: not a site
            return
        self.n += 1
        if self.n == self.at:
            os.kill(os.getpid(), self.sig)


def many_sites(n: int) -> tuple[AttachSite, ...]:
    return tuple(AttachSite("uprobe", f"pr_fn_{i}", "hit", i, TRUE, file_offset=0x100 + i)
                 for i in range(n))


@pytest.mark.parametrize("sig", (signal.SIGINT, signal.SIGTERM),
                         ids=lambda s: signal.Signals(s).name)
def test_a_stop_during_attach_ends_start_up_there_and_never_runs_the_command(
        sig: int, tmp_path: Path) -> None:
    backend = SignalDuringAttach(sig, at=2, clock=FakeClock())
    ran = tmp_path / "ran"
    status, view, err = run(backend, RunOptions(command=["touch", str(ran)]),
                            program(sites=many_sites(50)))
    assert status == 128 + sig
    assert len(backend.attached) == 2  # not one site more after the signal
    assert backend.calls[-2:] == ["detach", "close"] and "open_ring" not in backend.calls
    name = signal.Signals(sig).name
    assert err == (f"stopped by {name} during start-up, before tracing began: 2 of 50 "
                   "probe sites had been attached, now detached; the command was not "
                   "started\n")
    assert not ran.exists() and view.recs == []


def test_a_stop_during_compile_ends_start_up_at_once() -> None:
    import time

    class SlowCompile(FakeBackend):
        def load(self, program: RenderedProgram,
                 meanwhile: Callable[[], None] | None = None) -> None:
            super().load(program)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(3)  # a large plan compiles for seconds

    backend = SlowCompile(clock=FakeClock())
    start = time.monotonic()
    status, _view, err = run(backend, RunOptions())
    assert time.monotonic() - start < 2  # the compile is abandoned: nothing is attached
    assert status == 128 + signal.SIGTERM and backend.attached == []
    assert err == ("stopped by SIGTERM during start-up, before tracing began: nothing had "
                   "been attached\n")


def test_a_command_still_running_at_the_end_gets_sigterm_and_its_status_says_so() -> None:
    backend = FakeBackend(clock=FakeClock())
    status, _view, err = run(backend, RunOptions(command=["sleep", "30"], duration_s=0.2))
    assert status == 128 + signal.SIGTERM
    assert err.endswith("was still running: sent SIGTERM\n")


def test_a_command_that_ignores_sigterm_gets_sigkill_after_the_grace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(session_mod, "CHILD_GRACE_S", 0.5)
    ready = tmp_path / "ready"

    def wait_ready() -> None:  # the trap is set before the stop
        for _ in range(500):
            if ready.exists():
                return
            time.sleep(0.01)

    backend = FakeBackend(turns=[Turn(then=lambda: (wait_ready(),
                                                    os.kill(os.getpid(), signal.SIGINT)))])
    start = time.monotonic()
    status, _view, err = run(backend, RunOptions(
        command=["sh", "-c", f"trap '' TERM; touch {ready}; sleep 30"]))
    assert status == 128 + signal.SIGKILL
    assert 0.5 <= time.monotonic() - start < 5
    assert "did not end within 0.5 s of SIGTERM: sent SIGKILL\n" in err


class BlockedView(RecordingView):
    """stdout as a pipe nobody reads: the first write never returns."""

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        import time
        time.sleep(60)  # PEP 475: retried after every handler that returns


@pytest.fixture
def quick_grace(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    silenced: list[bool] = []
    monkeypatch.setattr(session_mod, "OUTPUT_GRACE_S", 0.3)
    monkeypatch.setattr(session_mod, "_silence_stdout", lambda: silenced.append(True))
    return silenced


def test_a_blocked_output_cannot_hold_the_deadline(quick_grace: list[bool]) -> None:
    import time

    backend = FakeBackend(turns=[Turn([rec(0), rec(1)]), Turn([rec(2)])], tail=[rec(3)])
    start = time.monotonic()
    status, _view, err = run(backend, RunOptions(duration_s=0.5), view=BlockedView())
    took = time.monotonic() - start
    assert status == session_mod.EXIT_INCOMPLETE
    assert took < 0.5 + 0.3 + 1.0, took
    assert backend.calls[-3:] == ["detach", "tail", "close"]
    assert "records not written: the output was blocked for 0.3 s after the stop" in err
    assert err.endswith("not written\n") and "incomplete trace: " in err
    assert quick_grace == [True]  # what the view still buffers is never flushed to fd 1


def test_a_signal_ends_a_blocked_write(quick_grace: list[bool]) -> None:
    import threading
    import time

    backend = FakeBackend(turns=[Turn([rec(0)])], tail=[rec(1), rec(2)])
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    start = time.monotonic()
    status, _view, err = run(backend, RunOptions(), view=BlockedView())
    timer.join()
    assert time.monotonic() - start < 0.2 + 0.3 + 1.0
    assert status == session_mod.EXIT_INCOMPLETE
    assert "3 records not written" in err  # the blocked batch and the tail
    assert backend.calls[-3:] == ["detach", "tail", "close"]


def test_with_a_command_losses_keep_its_status_and_the_last_line_says_so() -> None:
    backend = FakeBackend(turns=[Turn([rec(0)], counters={Counter.LOST_RINGBUF: 2})])
    status, _view, err = run(backend, RunOptions(command=["sh", "-c", "sleep 0.2"]))
    assert status == 0
    assert err.endswith("incomplete trace: 2 events lost\n")


# --- the binary changed between resolve and attach (issue 15 item 3) ----------------------


def _target(path: Path) -> TargetFile:
    st = os.stat(path)
    return TargetFile(str(path), "app", None,
                      FileIdentity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


def _replace(path: Path) -> None:
    """What a package upgrade does: a new file renamed over the old path."""
    new = path.with_suffix(".new")
    new.write_bytes(b"\x7fELF new build")
    os.rename(new, path)


def test_a_binary_replaced_before_attach_is_refused(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.write_bytes(b"\x7fELF old build")
    site = AttachSite("uprobe", "pr_fn_0", "hit", 0, _target(app), file_offset=0x100)
    _replace(app)
    backend = FakeBackend(clock=FakeClock())
    with pytest.raises(ResolveError, match=r"app changed after planrunner read it \(the "
                                           r"path names another file now: inode \d+ -> "
                                           r"\d+\): its probe offsets are the old file's"):
        run(backend, RunOptions(), program(sites=(site,)))
    assert backend.attached == [] and backend.calls[-2:] == ["detach", "close"]


def test_a_binary_rewritten_during_attach_is_refused_and_detached(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.write_bytes(b"\x7fELF old build")
    sites = tuple(AttachSite("uprobe", f"pr_fn_{i}", "hit", i, _target(app),
                             file_offset=0x100 + i) for i in range(3))

    class Rewrites(FakeBackend):
        def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
            super().attach(site, pid, ref_ctr)
            if site.index == 0 and site.fn_name not in HELPER_FUNCTIONS:
                with open(app, "ab") as fh:  # in place: same inode, another size
                    fh.write(b"more")

    backend = Rewrites(clock=FakeClock())
    with pytest.raises(ResolveError, match=r"rewritten in place: 14 -> 18 bytes"):
        run(backend, RunOptions(), program(sites=sites))
    assert len(backend.attached) == 3 and backend.calls[-2:] == ["detach", "close"]


def test_a_slow_reader_is_not_a_blocked_one(quick_grace: list[bool],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A tail that takes longer than the grace to write, but chunk by chunk, is written
    whole (a terminal over ssh after Ctrl-C)."""
    import time

    monkeypatch.setattr(session_mod, "OUTPUT_CHUNK", 2)

    class SlowView(RecordingView):
        def records(self, batch: Sequence[dict[str, object]]) -> None:
            time.sleep(0.05)  # 2 records per 0.05 s: the tail of 20 takes 0.5 s > 0.3 s
            super().records(batch)

    stop = Turn([rec(0)], then=lambda: os.kill(os.getpid(), signal.SIGINT))
    backend = FakeBackend(turns=[stop], tail=[rec(i) for i in range(1, 21)],
                          clock=FakeClock())
    status, view, err = run(backend, RunOptions(), view=SlowView())
    assert (status, ids(view)) == (0, list(range(21)))
    assert "not written" not in err and quick_grace == []


def test_computing_the_final_snapshots_is_not_writing_them(
        quick_grace: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """Unwinding and symbolizing a run's stacks can take longer than the grace (a
    loaded machine): that time is not the output's, whose write is all it bounds."""
    import time

    from planrunner.runtime.aggregates import AggregateReader

    real = AggregateReader.final

    def slow(self: AggregateReader) -> list:  # type: ignore[type-arg]
        time.sleep(0.5)  # > the grace of 0.3 s
        return real(self)

    monkeypatch.setattr(AggregateReader, "final", slow)
    backend = FakeBackend(turns=[Turn([rec(0)])], clock=FakeClock())
    status, view, err = run(backend, RunOptions(command=["true"]))
    assert status == 0 and ids(view) == [0]
    assert "not written" not in err and quick_grace == []


def test_a_binary_gone_after_attach_proves_nothing(tmp_path: Path) -> None:
    """With --pid the path is /proc/PID/root/...: it goes when the process ends, which
    may be right after the attach; only a different file there is a replacement."""
    app = tmp_path / "app"
    app.write_bytes(b"\x7fELF old build")
    site = AttachSite("uprobe", "pr_fn_0", "hit", 0, _target(app), file_offset=0x100)

    class Ends(FakeBackend):
        def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
            super().attach(site, pid, ref_ctr)
            if site.fn_name not in HELPER_FUNCTIONS:
                app.unlink()

    backend = Ends(clock=FakeClock())
    status, _view, _err = run(backend, RunOptions(duration_s=0.1), program(sites=(site,)))
    assert status == 0 and len(backend.attached) == 1


def test_a_kernel_without_syscall_tracepoints_still_traces_and_says_what_is_missing() -> None:
    """The execve watch is not the plan's: without it a run goes on (planrunner
    processes are then skipped once registered) and says so."""
    from planrunner.errors import BackendError

    backend = FakeBackend(helper_errors={"pr_on_execve": BackendError("no such event")},
                          clock=FakeClock(), btf=False)
    status, _view, err = run(backend, RunOptions(duration_s=0.1))
    assert status == 0
    assert "warning: cannot watch for planrunner processes starting (syscalls:" \
           "sys_enter_execve: " in err and "no such event)" in err
    assert [s.fn_name for s, _pid, _ref in backend.attached] == ["pr_fn_0"]
    # with the kernel's offsets the exec program reads argv: a raw tracepoint refused
    backend = FakeBackend(helper_errors={
        "pr_on_exec_argv_raw": BackendError("no such event")}, clock=FakeClock())
    status, _view, err = run(backend, RunOptions(duration_s=0.1))
    assert status == 0
    assert "warning: cannot watch for planrunner processes starting (sched:" \
           "sched_process_exec: " in err
    # a helper the run cannot do without still ends it
    backend = FakeBackend(helper_errors={"pr_on_exit_raw": BackendError("no such event")},
                          clock=FakeClock())
    with pytest.raises(BackendError, match="no such event"):
        run(backend, RunOptions(duration_s=0.1))


# --- the stop reason, a value of the session --------------------------------------------


def session(backend: FakeBackend, opts: RunOptions, prog: RenderedProgram | None = None,
            view: RecordingView | None = None) -> tuple[Session, int, str]:
    err = io.StringIO()
    clock = backend.clock or FakeClock()
    ses = Session(prog or program(), opts, view or RecordingView(), err, backend,
                  wall=clock.wall, monotonic=clock.monotonic)
    return ses, ses.run(), err.getvalue()


def test_each_end_of_tracing_says_its_reason(tmp_path: Path,
                                             quick_grace: list[bool]) -> None:
    def sigint() -> None:
        os.kill(os.getpid(), signal.SIGINT)

    got = {}
    ses, status, _ = session(FakeBackend(turns=[Turn([rec(0), rec(1)]), Turn([rec(2)])],
                                         clock=FakeClock()), RunOptions(max_events=2))
    got[StopReason.MAX_EVENTS] = (ses.stop_reason, status)
    ses, status, _ = session(FakeBackend(turns=[Turn([rec(0)], then=sigint)],
                                         clock=FakeClock()), RunOptions())
    got[StopReason.SIGNAL] = (ses.stop_reason, status)
    ses, status, _ = session(FakeBackend(turns=[Turn([rec(0)])], clock=FakeClock()),
                             RunOptions(duration_s=1.0))
    got[StopReason.DURATION] = (ses.stop_reason, status)
    ses, status, _ = session(FakeBackend(turns=[Turn([rec(0), rec(1)])]),
                             RunOptions(duration_s=0.5), view=BlockedView())
    got[StopReason.OUTPUT_BLOCKED] = (ses.stop_reason, status)
    ses, status, _ = session(FakeBackend(), RunOptions(command=["sh", "-c", "exit 3"]))
    got[StopReason.COMMAND_ENDED] = (ses.stop_reason, status)
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        ses, status, _ = session(FakeBackend(), RunOptions(pid=target.pid))
    finally:
        target.wait()
    got[StopReason.PIDS_EXITED] = (ses.stop_reason, status)
    ses, status, _ = session(FakeBackend(turns=[Turn([rec(0)]), Turn([rec(1)])],
                                         clock=FakeClock()), RunOptions(),
                             view=RecordingView(broken_after=1))
    got[StopReason.STDOUT_CLOSED] = (ses.stop_reason, status)
    ses, status, _ = session(SignalDuringAttach(signal.SIGINT, at=1, clock=FakeClock()),
                             RunOptions(), program(sites=many_sites(3)))
    got[StopReason.STARTUP_STOPPED] = (ses.stop_reason, status)
    assert got == {
        StopReason.MAX_EVENTS: (StopReason.MAX_EVENTS, 0),
        StopReason.SIGNAL: (StopReason.SIGNAL, 0),
        StopReason.DURATION: (StopReason.DURATION, 0),
        StopReason.OUTPUT_BLOCKED: (StopReason.OUTPUT_BLOCKED, session_mod.EXIT_INCOMPLETE),
        StopReason.COMMAND_ENDED: (StopReason.COMMAND_ENDED, 3),
        StopReason.PIDS_EXITED: (StopReason.PIDS_EXITED, 0),
        StopReason.STDOUT_CLOSED: (StopReason.STDOUT_CLOSED, 0),
        StopReason.STARTUP_STOPPED: (StopReason.STARTUP_STOPPED, 128 + signal.SIGINT),
    }
    assert set(got) == set(StopReason)  # every reason is reached by one end above


def test_a_crash_has_no_stop_reason_and_still_cleans_up_in_order() -> None:
    """The clean-up order of the ExitStacks: the probes, the live views, the backend,
    then the signal handlers (the hermetic fixture checks those)."""
    order: list[str] = []

    class Live:
        def start(self, source: SnapshotSource, sites: int, mode: str) -> None:
            order.append("live start")

        def close(self) -> None:
            order.append(f"live close after {backend.calls[-1]}")

    def crash() -> None:
        raise RuntimeError("simulated crash")

    backend = FakeBackend(turns=[Turn([rec(0)]), Turn(then=crash)], clock=FakeClock())
    ses = Session(program(), RunOptions(), RecordingView(), io.StringIO(), backend,
                  live=[Live()], wall=backend.clock.wall,  # type: ignore[union-attr]
                  monotonic=backend.clock.monotonic)  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="simulated crash"):
        ses.run()
    assert ses.stop_reason is None
    assert order == ["live start", "live close after detach"]
    assert backend.calls[-2:] == ["detach", "close"]
