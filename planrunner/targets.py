"""Turn what a user calls a program or library into the absolute path of an ELF file.

`resolve_target(spec, pid=None, span=None) -> str`, tried in this order:
1. a path (contains '/'): relative to the working directory; with a pid, looked up first
   under /proc/PID/root (that process's mount namespace and root: a container's file
   system), the host's path kept when both name one file; when they name two, the
   process's, and a note says so (`notes`): never the host's file silently;
2. with a pid: a name matched against the objects that process has mapped executable,
   by basename (`libc.so.6`) or library short name (`c`, `pthread`, `jvm`);
3. a program name on PATH (`postgres`, `python3.11`);
4. a library short name or soname, found like the dynamic linker does, through the
   `ldconfig -p` cache (host architecture preferred), then LD_LIBRARY_PATH.
The result is the real path (symlinks resolved): that is the inode uprobes attach to.
Unknown targets raise ResolveError with a hint. Every file, directory, link and variable
looked at, found or not, is declared to the run cache (planrunner/inputs.py).
"""

from __future__ import annotations

import os
import re
import stat

from planrunner import inputs
from planrunner.diagnostics import Span, did_you_mean
from planrunner.elf.reader import is_elf
from planrunner.errors import ResolveError

# platform.machine() -> the arch tag ldconfig prints in "(libc6,x86-64)".
_LDCONFIG_ARCH = {"x86_64": "x86-64", "aarch64": "AArch64", "riscv64": "RISC-V",
                  "ppc64le": "64bit", "ppc64": "64bit", "s390x": "64bit", "mips64": "64bit",
                  "loongarch64": "64bit"}
_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S.*)$")
_HINT = "give an absolute path, a program on PATH, or a library name from `ldconfig -p`"


def resolve_target(spec: str, pid: int | None = None, span: Span | None = None,
                   notes: list[str] | None = None) -> str:
    """The absolute real path of the ELF file `spec` names. ResolveError when none.
    What a user should know about the choice (a container's file that differs from the
    host's at the same path) is appended to `notes`."""
    if not spec:
        raise ResolveError("empty target", span, hints=(_HINT,))
    if "/" in spec:
        return _resolve_path(spec, pid, span, notes)
    if pid is not None:
        found = _from_process(spec, pid) or _from_process_dirs(spec, pid)
        if found:
            return found
    on_path = _from_path(spec)
    if on_path:
        return inputs.realpath(on_path)
    lib = _from_ldconfig(spec) or _from_ld_library_path(spec)
    if lib:
        return inputs.realpath(lib)
    raise _unknown(spec, pid, span)


def library_names(soname: str) -> tuple[str, ...]:
    """The short names a library answers to: libpthread.so.0 -> ('pthread',);
    libgtk-3.so.0 -> ('gtk-3', 'gtk') (the `-l` name, then without its version)."""
    m = re.match(r"^lib(.+?)\.so(\.|$)", os.path.basename(soname))
    if not m:
        return ()
    bare = re.match(r"^(.+?)-[\d.]+$", m.group(1))
    return (m.group(1), bare.group(1)) if bare else (m.group(1),)


def _resolve_path(spec: str, pid: int | None, span: Span | None,
                  notes: list[str] | None) -> str:
    host = os.path.abspath(spec)
    if pid is not None:
        inside = _inside_root(host, pid, notes)
        if inside is not None:
            return inside
    if inputs.isfile(host):
        return _real(host, None)
    if inputs.isdir(host):
        raise ResolveError(f"target '{spec}' is a directory", span,
                           hints=("give the executable or library file inside it",))
    st = inputs.stat(host)
    if st is not None:  # /dev/null: there, but no file to probe
        import stat

        mode = st.st_mode
        kind = ("a character device" if stat.S_ISCHR(mode) else "a block device"
                if stat.S_ISBLK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket")
        raise ResolveError(f"target '{spec}' is {kind}, not a file", span,
                           hints=("give an executable or library file",))
    raise ResolveError(f"target '{spec}' not found", span, hints=(_HINT,))


def _inside_root(host: str, pid: int, notes: list[str] | None) -> str | None:
    """`host` (an absolute path) as process `pid` sees it, through /proc/PID/root, which
    leads into its mount namespace and root directory (a container's files), both
    followed from here. The host's path when both name one file (the usual case: a
    process of this system); the inside one, with a note, when they name two files (a
    container's binary at a path the host has too: the host's would never fire); None
    when the process has no such file (or its root cannot be read): the host's path is
    used as before, with a note when the process cannot see it."""
    root = f"/proc/{pid}/root"
    inside = _real(root + host, pid)
    in_st = inputs.stat(inside)
    if in_st is None:
        if notes is not None and inputs.isfile(host) and inputs.access(root + "/", os.X_OK):
            notes.append(f"{host} is not in the file system of process {pid}: the "
                         "host's file is used, which that process cannot map")
        return None
    if not stat.S_ISREG(in_st.st_mode):
        return None  # a directory: said by the caller, as for the host's path
    host_st = inputs.stat(host)
    if host_st is None:
        return inside  # only the process has it (a container's own path)
    if (host_st.st_dev, host_st.st_ino) == (in_st.st_dev, in_st.st_ino):
        return _real(host, None)
    if notes is not None:
        notes.append(f"{host} in process {pid} is another file than the host's "
                     f"(inode {in_st.st_ino}, not the host's {host_st.st_ino}): traced "
                     f"through its root, {inside}")
    return inside


def _from_path(spec: str) -> str | None:
    """The first ELF file called `spec` on PATH. Scripts (a pyenv shim, a wrapper) are
    skipped: uprobes need the ELF image, so keep looking like `which -a` would."""
    for directory in (inputs.getenv("PATH", os.defpath) or "").split(os.pathsep):
        cand = os.path.join(directory or ".", spec)
        if inputs.isfile(cand) and inputs.access(cand, os.X_OK) and is_elf(cand):
            return cand
    return None


def _matches(spec: str, path: str) -> bool:
    base = os.path.basename(path)
    return spec in (base, path) or spec in library_names(base)


def _from_process(spec: str, pid: int) -> str | None:
    from planrunner.elf.procmaps import executable_objects

    for path in executable_objects(pid):
        if _matches(spec, path):
            return _real(path, pid)
    return None


def _from_process_dirs(spec: str, pid: int) -> str | None:
    """A library `pid` has not mapped yet (it may dlopen() it later): looked for in its
    LD_LIBRARY_PATH, then beside the objects it has mapped (its executable's directory
    first: where programs keep their plugins). Files not ELF are skipped."""
    from planrunner.elf.procmaps import executable_objects, host_prefix

    prefix = host_prefix(pid)
    dirs: list[str] = []
    try:
        env = dict(v.split(b"=", 1) for v in inputs.read_bytes(f"/proc/{pid}/environ")
                   .split(b"\0") if b"=" in v)
        dirs += [prefix + d for d in os.fsdecode(env.get(b"LD_LIBRARY_PATH", b"")).split(":")
                 if d.startswith("/")]
    except OSError:
        pass
    dirs += [os.path.dirname(p) for p in executable_objects(pid)]
    for directory in dict.fromkeys(dirs):
        try:
            names = sorted(inputs.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            if _matches(spec, name) and inputs.isfile(path) and is_elf(path):
                return _real(path, pid)
    return None


def _real(path: str, pid: int | None) -> str:
    """The path with symlinks resolved. A path under /proc/PID/root is resolved inside
    that root (os.path.realpath would follow the root link itself out to a host path)."""
    root = f"/proc/{pid}/root" if pid is not None else None
    if root is None or not path.startswith(root + "/"):
        return inputs.realpath(path)
    parts = path[len(root):].split("/")[1:]
    done = ""
    for _ in range(256):  # components plus symlink hops: bounded even with a loop
        if not parts:
            return root + (done or "/")
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            done = done.rsplit("/", 1)[0]
            continue
        cand = f"{done}/{part}"
        target = inputs.readlink(root + cand)
        if target is None:  # not a link (or missing): keep it
            done = cand
            continue
        parts = target.split("/")[1:] + parts if target.startswith("/") else \
            target.split("/") + parts
        if target.startswith("/"):
            done = ""
    return path


_LDCONFIG: list[tuple[tuple[str, str, str], ...]] = []
LD_SO_CACHE = "/etc/ld.so.cache"


def _ldconfig_cache() -> tuple[tuple[str, str, str], ...]:
    """(soname, flags, path) for every entry of `ldconfig -p`, parsed once per process.
    What it prints is the linker's cache file, declared as the input (each call: the
    parse is kept for the process, a compile may be recorded after it)."""
    inputs.stat(LD_SO_CACHE)
    if not _LDCONFIG:
        _LDCONFIG.append(_read_ldconfig())
    return _LDCONFIG[0]


def _read_ldconfig() -> tuple[tuple[str, str, str], ...]:
    # Imported here: most targets are paths, and `list` startup time matters.
    import shutil
    import subprocess

    tool = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
    if tool is None:
        return ()
    try:
        out = subprocess.run([tool, "-p"], capture_output=True, text=True, check=False,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    entries = []
    for line in out.splitlines():
        m = _LDCONFIG_LINE.match(line)
        if m:
            entries.append((m.group(1), m.group(2), m.group(3).strip()))
    return tuple(entries)


def _from_ldconfig(spec: str) -> str | None:
    hits = [(soname, flags, path) for soname, flags, path in _ldconfig_cache()
            if soname == spec or spec in library_names(soname)]
    if not hits:
        return None
    arch = _LDCONFIG_ARCH.get(os.uname().machine)
    # Prefer the host's ABI, then a versioned soname (what programs load) over the
    # unversioned dev symlink, then ldconfig's own order.
    ranked = sorted(hits, key=lambda h: (arch is not None and arch not in h[1],
                                         h[0] != spec and not re.search(r"\.so\.", h[0])))
    return ranked[0][2]


def _from_ld_library_path(spec: str) -> str | None:
    for directory in filter(None, (inputs.getenv("LD_LIBRARY_PATH") or "").split(":")):
        try:
            names = sorted(inputs.listdir(directory))
        except OSError:
            continue
        for name in names:
            if (name == spec or spec in library_names(name)) and \
                    inputs.isfile(os.path.join(directory, name)):
                return os.path.join(directory, name)
    return None


def _unknown(spec: str, pid: int | None, span: Span | None) -> ResolveError:
    hints = []
    if pid is not None:
        from planrunner.elf.procmaps import executable_objects

        mapped = executable_objects(pid)
        names = {os.path.basename(p) for p in mapped}
        names |= {n for p in mapped for n in library_names(p)}
        close = did_you_mean(spec, names)
        if close:
            hints.append(f"did you mean '{close}'?")
        hints.append(f"`planrunner list --pid {pid}` shows the objects it has mapped")
        message = f"target '{spec}' is not mapped in process {pid}, on PATH, or a known library"
    else:
        close = did_you_mean(spec, {n for s, _f, _p in _ldconfig_cache()
                                    for n in library_names(s)})
        if close:
            hints.append(f"did you mean the library '{close}'?")
        message = f"target '{spec}' not found on PATH or in the library cache"
    hints.append(_HINT)
    return ResolveError(message, span, hints=tuple(hints))
