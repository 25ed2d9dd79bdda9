"""render/environment.py TemplateCodeCache: a template compiled once is taken from
planrunner's __pycache__ by the next process (no compile), renders the same C, and a
file others may write, or PYTHONDONTWRITEBYTECODE, means compiling as before."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jinja2
import pytest

from planrunner.render import environment as envmod


def _env(cache_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=envmod.environment().loader,
                             bytecode_cache=envmod.TemplateCodeCache(str(cache_dir)),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(envmod.environment().filters)
    return env


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    original = jinja2.Environment.compile

    def counting(self, source, name=None, filename=None, raw=False, defer_init=False):  # type: ignore[no-untyped-def]
        seen.append(str(name))
        return original(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    return seen


def test_a_template_compiled_once_is_read_back(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    seen = _compiles(monkeypatch)
    first = _env(tmp_path).get_template("program.bpf.c.j2")
    assert seen == ["program.bpf.c.j2"] and list(tmp_path.iterdir())
    again = _env(tmp_path).get_template("program.bpf.c.j2")  # a new environment: a new run
    assert seen == ["program.bpf.c.j2"]  # not compiled again
    assert first.name == again.name  # (the goldens render through the cache too)


def test_an_open_file_or_no_bytecode_means_compiling(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    seen = _compiles(monkeypatch)
    _env(tmp_path).get_template("program.bpf.c.j2")
    for f in tmp_path.iterdir():
        os.chmod(f, 0o666)  # anyone may write it: not read
    _env(tmp_path).get_template("program.bpf.c.j2")
    assert len(seen) == 2
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    other = tmp_path / "other"
    _env(other).get_template("program.bpf.c.j2")
    assert not other.exists()
