"""runtime/compile_worker.py without the kernel: a worker that cannot start, or that
dies before answering, gives nothing back and says why (the run then compiles
in-process, as it did before the worker)."""

from __future__ import annotations

import sys

import pytest

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
