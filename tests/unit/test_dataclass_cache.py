"""planrunner/dataclass_cache.py: the code objects of planrunner's dataclass methods are
those the standard library compiles (same bytecode, constants, names, annotations and
behaviour), a later process takes them from the file instead of compiling, and a file
that is damaged, of another interpreter or writable by others is not used."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from planrunner import dataclass_cache

ROOT = Path(__file__).resolve().parents[2]
SOURCE = textwrap.dedent('''
    from __future__ import annotations
    from dataclasses import dataclass, field

    @dataclass(frozen=True, slots=True)
    class Point:
        """doc"""
        x: int
        y: tuple[int, ...] = ()
        tags: list[str] = field(default_factory=list, compare=False)

    @dataclass
    class Box:
        """doc"""
        p: Point
        n: int = 0
''')


def _module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    try:
        exec(compile(SOURCE, f"<{name}>", "exec"), mod.__dict__)
    finally:
        del sys.modules[name]
    return mod


METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")


@pytest.fixture
def installed() -> Iterator[None]:
    """The cache in this process, for one test (the CLI's entry installs it, never an
    import of planrunner)."""
    dataclass_cache.install()
    yield
    dataclass_cache.uninstall()


def test_the_methods_are_those_the_standard_library_compiles(installed: None) -> None:
    ours = _module("planrunner._dc_probe")  # through the cache
    ours_again = _module("planrunner._dc_probe")  # from the cache: the same code
    mine = dataclasses.__dict__.pop("exec")
    try:
        plain = _module("planrunner._dc_probe")  # the standard library alone
    finally:
        dataclasses.exec = mine  # type: ignore[attr-defined]
    assert ours_again.Point.__init__.__code__ is ours.Point.__init__.__code__
    other = _module("other_package._dc_probe")  # not ours: compiled each time, as before
    assert other.Point.__init__.__code__.co_flags == plain.Point.__init__.__code__.co_flags
    for cls in ("Point", "Box"):
        for name in METHODS:
            a, b = getattr(getattr(ours, cls), name), getattr(getattr(plain, cls), name)
            if not hasattr(a, "__code__"):
                assert not hasattr(b, "__code__")  # inherited from object in both
                continue
            for attr in ("co_code", "co_consts", "co_names", "co_varnames", "co_filename",
                         "co_flags"):
                assert getattr(a.__code__, attr) == getattr(b.__code__, attr), (cls, name)
            assert a.__annotations__ == b.__annotations__, (cls, name)
    p = ours.Point(1, (2,), ["t"])
    assert p == ours.Point(1, (2,), ["other"]) and hash(p) == hash(ours.Point(1, (2,)))
    assert repr(p) == "Point(x=1, y=(2,), tags=['t'])"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3  # type: ignore[misc]
    assert dataclasses.replace(p, x=5).x == 5
    assert ours.Box(p).n == 0


def _child(cache: Path, code: str) -> str:
    program = ("import sys\nfrom planrunner import dataclass_cache\n"
               f"dataclass_cache.install({str(cache)!r})\n" + code)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          check=True, cwd=ROOT, env=env).stdout


MAKE = ("import types\nm = types.ModuleType('planrunner._dc_child')\n"
        "sys.modules[m.__name__] = m\n"
        f"exec({SOURCE!r}, m.__dict__)\n"
        "print(dataclass_cache.compiled, m.Point(1) == m.Point(1))\n")


def test_a_later_process_takes_the_code_from_the_file(tmp_path: Path) -> None:
    cache = tmp_path / "__pycache__" / "dataclasses.bin"
    first = _child(cache, MAKE).split()
    assert int(first[0]) >= 8 and first[1] == "True"  # compiled, then written at exit
    assert cache.exists()
    assert _child(cache, MAKE).split() == ["0", "True"]  # every method from the file


def test_a_damaged_foreign_or_open_file_is_not_used(tmp_path: Path) -> None:
    cache = tmp_path / "__pycache__" / "dataclasses.bin"
    _child(cache, MAKE)
    good = cache.read_bytes()
    cache.write_bytes(good[: len(good) // 2])  # truncated
    assert int(_child(cache, MAKE).split()[0]) >= 8
    cache.write_bytes(good.replace(b"PRDC2\0", b"PRDC1\0x", 1))  # another interpreter
    assert int(_child(cache, MAKE).split()[0]) >= 8
    cache.write_bytes(good)
    os.chmod(cache, 0o666)  # anyone may write it: not trusted
    assert int(_child(cache, MAKE).split()[0]) >= 8
    os.chmod(cache, 0o644)
    assert _child(cache, MAKE).split()[0] == "0"
