"""runtime/perf_events.py without a kernel: the perf_event_attr of a tracepoint is
libbcc's (type, size, config = the tracefs id, sample_period 1, PERF_SAMPLE_RAW,
wakeup_events 1, the rest zero), and a missing event is an errno, never an exception.
The attach itself is exercised by every e2e run (the exit program is a tracepoint)."""

from __future__ import annotations

import errno
import struct

import pytest

from planrunner.runtime import perf_events


def test_the_attr_of_a_tracepoint_is_libbccs() -> None:
    attr = perf_events.tracepoint_attr(1234).raw
    assert len(attr) == 128
    assert struct.unpack_from("<IIQQQQQI", attr, 0) == (2, 128, 1234, 1, 1 << 10, 0, 0, 1)
    assert attr[52:] == bytes(128 - 52)


def test_a_missing_event_is_an_errno(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(perf_events, "DEFAULT_TRACEFS", str(tmp_path / "none"))
    monkeypatch.setattr(perf_events, "_tracefs", lambda: str(tmp_path))
    assert perf_events.attach_tracepoint(3, "nosuch", "event") == (-1, errno.ENOENT)
    monkeypatch.setattr(perf_events, "_tracefs", lambda: None)
    assert perf_events.attach_tracepoint(3, "sched", "sched_process_exit") == \
        (-1, errno.ENOENT)

