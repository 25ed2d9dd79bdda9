"""A loaded plan file: plain data plus a SourceMap from JSON paths to Spans.

Both loaders (load_yaml.py, load_toml.py) produce a LoadedPlan. A JSON path is a tuple
of mapping keys (str) and list indexes (int), e.g. ('probes', 'start', 'usdt') or
('outputs', 0, 'fields', 2). For every node the map keeps up to three spans:
- `key(path)`: the mapping key that introduced the node (None for list items / root),
- `value(path)`: the whole value as written (quotes included),
- `text(path)`: where the scalar's characters start (after an opening quote), which is
  what expression and `${param}` diagnostics shift from.
A path with no entry falls back to its nearest recorded ancestor, so every lookup
returns a usable location.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planrunner.diagnostics import Span

JsonPath = tuple[str | int, ...]
JsonObj = dict[str, Any]  # a mapping of the plan as loaded (keys are strings)


@dataclass
class SourceMap:
    """JSON path -> spans of one plan file (see the module docstring)."""

    path: str
    keys: dict[JsonPath, Span] = field(default_factory=dict)
    values: dict[JsonPath, Span] = field(default_factory=dict)
    texts: dict[JsonPath, Span] = field(default_factory=dict)

    def record(self, jpath: JsonPath, value: Span, key: Span | None = None,
               text: Span | None = None) -> None:
        self.values[jpath] = value
        if key is not None:
            self.keys[jpath] = key
        if text is not None:
            self.texts[jpath] = text

    def _lookup(self, table: dict[JsonPath, Span], jpath: JsonPath) -> Span | None:
        return table.get(tuple(jpath))

    def _nearest(self, jpath: JsonPath) -> Span:
        jpath = tuple(jpath)
        while jpath:
            span = self.values.get(jpath) or self.keys.get(jpath)
            if span is not None:
                return span
            jpath = jpath[:-1]
        return self.values.get((), Span(self.path, 1, 1))

    def value(self, jpath: JsonPath) -> Span:
        """The value's span, or the nearest ancestor's."""
        return self._lookup(self.values, jpath) or self._nearest(jpath)

    def key(self, jpath: JsonPath) -> Span:
        """The key's span; the value's for list items; else the nearest ancestor's."""
        return (self._lookup(self.keys, jpath) or self._lookup(self.values, jpath)
                or self._nearest(jpath))

    def text(self, jpath: JsonPath) -> Span:
        """Where a scalar's characters start (after an opening quote)."""
        return self._lookup(self.texts, jpath) or self.value(jpath)

    def has(self, jpath: JsonPath) -> bool:
        return tuple(jpath) in self.values


@dataclass(frozen=True)
class LoadedPlan:
    """What a loader returns: the file, its data (dicts, lists, scalars) and the map."""

    path: str
    source_text: str
    data: object
    spans: SourceMap
    format: str  # "yaml" or "toml"


def describe(jpath: JsonPath) -> str:
    """A short human name for the node at `jpath`: "probe 'start'", "output 0", ..."""
    names = {"probes": "probe", "targets": "target", "params": "param"}
    if not jpath:
        return "the plan"
    head = jpath[0]
    if len(jpath) == 1:
        return f"'{head}'"
    if head in names and len(jpath) >= 2:
        base = f"{names[str(head)]} '{jpath[1]}'"
        rest = jpath[2:]
    elif head == "outputs":
        base = f"output {jpath[1]}"
        rest = jpath[2:]
    else:
        base = f"'{head}'"
        rest = jpath[1:]
    if not rest:
        return base
    return f"{format_path(rest)} in {base}"


def format_path(jpath: JsonPath) -> str:
    """('args', 0, 'name') -> 'args[0].name' (0-based indexes, as in the file's lists)."""
    out = ""
    for part in jpath:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return f"'{out}'"
