"""Scope options of run, validate and render: `--pid PID[,PID...]` (repeatable),
`--comm NAME` (repeatable), `--cgroup PATH` (repeatable), and for run
`--follow-children`. AND across kinds, OR within one (runtime/scope.py applies them).

Every value is checked here, before anything is compiled, as a usage error (exit 2):
a comm the kernel would have truncated, a cgroup that does not exist, one on a cgroup
v1 hierarchy (`bpf_current_task_under_cgroup` only knows v2).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from planrunner.errors import UsageError

if TYPE_CHECKING:
    from planrunner.runtime.scope import Scope

MOUNTS = "/proc/self/mounts"


def add_scope_arguments(parser: argparse.ArgumentParser) -> None:
    from planrunner.commands.pids import pid_list_arg

    parser.add_argument("-p", "--pid", type=pid_list_arg, action="extend", default=None,
                        metavar="PID[,PID...]",
                        help="trace only these processes (repeatable, or a comma list; "
                             "targets are resolved in the first)")
    parser.add_argument("--comm", type=comm_arg, action="append", default=None,
                        metavar="NAME",
                        help="trace only threads with this command name, as `ps -o comm` "
                             "shows it (repeatable)")
    parser.add_argument("--cgroup", type=cgroup_arg, action="append", default=None,
                        metavar="PATH",
                        help="trace only processes in this cgroup v2 directory or below "
                             "(a systemd service, a container; repeatable)")


def first_pid(args: argparse.Namespace) -> int | None:
    """The pid targets are resolved in (the first --pid), or None."""
    pids: list[int] | None = getattr(args, "pid", None)
    return pids[0] if pids else None


def check_scope(args: argparse.Namespace) -> tuple[tuple[int, ...], tuple[str, ...],
                                                     tuple[str, ...], bool]:
    """The scope options, each value once, checked together (each alone was checked
    when parsed): (pids, comms, cgroups, follow children)."""
    pids = tuple(dict.fromkeys(getattr(args, "pid", None) or ()))
    comms = tuple(dict.fromkeys(getattr(args, "comm", None) or ()))
    cgroups = tuple(dict.fromkeys(getattr(args, "cgroup", None) or ()))
    follow = bool(getattr(args, "follow_children", False))
    if cgroups:  # render/contracts.py only then: a validate without --cgroup skips it
        from planrunner.render.contracts import MAX_CGROUPS

        if len(cgroups) > MAX_CGROUPS:
            raise UsageError(f"at most {MAX_CGROUPS} --cgroup directories, not "
                             f"{len(cgroups)}", hints=(
                                 "give their common parent: its descendants are included",))
    if follow and not pids and not getattr(args, "command", None):
        raise UsageError("--follow-children needs -c or --pid: whose children?")
    return pids, comms, cgroups, follow


def scope_from_args(args: argparse.Namespace) -> Scope:
    """The runtime's Scope of `run` (validate and render only check: check_scope, which
    needs nothing of the runtime)."""
    from planrunner.runtime.scope import Scope

    return Scope(*check_scope(args))


def comm_arg(text: str) -> str:
    raw = text.encode()
    if not raw:
        raise argparse.ArgumentTypeError("an empty command name matches nothing")
    from planrunner.render.contracts import COMM_LEN

    most = COMM_LEN - 1  # without the NUL: the kernel keeps this much of a command name
    if len(raw) > most:
        short = raw[:most].decode(errors="ignore")
        raise argparse.ArgumentTypeError(
            f"'{text}' is longer than {most} bytes, the most the kernel keeps of a "
            f"command name, so no thread has it: use --comm '{short}'")
    return text


def cgroup_arg(text: str) -> str:
    """An absolute cgroup v2 directory: PATH as given, or relative to the cgroup v2
    mount (`system.slice/nginx.service`, or `/system.slice/...` as /proc/PID/cgroup's
    `0::` line says)."""
    mounts = _mounts()
    v2 = [m for m, kind in mounts if kind == "cgroup2"]
    candidates = [text] if os.path.isabs(text) else []
    candidates += [os.path.join(m, text.lstrip("/")) for m in v2]
    not_cgroup = None
    for cand in candidates:
        if not os.path.isdir(cand):
            continue
        path = os.path.realpath(cand)
        kind = _fs_of(path, mounts)
        if kind == "cgroup2":
            return path
        if kind == "cgroup":
            raise argparse.ArgumentTypeError(
                f"{path} is on a cgroup v1 hierarchy: --cgroup needs a cgroup v2 "
                "directory (the kernel's in-BPF cgroup check only knows v2)"
                + (f"; the v2 hierarchy here is mounted at {', '.join(v2)}" if v2 else
                   "; this machine mounts no cgroup v2 hierarchy"))
        not_cgroup = not_cgroup or path  # `/` may still mean the v2 mount's root
    if not_cgroup is not None:
        raise argparse.ArgumentTypeError(f"{not_cgroup} is not a cgroup directory")
    if not v2:
        raise argparse.ArgumentTypeError(
            f"no cgroup '{text}': this machine mounts no cgroup v2 hierarchy (cgroup v1 "
            "only), and --cgroup needs one")
    raise argparse.ArgumentTypeError(
        f"no cgroup directory '{text}' (looked under {', '.join(v2)}); "
        "`systemctl show -p ControlGroup UNIT` names a service's cgroup, the `0::` line "
        "of /proc/PID/cgroup a process's")


def _mounts() -> list[tuple[str, str]]:
    """(mount point, fs type) of every mount, in mount order."""
    found = []
    try:
        with open(MOUNTS, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 2:
                    found.append((fields[1].replace("\\040", " "), fields[2]))
    except OSError:
        pass
    return found


def _fs_of(path: str, mounts: list[tuple[str, str]]) -> str | None:
    """The type of the file system `path` is on: the longest mount point above it."""
    best: tuple[int, str] | None = None
    for point, kind in mounts:
        if path == point or path.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) >= best[0]:
                best = (len(point), kind)
    return best[1] if best else None
