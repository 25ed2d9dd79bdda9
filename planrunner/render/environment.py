"""The Jinja environment for templates/: StrictUndefined (a typo in a template is an
error, not empty text), trimmed blocks and a kept trailing newline so the C is tidy and
byte-stable. Autoescape is off: templates receive only generated C, never plan text."""

from __future__ import annotations

import io
import os
from functools import lru_cache

import jinja2

from planrunner import pycache
from planrunner.resources import data_dir


def c_comment(text: object) -> str:
    """Text safe inside a C block comment: printable ASCII only, no comment delimiters."""
    out = "".join(c if c.isascii() and c.isprintable() else "?" for c in str(text))
    return out.replace("*/", "*?").replace("/*", "?*")


class TemplateCodeCache(jinja2.BytecodeCache):
    """The compiled templates, kept in planrunner/__pycache__/jinja like the package's
    .pyc files (compiling program.bpf.c.j2 was ~12 ms of every first run), read and
    written as planrunner/pycache.py says. jinja2 checks each entry's magic and its
    template's checksum."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, bucket: jinja2.bccache.Bucket) -> str:
        return os.path.join(self.directory, f"{bucket.key}.cache")

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        data = pycache.read(self._path(bucket))
        if data is not None:
            bucket.load_bytecode(io.BytesIO(data))

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        out = io.BytesIO()
        bucket.write_bytecode(out)
        pycache.write(self._path(bucket), out.getvalue())


def code_cache_dir() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "__pycache__", "jinja")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        bytecode_cache=TemplateCodeCache(code_cache_dir()),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["c_comment"] = c_comment
    return env


def render_template(name: str, **context: object) -> str:
    return environment().get_template(name).render(**context)


def template_text(name: str) -> str:
    """The raw text of a template file (for C headers included verbatim)."""
    return (data_dir("templates") / name).read_text(encoding="utf-8")
