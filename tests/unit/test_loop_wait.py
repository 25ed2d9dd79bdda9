"""runtime/loop_wait.py: which programs' loops may sleep until something is due, how
long, and that the sleep ends at once on a stop signal or a readable fd."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from planrunner.render.model import UCOPY_ENTRIES
from planrunner.runtime.loop_wait import QUIET_POLL_S, TurnWaiter, copy_rate, quiet_turn_s

ROOT = Path(__file__).resolve().parents[2]


def program_of(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    plan = tmp_path / "p.yaml"
    plan.write_text(text)
    return compile_plan(str(plan), {})[2]


PROFILE = (ROOT / "plans" / "cpu-profile.yaml").read_text()


def test_a_profile_sleeps_until_a_quarter_of_the_copies_map_could_fill(
        tmp_path: Path) -> None:
    program = program_of(tmp_path, PROFILE)
    assert program.stack_maps.copies and not program.prints
    assert copy_rate(program, 2) == 198
    assert quiet_turn_s(program, 2) == QUIET_POLL_S  # 512 copies take 2.6 s at 198/s
    # 64 CPUs at 99 Hz: 6336 copies a second, a quarter of the map in 81 ms
    assert quiet_turn_s(program, 64) == pytest.approx(UCOPY_ENTRIES / 4 / (99 * 64))


def test_printing_and_uprobe_programs_turn_every_poll(tmp_path: Path) -> None:
    printing = program_of(tmp_path, PROFILE.replace(
        "outputs:\n  - count: sample\n    by: [comm, kstack, ustack]",
        "outputs:\n  - print: sample\n    fields: [comm]"))
    assert printing.prints and quiet_turn_s(printing, 2) is None
    uprobe = program_of(tmp_path, """planrunner: 1
name: t
targets:
  c: {binary: c}
probes:
  m:
    uprobe: "c:malloc"
outputs:
  - count: m
    by: [comm, ustack]
stack: {unwind: auto}
""")
    assert copy_rate(uprobe, 2) is None and quiet_turn_s(uprobe, 2) is None


@pytest.fixture
def usr1() -> Iterator[None]:
    old = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_a_signal_ends_the_sleep_at_once(usr1: None) -> None:
    waiter = TurnWaiter([])
    try:
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        t0 = time.monotonic()
        waiter.wait(5.0)
        assert 0.05 < time.monotonic() - t0 < 1.0
        # the byte is read: the next sleep is a whole one
        t0 = time.monotonic()
        waiter.wait(0.2)
        assert time.monotonic() - t0 >= 0.15
    finally:
        waiter.close()
    assert signal.set_wakeup_fd(-1) == -1  # the previous wakeup fd (none) is back


def test_a_readable_fd_ends_the_sleep_and_the_timeout_bounds_it() -> None:
    r, w = os.pipe()
    waiter = TurnWaiter([r])
    try:
        t0 = time.monotonic()
        waiter.wait(0.1)
        assert 0.08 < time.monotonic() - t0 < 1.0
        os.write(w, b"x")
        t0 = time.monotonic()
        waiter.wait(5.0)
        assert time.monotonic() - t0 < 1.0
        r2, w2 = os.pipe()
        os.write(w2, b"x")
        t0 = time.monotonic()
        os.read(r, 1)
        waiter.wait(5.0, also=[r2])  # a pidfd's place: asked each time
        assert time.monotonic() - t0 < 1.0
        for fd in (r2, w2):
            os.close(fd)
    finally:
        waiter.close()
        os.close(r)
        os.close(w)
