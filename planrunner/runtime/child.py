"""`-c 'CMD ARGS'`: a child started with everything attached before its first
instruction. The child is forked and waits on a pipe; planrunner attaches (filtering
on the child's pid), then releases it to exec. A child never released (start-up was
stopped) exits without running the command. `execed()` says when the command has
replaced the copy of planrunner (a second pipe, closed by the exec), so that its maps
are read then. At the end, a command still running gets
SIGTERM, then SIGKILL after a grace period (`terminate`). Only this child is ever
signalled, by PID.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable

from planrunner.errors import CommandNotFound, UsageError


class Child:
    def __init__(self, pid: int, release_fd: int, exec_fd: int | None = None,
                 path: str | None = None) -> None:
        self.pid = pid
        self.path = path  # what the command line named, found on PATH (may be a script)
        self.exes: list[str] = []  # the executables it was seen running after its exec
        self._release_fd: int | None = release_fd
        # read end of a pipe whose only writer is the child's close-on-exec copy: EOF
        # once the child has exec'd (or exited)
        self._exec_fd = exec_fd
        self._status: int | None = None

    @classmethod
    def spawn_stopped(cls, argv: list[str]) -> Child:
        if not argv:
            raise UsageError("-c needs a command")
        import shutil  # -c runs only

        path = shutil.which(argv[0])
        if path is None:  # said before anything is compiled or attached
            raise CommandNotFound(f"cannot run {argv[0]}: {_why_not_runnable(argv[0])}",
                                  hints=("-c takes a command line, as a shell would run it",))
        # Between its release and the exec the child is a copy of planrunner under the
        # traced pid: the program skips it until the kernel reports the exec done
        # (ConfigSlot.COMMAND, runtime_helpers.h pr_on_exec). The window is kept short
        # all the same: everything is prepared before the fork, and libc's execv is
        # called through ctypes on ready C strings (os.execvp walks PATH in Python,
        # os.execv strlen()s every argument).
        execv = ctypes.CDLL(None).execv  # dlsym() now, not in the child
        c_path = os.fsencode(path)
        c_argv = (ctypes.c_char_p * (len(argv) + 1))(*map(os.fsencode, argv), None)
        read_fd, write_fd = os.pipe()
        exec_r, exec_w = os.pipe()  # both close-on-exec (PEP 446)
        pid = os.fork()
        if pid == 0:  # child: wait for the go-ahead, then become the command
            try:
                os.close(write_fd)  # not traced yet: we are still waiting below
                os.close(exec_r)
                if os.read(read_fd, 1):  # read_fd is close-on-exec (PEP 446)
                    execv(c_path, c_argv)
                    os.execv(path, argv)  # it failed: again, for the OSError with errno
            except OSError as exc:
                os.write(2, f"planrunner: cannot run {argv[0]}: {exc.strerror}\n".encode())
                os._exit(127)
            os._exit(0)  # planrunner went away before releasing us
        os.close(read_fd)
        os.close(exec_w)
        os.set_blocking(exec_r, False)
        return cls(pid, write_fd, exec_r, path)

    def execed(self) -> bool:
        """Whether the child has exec'd the command (or ended): its maps are then the
        command's, no longer a copy of planrunner's."""
        if self._exec_fd is None:
            return True
        try:
            if os.read(self._exec_fd, 1):
                return False  # nothing writes to it: not expected
        except BlockingIOError:
            return False
        os.close(self._exec_fd)
        self._exec_fd = None
        return True

    def look(self) -> None:
        """Note the executable the command runs now, once it has exec'd (a script's
        interpreter, then whatever that execs: said when its run recorded nothing)."""
        if self._status is not None or not self.execed():
            return
        try:
            exe = os.readlink(f"/proc/{self.pid}/exe")
        except OSError:  # exited, or a kernel thread
            return
        if not self.exes or self.exes[-1] != exe:
            self.exes.append(exe)

    def release(self) -> None:
        if self._release_fd is not None:
            os.write(self._release_fd, b"g")
            os.close(self._release_fd)
            self._release_fd = None

    def poll(self) -> int | None:
        if self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self._status = status
        return self._status

    def exit_status(self) -> int:
        """The command's exit code, or 128+N when signal N ended it (like a shell)."""
        status = self.poll()
        if status is None:
            return 0
        if os.WIFSIGNALED(status):
            return 128 + os.WTERMSIG(status)
        return os.WEXITSTATUS(status)

    @property
    def released(self) -> bool:
        return self._release_fd is None

    def abandon(self) -> None:
        """Never released: close the pipe, so that it exits without running the command,
        and reap it."""
        if self._release_fd is not None:
            os.close(self._release_fd)
            self._release_fd = None
        if self._exec_fd is not None:
            os.close(self._exec_fd)
            self._exec_fd = None
        try:
            _, self._status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def terminate(self, grace_s: float, hurry: Callable[[], bool]) -> str | None:
        """End the command if it still runs: SIGTERM, then SIGKILL when it is still
        there after `grace_s` or as soon as `hurry()` says so (a second Ctrl-C). The
        last signal sent (None: it had ended by itself)."""
        if self._release_fd is not None:
            self.abandon()
            return None
        if self.poll() is not None:
            return None
        sent = self._send(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while self.poll() is None:
            if time.monotonic() >= deadline or hurry():
                sent = self._send(signal.SIGKILL)
                try:
                    _, self._status = os.waitpid(self.pid, 0)
                except ChildProcessError:
                    pass
                break
            time.sleep(0.02)
        return sent

    def _send(self, sig: signal.Signals) -> str | None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return None
        return sig.name

    def kill_if_running(self, grace_s: float = 3.0) -> None:
        self.terminate(grace_s, lambda: False)


def _why_not_runnable(name: str) -> str:
    if "/" not in name:
        return "command not found in PATH"
    if not os.path.exists(name):
        return "no such file"
    if os.path.isdir(name):
        return "is a directory"
    return "not executable"
