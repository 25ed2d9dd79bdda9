"""The maps timeline (stacks/timeline.py): which mappings a process had at a given time,
from fork/exec/mmap/exit records; and the kernel's records themselves
(runtime/task_events.py) for a real short-lived process."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from planrunner.runtime.task_events import TaskEvents
from planrunner.stacks.timeline import PROT_EXEC, PROT_READ, MapsTimeline, Mmap

RX = PROT_READ | PROT_EXEC
TRUE = "/usr/bin/true"


def _m(start: int, end: int, path: str, pgoff: int = 0) -> Mmap:
    return Mmap(start, end, pgoff, RX, os.makedev(8, 1), 42, path)


def _paths(tl: MapsTimeline, pid: int, t: int) -> list[tuple[int, int, str]] | None:
    mods = tl.modules(pid, t)
    return None if mods is None else [(m.start, m.end, m.path) for m in mods.mappings]


def test_an_exec_begins_an_image_that_the_exit_does_not_end_for_late_stacks() -> None:
    tl = MapsTimeline()
    tl.exec(10, 100)
    tl.mmap(10, 110, _m(0x1000, 0x2000, "/a"))
    tl.mmap(10, 120, _m(0x5000, 0x6000, "/liba.so"))
    tl.exit(10, 200)
    assert _paths(tl, 10, 115) == [(0x1000, 0x2000, "/a")]  # liba not mapped yet
    assert _paths(tl, 10, 150) == [(0x1000, 0x2000, "/a"), (0x5000, 0x6000, "/liba.so")]
    assert _paths(tl, 10, 90) is None  # before the exec: not known


def test_an_exec_after_the_stack_does_not_change_its_maps() -> None:
    tl = MapsTimeline()
    tl.exec(10, 100)
    tl.mmap(10, 110, _m(0x1000, 0x2000, "/a"))
    tl.exec(10, 300)
    tl.mmap(10, 310, _m(0x7000, 0x8000, "/b"))
    assert _paths(tl, 10, 250) == [(0x1000, 0x2000, "/a")]
    assert _paths(tl, 10, 350) == [(0x7000, 0x8000, "/b")]


def test_a_reused_pid_is_another_process_from_its_fork_on() -> None:
    tl = MapsTimeline()
    tl.exec(7, 100)
    tl.mmap(7, 110, _m(0x1000, 0x2000, "/old"))
    tl.exit(7, 150)
    tl.exec(3, 50)  # the parent of the new pid 7
    tl.mmap(3, 60, _m(0x9000, 0xA000, "/parent"))
    tl.fork(7, 3, 400)  # inherits the parent's maps
    assert _paths(tl, 7, 140) == [(0x1000, 0x2000, "/old")]
    assert _paths(tl, 7, 410) == [(0x9000, 0xA000, "/parent")]


def test_processes_running_before_tracing_and_lost_records_are_not_known() -> None:
    tl = MapsTimeline()
    tl.mmap(5, 100, _m(0x1000, 0x2000, "/dlopened.so"))  # no fork or exec seen
    assert tl.modules(5, 200) is None and not tl.knows(5)
    tl.fork(6, 5, 150)  # a child of an unknown image is unknown too
    assert tl.modules(6, 200) is None
    tl.exec(8, 100)
    tl.unsure(120)  # the kernel dropped records: the image may lack a mapping
    assert tl.modules(8, 200) is None
    tl.exec(8, 300)  # a new image after that is whole again
    assert _paths(tl, 8, 310) == []


def test_a_later_mapping_hides_the_part_of_an_earlier_one_it_covers() -> None:
    tl = MapsTimeline()
    tl.exec(9, 1)
    tl.mmap(9, 2, _m(0x1000, 0x5000, "/a"))
    tl.mmap(9, 3, _m(0x2000, 0x3000, "/b"))
    mods = tl.modules(9, 4)
    assert mods is not None
    got = [(m.start, m.end, m.path, m.file_offset) for m in mods.mappings]
    assert got == [(0x1000, 0x2000, "/a", 0), (0x2000, 0x3000, "/b", 0),
                   (0x3000, 0x5000, "/a", 0x2000)]


def test_images_that_ended_long_before_the_newest_record_are_forgotten() -> None:
    tl = MapsTimeline(keep_ns=1000)
    tl.exec(4, 100)
    tl.mmap(4, 110, _m(0x1000, 0x2000, "/a"))
    tl.exit(4, 120)
    assert tl.modules(4, 115) is not None
    tl.exec(5, 5000)  # much later
    assert tl.modules(4, 115) is None


# -- fork: a child inherits its parent's image as of the fork ----------------------------

def _seeded_parent() -> MapsTimeline:
    """Pid 3 was running when tracing began (seeded from /proc), then dlopen()ed a
    library at 200."""
    tl = MapsTimeline()
    tl.seed(3, [_m(0x1000, 0x2000, "/postgres"), _m(0x7000, 0x8000, "/libc.so.6")])
    tl.mmap(3, 200, _m(0x9000, 0xA000, "/plpgsql.so"))
    return tl


def test_a_child_forked_by_a_seeded_parent_has_its_maps_as_of_the_fork() -> None:
    tl = _seeded_parent()
    tl.fork(20, 3, 100)  # before the dlopen
    tl.fork(21, 3, 300)  # after it
    tl.exit(20, 110)
    tl.exit(21, 310)
    assert tl.knows(3)
    assert _paths(tl, 20, 105) == [(0x1000, 0x2000, "/postgres"),
                                   (0x7000, 0x8000, "/libc.so.6")]
    assert _paths(tl, 21, 305) == [(0x1000, 0x2000, "/postgres"),
                                   (0x7000, 0x8000, "/libc.so.6"),
                                   (0x9000, 0xA000, "/plpgsql.so")]
    assert _paths(tl, 20, 50) is None  # before its fork: no such process
    # a library the parent maps after the fork is not the child's
    tl.mmap(3, 400, _m(0xB000, 0xC000, "/late.so"))
    assert _paths(tl, 21, 500) == _paths(tl, 21, 305)


def test_children_forked_between_the_same_mmaps_share_their_modules() -> None:
    tl = _seeded_parent()
    for pid in (30, 31, 32):
        tl.fork(pid, 3, 250 + pid)
    assert tl.modules(30, 400) is tl.modules(32, 400)
    tl.fork(33, 3, 100)  # before the dlopen: other maps
    assert tl.modules(33, 400) is not tl.modules(30, 400)


def test_a_forked_child_that_execs_has_the_new_program_only() -> None:
    tl = _seeded_parent()
    tl.fork(22, 3, 300)
    tl.exec(22, 320)
    tl.mmap(22, 330, _m(0x40000, 0x41000, "/bin/sh"))
    assert _paths(tl, 22, 310) == [(0x1000, 0x2000, "/postgres"),
                                   (0x7000, 0x8000, "/libc.so.6"),
                                   (0x9000, 0xA000, "/plpgsql.so")]
    assert _paths(tl, 22, 340) == [(0x40000, 0x41000, "/bin/sh")]
    assert tl.knows(22)


def test_a_forked_child_adds_its_own_mappings_on_top_of_the_inherited() -> None:
    tl = _seeded_parent()
    tl.fork(23, 3, 300)
    tl.mmap(23, 350, _m(0x9000, 0x9800, "/over.so"))  # over half of plpgsql.so
    tl.mmap(23, 360, _m(0xD000, 0xE000, "/own.so"))
    assert _paths(tl, 23, 355) == [(0x1000, 0x2000, "/postgres"),
                                   (0x7000, 0x8000, "/libc.so.6"),
                                   (0x9000, 0x9800, "/over.so"),
                                   (0x9800, 0xA000, "/plpgsql.so")]
    assert _paths(tl, 23, 370) == _paths(tl, 23, 355) + [(0xD000, 0xE000, "/own.so")]
    # the child's mappings are not the parent's, nor its siblings'
    tl.fork(24, 3, 380)
    assert _paths(tl, 3, 400) == _paths(tl, 24, 400) == _paths(tl, 23, 310)


def test_a_child_of_an_unknown_parent_is_unknown_and_so_are_its_children() -> None:
    tl = MapsTimeline()
    tl.fork(40, 9, 100)  # pid 9: never seen (not seeded, no record)
    tl.mmap(40, 110, _m(0x1000, 0x2000, "/own.so"))
    tl.fork(41, 40, 120)
    assert tl.modules(40, 200) is None and not tl.knows(40)
    assert tl.modules(41, 200) is None and not tl.knows(41)
    tl.mmap(5, 100, _m(0x1000, 0x2000, "/a"))  # first seen by a bare mmap: unknown
    tl.fork(42, 5, 130)
    assert tl.modules(42, 200) is None
    tl.exec(41, 300)  # an exec makes it whole again
    assert _paths(tl, 41, 310) == []


def test_a_pid_reused_by_another_fork_is_the_new_child() -> None:
    """The seeded parent forks pid 50 twice (the first child exited, the pid came
    round again); an old stack of the first keeps the first child's maps."""
    tl = _seeded_parent()
    tl.fork(50, 3, 100)
    tl.mmap(50, 120, _m(0xD000, 0xE000, "/first.so"))
    tl.exit(50, 150)
    tl.fork(50, 3, 300)
    assert _paths(tl, 50, 130) == [(0x1000, 0x2000, "/postgres"),
                                   (0x7000, 0x8000, "/libc.so.6"),
                                   (0xD000, 0xE000, "/first.so")]
    assert _paths(tl, 50, 310) == [(0x1000, 0x2000, "/postgres"),
                                   (0x7000, 0x8000, "/libc.so.6"),
                                   (0x9000, 0xA000, "/plpgsql.so")]
    # a stack without a time (an aggregation key) goes to the image holding it
    held = tl.modules_holding(50, [0xD010])
    found = held.find(0xD010) if held is not None else None
    assert found is not None and found.path == "/first.so"


def test_after_lost_records_a_reread_makes_a_parent_and_its_later_children_known() -> None:
    tl = _seeded_parent()
    tl.exec(70, 450)
    tl.unsure(500)  # records were lost: no current image is known whole
    tl.fork(60, 3, 600)
    tl.exec(71, 610)  # begun after the loss: known
    assert tl.modules(60, 650) is None and not tl.knows(3)
    tl.reseed(3, [_m(0x1000, 0x2000, "/postgres")], 700)  # /proc, read at 700
    tl.reseed(71, [_m(0x5000, 0x6000, "/wrong")], 700)  # known already: kept
    tl.reseed(70, [_m(0x3000, 0x4000, "/b")], 700)
    tl.fork(61, 3, 800)
    assert _paths(tl, 3, 650) is None  # between the loss and the reread: still unknown
    assert _paths(tl, 3, 750) == [(0x1000, 0x2000, "/postgres")]
    assert _paths(tl, 61, 850) == [(0x1000, 0x2000, "/postgres")]
    assert _paths(tl, 71, 850) == []
    assert _paths(tl, 70, 850) == [(0x3000, 0x4000, "/b")]


def _task_events(tl: MapsTimeline) -> TaskEvents:
    try:
        return TaskEvents(tl)
    except OSError as exc:
        pytest.skip(f"perf_event_open of a dummy event is refused here: {exc}")


def test_the_kernel_reports_the_maps_of_a_process_that_has_exited() -> None:
    """/usr/bin/true runs and exits; its maps, read afterwards from the kernel's
    records, hold the program, libc and the loader, at the load addresses it had."""
    tl = MapsTimeline()
    events = _task_events(tl)
    try:
        proc = subprocess.Popen([TRUE])
        assert proc.wait() == 0
        after = time.monotonic_ns()
        events.drain()
    finally:
        events.close()
    assert tl.knows(proc.pid)
    mods = tl.modules(proc.pid, after)
    assert mods is not None
    names = {os.path.basename(m.path) for m in mods.mappings}
    assert {"true", "libc.so.6", "ld-linux-x86-64.so.2", "[vdso]"} <= names
    main = next(m for m in mods.mappings if m.path == TRUE)
    assert main.executable and main.bias is not None and main.build_id
    assert not os.path.exists(f"/proc/{proc.pid}/maps")  # reaped: nothing left to read


def test_a_seeded_process_is_known_from_the_start_and_gains_later_mappings() -> None:
    tl = MapsTimeline()
    tl.seed(12, [_m(0x1000, 0x2000, "/a")])
    tl.mmap(12, 500, _m(0x5000, 0x6000, "/dlopened.so"))
    assert tl.knows(12)
    assert _paths(tl, 12, 100) == [(0x1000, 0x2000, "/a")]
    assert _paths(tl, 12, 600) == [(0x1000, 0x2000, "/a"), (0x5000, 0x6000, "/dlopened.so")]


def test_processes_running_when_tracing_begins_are_read_from_proc() -> None:
    """A process started before the records were opened, and gone before its stacks
    are read, still has its maps: read from /proc when tracing began (as perf does)."""
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.1)  # exec'd and mapped
        tl = MapsTimeline()
        events = _task_events(tl)
        try:
            events.seed_running()
        finally:
            sleeper.kill()  # our own child, by its pid
            sleeper.wait()
            events.drain()
            events.close()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
    mods = tl.modules(sleeper.pid, time.monotonic_ns())
    assert mods is not None
    assert any(os.path.basename(m.path) == "sleep" and m.bias is not None
               for m in mods.mappings)


def test_a_process_running_through_a_loss_of_records_is_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One page of ring per CPU, overflowed by a few process starts while nothing reads
    it: the kernel reports the loss with the next record it can write, and the drain
    that applies it reads the running processes from /proc again."""
    from planrunner.runtime import task_events

    monkeypatch.setattr(task_events, "PAGES", 1)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.1)  # exec'd and mapped
        tl = MapsTimeline()
        events = _task_events(tl)
        try:
            events.seed_running()
            assert tl.knows(sleeper.pid)
            for _ in range(3):  # a few processes' records at a time, unread: the ring fills
                for proc in [subprocess.Popen([TRUE]) for _ in range(48)]:
                    proc.wait()
                events.drain()
                if events.lost:
                    break
        finally:
            events.close()
    finally:
        sleeper.kill()  # our own child, by its pid
        sleeper.wait()
    assert events.lost > 0
    assert tl.knows(sleeper.pid)  # unsure, then read again
    mods = tl.modules(sleeper.pid, time.monotonic_ns())
    assert mods is not None
    assert any(os.path.basename(m.path) == "sleep" for m in mods.mappings)
