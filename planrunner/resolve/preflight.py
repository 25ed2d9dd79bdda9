"""Preflight: USDT probes that exist but will not fire unless the traced runtime is
started a certain way, said as warnings located at the probe (never errors: the plan is
right, the process may not be).

- CPython 3.11 fires `function__entry` and `line` only while a profile or trace hook is
  set (sys.setprofile/settrace: profilers, coverage, debuggers); `function__return` fires
  always.
- HotSpot fires method, allocation and monitor probes only with
  `-XX:+ExtendedDTraceProbes` (on the command line, JAVA_TOOL_OPTIONS or
  JDK_JAVA_OPTIONS).
- PHP fires its probes only with USE_ZEND_DTRACE=1 in the environment.
- Ruby fires method__entry/return only while a TracePoint is active (cmethod__* fire
  without one).

With --pid the process is read (/proc/PID/cmdline and environ) and the warning is given
only when the condition is really missing; with -c, the command and planrunner's own
environment (which the command inherits) are checked; otherwise it is a reminder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planrunner import inputs
from planrunner.diagnostics import Diagnostic
from planrunner.plan.model import ProbeSpec

JVM_FLAG = "-XX:+ExtendedDTraceProbes"
JVM_OPTION_VARS = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")
PHP_VAR = "USE_ZEND_DTRACE"


@dataclass(frozen=True, slots=True)
class Process:
    """What preflight may know of the traced process: its arguments and environment
    (None: unknown, e.g. a system-wide run)."""

    argv: Sequence[str] | None
    environ: Mapping[str, str] | None
    from_pid: bool = False  # read from a running process (--pid), not a -c command

    @classmethod
    def of_pid(cls, pid: int) -> Process:
        return cls(_read_nul(f"/proc/{pid}/cmdline"), _environ(pid), from_pid=True)

    @classmethod
    def of_command(cls, command: Sequence[str]) -> Process:
        return cls(list(command), dict(os.environ))


def _read_nul(path: str) -> list[str] | None:
    try:
        data = inputs.read_bytes(path)
    except OSError:
        return None
    return [p.decode(errors="replace") for p in data.split(b"\0") if p]


def _environ(pid: int) -> dict[str, str] | None:
    items = _read_nul(f"/proc/{pid}/environ")
    if items is None:
        return None
    return dict(item.split("=", 1) for item in items if "=" in item)


_JVM_EXTENDED = ("method__entry", "method__return", "object__alloc")


def _jvm_missing(proc: Process | None) -> bool | None:
    """True: the JVM lacks the flag; False: it has it; None: unknown."""
    if proc is None or proc.argv is None:
        return None
    words = list(proc.argv)
    for var in JVM_OPTION_VARS:
        words += (proc.environ or {}).get(var, "").split()
    return JVM_FLAG not in words


def warnings_for(spec: ProbeSpec, provider: str, name: str,
                 proc: Process | None) -> list[Diagnostic]:
    """The preflight warnings for USDT probe provider:name, located at `spec`."""
    at = spec.spec_span
    if provider == "python" and name in ("function__entry", "line"):
        return [Diagnostic(
            f"CPython fires python:{name} only while a profile or trace hook is set",
            at, ("run the code under a profiler, coverage or sys.setprofile(); "
                 "python:function__return fires without one",), severity="warning")]
    if provider == "hotspot" and (name in _JVM_EXTENDED or name.startswith("monitor__")):
        missing = _jvm_missing(proc)
        if missing is False:
            return []
        who = "this JVM was" if missing else "a JVM must be"
        return [Diagnostic(
            f"hotspot:{name} fires only in a JVM started with {JVM_FLAG}: {who} "
            f"{'started without it' if missing else 'started with it'}",
            at, (f"start java with {JVM_FLAG} (or put it in JAVA_TOOL_OPTIONS)",),
            severity="warning")]
    if provider == "php":
        env = proc.environ if proc is not None else None
        if env is not None and env.get(PHP_VAR) == "1":
            return []
        state = ("this process lacks it" if env is not None
                 else "the PHP process must have it")
        return [Diagnostic(
            f"PHP fires php:{name} only with {PHP_VAR}=1 in its environment: {state}",
            at, (f"start php with {PHP_VAR}=1 (e.g. `{PHP_VAR}=1 php script.php`, or "
                 "env in the php-fpm pool)",), severity="warning")]
    # cmethod__entry/return fire without one (checked on Debian's Ruby 3.1.2), except
    # for the calls the VM runs as specialized instructions (Integer#+, #<...)
    if provider == "ruby" and name in ("method__entry", "method__return"):
        return [Diagnostic(
            f"Ruby fires ruby:{name} only while a TracePoint is active",
            at, ("enable a TracePoint in the program (e.g. TracePoint.new(:call) {}.enable "
                 "or a profiler); ruby:cmethod__*, object__create and the gc probes fire "
                 "without one",),
            severity="warning")]
    if provider == "ruby" and name == "cmethod__entry" and (proc is None or not proc.from_pid):
        # Seen on Debian's Ruby 3.1.2: a semaphore raised while the interpreter loads
        # rubygems crashed it in about a third of runs (NULL dereference in its
        # rb_dtrace_setup); raised in a process that is already running, it did not.
        return [Diagnostic(
            "enabling ruby:cmethod__entry while Ruby starts crashed Debian's Ruby 3.1.2 "
            "in about a third of runs (inside the interpreter's own dtrace hook)",
            at, ("attach to a running process with --pid, or count Ruby-defined methods "
                 "with ruby:method__entry",), severity="warning")]
    return []

