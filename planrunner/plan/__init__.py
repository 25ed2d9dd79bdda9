"""Plans: read a plan file (YAML or TOML) with positions, check it, build the Plan model.

    load_plan(path, overrides)            -> Plan     load -> schema -> build
    validate_schema_only(path, overrides) -> LoadedPlan   load -> schema (for --schema-only)
    load_source(path)                     -> LoadedPlan   load only (by extension)

Each stage raises one PlanError subclass carrying all of its Diagnostics:
PlanSyntaxError (load), PlanSchemaError (schema), UsageError (params from --set),
PlanSemanticError (build). A plan with schema errors is still built, without the
entries the schema broke (validate.SchemaReport), and the PlanSchemaError raised then
carries the schema and the semantic diagnostics together, in file order, each once,
and that partial Plan when it built (pipeline.py resolves it for resolve's mistakes).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planrunner.diagnostics import Diagnostic
from planrunner.errors import PlanError, PlanSchemaError, UsageError
from planrunner.plan.model import Plan
from planrunner.plan.params import parse_overrides
from planrunner.plan.source import JsonPath, LoadedPlan

if TYPE_CHECKING:
    from planrunner.plan.validate import SchemaReport

SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}

__all__ = ["Plan", "LoadedPlan", "load_plan", "load_source", "parse_overrides",
           "validate_schema_only"]


def load_source(path: str | Path, source: bytes | None = None) -> LoadedPlan:
    """Read and parse `path` by its extension (.yaml, .yml, .toml); `source`: its bytes,
    when the caller read them already (`run`, for its cache key: read once)."""
    path = str(path)
    kind = SUFFIXES.get(Path(path).suffix.lower())
    if kind is None:
        raise UsageError(f"{path}: a plan file ends in .yaml, .yml or .toml")
    from planrunner.plan.limits import read_bounded

    try:
        text = read_bounded(path, source)  # a size bound, before any parsing (plan/limits.py)
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read plan {path}: {getattr(exc, 'strerror', None) or exc}"
                        ) from None
    if kind == "yaml":
        from planrunner.plan.load_yaml import load_yaml
        return load_yaml(path, text)
    from planrunner.plan.load_toml import load_toml
    return load_toml(path, text)


def validate_schema_only(path: str | Path, overrides: dict[str, str] | None = None
                         ) -> LoadedPlan:
    """Load and schema-check `path`; raise PlanSyntaxError or PlanSchemaError.

    `overrides` is accepted for symmetry with load_plan and not used: the schema
    concerns the file alone.
    """
    from planrunner.plan.validate import validate

    loaded = load_source(path)
    validate(loaded)
    return loaded


def load_plan(path: str | Path, overrides: dict[str, str] | None = None, *,
              require_params: bool = True, source: bytes | None = None) -> Plan:
    """Load, schema-check and build the plan at `path` with `--set` overrides.

    With require_params=False a required param without a value is left out of
    `param_values` instead of being a UsageError (for `validate` of a library plan).
    """
    from planrunner.plan.build import build
    from planrunner.plan.validate import schema_report

    loaded = load_source(path, source)
    report = schema_report(loaded)
    if report.diagnostics:
        diagnostics, plan = _with_semantic(loaded, report, dict(overrides or {}))
        err = PlanSchemaError(diagnostics)
        err.partial = plan
        raise err
    return build(loaded, dict(overrides or {}), require_params=require_params)


def _with_semantic(loaded: LoadedPlan, report: SchemaReport, overrides: dict[str, str]
                   ) -> tuple[list[Diagnostic], Plan | None]:
    """The schema's diagnostics and those of building the parts the schema accepted,
    in file order, each once; and the Plan of those parts when building them found no
    mistake."""
    from planrunner.plan.build import build

    partial = replace(loaded, data=_without(loaded.data, report.unknown_keys))
    plan = None
    try:
        plan = build(partial, overrides, require_params=False, broken=report.broken)
        semantic: tuple[Diagnostic, ...] = ()
    except PlanError as err:
        semantic = err.diagnostics
    except (KeyError, TypeError, AttributeError, ValueError, StopIteration):
        # A schema hole the pruning did not foresee: the schema errors still stand.
        semantic = ()
    return merged_diagnostics(report.diagnostics, semantic), plan


def merged_diagnostics(*groups: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Every diagnostic of `groups`, in file order, each once."""
    merged = list(dict.fromkeys(d for group in groups for d in group))
    return sorted(merged, key=_position)


def _position(diag: Diagnostic) -> tuple[int, int]:
    return (diag.span.line, diag.span.column) if diag.span else (0, 0)


def _without(data: object, paths: frozenset[JsonPath]) -> object:
    """A copy of `data` without the keys at `paths` (the schema's unknown keys)."""
    if not paths:
        return data
    data = copy.deepcopy(data)
    for path in paths:
        node: Any = data  # a mapping or list of the loaded plan, or None once lost
        for part in path[:-1]:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return data
