"""Validated plan data -> the frozen Plan model (planrunner/plan/model.py).

`build(loaded, overrides)` binds params first (defaults, then `--set` overrides; a bad
override or a missing required param is a UsageError, raised at once since nothing
can be built without the values), then builds targets, probes, outputs and settings,
collecting every mistake into one PlanSemanticError. Expression and `${param}`
errors keep their exact columns. It assumes the data passed the schema (validate.py),
except for the parts named in `broken` (see validate.SchemaReport): those entries are
skipped, though their names stay known, so that the rest of a plan with schema errors
is still checked ("unknown probe 'x'" is not said of a probe that merely has a typo).
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from pathlib import Path
from types import MappingProxyType

from planrunner.diagnostics import Diagnostic
from planrunner.errors import PlanSemanticError, UsageError
from planrunner.param_values import PARAM_TYPES, ParamValueError, convert
from planrunner.plan.build_outputs import build_outputs
from planrunner.plan.build_probes import build_probes, build_stack
from planrunner.plan.context import BuildContext
from planrunner.plan.model import ParamSpec, Plan, Settings, StackSpec, TargetSpec
from planrunner.plan.params import DURATION_HINT, check_overrides
from planrunner.plan.source import JsonObj, JsonPath, LoadedPlan

_BUILD_ID = re.compile(r"^(?:[0-9a-f]{2})+$")


def build(loaded: LoadedPlan, overrides: dict[str, str], *,
          require_params: bool = True, broken: frozenset[JsonPath] = frozenset()) -> Plan:
    """Build the Plan; raise UsageError (params) or PlanSemanticError (everything else)."""
    data = loaded.data
    assert isinstance(data, dict), "the loader guarantees a mapping"
    ctx = BuildContext(loaded)

    def section(name: str) -> JsonObj:
        value = data.get(name, {})
        return {} if (name,) in broken or not isinstance(value, dict) else value

    def skipped(name: str) -> set[object]:
        return {p[1] for p in broken if len(p) == 2 and p[0] == name}

    params = _params(ctx, section("params"), skipped("params"))
    _bind(ctx, params, overrides, require_params)
    target_data = section("targets")
    targets = _targets(ctx, target_data, skipped("targets"))
    probe_data = section("probes")
    target_names = list(target_data) if ("targets",) not in broken else None
    probes = build_probes(ctx, probe_data, target_names, skipped("probes"))
    probe_names = list(probe_data) if ("probes",) not in broken and "probes" in data else None
    output_data = data.get("outputs", [])
    if ("outputs",) in broken or not isinstance(output_data, list):
        output_data = []
    outputs, tables = build_outputs(ctx, output_data, probe_names, skipped("outputs"))
    settings = (Settings() if any(p[:1] == ("settings",) for p in broken)
                else _settings(ctx, data.get("settings", {})))
    stack = (StackSpec() if any(p[:1] == ("stack",) for p in broken)
             else build_stack(ctx, ("stack",), data.get("stack", {})))
    if ctx.errors:
        raise PlanSemanticError(sorted(ctx.errors, key=_position))
    return Plan(
        path=loaded.path, source_text=loaded.source_text,
        name=data.get("name", Path(loaded.path).stem),
        description=data.get("description", ""),
        params=params, param_values=MappingProxyType(dict(ctx.param_values)), targets=targets,
        probes=probes, outputs=outputs, settings=settings, stack=stack, tables=tables,
        substituted_params=frozenset(ctx.substituted))


def _position(diag: Diagnostic) -> tuple[int, int]:
    return (diag.span.line, diag.span.column) if diag.span else (0, 0)


def _params(ctx: BuildContext, params: JsonObj, skip: AbstractSet[object] = frozenset()
            ) -> tuple[ParamSpec, ...]:
    out = []
    for name, spec in params.items():
        jpath = ("params", name)
        if name in skip:  # declared, so `${name}` is no "unknown param"; left unbound
            ptype = spec.get("type") if isinstance(spec, dict) else None
            ctx.param_types[name] = ptype if ptype in PARAM_TYPES else "string"
            continue
        ptype, required = spec["type"], spec.get("required", False)
        ctx.param_types[name] = ptype
        default = None
        if "default" in spec and required:
            ctx.error(f"param '{name}' has a default and required: true", ctx.spans.key(jpath),
                      "keep one: a default, or required: true")
        elif "default" in spec:
            try:
                default = convert(ptype, spec["default"])
                ctx.param_values[name] = default
            except ParamValueError as exc:
                ctx.error(f"bad default for {ptype} param '{name}': {exc}",
                          ctx.spans.value(jpath + ("default",)),
                          DURATION_HINT if ptype == "duration" else None)
        elif not required:
            ctx.error(f"param '{name}' needs a default or required: true", ctx.spans.key(jpath))
        out.append(ParamSpec(name=name, type=ptype, default=default, required=required,
                             help=spec.get("help", ""), span=ctx.spans.key(jpath)))
    return tuple(out)


def _bind(ctx: BuildContext, params: tuple[ParamSpec, ...], overrides: dict[str, str],
          require_params: bool) -> None:
    ctx.param_values.update(check_overrides(overrides, ctx.param_types))
    missing = [p for p in params if p.required and p.name not in ctx.param_values]
    if missing and require_params:
        raise UsageError([Diagnostic(f"param '{p.name}' is required", p.span,
                                     (f"pass --set {p.name}=VALUE ({p.type})",))
                          for p in missing])


def _targets(ctx: BuildContext, targets: JsonObj, skip: AbstractSet[object] = frozenset()
             ) -> tuple[TargetSpec, ...]:
    out = []
    for name, spec in targets.items():
        jpath = ("targets", name)
        if name in skip:
            continue
        binary = ctx.sub(jpath + ("binary",), spec["binary"])
        if not binary.strip():
            ctx.error(f"target '{name}' has an empty binary", ctx.spans.value(jpath + ("binary",)),
                      "give a path, a name on PATH or a library short name")
        build_id = None
        if "build_id" in spec:
            build_id = ctx.sub(jpath + ("build_id",), spec["build_id"]).strip().lower()
            if not _BUILD_ID.match(build_id):
                ctx.error(f"build_id '{build_id}' of target '{name}' is not a build id",
                          ctx.spans.text(jpath + ("build_id",)),
                          "a build id is an even number of hex digits, as `readelf -n BINARY` "
                          "prints after 'Build ID:'")
                build_id = None
        out.append(TargetSpec(name=name, binary=binary, build_id=build_id,
                              span=ctx.spans.text(jpath + ("binary",)),
                              optional=bool(spec.get("optional", False))))
    return tuple(out)


def _settings(ctx: BuildContext, data: JsonObj) -> Settings:
    defaults = Settings()
    pages = data.get("ringbuf_pages", defaults.ringbuf_pages)
    if pages is not None and pages & (pages - 1):
        ctx.error(f"'ringbuf_pages' must be a power of two, got {pages}",
                  ctx.spans.value(("settings", "ringbuf_pages")),
                  f"e.g. {1 << (pages.bit_length() - 1)} or {1 << pages.bit_length()}")
    return Settings(string_size=data.get("string_size", defaults.string_size),
                    map_size=data.get("map_size", defaults.map_size), ringbuf_pages=pages,
                    span_depth=data.get("span_depth", defaults.span_depth),
                    max_sites=data.get("max_sites", defaults.max_sites))
