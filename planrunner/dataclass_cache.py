"""The code objects of dataclass methods, kept between runs like the interpreter's own
__pycache__ (issue 17: start-up).

The standard library's dataclasses writes the source of each class's __init__,
__repr__, __eq__, __hash__ (and, frozen, __setattr__ and __delattr__) and compiles it
at every start: ~0.4 ms a class on the machines of BENCHMARKS.md, 112 classes (47 ms)
before a first run's program can be compiled, as many in `validate`. Compiling is the
cost; the source is the same from one run to the next.

`install()` gives the dataclasses module an `exec` of its own (a module global, looked up
before the builtin; nothing else changes) that compiles each source text of a planrunner
class once (other modules' classes are left alone) and keeps the code object, under a
BLAKE2 hash of the text, in `planrunner/__pycache__/dataclasses.TAG.bin` (TAG: this
interpreter's cache tag; the file's header names the exact version, as marshal and
bytecode are per version). The code is what `exec` of the text
would have compiled: same file name, no inherited `__future__` flags (dataclasses.py
has none). A text never seen is compiled as before, and kept when the process exits
(unless PYTHONDONTWRITEBYTECODE says no .pyc may be written).

The file is trusted as far as its directory is, like a .pyc: used only when the
directory and the file belong to this user (or root) and no one else may write them.
Anything wrong with it (missing, damaged, another version) means compiling, as without
it.
"""

from __future__ import annotations

import builtins
import marshal
import os
import sys
from _blake2 import blake2b  # builtin: hashlib would load OpenSSL (~2 ms of every start)
from types import CodeType
from typing import Any

MAGIC = b"PRDC1\0"
MAX_ENTRIES = 2048  # a bound on the file: beyond it, only what this process used is kept
OURS = "planrunner."  # classes of other modules are made as the standard library makes them
_codes: dict[bytes, CodeType] = {}  # from the file, and those compiled by this process
_used: set[bytes] = set()
compiled = 0  # source texts compiled by this process (the rest came from the file)
_added = False
_path: str | None = None


def _version() -> bytes:
    return f"{sys.implementation.cache_tag}|{sys.version}".encode()


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022


def cache_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__",
                        f"dataclasses.{sys.implementation.cache_tag}.bin")


def _load(path: str) -> dict[bytes, CodeType]:
    try:
        if not _trusted(os.stat(os.path.dirname(path))):
            return {}
        with open(path, "rb") as fh:
            if not _trusted(os.fstat(fh.fileno())):
                return {}
            blob = fh.read()
    except OSError:
        return {}
    head = MAGIC + _version() + b"\n"
    if not blob.startswith(head):
        return {}
    try:
        codes = marshal.loads(blob[len(head):])
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(codes, dict) or not all(
            isinstance(k, bytes) and isinstance(v, CodeType) for k, v in codes.items()):
        return {}
    return codes


def _exec(source: Any, globals_: dict[str, Any] | None = None,
          locals_: dict[str, Any] | None = None) -> None:
    """builtins.exec, with the code of a source text compiled once."""
    global _added, compiled
    if isinstance(source, str):
        # never this module's __future__ flags: dataclasses' frame, which calls exec, has
        # none, and the builtin exec would compile with the flags of its caller
        if not str((globals_ or {}).get("__name__", "")).startswith(OURS):
            source = compile(source, "<string>", "exec", dont_inherit=True)
        else:
            key = blake2b(source.encode(), digest_size=16).digest()
            code = _codes.get(key)
            if code is None:
                code = compile(source, "<string>", "exec", dont_inherit=True)
                _codes[key] = code
                _added = True
                compiled += 1
            _used.add(key)
            source = code
    builtins.exec(source, globals_, locals_)


def save() -> None:
    """Write what this process compiled (at exit; never raises)."""
    global _added
    if not _added or _path is None or sys.dont_write_bytecode:  # as for .pyc files
        return
    keep = _codes if len(_codes) <= MAX_ENTRIES else {k: _codes[k] for k in _used}
    directory = os.path.dirname(_path)
    tmp = f"{_path}.{os.getpid()}.tmp"
    try:
        os.makedirs(directory, exist_ok=True)
        if not _trusted(os.stat(directory)):
            return
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + _version() + b"\n" + marshal.dumps(keep))
        os.replace(tmp, _path)
        _added = False
    except (OSError, ValueError):
        try:
            os.unlink(tmp)
        except OSError:
            pass


def install(path: str | None = None) -> None:
    """Route dataclasses' compiles through the cache at `path` (default: cache_path());
    called again with another path, the cache is that file's from then on."""
    global _path
    import dataclasses

    path = path or cache_path()
    if path != _path:
        _path = path
        _codes.clear()
        _used.clear()
        _codes.update(_load(path))
    if dataclasses.__dict__.get("exec") is not _exec:
        vars(dataclasses)["exec"] = _exec  # a module global, found before the builtin
        import atexit

        atexit.register(save)
