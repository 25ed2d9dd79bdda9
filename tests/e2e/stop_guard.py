"""`python -m tests.e2e.stop_guard [--in-process] ARGS...`: planrunner's CLI (`ARGS` as
for `python -m planrunner`) with a guard armed when the stop begins (the backend's first
`detach`): from then on any use of bcc's table API (a `BPF[name]` lookup, a table's
reads) writes a GUARD line on stderr and raises, and an import of bcc after that point
is reported at exit the same way. With `--in-process` bcc compiles the program in the
run's own process (tests/e2e/in_process.py), so bcc is imported and its table classes
could be reached. Test code: production has no hook.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

from planrunner.cli import run_and_exit
from planrunner.runtime import bcc_backend

MARK = "GUARD:"
_armed = {"on": False, "bcc_before": False}
_patched: list[tuple[Any, str, Any]] = []  # (class, name, what it was): disarm() restores


def _refuse(what: str) -> Any:
    def refuse(*_args: Any, **_kw: Any) -> Any:
        sys.stderr.write(f"{MARK} bcc's {what} used after the stop began\n")
        sys.stderr.flush()
        raise AssertionError(f"bcc's {what} used after the stop began")
    return refuse


def arm() -> None:
    """From now on, bcc's table API raises (and says so on stderr)."""
    if _armed["on"]:
        return
    _armed["on"] = True
    _armed["bcc_before"] = "bcc" in sys.modules
    bcc = sys.modules.get("bcc")
    if bcc is not None:
        _patch(bcc.BPF, "__getitem__", "BPF[name]")
        _patch(bcc.BPF, "get_table", "BPF.get_table")
        tables = [c for c in vars(bcc.table).values()
                  if isinstance(c, type) and issubclass(c, bcc.table.TableBase)]
        for cls in tables:  # every class of table that defines a read of its own
            for name in ("__getitem__", "__delitem__", "items", "keys", "values",
                         "items_lookup_batch", "items_lookup_and_delete_batch", "clear",
                         "sum", "getvalue"):
                if name in cls.__dict__:
                    _patch(cls, name, f"{cls.__name__}.{name}")
    atexit.register(_imported_late)


def disarm() -> None:
    """bcc's table API as it was (a test that armed the guard in its own process)."""
    while _patched:
        cls, name, was = _patched.pop()
        setattr(cls, name, was)
    _armed["on"] = False
    atexit.unregister(_imported_late)


def _patch(cls: Any, name: str, what: str) -> None:
    _patched.append((cls, name, cls.__dict__[name]))
    setattr(cls, name, _refuse(what))


def _imported_late() -> None:
    if not _armed["bcc_before"] and "bcc" in sys.modules:
        sys.stderr.write(f"{MARK} bcc was imported after the stop began\n")


class _Guarded:
    def detach(self) -> None:
        arm()
        super().detach()  # type: ignore[misc]


if __name__ == "__main__":
    args = sys.argv[1:]
    base: Any = bcc_backend.BccBackend
    if args[:1] == ["--in-process"]:
        from tests.e2e.in_process import InProcessBackend

        base, args = InProcessBackend, args[1:]
    # commands/run.py looks the class up in the module when `run` starts
    vars(bcc_backend)["BccBackend"] = type("GuardedBackend", (_Guarded, base), {})
    run_and_exit(args)
