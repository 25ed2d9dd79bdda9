"""What the checked expressions use, read off the typed trees: which arguments each probe
must read, which stacks it captures, and which begin-side values each span must capture.

A probe reads an argument when any expression that runs in it refers to it: its own
`where:` and string lengths, its outputs, the key of a span it begins or ends, and, for
the end probe of a span, the span's filter and outputs (their `begin.X` values run in
the begin probe, as captures).
"""

from __future__ import annotations

from collections.abc import Iterable

from planrunner.expr.typed import ArgRef, CaptureRef, StackRef, TExpr, refs
from planrunner.expr.types import StackKind
from planrunner.resolve.model import ResolvedOutput


def output_exprs(outputs: Iterable[ResolvedOutput]) -> list[TExpr]:
    """Every expression of `outputs`, in checking order (fields, by, value, where)."""
    out: list[TExpr] = []
    for o in outputs:
        out += [f.expr for f in o.fields]
        out += [f.expr for f in o.by]
        out += [e for e in (o.value, o.where) if e is not None]
    return out


def captures(exprs: Iterable[TExpr], span: str) -> tuple[CaptureRef, ...]:
    """The `begin.X` values of span `span` in `exprs`, each once, in order of first use
    (a span on it runs its own expressions at its event: their `begin.X` are theirs)."""
    seen: dict[CaptureRef, None] = {}
    for e in exprs:
        for ref in refs(e):
            if isinstance(ref, CaptureRef) and ref.span == span:
                seen.setdefault(ref)
    return tuple(seen)


def arg_indexes(exprs: Iterable[TExpr | None]) -> set[int]:
    """The argument indexes `exprs` refer to directly (not through a capture)."""
    return {ref.index for e in exprs if e is not None for ref in refs(e)
            if isinstance(ref, ArgRef)}


def stack_kinds(exprs: Iterable[TExpr | None]) -> tuple[StackKind, ...]:
    """The stacks `exprs` refer to directly (user first), each once."""
    kinds = {ref.kind for e in exprs if e is not None for ref in refs(e)
             if isinstance(ref, StackRef)}
    return tuple(k for k in ("user", "kernel") if k in kinds)
