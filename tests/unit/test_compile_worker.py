"""runtime/compile_worker.py without the kernel: a worker that cannot start, or that
dies before answering, gives nothing back and says why (the run then compiles
in-process, as it did before the worker)."""

from __future__ import annotations

import io
import signal
import sys
import threading
import time

import pytest

from planrunner.runtime import compile_worker
from planrunner.runtime.compile_worker import CompileWorker


def test_a_worker_that_cannot_start_gives_nothing_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    worker = CompileWorker()
    worker.start()
    assert worker.pid is None
    assert worker.compile("int f(void *ctx) { return 0; }", [], {}) is None
    assert "did not start" in worker.why


def test_a_worker_that_dies_gives_nothing_and_says_why(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexit 3\n")  # exits at once, answering nothing
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    worker = CompileWorker()
    assert worker.compile("int f(void *ctx) { return 0; }", [], {}) is None
    assert worker.why.startswith("the compile worker")
    assert worker.pid is None  # closed and reaped


def _fake_worker(monkeypatch: pytest.MonkeyPatch, tmp_path, body: str) -> None:
    fake = tmp_path / "python3"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))


def test_close_does_not_wait_for_a_compile_in_another_thread(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A stop closes the worker while the load thread waits for its answer: before, the
    close waited for the pipe's lock, held by the blocked read, until the compile ended
    (15-87 s for a large plan)."""
    _fake_worker(monkeypatch, tmp_path, "cat >/dev/null; sleep 30")  # reads, never answers
    worker = CompileWorker()
    worker.start()
    proc = worker._proc
    assert proc is not None
    got: list[object] = []
    load = threading.Thread(target=lambda: got.append(worker.compile("x", [], {})),
                            daemon=True)
    load.start()
    time.sleep(0.3)  # the load thread is blocked on the worker's pipe
    start = time.monotonic()
    closer = threading.Thread(target=worker.close, daemon=True)
    closer.start()
    closer.join(10)
    took = time.monotonic() - start
    assert not closer.is_alive(), "close waited for the worker"
    assert took < 5, took  # the worker sleeps 30 s
    load.join(5)
    assert got == [None]
    assert proc.returncode == -signal.SIGKILL


def test_a_worker_that_uses_no_cpu_is_killed_and_says_why(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A stopped (or stuck) worker held the run for ever: now it is killed once it has
    used no CPU for STALL_S, and one line says so (the run compiles in-process)."""
    monkeypatch.setattr(compile_worker, "STALL_S", 0.5)
    _fake_worker(monkeypatch, tmp_path, "exec sleep 30")  # never reads, never answers
    err = io.StringIO()
    worker = CompileWorker(err)
    start = time.monotonic()
    # a request larger than a pipe holds: the write blocks too, as on a stopped worker
    assert worker.compile("x" * (1 << 20), [], {}) is None
    assert time.monotonic() - start < 10
    assert worker.pid is None
    assert "used no CPU for 0.5 s (stopped?): killed it" in worker.why
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().endswith(": compiling in this process instead\n")


def test_a_worker_killed_by_someone_else_says_so_in_one_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    _fake_worker(monkeypatch, tmp_path, "kill -9 $$")
    err = io.StringIO()
    worker = CompileWorker(err)
    assert worker.compile("int f(void *ctx) { return 0; }", [], {}) is None
    line = err.getvalue()
    assert line.startswith("the compile worker (pid ")
    assert line.endswith(") was killed by SIGKILL: compiling in this process instead\n")


def test_a_worker_this_run_kills_to_stop_says_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    _fake_worker(monkeypatch, tmp_path, "cat >/dev/null; sleep 30")
    err = io.StringIO()
    worker = CompileWorker(err)
    load = threading.Thread(target=worker.compile, args=("x", [], {}), daemon=True)
    load.start()
    time.sleep(0.3)
    worker.close()
    load.join(5)
    assert not load.is_alive()
    assert err.getvalue() == ""
