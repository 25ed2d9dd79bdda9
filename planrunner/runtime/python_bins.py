"""Which executables are CPython interpreters whose frames BPF reads: the program's
`pr_pybins` map (templates/python_helpers.h), filled before attaching and as processes
appear.

Before attaching: the interpreters on the usual paths (/usr/bin, /usr/local/bin: a
python3.11 started at any moment later is recognised in BPF from its first event, so
the stacks of one that exits at once are still named), the -c command's program, the
--pid processes' and the plan's targets. Later: the executable of each process BPF
announces (its first copied stack), when it looks like an interpreter not yet known.
One that is an interpreter planrunner cannot read (another version, a libpython build)
is said once, on stderr, when it is the command, a --pid process or a process seen
running: its stacks keep the interpreter's native frames.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterable, Sequence
from typing import TextIO

from planrunner.errors import BackendError
from planrunner.render.model import RenderedProgram
from planrunner.runtime.backend import Backend
from planrunner.stacks.python_versions import (
    UnsupportedPython,
    looks_like_python,
    python_binary,
)

SEARCHED = ("/usr/bin/python3*", "/usr/local/bin/python3*", "/usr/bin/python")


def interpreters_on_path() -> list[str]:
    """The interpreters on the usual paths (SEARCHED) that may be run."""
    return [path for pattern in SEARCHED for path in sorted(glob.glob(pattern))
            if looks_like_python(path) and os.access(path, os.X_OK)]


def read_ahead() -> None:
    """Read the interpreters on the usual paths now (their ELF symbols, ~20-35 ms):
    `register_start` then finds them in the ELF caches. A run does it while its
    program compiles (session.py `_warm_up`)."""
    for path in interpreters_on_path():
        try:
            python_binary(path)
        except UnsupportedPython:
            pass


class PythonBinaries:
    """The interpreters written to the program's map (see the module docstring)."""

    def __init__(self, backend: Backend, program: RenderedProgram, stderr: TextIO) -> None:
        self.backend, self.map = backend, program.python_bins_map
        self.stderr = stderr
        self.known: set[tuple[int, int]] = set()  # (st_dev, st_ino) looked at
        self.registered: list[str] = []

    def register(self, path: str, say: bool) -> bool:
        """Add `path` when it is a readable CPython; `say`: tell why not when it is a
        Python planrunner cannot read."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        if (st.st_dev, st.st_ino) in self.known:
            return False
        self.known.add((st.st_dev, st.st_ino))
        try:
            binary = python_binary(path)
        except UnsupportedPython as exc:
            if say:
                self.stderr.write(f"note: {exc}\n")
            return False
        try:
            self.backend.update_map(self.map, binary.key_bytes(), binary.value_bytes())
        except BackendError as exc:
            self.stderr.write(f"warning: cannot name the Python frames of {path}: {exc}\n")
            return False
        self.registered.append(binary.path)
        return True

    def register_start(self, command: Sequence[str] | None, pids: Iterable[int],
                       targets: Iterable[str]) -> None:
        for path in interpreters_on_path():
            self.register(path, False)
        for path in targets:
            if looks_like_python(path):
                self.register(path, True)
        for pid in pids:
            self.process(pid)
        if command:
            found = shutil.which(command[0])
            if found and looks_like_python(os.path.realpath(found)):
                self.register(found, True)

    def process(self, pid: int) -> None:
        """A process seen running: its executable, when it looks like an interpreter."""
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            return
        if looks_like_python(exe):
            self.register(f"/proc/{pid}/exe", True)
