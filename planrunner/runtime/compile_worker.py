"""A first run's compile, in a process of its own (issue 17: first runs <= 0.3x bcc trace).

Two things make bcc's compile slow before clang does any of the plan's work, and a
separate process removes both:

- bcc reads all of /proc/kallsyms (~120k lines, 80-100 ms here) on every compile, only
  to learn whether the kernel has bpf_probe_read_kernel (Linux >= 5.5; DoMiscWorkAround
  in bcc's b_frontend_action.cc). Every kernel this path runs on has it (it loads only
  where the ring buffer can be mmapped, 5.8 and later), so the worker, in a mount
  namespace of its own, sees a /proc/kallsyms of that one line. Nothing else in a
  compile reads the file. Without the right to make a namespace (a container without
  CAP_SYS_ADMIN) the worker compiles against the real file, as bcc always does.
- starting Python and importing bcc (with LLVM) takes ~0.1 s, which the worker spends
  while `run` loads, resolves and renders the plan on the other CPU.

The worker compiles with bcc (through runtime/bcc_backend.py, the one module that
imports it), takes the instructions and map definitions as the compiled-program cache
does (runtime/compile_cache.py), and sends them back in the cache's own file format; the
parent loads them with its own bpf() calls, as a cached program. Its maps are made
again by the parent: the worker's die with it. clang's diagnostics go to the worker's
stderr, which is the parent's.

Protocol (one request, one reply, over pipes): the parent writes a line with a length,
then the C source, the cflags, the pinned maps, the BTF constants, optional and
needed (macros the worker defines from the kernel's BTF, which it parses while the
parent renders), and the maps to store as task storage (bcc_backend._capture) as
JSON of that length (not up to an end of file: a `-c` command forked but not yet exec'd
holds a copy of the pipe); the
worker answers one line: `ok N` followed by N bytes of compile_cache.encode();
`error "JSON TEXT"` when bcc could not compile the C (the run fails with bcc's words);
`uncacheable TEXT` or `fail TEXT` when the worker cannot give the program back (the run
compiles in-process, as it did before the worker, and the cache log says why).
"""

from __future__ import annotations

import ctypes as ct
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import IO, TYPE_CHECKING, TextIO

from planrunner.runtime import compile_cache as cc
from planrunner.timing import mark

if TYPE_CHECKING:
    from planrunner.render.model import RuntimeConstant

WIRE_KEY = "compile-worker"  # the key compile_cache.encode() needs; the pipe has one entry
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG = 1
# what bcc looks for; the address is never used, only that the name is there (bcc skips
# addresses of 0 and below the kernel's half of the address space)
KALLSYMS_LINE = b"ffffffff81000000 T bpf_probe_read_kernel\n"
# A worker that uses no CPU for this long while it should compile is stopped or stuck
# (a compile uses CPU all along, even a starved one gets some in far less): it is
# killed and the run compiles in-process. Checked every WATCH_S.
STALL_S = 5.0
WATCH_S = 0.1
# Ctrl-C reaches the worker too (the terminal's process group): it is ignored from the
# first line on (no KeyboardInterrupt traceback on the user's terminal); `run` decides
# and kills the worker when it stops. The dataclass cache, as `run`'s entry installs it:
# the worker's imports (bcc_backend, render/model.py) are on a first run's path.
_BOOT = ("import signal, sys\n"
         "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
         "from planrunner import dataclass_cache\n"
         "dataclass_cache.install()\n"
         "from planrunner.runtime.compile_worker import serve\n"
         "sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))\n")


class CompileWorker:
    """One worker process, started early (`start`) so that its start-up overlaps the
    parent's; `compile` starts it if that was not done. Closed (and killed, if still
    running) by `close`, from any thread: the worker is killed before its pipes are
    closed, so a close never waits for a compile (a thread blocked on a pipe holds the
    pipe's lock until the worker's end of it is gone). A worker that uses no CPU for
    STALL_S while it should be compiling (stopped, or stuck) is killed too, and
    `compile` gives nothing back: the run compiles in-process. When the worker ended
    without answering (killed, stuck, crashed), one line on `stderr` says so."""

    def __init__(self, stderr: TextIO | None = None) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()  # `close` may come from two threads at once
        self._stderr = stderr
        self._closing = False  # we killed it: its silence is ours, not its fault
        self.why = ""  # why the last compile gave nothing back (for the cache log)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    def start(self) -> None:
        if self._proc is None:
            # this process's planrunner, whatever the working directory holds (-P)
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
                __file__))))
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
            try:
                # -Xplanrunner: what tells a run already attached that this Python is
                # planrunner from its first instruction (runtime_helpers.h pr_on_exec)
                self._proc = subprocess.Popen(
                    [sys.executable, "-Xplanrunner", "-P", "-c", _BOOT], env=env,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
            except OSError as exc:  # then the run compiles in-process, as before
                self.why = f"the compile worker did not start: {exc.strerror}"

    def compile(self, c_source: str, cflags: list[str], pins: dict[str, str],
                btf: Sequence[tuple[str, tuple[str, str]]] = (),
                needed: Sequence[tuple[str, tuple[str, str]]] = (),
                task_storage: Sequence[str] = (),
                meanwhile: Callable[[], None] | None = None) -> cc.CompiledProgram | None:
        """The program bcc compiles from `c_source`, or None when the worker could not
        give it in the cache's form (the caller compiles in-process instead). Raises
        BackendError when bcc could not compile it (clang has said why on stderr).
        `btf`: the optional BTF constants (macro, kernel member), which the worker
        defines where the kernel's BTF has them (elf/btf.py optional_cflags); `needed`:
        those the C cannot do without (a kernel's BTF without one: the worker fails, and
        the compile in-process says which). `task_storage`: bcc_backend._capture's.
        `meanwhile` is called once the C is sent, while the worker compiles it."""
        self.start()
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            return None
        mark("compile-request")
        status, text = "", ""
        watchdog = _Watchdog(proc)
        watchdog.start()
        try:
            request = json.dumps({"c": c_source, "cflags": cflags, "pins": pins,
                                  "btf": list(btf), "needed": list(needed),
                                  "task_storage": list(task_storage)}).encode()
            proc.stdin.write(f"{len(request)}\n".encode() + request)
            proc.stdin.flush()
            if meanwhile is not None:
                meanwhile()
            status, _, text = proc.stdout.readline().decode().rstrip("\n").partition(" ")
            if status == "ok":
                blob = proc.stdout.read(int(text))
                mark("compile-reply")
                return cc.decode(WIRE_KEY, blob)
            if not status:
                # it ended without answering: why is asked before close(), since a dying
                # worker's pipe is at EOF before it can be reaped, and close() would then
                # kill it as if this run had stopped it (and say nothing)
                self.why = "the compile worker said nothing"
                self._say_why_it_ended(proc, watchdog)
                return None
        except (OSError, ValueError) as exc:  # the worker died or said nonsense
            self.why = f"the compile worker failed ({exc})"
            self._say_why_it_ended(proc, watchdog)
            return None
        finally:
            watchdog.stop()
            self.close()
        if status == "error":
            from planrunner.runtime.bcc_backend import CompileFailed

            raise CompileFailed(json.loads(text))
        self.why = f"the compile worker said: {status} {text}".rstrip()
        return None  # "uncacheable" or "fail"

    def _say_why_it_ended(self, proc: subprocess.Popen[bytes], watchdog: _Watchdog) -> None:
        """One line on stderr for a worker that ended without answering (not when this
        run killed it to stop): the run goes on, compiling in this process."""
        if self._closing or self._stderr is None:
            return
        if watchdog.killed:
            what = f"used no CPU for {STALL_S:g} s (stopped?): killed it"
        else:
            try:
                code = proc.wait(timeout=STALL_S)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None and code < 0:
                try:
                    what = f"was killed by {signal.Signals(-code).name}"
                except ValueError:
                    what = f"was killed by signal {-code}"
            else:
                what = f"ended without answering (exit status {code})"
        self.why = f"the compile worker (pid {proc.pid}) {what}"
        self._stderr.write(f"{self.why}: compiling in this process instead\n")
        self._stderr.flush()

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is None:
                return
            if proc.poll() is None:
                self._closing = True
                proc.kill()  # ours, by PID: started above. First: see the class docstring
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                try:
                    f.close()
                except (OSError, ValueError):  # a write cut short, or closed already
                    pass
        proc.wait()


class _Watchdog:
    """Kills a worker that uses no CPU for STALL_S (it compiles, or is about to: a
    worker that does not is stopped or stuck, and would hold the run for ever)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="planrunner-worker-watch",
                                        daemon=True)
        self.killed = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        last, since = _cpu_ticks(self._proc.pid), time.monotonic()
        while not self._done.wait(WATCH_S):
            ticks = _cpu_ticks(self._proc.pid)
            if ticks is None:  # ended (the reader sees the end of its pipe)
                return
            if ticks != last:
                last, since = ticks, time.monotonic()
            elif time.monotonic() - since >= STALL_S:
                self.killed = True
                if self._proc.poll() is None:
                    self._proc.kill()  # ours, by PID; the blocked read then ends
                return


def _cpu_ticks(pid: int) -> int | None:
    """utime + stime of process `pid` (all its threads), None once it has ended."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # comm may hold spaces: after its ')'
    if len(fields) < 13 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[11]) + int(fields[12])


def hide_kallsyms() -> bool:
    """Give this process a mount namespace where /proc/kallsyms is KALLSYMS_LINE alone
    (see the module docstring). False, with nothing changed, where that is not allowed."""
    libc = ct.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    # private first: the bind mount below must never reach the machine's namespace
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    import tempfile  # the worker's only: with random and hashlib, ~3 ms of `run`

    # a file of its own (a memfd cannot be bind-mounted), gone once mounted
    try:
        fd, path = tempfile.mkstemp(prefix="planrunner-kallsyms-")
    except OSError:
        return False
    try:
        os.write(fd, KALLSYMS_LINE)
        return bool(libc.mount(path.encode(), b"/proc/kallsyms", None, MS_BIND, None) == 0)
    finally:
        os.close(fd)
        os.unlink(path)


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """The worker: one request from `stdin`, its reply on `stdout`. Never a traceback:
    a parent that closed the pipes (it stopped, or was killed before asking) is gone,
    and nobody would read what the worker has to say."""
    ct.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # never outlive `run`
    mark("worker-main")
    hide_kallsyms()
    from planrunner.runtime import bcc_backend  # not in `run` before it spawns this

    try:
        bcc_backend.import_bcc()  # while the parent is still rendering
        mark("worker-bcc")
        _parse_btf_ahead()
        size = stdin.readline()
        if not size:  # the parent closed the pipe without asking
            return 0
        request = json.loads(stdin.read(int(size)))
        mark("worker-request")
        compiled = bcc_backend.compile_program(request["c"], list(request["cflags"]),
                                               dict(request["pins"]),
                                               _btf_constants(request.get("btf", ())),
                                               _btf_constants(request.get("needed", ())),
                                               [str(n) for n in request.get("task_storage",
                                                                            ())])
        mark("worker-compiled")
        reply = _reply(compiled)
    except cc.Uncacheable as exc:
        reply = f"uncacheable {exc}\n".encode()
    except bcc_backend.CompileFailed as exc:
        reply = f"error {json.dumps(exc.detail)}\n".encode()
    except Exception as exc:  # noqa: BLE001 - the run compiles in-process and says it
        reply = f"fail {type(exc).__name__}: {exc}\n".encode()
    try:
        stdout.write(reply)
        stdout.flush()
    except OSError:  # the parent is gone (EPIPE): nobody to answer
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())  # nor at exit's flush
        return 1
    return 0 if reply.startswith((b"ok ", b"uncacheable ")) else 1


def _parse_btf_ahead() -> None:
    """Parse the kernel's BTF for the offsets a compile defines (the run's own programs',
    task_struct.comm: ~75 ms on an AMD EPYC) while the parent renders, off its path to
    `Tracing`. Kept for this process (elf/btf.py); a kernel without them has none."""
    from planrunner.elf import btf
    from planrunner.runtime.bcc_backend import own_btf_cflags

    own_btf_cflags()
    try:
        btf.kernel_offset(btf.TASK_COMM)
    except btf.BtfError:
        pass
    mark("worker-btf")


def _btf_constants(constants: Iterable[tuple[str, Sequence[str]]]
                   ) -> list[RuntimeConstant]:
    """The request's BTF constants (optional or needed), [macro, [struct, path]] in
    JSON."""
    from planrunner.elf.btf import KernelMember
    from planrunner.render.model import RuntimeConstant

    return [RuntimeConstant(str(macro), KernelMember(str(member[0]), str(member[1])))
            for macro, member in constants]


def _reply(compiled: cc.CompiledProgram) -> bytes:
    blob = cc.encode(WIRE_KEY, compiled)
    return f"ok {len(blob)}\n".encode() + blob


if __name__ == "__main__":
    sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))
