"""`-c 'CMD ARGS'`: a child started with everything attached before its first
instruction. The child is forked and waits on a pipe; planrunner attaches (filtering
on the child's pid), then releases it to exec. Only this child is ever killed, by PID.
"""

from __future__ import annotations

import os
import signal

from planrunner.errors import UsageError


class Child:
    def __init__(self, pid: int, release_fd: int) -> None:
        self.pid = pid
        self._release_fd: int | None = release_fd
        self._status: int | None = None

    @classmethod
    def spawn_stopped(cls, argv: list[str]) -> Child:
        if not argv:
            raise UsageError("-c needs a command")
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: wait for the go-ahead, then become the command
            try:
                os.close(write_fd)
                go = os.read(read_fd, 1)
                os.close(read_fd)
                if go:
                    os.execvp(argv[0], argv)
            except OSError as exc:
                os.write(2, f"planrunner: cannot run {argv[0]}: {exc.strerror}\n".encode())
                os._exit(127)
            os._exit(0)  # planrunner went away before releasing us
        os.close(read_fd)
        return cls(pid, write_fd)

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

    def kill_if_running(self) -> None:
        if self._release_fd is not None:  # never released: let it exit without exec
            os.close(self._release_fd)
            self._release_fd = None
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            except ProcessLookupError:
                pass
