"""The Jinja environment for templates/: StrictUndefined (a typo in a template is an
error, not empty text), trimmed blocks and a kept trailing newline so the C is tidy and
byte-stable. Autoescape is off: templates receive only generated C, never plan text."""

from __future__ import annotations

from functools import lru_cache

import jinja2

from planrunner.resources import data_dir


def c_comment(text: object) -> str:
    """Text safe inside a C block comment: printable ASCII only, no comment delimiters."""
    out = "".join(c if c.isascii() and c.isprintable() else "?" for c in str(text))
    return out.replace("*/", "*?").replace("/*", "?*")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
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
