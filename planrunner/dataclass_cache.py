"""The code objects of dataclass methods, kept between runs like the interpreter's own
__pycache__ (issue 17: start-up).

The standard library's dataclasses writes the source of each class's __init__,
__repr__, __eq__, __hash__ (and, frozen, __setattr__ and __delattr__) and compiles it
at every start: ~0.4 ms a class on the machines of BENCHMARKS.md, 112 classes (47 ms)
before a first run's program can be compiled, as many in `validate`. Compiling is the
cost; the source is the same from one run to the next.

`install()`, called by the command line's entry (planrunner.cli.run_and_exit) and never
on import, gives the dataclasses module an `exec` of its own (a module global, looked up
before the builtin; nothing else changes) that compiles each source text of a planrunner
class once (other modules' classes are left alone) and keeps the code object, under a
BLAKE2 hash of the text and by module, in `planrunner/__pycache__/dataclasses.TAG.bin` (TAG: this
interpreter's cache tag; the file's header names the exact version, as marshal and
bytecode are per version). The code is what `exec` of the text
would have compiled: same file name, no inherited `__future__` flags (dataclasses.py
has none). A text never seen is compiled as before, and kept when the process exits
(unless PYTHONDONTWRITEBYTECODE says no .pyc may be written).

The file is read and written as planrunner/pycache.py says (trusted as a .pyc is:
this user's or root's, writable by no one else). Anything wrong with it (missing,
damaged, another version) means compiling, as without it.
"""

from __future__ import annotations

import builtins
import marshal
import os
import sys
from _blake2 import blake2b  # builtin: hashlib would load OpenSSL (~2 ms of every start)
from types import CodeType
from typing import Any

from planrunner import pycache

MAGIC = b"PRDC2\0"
MAX_PER_MODULE = 256  # beyond it, a module keeps only what this process used
OURS = "planrunner."  # classes of other modules are made as the standard library makes them
# The file holds, per module, the marshalled codes of its classes: a module's are
# unmarshalled when it first makes a class (a warm `run` needs a fifth of them).
_blobs: dict[str, bytes] = {}  # module -> its marshalled {key: code}, as read
_codes: dict[str, dict[bytes, CodeType]] = {}  # module -> {key: code}, once needed
_used: dict[str, set[bytes]] = {}
_changed: set[str] = set()  # modules that compiled something new
compiled = 0  # source texts compiled by this process (the rest came from the file)
_path: str | None = None


def _version() -> bytes:
    return f"{sys.implementation.cache_tag}|{sys.version}".encode()


def cache_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__",
                        f"dataclasses.{sys.implementation.cache_tag}.bin")


def _load(path: str) -> dict[str, bytes]:
    blob = pycache.read(path)
    head = MAGIC + _version() + b"\n"
    if blob is None or not blob.startswith(head):
        return {}
    try:
        blobs = marshal.loads(blob[len(head):])
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(blobs, dict) or not all(
            isinstance(k, str) and isinstance(v, bytes) for k, v in blobs.items()):
        return {}
    return blobs


def _module_codes(module: str) -> dict[bytes, CodeType]:
    codes = _codes.get(module)
    if codes is None:
        codes = {}
        try:
            found = marshal.loads(_blobs.get(module, b"{}"))
        except (EOFError, ValueError, TypeError):
            found = None
        if isinstance(found, dict):
            codes = {k: v for k, v in found.items()
                     if isinstance(k, bytes) and isinstance(v, CodeType)}
        _codes[module] = codes
        _used[module] = set()
    return codes


def _exec(source: Any, globals_: dict[str, Any] | None = None,
          locals_: dict[str, Any] | None = None) -> None:
    """builtins.exec, with the code of a source text compiled once."""
    global compiled
    if isinstance(source, str):
        module = str((globals_ or {}).get("__name__", ""))
        # never this module's __future__ flags: dataclasses' frame, which calls exec, has
        # none, and the builtin exec would compile with the flags of its caller
        if not module.startswith(OURS):
            source = compile(source, "<string>", "exec", dont_inherit=True)
        else:
            codes = _module_codes(module)
            key = blake2b(source.encode(), digest_size=16).digest()
            code = codes.get(key)
            if code is None:
                code = codes[key] = compile(source, "<string>", "exec", dont_inherit=True)
                _changed.add(module)
                compiled += 1
            _used[module].add(key)
            source = code
    builtins.exec(source, globals_, locals_)


def save() -> None:
    """Write what this process compiled (at exit; never raises)."""
    if not _changed or _path is None:
        return
    blobs = dict(_blobs)
    for module in _changed:
        codes = _codes[module]
        if len(codes) > MAX_PER_MODULE:
            codes = {k: codes[k] for k in _used[module]}
        blobs[module] = marshal.dumps(codes)
    try:
        data = MAGIC + _version() + b"\n" + marshal.dumps(blobs)
    except ValueError:  # a code object marshal cannot write: nothing is kept
        return
    if pycache.write(_path, data):
        _blobs.update(blobs)
        _changed.clear()


def install(path: str | None = None) -> None:
    """Route dataclasses' compiles through the cache at `path` (default: cache_path());
    called again with another path, the cache is that file's from then on."""
    global _path
    import dataclasses

    path = path or cache_path()
    if path != _path:
        _path = path
        for table in (_blobs, _codes, _used):
            table.clear()
        _changed.clear()
        _blobs.update(_load(path))
    if dataclasses.__dict__.get("exec") is not _exec:
        vars(dataclasses)["exec"] = _exec  # a module global, found before the builtin
        import atexit

        atexit.register(save)


def uninstall() -> None:
    """Give dataclasses its builtin exec back and keep nothing at exit (tests)."""
    import atexit
    import dataclasses

    if dataclasses.__dict__.get("exec") is _exec:
        del vars(dataclasses)["exec"]
    atexit.unregister(save)
