"""C identifiers made from plan names. Plan names are identifiers
([A-Za-z_][A-Za-z0-9_-]*, checked by the schema); `-` becomes `_`."""

from __future__ import annotations

from collections.abc import Callable

from planrunner.probe_kinds import (
    PERF_SITE,
    TRACEPOINT_SITE,
    UPROBE_SITE,
    URETPROBE_SITE,
    SiteKind,
    site_kind,
)


def c_ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def thunk_name(probe: str, kind: str, index: int) -> str:
    """The C function attached at one site of `probe`."""
    return f"pr_{c_ident(probe)}{THUNK_SUFFIXES[site_kind(kind)](index)}"


def _site_suffix(index: int) -> str:
    return f"_s{index}"


def _tracepoint_suffix(index: int) -> str:
    return f"_tp{index}" if index else "_tp"  # a tracepoint set has one per event


def _perf_suffix(index: int) -> str:
    return "_perf"


# What ends the name of the thunk of each kind of site (the `index`th of its probe).
THUNK_SUFFIXES: dict[SiteKind, Callable[[int], str]] = {
    UPROBE_SITE: _site_suffix,
    URETPROBE_SITE: _site_suffix,
    TRACEPOINT_SITE: _tracepoint_suffix,
    PERF_SITE: _perf_suffix,
}
