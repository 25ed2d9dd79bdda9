"""runtime/perf_events.py without a kernel: the perf_event_attr of a tracepoint is
libbcc's (type, size, config = the tracefs id, sample_period 1, PERF_SAMPLE_RAW,
wakeup_events 1, the rest zero), and a missing event is an errno, never an exception.
The attach itself is exercised by every e2e run (the exit program is a tracepoint)."""

from __future__ import annotations

import errno
import os
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


def test_close_after_exit_leaves_the_last_reference_to_a_child_until_this_process_ends(
) -> None:
    """The run's own tracepoints at a stop (issue 28 item 4): this process closes its
    copies at once; the child holds them until this process's end (its pipe end here,
    closed by hand) and then exits, and only then is the file really released: a pipe's
    reader sees EOF only once no writer is left."""
    import select

    r, w = os.pipe()
    try:
        assert perf_events.close_after_exit([w])
        with pytest.raises(OSError):
            os.fstat(w)  # closed here
        assert select.select([r], [], [], 0.2)[0] == []  # still open in the child
        child, end = perf_events._CLOSERS.pop()
        os.close(end)  # as this process's exit would
        assert child.wait(10) == 0  # type: ignore[attr-defined]
        assert select.select([r], [], [], 5)[0] == [r] and os.read(r, 1) == b""  # EOF
    finally:
        os.close(r)
