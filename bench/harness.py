"""Process control and timing for bench/run.py: every process it starts is tracked by
PID, bounded by `timeout --foreground -s INT -k 5 BOUND`, and killed (by PID or by the
process group created for it) if still alive at the end. Nothing is killed by name.

Child keeps the wait4 rusage, so a tracer's CPU time and peak RSS (ru_maxrss covers the
`timeout` wrapper's waited-for descendants, i.e. the tracer) come with its exit status.
`Lines` timestamps the lines of a pipe or pty as they arrive (startup and stop phases).
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

LIVE: dict[int, bool] = {}  # pid -> leads its own process group (created here)
EVENT_RE = re.compile(rb"ev-(?:alpha|beta|gamma|delta)")


def compile_bytecode(tree: str, python: str, plan: str | None = None) -> None:
    """What an installed planrunner has before its first timed run: its .pyc files (as
    `pip install` writes them) and, by one `render` of `plan`, the code of its dataclass
    methods (planrunner/dataclass_cache.py). Without them (PYTHONDONTWRITEBYTECODE=1 in a
    checkout) every run compiles again, which measures the compiler, not planrunner."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([python, "-m", "compileall", "-q", os.path.join(tree, "planrunner")],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    # every module imported once makes every class of the package (a `run` would
    # write those of the modules it imports, a `render` fewer); from /: `-m` and `-c`
    # put the working directory first on sys.path
    subprocess.run([python, "-c", _IMPORT_ALL], check=True, cwd="/",
                   env={**env, "PYTHONPATH": tree}, stdout=subprocess.DEVNULL)
    if plan is not None:  # and the classes a compile makes inside functions
        subprocess.run([python, "-m", "planrunner", "render", plan], check=True, cwd="/",
                       env={**env, "PYTHONPATH": tree}, stdout=subprocess.DEVNULL)


_IMPORT_ALL = """
import importlib, pkgutil, planrunner
from planrunner import dataclass_cache
dataclass_cache.install()  # as the CLI's entry does
for m in pkgutil.walk_packages(planrunner.__path__, "planrunner."):
    if m.name.endswith("__main__"):  # the command line itself
        continue
    try:
        importlib.import_module(m.name)
    except ImportError:  # an optional dependency (rich) that is not installed
        pass
"""


def cpu_model() -> str:
    """/proc/cpuinfo's model name, printed beside every figure (Intel and AMD differ)."""
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        return next((line.split(":", 1)[1].strip() for line in fh
                     if line.startswith("model name")), "unknown CPU")


def mono() -> float:
    return time.monotonic()


def bounded(argv: Sequence[str], bound: float) -> list[str]:
    return ["timeout", "--foreground", "-s", "INT", "-k", "5", str(int(bound)), *argv]


class Child:
    """A started process, reaped with wait4 (rusage kept)."""

    def __init__(self, argv: Sequence[str], group: bool = False, **kw: object) -> None:
        self.p = subprocess.Popen(list(argv), start_new_session=group, **kw)  # type: ignore[call-overload]
        self.pid, self.group = self.p.pid, group
        self.rc: int | None = None
        self.ru: os.struct_rusage | None = None
        self.ended_at: float | None = None
        LIVE[self.pid] = group

    def alive(self) -> bool:
        if self.rc is not None:
            return False
        try:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (Popen.communicate): take its status
            self.rc, self.ended_at = self.p.returncode, mono()
            LIVE.pop(self.pid, None)
            return False
        if pid != self.pid:
            return True
        self.rc, self.ru, self.ended_at = os.waitstatus_to_exitcode(status), ru, mono()
        self.p.returncode = self.rc
        LIVE.pop(self.pid, None)
        return False

    def wait(self, timeout: float, tick: float = 0.005) -> bool:
        end = mono() + timeout
        while self.alive():
            if mono() > end:
                return False
            time.sleep(tick)
        return True

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        try:
            if self.group:
                os.killpg(self.pid, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.wait(10)

    def stop(self, grace: float = 8.0) -> tuple[float, bool]:
        """SIGINT (the `timeout` wrapper forwards it once), SIGKILL to the group after
        `grace`. Returns (seconds to exit, killed)."""
        t = mono()
        if not self.alive():
            return 0.0, False
        self.signal(signal.SIGINT)
        if self.wait(grace):
            return mono() - t, False
        self.kill()
        return mono() - t, True

    def cpu_s(self) -> float | None:
        return self.ru.ru_utime + self.ru.ru_stime if self.ru else None

    def maxrss_mib(self) -> float | None:
        return self.ru.ru_maxrss / 1024 if self.ru else None


def serve_until_stopped() -> None:
    """For the floor scripts (what the driver runs as a tracer): say READY once attached,
    then sleep until SIGINT or SIGTERM; the handlers only set a flag."""
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    print("READY", flush=True)
    while not stop:
        signal.pause()


def cleanup() -> None:
    for pid, group in list(LIVE.items()):
        try:
            if group:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        LIVE.pop(pid, None)


class Lines:
    """Collects (time, line) from fds (a pipe or pty master) with select, no threads."""

    def __init__(self, fds: dict[str, int]) -> None:
        self.fds = dict(fds)
        self.bufs = {name: b"" for name in fds}
        self.seen: list[tuple[float, str, bytes]] = []

    def pump(self, timeout: float) -> None:
        live = [fd for fd in self.fds.values() if fd >= 0]
        if not live:
            time.sleep(timeout)
            return
        ready, _, _ = select.select(live, [], [], timeout)
        now = mono()
        for name, fd in self.fds.items():
            if fd not in ready:
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.fds[name] = -1
                continue
            buf = self.bufs[name] + chunk
            *lines, self.bufs[name] = buf.split(b"\n")
            self.seen.extend((now, name, line) for line in lines)

    def first(self, pattern: re.Pattern[bytes], stream: str | None = None) -> float | None:
        for t, name, line in self.seen:
            if (stream is None or name == stream) and pattern.search(line):
                return t
        return None

    def text(self, stream: str) -> bytes:
        return b"\n".join(line for _t, name, line in self.seen if name == stream)

    def wait_for(self, pattern: re.Pattern[bytes], bound: float, proc: Child | None = None,
                 stream: str | None = None) -> float | None:
        end = mono() + bound
        while mono() < end:
            hit = self.first(pattern, stream)
            if hit is not None:
                return hit
            if proc is not None and not proc.alive() and all(fd < 0 for fd in self.fds.values()):
                return None
            self.pump(0.01)
        return None

    def drain(self, seconds: float) -> None:
        end = mono() + seconds
        while mono() < end and any(fd >= 0 for fd in self.fds.values()):
            self.pump(0.02)


def time_cmd(argv: Sequence[str], bound: float = 60) -> tuple[float, int | None]:
    """Wall time of one command run to the end with output to /dev/null."""
    t0 = mono()
    c = Child(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    guard = threading.Timer(bound, c.kill)
    guard.start()
    _, status, ru = os.wait4(c.pid, 0)
    wall = mono() - t0
    guard.cancel()
    c.rc, c.ru = os.waitstatus_to_exitcode(status), ru
    LIVE.pop(c.pid, None)
    return wall, c.rc


def parse_kv(text: bytes) -> dict[str, object]:
    out: dict[str, object] = {}
    for line in text.decode(errors="replace").splitlines():
        if not line.startswith("mode="):
            continue
        for kv in line.split():
            k, _, v = kv.partition("=")
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def count_events(path: str) -> int:
    """Events printed in `path`, read in chunks cut at line ends (a word split across two
    chunks would not match, and a 10 s run prints tens of MiB)."""
    n, carry = 0, b""
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            chunk = carry + chunk
            cut = chunk.rfind(b"\n") + 1
            n += len(EVENT_RE.findall(chunk, 0, cut))
            carry = chunk[cut:]
    return n + len(EVENT_RE.findall(carry))


def wait_stable(path: str, quiet: float = 0.6, bound: float = 20.0) -> float:
    """Wait until a file stops growing (the tracer drained its backlog)."""
    t0, last, since = mono(), -1, mono()
    while mono() - t0 < bound:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        if size != last:
            last, since = size, mono()
        elif mono() - since >= quiet:
            break
        time.sleep(0.1)
    return mono() - t0
