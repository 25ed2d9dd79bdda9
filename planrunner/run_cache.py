"""The second cache level: what `run` computes before the kernel (load, resolve, render),
keyed by what it was computed from, so that a warm run skips parsing, resolving and
rendering and their imports (yaml, jsonschema, jinja2, pyelftools, capstone).

The first level (runtime/compile_cache.py) skips clang; this one skips the Python
before the backend, which on a warm run was most of the time left (BENCHMARKS.md,
"Issue 17 (round two): startup").

Key (SHA-256, length-prefixed parts): this file's format, the planrunner version and
the identity of its source files and of the templates and schema (a checkout edited
without a new version never gets a program pickled by older code), the plan's path and
bytes (read once, bounded as the loader bounds them, and handed to the loader), the
`--set` values (a value param's by class only: mask_sets), whether there is a --pid (not
which: an entry for another process is checked against this one's /proc files,
`rebased`), the -c command, the current directory, the whole environment
but the cache's own variables and those a shell or sudo sets per command line (`_`,
SUDO_COMMAND, OLDPWD) (preflight warnings read it), the effective uid, the kernel
(uname) and whether stderr is a terminal.

An entry also holds the list of inputs the compile declared (planrunner/inputs.py: the
code that reads a file, lists a directory, follows a link, reads a variable or probes
for an absence says what it looked at and what it found, when it found it), and a warm
run checks exactly that list again before using the entry: no audit hook, nothing
inferred. Files by mode, owner, device, inode, size, mtime and ctime, taken when read
(a binary replaced during the compile is a miss next time, never a stored error);
/proc and /sys files by their bytes (/proc/PID/stat by the process's start time,
recorded for every process whose /proc files were read: a pid reused is a miss);
listings by their names; links and realpaths by where they lead; variables by value;
absences as absences (an optional target that appears, a program installed in a PATH
directory before the one found). A compile during which an input changed between two
reads, or that used what cannot be named, is not stored.

Entries are pickles of the compile's result (RenderedProgram and what `run` shows
around it), in the same private directory and with the same header (magic, format,
SHA-256 of the body) as the program cache's; a damaged entry is removed and rebuilt.
Unpickling runs code only from modules planrunner imports, and the file is trusted as
far as the directory is: 0700, 0600, this user's (runtime/entry_store.py checks).
`run --no-cache` neither reads nor writes it.
"""

from __future__ import annotations

import os
import pickle
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planrunner import __version__
from planrunner.inputs import Input, InputLog, changed
from planrunner.runtime.entry_store import seal, unseal
from planrunner.sha256 import sha256

if TYPE_CHECKING:
    from planrunner.render.model import RenderedProgram
    from planrunner.runtime.entry_store import EntryStore

FORMAT_VERSION = 3
MAGIC = b"PRRUN\0\0\0"
SUFFIX = ".run"
# variables that change where the cache is and what it logs, never what a compile makes,
# and those a shell or sudo sets per command line (`_`: the program just run, by the
# path it was typed as; SUDO_COMMAND: the whole command line; OLDPWD): keyed, they
# would make runs that differ only in -d or in how planrunner was typed miss
_NOT_INPUTS = frozenset({"PLANRUNNER_CACHE_DIR", "PLANRUNNER_CACHE_LOG", "_",
                         "SUDO_COMMAND", "OLDPWD"})
# data the compile reads that is code, not input (resources.data_dir's folders)
_DATA = ("templates", "schema")


@dataclass(frozen=True, slots=True)
class CompiledRun:
    """What `run` needs of load/resolve/render: the program and what it shows beside."""

    program: RenderedProgram
    warnings: str  # resolve's diagnostics as printed, replayed verbatim
    shown: tuple[str, ...]  # outputs and tables in plan order (open_view's names)
    has_tables: bool
    plan_name: str
    description: str  # for --prometheus (which never takes an entry: the plan's)
    plans: tuple[tuple[str, str], ...] = ()  # each plan's (name, description)
    # the params keyed by class only (ValueParams); their defaults fill the program's
    # data params a run does not --set
    params: ValueParams = ()


def plans_part(paths: Sequence[str], plan_bytes: Sequence[bytes]) -> tuple[str, bytes]:
    """run_key's `plan` and `plan_bytes` for the plans of one run: one plan's own path
    and bytes; several plans' paths NUL-joined and their bytes, each length-prefixed."""
    if len(paths) == 1:
        return paths[0], plan_bytes[0]
    return "\0".join(paths), b"".join(struct.pack("<Q", len(b)) + b for b in plan_bytes)


# A plan's params whose value never shapes its program (resolve/scope.py Constants
# .value_params): (name, type, default or None). Stored per plan (params_key) by the
# compile, read before the run key is made: a `--set` of one of them is keyed by its
# class (param_values.data_class), not its value, so another threshold or size is a hit, and the
# hit's program gets this run's values (with_values).
ValueParams = tuple[tuple[str, str, "int | None"], ...]
PARAMS_SUFFIX = ".params"


def params_key(plan: str, plan_bytes: bytes) -> str:
    return _digest((f"planrunner-run-params:{FORMAT_VERSION}", __version__,
                    source_identity(), plan, plan_bytes))


def _digest(parts: Sequence[str | bytes]) -> str:
    """SHA-256 of `parts`, each length-prefixed: no two splits of the same bytes collide."""
    h = sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else part.encode("utf-8", "surrogateescape")
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.hexdigest()


def read_value_params(cache: EntryStore, key: str) -> ValueParams:
    blob = cache.read_entry(key + PARAMS_SUFFIX)
    if blob is None:
        return ()
    try:
        params = pickle.loads(unseal(blob, MAGIC, FORMAT_VERSION, "params entry"))  # noqa: S301
        if isinstance(params, tuple) and all(
                isinstance(p, tuple) and len(p) == 3 and isinstance(p[0], str)
                and p[1] in ("int", "duration") and (p[2] is None or isinstance(p[2], int))
                for p in params):
            return params
        raise ValueError("malformed")
    except (ValueError, EOFError, pickle.UnpicklingError, TypeError) as exc:
        cache.discard_entry(key + PARAMS_SUFFIX, f"is corrupt ({exc})")
        return ()


def store_value_params(cache: EntryStore, key: str, params: ValueParams) -> None:
    cache.write_entry(key + PARAMS_SUFFIX, seal(
        MAGIC, FORMAT_VERSION, pickle.dumps(params, protocol=pickle.HIGHEST_PROTOCOL)))


def mask_sets(sets: Sequence[str], params: ValueParams) -> tuple[list[str], dict[str, int]]:
    """`sets` as the run key takes them, with the values given to `params`. A value
    param's `--set` items are dropped and replaced, for every value param, by its class
    (param_values.data_class) with the value it has in this run (given, else its
    default): data values share one key, given or not; a const value (a negative int)
    or a text that is no value is keyed as given."""
    from planrunner.param_values import ParamValueError, convert, data_class

    types = {name: ptype for name, ptype, _ in params}
    effective: dict[str, object] = {name: default for name, _, default in params}
    kept, given = [], {}
    for item in sets:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in types:
            kept.append(item)
            continue
        try:
            effective[name] = given[name] = convert(types[name], text)
        except ParamValueError:
            kept.append(item)  # the compile says what is wrong with it
            effective[name] = None
    tags, values = [], {}
    for name in sorted(types):
        value = effective[name]
        if isinstance(value, int) and data_class(types[name], value) == "data":
            tags.append(f"{name}=\0data")
            if name in given:
                values[name] = value
        else:
            tags.append(f"{name}=\0{value!r}")
    return kept + tags, values


def with_values(run: CompiledRun, values: dict[str, int]) -> CompiledRun:
    """`run` (a hit) with its data params set to this run's `values` (else defaults)."""
    program = run.program
    if not program.data_params:
        return run
    from dataclasses import replace

    from planrunner.param_values import pack_values

    given = {name: default for name, _, default in run.params if default is not None}
    given.update(values)
    return replace(run, program=replace(
        program, param_values=pack_values(program.data_params, given)))


def run_key(plan: str, plan_bytes: bytes, sets: Sequence[str], pid_given: bool,
            command: str | None, stderr_tty: bool,
            environ: dict[str, str] | None = None, cwd: str | None = None,
            kernel: str | None = None) -> str:
    env = os.environ if environ is None else environ
    if kernel is None:
        u = os.uname()
        kernel = f"{u.release}|{u.version}|{u.machine}"
    return _digest((f"planrunner-run-cache:{FORMAT_VERSION}", __version__, source_identity(),
                    plan, plan_bytes,
                    "\0".join(sets), "--pid" if pid_given else "", command or "",
                    cwd if cwd is not None else os.getcwd(),
                    "\0".join(f"{k}={v}" for k, v in sorted(env.items())
                              if k not in _NOT_INPUTS),
                    str(os.geteuid()), kernel,
                    str(stderr_tty)))


def source_identity(root: str | None = None) -> str:
    """Path, size, mtime and ctime of every file of the planrunner package and of the
    data it reads as code (templates/, schema/) (~200 stats, under a millisecond): the
    code that computed an entry, which the version alone does not name in a working
    tree."""
    h = sha256()
    package = os.path.dirname(os.path.abspath(__file__))
    roots = [root] if root else [package]
    for name in () if root else _DATA:  # as resources.data_dir finds them (no pathlib)
        roots += [next((d for d in (os.path.join(package, "_data", name),
                                    os.path.join(os.path.dirname(package), name))
                        if os.path.isdir(d)), package)]
    for top in roots:
        stack = [top]
        while stack:
            with os.scandir(stack.pop()) as it:
                for e in sorted(it, key=lambda e: e.name):
                    if e.is_dir(follow_symlinks=False):
                        if e.name != "__pycache__":
                            stack.append(e.path)
                    elif e.name.endswith(".py") or top != package:
                        st = e.stat()
                        h.update(f"{e.path}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}\n"
                                 .encode("utf-8", "surrogateescape"))
    return h.hexdigest()


# --- inputs -----------------------------------------------------------------------------

class Uncacheable(Exception):
    pass


def declared_inputs(log: InputLog) -> tuple[Input, ...]:
    """What the compile declared it read (planrunner/inputs.py), each as found when it
    was read. Raises Uncacheable when that list cannot stand for the compile."""
    if log.unkeyable_why:
        raise Uncacheable(f"the compile used {log.unkeyable_why}")
    if log.moved:
        raise Uncacheable(log.moved)  # the next run compiles again, and stores
    return log.inputs()


# --- entries ----------------------------------------------------------------------------

def encode(key: str, inputs: Sequence[Input], run: CompiledRun) -> bytes:
    body = pickle.dumps({"key": key, "inputs": tuple(inputs), "run": run},
                        protocol=pickle.HIGHEST_PROTOCOL)
    return seal(MAGIC, FORMAT_VERSION, body)


def decode(key: str, blob: bytes) -> tuple[tuple[Input, ...], CompiledRun]:
    """Raises ValueError saying what is wrong with the entry."""
    body = unseal(blob, MAGIC, FORMAT_VERSION, "run-cache entry")
    try:
        d = pickle.loads(body)  # noqa: S301 - a private file of this user, checksummed
        if d["key"] != key:
            raise ValueError("stored under another key")
        run, inputs = d["run"], d["inputs"]
        if not isinstance(run, CompiledRun):
            raise ValueError("not a compiled run")
        if not isinstance(inputs, tuple) or not all(
                isinstance(x, tuple) and len(x) == 3 and all(isinstance(p, str) for p in x)
                for x in inputs):
            raise ValueError("malformed input list")
        return inputs, run
    except (KeyError, TypeError, ValueError, AttributeError, EOFError,
            pickle.UnpicklingError, ImportError) as exc:
        raise ValueError(f"malformed body: {exc}") from None


def lookup(cache: EntryStore, key: str, pid: int | None = None) -> CompiledRun | None:
    """The entry under `key` when its inputs are unchanged; None otherwise (a stale
    entry is removed, a damaged one reported and removed). With `pid` (--pid), an entry
    compiled for another process is checked against this one's files (rebased)."""
    blob = cache.read_entry(key + SUFFIX)
    if blob is None:
        cache.note(f"run miss {key[:16]}")
        return None
    try:
        inputs, run = decode(key, blob)
    except ValueError as exc:
        cache.discard_entry(key + SUFFIX, f"is corrupt ({exc})")
        return None
    old = run.program.pid
    if pid is not None and old is not None and old != pid:
        if f"process {old}" in run.warnings:  # said of that process: compile for this one
            cache.note(f"run miss {key[:16]}: its warnings name process {old}")
            return None
        inputs = rebased(inputs, old, pid)
    why = changed(inputs)
    if why is not None:
        cache.note(f"run stale {key[:16]}: {why}")
        cache.remove_entry(key + SUFFIX)
        return None
    cache.note(f"run hit {key[:16]}")
    if pid is not None and old != pid:
        from dataclasses import replace

        run = replace(run, program=replace(run.program, pid=pid))
    return run


def rebased(inputs: Sequence[Input], old: int, new: int) -> tuple[Input, ...]:
    """The inputs of a compile for --pid `old` as those of one for `new`: what it read
    of /proc/OLD (the process's root, cmdline, environ...) read of /proc/NEW instead,
    less OLD's identity (its start time: it only told a reused pid, and this is another
    process by design). A new process that differs in any of them is a miss."""
    prefix, to = f"/proc/{old}/", f"/proc/{new}/"
    return tuple((kind, to + what[len(prefix):] if what.startswith(prefix) else what, found)
                 for kind, what, found in inputs
                 if not (kind == "content" and what == f"/proc/{old}/stat"))


def store(cache: EntryStore, key: str, log: InputLog, run: CompiledRun) -> None:
    try:
        data = encode(key, declared_inputs(log), run)
    except (Uncacheable, pickle.PicklingError, TypeError, AttributeError) as exc:
        cache.note(f"run not stored: {exc}")
        return
    cache.write_entry(key + SUFFIX, data)
