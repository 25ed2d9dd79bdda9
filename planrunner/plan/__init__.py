"""Plans: read a plan file (YAML or TOML) with positions, check it, build the Plan model.

    load_plan(path, overrides)            -> Plan     load -> schema -> build
    validate_schema_only(path, overrides) -> LoadedPlan   load -> schema (for --schema-only)
    load_source(path)                     -> LoadedPlan   load only (by extension)

Each stage raises one PlanError subclass carrying all of its Diagnostics:
PlanSyntaxError (load), PlanSchemaError (schema), UsageError (params from --set),
PlanSemanticError (build). A later stage runs only when the earlier one passed.
"""

from __future__ import annotations

from pathlib import Path

from planrunner.errors import PlanError, UsageError
from planrunner.plan.model import Plan
from planrunner.plan.params import parse_overrides
from planrunner.plan.source import LoadedPlan

SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}

__all__ = ["Plan", "LoadedPlan", "load_plan", "load_source", "parse_overrides",
           "validate_schema_only"]


def load_source(path: str | Path) -> LoadedPlan:
    """Read and parse `path` by its extension (.yaml, .yml, .toml)."""
    path = str(path)
    kind = SUFFIXES.get(Path(path).suffix.lower())
    if kind is None:
        raise UsageError(f"{path}: a plan file ends in .yaml, .yml or .toml")
    from planrunner.plan.limits import read_bounded

    try:
        text = read_bounded(path)  # a size bound, before any parsing (plan/limits.py)
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
              require_params: bool = True) -> Plan:
    """Load, schema-check and build the plan at `path` with `--set` overrides.

    With require_params=False a required param without a value is left out of
    `param_values` instead of being a UsageError (for `validate` of a library plan).
    """
    from planrunner.plan.build import build

    loaded = validate_schema_only(path)
    return build(loaded, dict(overrides or {}), require_params=require_params)
