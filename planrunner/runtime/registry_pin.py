"""Where the registry of planrunner runs (runtime/tracers.py) is pinned, and the BPF
filesystem it is pinned on.

`/sys/fs/bpf` is world-writable (1777, as systemd mounts it), so any user can create
`/sys/fs/bpf/planrunner_tracers` (TRACERS_PIN) before the first run after boot: a
directory, a dangling symbolic link, or a map of their own, which would make every
root run fail or, worse, let that user fill the table every run scans (a registered
pid is never recorded). `tracers_pin()` uses TRACERS_PIN only when nothing is there
(the first run pins it, owned by root: no user can remove it from the sticky
directory) or when it is ours: a BPF map owned by root with the registry's layout.
Anything else there, and the registry is pinned in PRIVATE_DIR instead
(`/sys/fs/bpf/planrunner/tracers`), a directory created mode 0700 and checked to be a
directory of root's that no one else can write; when even that is not ours, the
error says what was found at both places. Runs pinned at either place do not see each
other (an old planrunner only knows TRACERS_PIN): the fallback is for a squatted
machine, not a second default.

The programs' C names the pin at compile time: `pin_cflags()` gives the -D that moves
it (templates/runtime_helpers.h PR_TRACERS_PIN; the compile cache keys on cflags).
"""

from __future__ import annotations

import os
import stat

from planrunner.errors import BackendError, BackendUnavailable
from planrunner.render.contracts import TRACER_TABLE
from planrunner.render.model import TRACERS_PIN, TRACERS_PIN_MACRO

BPF_FS = os.path.dirname(TRACERS_PIN)  # /sys/fs/bpf
PRIVATE_DIR = "planrunner"  # under BPF_FS: root's own, mode 0700
PRIVATE_NAME = "tracers"
BPF_MAP_TYPE_ARRAY = 2
# The registry's map: one element of struct pr_tracer_table (render/contracts.py)
REGISTRY_MAP = (BPF_MAP_TYPE_ARRAY, 4, TRACER_TABLE.size, 1)


def tracers_pin(base: str = BPF_FS, default: str = TRACERS_PIN) -> str:
    """The pin to open or create the registry at (see the module docstring); raises
    BackendError naming what was found when neither place is usable. As a user,
    `default` unchecked: a user cannot load programs, and loading says so."""
    ensure_bpffs(base)
    if os.geteuid() != 0:
        return default
    found = foreign(default)
    if found is None:
        return default
    private = os.path.join(base, PRIVATE_DIR)
    why = _private_dir(private)
    pin = os.path.join(private, PRIVATE_NAME)
    if why is None:
        why = foreign(pin)
        if why is None:
            return pin
        where = pin
    else:
        where = private
    raise BackendError(
        f"the registry of planrunner runs cannot be pinned: {default} is {found}, and "
        f"{where} is {why}",
        hints=(f"another user may have created them to stop planrunner: `ls -la {base} "
               f"{private}`; remove them (`rm -r {default} {private}`) while no "
               "planrunner run is active",))


def pin_cflags(pin: str, default: str = TRACERS_PIN) -> list[str]:
    """The cflags that make the program open the registry at `pin`."""
    return [] if pin == default else [f'-D{TRACERS_PIN_MACRO}="{pin}"']


def foreign(path: str) -> str | None:
    """What is at `path` when it is not the registry as planrunner pins it (None:
    nothing there, or a map of root's with the registry's layout)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        dangling = "" if os.path.exists(path) else "dangling "
        return f"a {dangling}symbolic link to {target} (owner uid {st.st_uid})"
    if stat.S_ISDIR(st.st_mode):
        return f"a directory (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o})"
    if not stat.S_ISREG(st.st_mode):  # a pinned object is a regular file on bpffs
        return f"not a pinned BPF object (mode {st.st_mode:o}, owner uid {st.st_uid})"
    if st.st_uid != 0:
        return f"a BPF object pinned by uid {st.st_uid}"
    from planrunner.runtime.kernel import bpf  # noqa: PLC0415 - root, rarely

    try:
        fd = bpf.obj_get(path)
    except OSError as exc:
        return f"not a BPF map ({exc.strerror})"
    try:
        found = bpf.map_info(fd).shape
    except OSError:
        return "a BPF object that is not a map"
    finally:
        os.close(fd)
    if found != REGISTRY_MAP:
        return (f"another map (type {found[0]}, key {found[1]} bytes, value {found[2]} "
                f"bytes, {found[3]} entries)")
    return None


def _private_dir(path: str) -> str | None:
    """Create `path` (0700) when absent; what it is when it is not root's own directory
    that only root can write (None: it is)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"impossible to create ({exc.strerror})"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return f"a symbolic link (owner uid {st.st_uid})"
    if not stat.S_ISDIR(st.st_mode):
        return f"not a directory (mode {st.st_mode:o}, owner uid {st.st_uid})"
    if st.st_uid != 0 or mode & 0o022:
        return f"a directory of uid {st.st_uid} with mode {mode:o}"
    return None


def ensure_bpffs(directory: str = BPF_FS) -> None:
    """Mount the BPF filesystem at `directory` (where the tracer registry is pinned)
    when nothing is mounted there, as systemd does at boot on most distributions."""
    if _mounted_type(directory) == "bpf":
        return
    import subprocess  # noqa: PLC0415 - once per boot at most

    try:
        subprocess.run(["mount", "-t", "bpf", "bpf", directory], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BackendUnavailable(
            f"the BPF filesystem is not mounted at {directory} and mounting it failed "
            f"({exc})",
            hints=(f"mount it: `mount -t bpf bpf {directory}`; planrunner pins the "
                   "registry of running tracers there, so that two runs never trace "
                   "each other",)) from None


def _mounted_type(directory: str) -> str | None:
    found = None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 2 and fields[1] == directory:
                    found = fields[2]  # the last mount there is the visible one
    except OSError:
        return None
    return found
