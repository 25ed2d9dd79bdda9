"""The second cache level: what `run` computes before the kernel (load, resolve, render),
keyed by what it was computed from, so that a warm run skips parsing, resolving and
rendering and their imports (yaml, jsonschema, jinja2, pyelftools, capstone).

The first level (runtime/compile_cache.py) skips clang; this one skips the Python
before the backend, which on a warm run was most of the time left (BENCHMARKS.md,
"Issue 17 (round two): startup").

Key (SHA-256, length-prefixed parts): this file's format, the planrunner version and
the identity of its source files (a checkout edited without a new version never gets
a program pickled by older code), the plan's path and bytes, the raw `--set` values,
the --pid / -c values, the current directory, the whole environment but the cache's
own variables and those a shell or sudo sets per command line (`_`, SUDO_COMMAND,
OLDPWD) (preflight warnings read it, PATH finds binaries), the effective uid, the
kernel (uname) and whether stderr is a terminal.

An entry also records every input the compile read, seen by an audit hook
(sys.addaudithook) while it ran, and each is checked again before the entry is used:
- a file opened (target binaries, templates, the schema; not the plan, whose path and
  bytes are in the key, read again by every run): device, inode,
  size, mtime and ctime (a rebuilt or replaced binary is another file);
- under /proc and /sys (a --pid target's cmdline and environ, tracefs formats): the
  bytes read again and compared by hash (/proc/PID/stat: the process's start time,
  recorded for every process whose /proc files were read: a pid reused is a miss);
- a directory listed outside the import system: its sorted names;
- the directory of each file opened, and each $PATH directory: its mtime (a binary or
  library installed beside or before the one found is another resolution).
Not stored (the run compiles each time): a compile that started a process, read a
process's memory, or read no file at all, i.e. anything whose inputs cannot be named.
Files the import system opens (planrunner's own modules) are not inputs: the version is.

Entries are pickles of the compile's result (RenderedProgram and what `run` shows
around it), in the same private directory and with the same header (magic, format,
SHA-256 of the body) as the program cache's; a damaged entry is removed and rebuilt.
Unpickling runs code only from modules planrunner imports, and the file is trusted as
far as the directory is: 0700, 0600, this user's (compile_cache.ProgramCache checks).
`run --no-cache` neither reads nor writes it.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planrunner import __version__
from planrunner.runtime.compile_cache import seal, sha256, unseal

if TYPE_CHECKING:
    from planrunner.render.model import RenderedProgram
    from planrunner.runtime.compile_cache import ProgramCache

FORMAT_VERSION = 1
MAGIC = b"PRRUN\0\0\0"
SUFFIX = ".run"
# variables that change where the cache is and what it logs, never what a compile makes,
# and those a shell or sudo sets per command line (`_`: the program just run, by the
# path it was typed as; SUDO_COMMAND: the whole command line; OLDPWD): keyed, they
# would make runs that differ only in -d or in how planrunner was typed miss
_NOT_INPUTS = frozenset({"PLANRUNNER_CACHE_DIR", "PLANRUNNER_CACHE_LOG", "_",
                         "SUDO_COMMAND", "OLDPWD"})
_EVENTS = frozenset({"open", "os.listdir", "os.scandir"})
# events after which a compile's inputs cannot be named: never stored
_UNKEYABLE = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
                        "os.fork"})


@dataclass(frozen=True, slots=True)
class CompiledRun:
    """What `run` needs of load/resolve/render: the program and what it shows beside."""

    program: RenderedProgram
    warnings: str  # resolve's diagnostics as printed, replayed verbatim
    shown: tuple[str, ...]  # outputs and tables in plan order (open_view's names)
    has_tables: bool
    plan_name: str
    description: str  # for --prometheus (which never takes an entry: the plan's)


def run_key(plan: str, plan_bytes: bytes, sets: Sequence[str], pid: Sequence[int],
            command: str | None, stderr_tty: bool,
            environ: dict[str, str] | None = None, cwd: str | None = None) -> str:
    env = os.environ if environ is None else environ
    u = os.uname()
    h = sha256()
    for part in (f"planrunner-run-cache:{FORMAT_VERSION}", __version__, source_identity(),
                 plan, plan_bytes,
                 "\0".join(sets), ",".join(map(str, pid)), command or "",
                 cwd if cwd is not None else os.getcwd(),
                 "\0".join(f"{k}={v}" for k, v in sorted(env.items())
                           if k not in _NOT_INPUTS),
                 str(os.geteuid()), f"{u.release}|{u.version}|{u.machine}",
                 str(stderr_tty)):
        data = part if isinstance(part, bytes) else part.encode("utf-8", "surrogateescape")
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.hexdigest()


def source_identity(root: str | None = None) -> str:
    """Path, size and mtime of every file of the planrunner package (~150 stats, well
    under a millisecond): the code that computed an entry, which the version alone does
    not name in a working tree."""
    h = sha256()
    stack = [root or os.path.dirname(os.path.abspath(__file__))]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in sorted(it, key=lambda e: e.name):
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__":
                        stack.append(e.path)
                elif e.name.endswith(".py"):
                    st = e.stat()
                    h.update(f"{e.path}|{st.st_size}|{st.st_mtime_ns}\n".encode(
                        "utf-8", "surrogateescape"))
    return h.hexdigest()


# --- inputs -----------------------------------------------------------------------------

def _stat(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _mtime(path: str) -> str:
    try:
        return str(os.stat(path).st_mtime_ns)
    except OSError:
        return "missing"


def _is_proc_pid(parts: list[str]) -> bool:
    return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit()


def _content(path: str) -> str:
    """The bytes of a /proc or /sys file, by hash; /proc/PID/stat as its start time
    (the process's identity: the other fields are counters that move every tick)."""
    parts = path.split("/")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return "missing"
    if _is_proc_pid(parts) and len(parts) == 4 and parts[3] == "stat":
        fields = data.rsplit(b")", 1)[-1].split()
        return "start:" + (fields[19].decode() if len(fields) > 19 else "?")
    return sha256(data).hexdigest()


def _listing(path: str) -> str:
    try:
        return sha256("\0".join(sorted(os.listdir(path))).encode(
            "utf-8", "surrogateescape")).hexdigest()
    except OSError:
        return "missing"


_CHECKS = {"stat": _stat, "content": _content, "dir": _listing, "mtime": _mtime}


def fingerprint(kind: str, path: str) -> str:
    return _CHECKS[kind](path)


class Uncacheable(Exception):
    pass


class InputRecorder:
    """The files and directories a compile reads, from the interpreter's audit events.
    An audit hook cannot be removed: one is installed per process and does nothing
    outside `recording()`."""

    _installed: InputRecorder | None = None

    def __init__(self) -> None:
        self.active = False
        self.opened: list[str] = []
        self.listed: list[str] = []
        self.unkeyable: str | None = None

    @classmethod
    def get(cls) -> InputRecorder:
        if cls._installed is None:
            rec = cls._installed = InputRecorder()
            sys.addaudithook(rec._hook)
        return cls._installed

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event in _UNKEYABLE:
            self.unkeyable = self.unkeyable or event
            return
        if event not in _EVENTS or not args or not isinstance(args[0], (str, bytes)):
            return
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("importlib") or caller == "zipimport":
            return  # the import system: modules are versioned, not inputs
        path = os.fsdecode(args[0])
        if event == "open":
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
            if any(c in mode for c in "wax+"):
                return
            self.opened.append(path)
        else:
            self.listed.append(path)

    @contextmanager
    def recording(self) -> Iterator[InputRecorder]:
        self.opened, self.listed, self.unkeyable = [], [], None
        self.active = True
        try:
            yield self
        finally:
            self.active = False

    def inputs(self, keyed: Sequence[str] = ()) -> tuple[tuple[str, str, str], ...]:
        """(kind, path, fingerprint) of everything recorded, taken now (right after the
        compile: a file that changed during it is caught at the next use, when its
        fingerprint differs). `keyed`: files whose bytes are in the key (the plan, read
        and found again by every run): not inputs. Raises Uncacheable."""
        if self.unkeyable:
            raise Uncacheable(f"the compile used {self.unkeyable}")
        if not self.opened:
            raise Uncacheable("the compile read no file")
        deps: dict[tuple[str, str], None] = {}
        skip = {os.path.abspath(p) for p in keyed}
        for raw in self.opened:
            path = os.path.abspath(raw)
            if path in skip:
                continue
            parts = path.split("/")
            if _is_proc_pid(parts) and len(parts) > 3 and parts[3] in ("mem", "pagemap"):
                raise Uncacheable(f"the compile read process memory ({path})")
            if _is_proc_pid(parts):  # the same process, not one that reuses its pid
                deps[("content", "/".join(parts[:3] + ["stat"]))] = None
            if parts[1] in ("proc", "sys") and not (
                    _is_proc_pid(parts) and len(parts) > 3 and parts[3] in ("root", "exe",
                                                                             "map_files")):
                deps[("content", path)] = None
            else:
                deps[("stat", path)] = None
                deps[("mtime", os.path.dirname(path))] = None
        for raw in self.listed:
            deps[("dir", os.path.abspath(raw))] = None
        for d in os.environ.get("PATH", "").split(":"):
            if d:
                deps[("mtime", d)] = None
        return tuple((kind, path, fingerprint(kind, path)) for kind, path in deps)


def unchanged(inputs: Sequence[tuple[str, str, str]]) -> str | None:
    """None when every input is as recorded; else the first that is not."""
    for kind, path, want in inputs:
        if fingerprint(kind, path) != want:
            return f"{path} changed"
    return None


# --- entries ----------------------------------------------------------------------------

def encode(key: str, inputs: Sequence[tuple[str, str, str]], run: CompiledRun) -> bytes:
    body = pickle.dumps({"key": key, "inputs": tuple(inputs), "run": run},
                        protocol=pickle.HIGHEST_PROTOCOL)
    return seal(MAGIC, FORMAT_VERSION, body)


def decode(key: str, blob: bytes) -> tuple[tuple[tuple[str, str, str], ...], CompiledRun]:
    """Raises ValueError saying what is wrong with the entry."""
    body = unseal(blob, MAGIC, FORMAT_VERSION, "run-cache entry")
    try:
        d = pickle.loads(body)  # noqa: S301 - a private file of this user, checksummed
        if d["key"] != key:
            raise ValueError("stored under another key")
        run, inputs = d["run"], tuple(tuple(x) for x in d["inputs"])
        if not isinstance(run, CompiledRun):
            raise ValueError("not a compiled run")
        return inputs, run
    except (KeyError, TypeError, ValueError, AttributeError, EOFError,
            pickle.UnpicklingError, ImportError) as exc:
        raise ValueError(f"malformed body: {exc}") from None


def lookup(cache: ProgramCache, key: str) -> CompiledRun | None:
    """The entry under `key` when its inputs are unchanged; None otherwise (a stale
    entry is removed, a damaged one reported and removed)."""
    blob = cache.read_entry(key + SUFFIX)
    if blob is None:
        cache.note(f"run miss {key[:16]}")
        return None
    try:
        inputs, run = decode(key, blob)
    except ValueError as exc:
        cache.discard_entry(key + SUFFIX, f"is corrupt ({exc})")
        return None
    why = unchanged(inputs)
    if why is not None:
        cache.note(f"run stale {key[:16]}: {why}")
        cache.remove_entry(key + SUFFIX)
        return None
    cache.note(f"run hit {key[:16]}")
    return run


def store(cache: ProgramCache, key: str, recorder: InputRecorder, run: CompiledRun,
          keyed: Sequence[str] = ()) -> None:
    try:
        inputs = recorder.inputs(keyed)
        data = encode(key, inputs, run)
    except (Uncacheable, pickle.PicklingError, TypeError, AttributeError) as exc:
        cache.note(f"run not stored: {exc}")
        return
    cache.write_entry(key + SUFFIX, data)
