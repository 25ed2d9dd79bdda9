"""Warnings that do not stop a plan: declared types that disagree with the operands in
the notes, and probes that fire only when the runtime is started a certain way
(resolve/preflight.py), checked against the committed fixtures and the real runtimes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from planrunner.plan.model import ProbeSpec
from planrunner.resolve.preflight import JVM_FLAG, Process, warnings_for

ROOT = Path(__file__).resolve().parents[2]
DEMO = "tests/fixtures/elf/bin/demo"
PYTHON = "/usr/bin/python3.11"


def _warnings(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch, **kw: object
              ) -> list[str]:
    monkeypatch.chdir(ROOT)
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    resolved = compile_plan(str(plan), {}, **kw)[1]  # type: ignore[arg-type]
    assert all(w.severity == "warning" for w in resolved.warnings)
    return [f"{w.span.line}:{w.span.column}: {w.message}" if w.span else w.message
            for w in resolved.warnings]


def test_declared_types_that_disagree_with_the_operand(tmp_path, monkeypatch) -> None:
    got = _warnings(tmp_path, f"""planrunner: 1
name: t
targets:
  d: {{binary: {DEMO}}}
probes:
  start:
    usdt: d:demo:request__start
    args: [{{name: id, type: int32}}, {{name: path, type: string}}]
  done:
    usdt: d:demo:request__done
    args: [{{name: id, type: uint64}}, {{name: status, type: string}}]
outputs:
  - print: start
    fields: [id]
""", monkeypatch)
    assert got == [
        "8:29: argument 1 is a 8-byte value in the probe's note, but `int32` is 4 bytes: "
        "its upper bytes are dropped",
        "11:59: argument 2 is a 4-byte value in the probe's note, but `string` needs an "
        "8-byte pointer",
    ]


@pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"{PYTHON} is not installed")
def test_cpython_function_entry_needs_a_hook(tmp_path, monkeypatch) -> None:
    got = _warnings(tmp_path, f"""planrunner: 1
name: t
targets:
  py: {{binary: {PYTHON}}}
probes:
  entry: {{usdt: py:python:function__entry}}
  ret: {{usdt: py:python:function__return}}
outputs:
  - count: entry
  - count: ret
""", monkeypatch)
    assert got == ["6:17: CPython fires python:function__entry only while a profile or "
                   "trace hook is set"]


def _spec() -> ProbeSpec:
    from planrunner.diagnostics import Span

    at = Span("p.yaml", 1, 1)
    return ProbeSpec("m", "usdt", at, at)


def test_jvm_extended_probes_follow_the_command_line() -> None:
    spec = _spec()
    bare = Process(["java", "-cp", ".", "Main"], {})
    flagged = Process(["java", JVM_FLAG, "Main"], {})
    in_env = Process(["java", "Main"], {"JAVA_TOOL_OPTIONS": f"-Xmx1g {JVM_FLAG}"})
    assert "started without it" in warnings_for(spec, "hotspot", "method__entry",
                                                bare)[0].message
    assert warnings_for(spec, "hotspot", "method__entry", flagged) == []
    assert warnings_for(spec, "hotspot", "object__alloc", in_env) == []
    assert "must be started with it" in warnings_for(spec, "hotspot", "monitor__wait",
                                                     None)[0].message
    assert warnings_for(spec, "hotspot", "gc__begin", bare) == []  # fires without it


def test_php_needs_use_zend_dtrace() -> None:
    spec = _spec()
    assert warnings_for(spec, "php", "function__entry",
                        Process(["php"], {"USE_ZEND_DTRACE": "1"})) == []
    assert "this process lacks it" in warnings_for(
        spec, "php", "request__startup", Process(["php"], {}))[0].message


def test_ruby_method_probes_need_a_tracepoint_c_methods_do_not() -> None:
    """Checked on Debian's Ruby 3.1.2 (tests/e2e/test_plans_ruby_php.py enables a
    TracePoint): cmethod__entry fires without one."""
    spec = _spec()
    for name in ("method__entry", "method__return"):
        assert "only while a TracePoint is active" in warnings_for(
            spec, "ruby", name, None)[0].message
    for name in ("cmethod__return", "object__create", "gc__mark__begin"):
        assert warnings_for(spec, "ruby", name, None) == []
    assert not any("TracePoint" in w.message  # (its crash warning is the next test's)
                   for w in warnings_for(spec, "ruby", "cmethod__entry", None))


def test_a_live_process_is_read_from_proc() -> None:
    """--pid: the command line and environment of the real process decide."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                              JVM_FLAG], env={**os.environ, "USE_ZEND_DTRACE": "1"})
    try:
        time.sleep(0.2)
        proc = Process.of_pid(child.pid)
        assert proc.argv is not None and JVM_FLAG in proc.argv
        assert proc.environ is not None and proc.environ.get("USE_ZEND_DTRACE") == "1"
        assert warnings_for(_spec(), "hotspot", "method__entry", proc) == []
        assert warnings_for(_spec(), "php", "function__entry", proc) == []
    finally:
        child.kill()
        child.wait()


def test_ruby_cmethod_entry_is_risky_while_ruby_starts() -> None:
    """Debian's Ruby 3.1.2 crashed in its own dtrace hook when cmethod__entry was
    enabled during start-up (-c, or a system-wide run catching new processes); a
    running process (--pid) did not."""
    spec = _spec()
    assert "crashed" in warnings_for(spec, "ruby", "cmethod__entry", None)[0].message
    assert warnings_for(spec, "ruby", "cmethod__entry", Process(["ruby", "x.rb"], {}))
    assert warnings_for(spec, "ruby", "cmethod__entry",
                        Process(["ruby", "x.rb"], {}, from_pid=True)) == []
