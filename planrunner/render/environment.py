"""The Jinja environment for templates/: StrictUndefined (a typo in a template is an
error, not empty text), trimmed blocks and a kept trailing newline so the C is tidy and
byte-stable. Autoescape is off: templates receive only generated C, never plan text."""

from __future__ import annotations

import os
import sys
from functools import lru_cache

import jinja2

from planrunner.resources import data_dir


def c_comment(text: object) -> str:
    """Text safe inside a C block comment: printable ASCII only, no comment delimiters."""
    out = "".join(c if c.isascii() and c.isprintable() else "?" for c in str(text))
    return out.replace("*/", "*?").replace("/*", "?*")


class TemplateCodeCache(jinja2.BytecodeCache):
    """The compiled templates, kept in planrunner/__pycache__/jinja like the package's
    .pyc files (compiling program.bpf.c.j2 was ~12 ms of every first run). Trusted as
    a .pyc is (planrunner/dataclass_cache.py): read only when this user or root owns the
    file and no one else may write it; written unless PYTHONDONTWRITEBYTECODE says no.
    jinja2 checks each entry's magic and its template's checksum."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, bucket: jinja2.bccache.Bucket) -> str:
        return os.path.join(self.directory, f"{bucket.key}.cache")

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            with open(self._path(bucket), "rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022:
                    bucket.load_bytecode(fh)
        except OSError:
            pass

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if sys.dont_write_bytecode:
            return
        path = self._path(bucket)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as fh:
                bucket.write_bytecode(fh)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


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
