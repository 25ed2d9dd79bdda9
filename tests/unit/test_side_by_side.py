"""runtime/side_by_side.py: calls run side by side, all waited for, the first failure
in the calls' order raised."""

from __future__ import annotations

import threading
import time

import pytest

from planrunner.runtime.side_by_side import side_by_side


def test_two_threads_run_two_calls_at_once() -> None:
    both = threading.Barrier(2, timeout=5)  # broken unless two calls wait at once
    ran: list[int] = []

    def call(i: int) -> None:
        both.wait()
        ran.append(i)

    side_by_side([lambda i=i: call(i) for i in range(4)], threads=2)
    assert sorted(ran) == [0, 1, 2, 3]


def test_one_thread_runs_every_call_in_the_callers_thread_in_order() -> None:
    seen: list[tuple[int, int]] = []
    side_by_side([lambda i=i: seen.append((i, threading.get_ident())) for i in range(3)],
                 threads=1)
    assert seen == [(i, threading.get_ident()) for i in range(3)]


def test_the_first_failure_in_order_is_raised_once_every_call_has_ended() -> None:
    ended: list[int] = []

    def slow_failure() -> None:
        time.sleep(0.2)
        ended.append(0)
        raise ValueError("first")

    def quick_failure() -> None:
        ended.append(1)
        raise KeyError("second")

    def slow_success() -> None:
        time.sleep(0.3)
        ended.append(2)

    with pytest.raises(ValueError, match="first"):
        side_by_side([slow_failure, quick_failure, slow_success], threads=3)
    assert sorted(ended) == [0, 1, 2]  # nothing left running after the raise


def test_no_calls_and_more_threads_than_calls() -> None:
    side_by_side([])
    out: list[int] = []
    side_by_side([lambda: out.append(1)], threads=8)
    assert out == [1]
