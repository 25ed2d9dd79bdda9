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
then the C source, the cflags and the pinned maps as JSON of that length (not up to an
end of file: a `-c` command forked but not yet exec'd holds a copy of the pipe); the
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
from typing import IO

from planrunner.runtime import bcc_backend
from planrunner.runtime import compile_cache as cc

WIRE_KEY = "compile-worker"  # the key compile_cache.encode() needs; the pipe has one entry
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG = 1
# what bcc looks for; the address is never used, only that the name is there (bcc skips
# addresses of 0 and below the kernel's half of the address space)
KALLSYMS_LINE = b"ffffffff81000000 T bpf_probe_read_kernel\n"
# Ctrl-C reaches the worker too (the terminal's process group): it is ignored from the
# first line on (no KeyboardInterrupt traceback on the user's terminal); `run` decides
# and kills the worker when it stops
_BOOT = ("import signal, sys\n"
         "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
         "from planrunner.runtime.compile_worker import serve\n"
         "sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))\n")


class CompileWorker:
    """One worker process, started early (`start`) so that its start-up overlaps the
    parent's; `compile` starts it if that was not done. Closed (and killed, if still
    running) by `close`."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self.why = ""  # why the last compile gave nothing back (for the cache log)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

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

    def compile(self, c_source: str, cflags: list[str],
                pins: dict[str, str]) -> cc.CompiledProgram | None:
        """The program bcc compiles from `c_source`, or None when the worker could not
        give it in the cache's form (the caller compiles in-process instead). Raises
        BackendError when bcc could not compile it (clang has said why on stderr)."""
        self.start()
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            return None
        status, text = "", ""
        try:
            request = json.dumps({"c": c_source, "cflags": cflags, "pins": pins}).encode()
            proc.stdin.write(f"{len(request)}\n".encode() + request)
            proc.stdin.flush()
            status, _, text = proc.stdout.readline().decode().rstrip("\n").partition(" ")
            if status == "ok":
                blob = proc.stdout.read(int(text))
                return cc.decode(WIRE_KEY, blob)
        except (OSError, ValueError) as exc:  # the worker died or said nonsense
            self.why = f"the compile worker failed ({exc})"
            return None
        finally:
            self.close()
        if status == "error":
            raise bcc_backend.CompileFailed(json.loads(text))
        self.why = f"the compile worker said: {status or 'nothing'} {text}".rstrip()
        return None  # "uncacheable" or "fail", or nothing at all

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        if proc.poll() is None:
            proc.kill()  # ours, by PID: started above
        proc.wait()


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
    """The worker: one request from `stdin`, its reply on `stdout`."""
    ct.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # never outlive `run`
    hide_kallsyms()
    try:
        bcc_backend.import_bcc()  # while the parent is still rendering
        request = json.loads(stdin.read(int(stdin.readline())))
        compiled = bcc_backend.compile_program(request["c"], list(request["cflags"]),
                                               dict(request["pins"]))
    except cc.Uncacheable as exc:
        stdout.write(f"uncacheable {exc}\n".encode())
        return 0
    except bcc_backend.CompileFailed as exc:
        stdout.write(f"error {json.dumps(exc.detail)}\n".encode())
        return 1
    except Exception as exc:  # noqa: BLE001 - the run compiles in-process and says it
        stdout.write(f"fail {type(exc).__name__}: {exc}\n".encode())
        return 1
    blob = cc.encode(WIRE_KEY, compiled)
    stdout.write(f"ok {len(blob)}\n".encode() + blob)
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))
