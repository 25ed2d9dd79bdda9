"""The user-facing error hierarchy. Every error a user can cause is a PlanError
carrying one or more Diagnostics; an internal bug is never a PlanError."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:  # imported when an error is made: every command imports this module
    from planrunner.diagnostics import Diagnostic, Span

P = ParamSpec("P")
R = TypeVar("R")


class PlanError(Exception):
    """Root of every user-facing error. Exit code 1 unless a subclass says otherwise."""

    exit_code = 1

    def __init__(self, diagnostics: Iterable[Diagnostic] | str, span: Span | None = None,
                 hints: tuple[str, ...] = ()) -> None:
        if isinstance(diagnostics, str):
            from planrunner.diagnostics import Diagnostic

            diagnostics = [Diagnostic(diagnostics, span, hints)]
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        if not self.diagnostics:
            raise ValueError("PlanError needs at least one diagnostic")
        super().__init__(self.diagnostics[0].headline())


class PlanSyntaxError(PlanError):
    """The file is not valid YAML/TOML."""


class PlanSchemaError(PlanError):
    """The plan does not match schema/plan.schema.json. `partial`: the Plan built from
    the parts the schema accepted, when building them found nothing wrong (the pipeline
    resolves it, so that the mistakes resolve finds are told with these)."""

    partial: object = None  # a plan.model.Plan; errors.py imports no stage


class PlanSemanticError(PlanError):
    """Cross-field mistakes: unknown probe references, bad params, duplicate keys..."""


class ExpressionError(PlanError):
    """A `where`/`fields`/`value`/`by` expression that does not parse or type-check."""


class ResolveError(PlanError):
    """A target, probe, symbol or tracepoint that cannot be found or read."""


class OperandError(PlanError):
    """A USDT argument operand that cannot be decoded or read on this architecture."""


class BackendError(PlanError):
    """Compiling, loading or attaching the BPF program failed."""


class BackendUnavailable(PlanError):
    """The machine lacks what `run` needs (root, bcc, kernel headers). Exit code 3."""

    exit_code = 3


class UsageError(PlanError):
    """Bad command-line input (unknown --set name, bad value). Exit code 2."""

    exit_code = 2


class CommandNotFound(UsageError):
    """`-c` names a program that cannot be run. Exit code 127, as a shell's."""

    exit_code = 127


def collect(errors: Iterable[PlanError], cls: type[PlanError] = PlanError) -> PlanError | None:
    """Merge several PlanErrors into one of class `cls` (None when there are none);
    a diagnostic raised twice (the same check on a span's begin and end) is kept once."""
    diags: list[Diagnostic] = []
    for err in errors:
        diags.extend(err.diagnostics)
    diags = list(dict.fromkeys(diags))
    return cls(diags) if diags else None


def raise_collected(errors: Iterable[PlanError], cls: type[PlanError] = PlanError) -> None:
    """Raise every diagnostic of `errors` as one `cls`; return when there are none."""
    err = collect(errors, cls)
    if err is not None:
        raise err


def attempt(errors: list[PlanError], fn: Callable[P, R], *args: P.args,
            **kwargs: P.kwargs) -> R | None:
    """fn(*args, **kwargs), or None with its PlanError appended to `errors` (for stages
    that report every mistake of a plan at once)."""
    try:
        return fn(*args, **kwargs)
    except PlanError as err:
        errors.append(err)
        return None
