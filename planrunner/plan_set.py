"""Several plans in one run (`planrunner run A.yaml B.yaml`): one program for all.

Each plan is loaded and resolved on its own (its own settings, params and located
mistakes, exactly as when it runs alone); the resolved plans are then merged into one
ResolvedPlan, which render makes into one BPF program: one ring buffer, one session, one
exporter. Merging namespaces every name a plan chose under the plan's name, `PLAN.NAME`
(probes, targets, outputs, tables, the spans a `depth` reads), and numbers the outputs
after those of the plans before it (their record ids and map names stay distinct). A
single plan is never merged: its names, records and C are unchanged.

    split_overrides(declared, sets) -> each plan's --set values
    merge(plans)                    -> one (Plan, ResolvedPlan)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from planrunner.diagnostics import Diagnostic, Span
from planrunner.errors import PlanError, UsageError
from planrunner.expr.typed import CaptureRef, DepthRef, LatencyRef
from planrunner.plan.model import OutputSpec, Plan, ProbeSpec, Settings, TableSpec, TargetSpec
from planrunner.resolve.model import ResolvedSite

if TYPE_CHECKING:
    from planrunner.resolve.model import ResolvedPlan

_T = TypeVar("_T")

SEP = "."  # PLAN.NAME: no plan-chosen name (an identifier) holds a dot


def declared(path: str, source: bytes | None = None) -> tuple[str, frozenset[str]]:
    """The plan's name and the params it declares, read without building it (None of a
    plan that does not even parse: its load tells why, with the others' mistakes)."""
    from pathlib import Path

    from planrunner.plan import load_source

    try:
        data = load_source(path, source).data
    except PlanError:
        return Path(path).stem, frozenset()
    if not isinstance(data, dict):
        return Path(path).stem, frozenset()
    name = data.get("name")
    params = data.get("params")
    return (name if isinstance(name, str) and name else Path(path).stem,
            frozenset(params) if isinstance(params, dict) else frozenset())


def split_overrides(plans: Sequence[tuple[str, frozenset[str]]],
                    sets: dict[str, str]) -> list[dict[str, str]]:
    """Each plan's --set values: `NAME=V` goes to the plan that declares NAME (two plans
    declaring it: an error, say which with `PLAN.NAME=V`), `PLAN.NAME=V` to that plan."""
    out: list[dict[str, str]] = [{} for _ in plans]
    errors: list[Diagnostic] = []
    names = [name for name, _ in plans]
    for key, value in sets.items():
        plan, dot, param = key.rpartition(SEP)
        if dot:
            if plan not in names:
                errors.append(Diagnostic(
                    f"--set {key}={value}: no plan of this run is named '{plan}'",
                    hints=(f"the plans: {', '.join(names)}",)))
            else:
                out[names.index(plan)][param] = value
            continue
        owners = [i for i, (_, params) in enumerate(plans) if key in params]
        if len(owners) > 1:
            which = ", ".join(names[i] for i in owners)
            errors.append(Diagnostic(
                f"--set {key}={value}: several plans declare '{key}' ({which})",
                hints=(f"say which: --set {names[owners[0]]}{SEP}{key}={value}",)))
        elif not owners:
            known = sorted(f"{n}{SEP}{p}" for n, ps in plans for p in ps)
            errors.append(Diagnostic(
                f"--set {key}={value}: no plan of this run has a param '{key}'",
                hints=(f"their params: {', '.join(known) or 'none'}",)))
        else:
            out[owners[0]][key] = value
    if errors:
        raise UsageError(errors)
    return out


def merge(plans: Sequence[tuple[Plan, ResolvedPlan]]) -> tuple[Plan, ResolvedPlan]:
    """One plan and one resolved plan holding every plan's probes and outputs, their
    names qualified `PLAN.NAME`. Two plans of one name, or two names that make one C
    identifier, are an error naming both."""
    if len(plans) == 1:
        return plans[0]
    _check_distinct(plans)
    for _, resolved in plans:  # one program, plans with params of one name: values in C
        resolved.param_pins.update(name for name, _ in resolved.data_params)
    merged_plans: list[Plan] = []
    merged: list[ResolvedPlan] = []
    offset = 0  # each output's index: its record id and map name in the program
    for plan, resolved in plans:
        rename = _Qualifier(plan.name, offset)
        merged_plans.append(rename(plan))
        merged.append(rename(resolved))
        offset += 1 + max([o.index for o in plan.outputs] + [t.index for t in plan.tables],
                          default=-1)
    first = plans[0][0]
    one = Plan(
        path=first.path, source_text=first.source_text,
        name="+".join(p.name for p, _ in plans),
        description="; ".join(p.description for p, _ in plans if p.description),
        params=(), param_values={},
        targets=tuple(t for p in merged_plans for t in p.targets),
        probes=tuple(s for p in merged_plans for s in p.probes),
        outputs=tuple(o for p in merged_plans for o in p.outputs),
        settings=_settings([p.settings for p, _ in plans]),
        tables=tuple(t for p in merged_plans for t in p.tables))
    from planrunner.resolve.model import ResolvedPlan as Resolved

    return one, Resolved(one, tuple(p for r in merged for p in r.probes),
                         tuple(o for r in merged for o in r.outputs),
                         plans[0][1].pid, tuple(w for r in merged for w in r.warnings))


def plan_of(name: str, plan_names: Sequence[str]) -> tuple[str, str]:
    """(plan, own name) of a qualified output name (the longest plan name that
    prefixes it: a plan's name may hold a dot); ("", name) when none does."""
    for plan in sorted(plan_names, key=len, reverse=True):
        if name.startswith(plan + SEP):
            return plan, name[len(plan) + len(SEP):]
    return "", name


def _settings(all_settings: list[Settings]) -> Settings:
    """What the one program needs for all: the largest maps, span depth and ring (a
    ring size any plan leaves to its records is left to them all)."""
    rings = [s.ringbuf_pages for s in all_settings]
    return Settings(
        string_size=max(s.string_size for s in all_settings),  # resolve applied each's
        map_size=max(s.map_size for s in all_settings),
        ringbuf_pages=None if None in rings else max(r for r in rings if r is not None),
        span_depth=max(s.span_depth for s in all_settings),
        max_sites=sum(s.max_sites for s in all_settings))


def _check_distinct(plans: Sequence[tuple[Plan, ResolvedPlan]]) -> None:
    from planrunner.render.names import c_ident

    errors: list[Diagnostic] = []
    seen: dict[str, Plan] = {}
    for plan, _ in plans:
        other = seen.setdefault(plan.name, plan)
        if other is not plan:
            errors.append(Diagnostic(
                f"two plans of this run are named '{plan.name}' ({other.path} and "
                f"{plan.path}): their outputs would have the same names",
                Span(plan.path, 1, 1),
                hints=("run one of them alone, or give a copy another `name:`",)))
    if errors:
        raise PlanError(errors)
    c_names: dict[str, str] = {}
    for plan, _ in plans:
        for probe in plan.probes:
            qualified = f"{plan.name}{SEP}{probe.name}"
            clash = c_names.setdefault(c_ident(qualified), qualified)
            if clash != qualified:
                errors.append(Diagnostic(
                    f"probes '{clash}' and '{qualified}' of two plans would have the same "
                    "C name in the one program of this run", probe.span,
                    hints=("rename one of the probes",)))
    if errors:
        raise PlanError(errors)


class _Qualifier:
    """Rewrites one plan's (or resolved plan's) frozen data: each name it chose becomes
    `PLAN.NAME`, each output and table index moves past the plans before it."""

    def __init__(self, plan: str, offset: int) -> None:
        self.prefix = f"{plan}{SEP}"
        self.offset = offset
        self.rules: dict[type, Callable[[Any], object]] = {
            ProbeSpec: self._probe,
            TargetSpec: lambda t: replace(t, name=self.q(t.name)),
            OutputSpec: lambda o: replace(o, name=self.q(o.name), probe=self.q(o.probe),
                                          index=o.index + offset),
            TableSpec: lambda t: replace(
                t, name=self.q(t.name), index=t.index + offset,
                columns=tuple(replace(c, outputs=tuple(self.q(n) for n in c.outputs))
                              for c in t.columns)),
            ResolvedSite: lambda s: replace(s, probe=self.q(s.probe)),
            DepthRef: lambda d: replace(d, span=self.q(d.span)),
            # a span's own values name it (spans on spans: whose begin.X, whose latency)
            CaptureRef: lambda c: replace(c, span=self.q(c.span) if c.span else ""),
            LatencyRef: lambda r: replace(r, span=self.q(r.span) if r.span else ""),
        }

    def q(self, name: str) -> str:
        return self.prefix + name

    def _probe(self, spec: ProbeSpec) -> ProbeSpec:
        def opt(name: str | None) -> str | None:
            return None if name is None else self.q(name)

        return replace(spec, name=self.q(spec.name), target=opt(spec.target),
                       begin=opt(spec.begin), end=opt(spec.end),
                       ends=tuple(self.q(n) for n in spec.ends))

    def __call__(self, obj: _T) -> _T:
        return cast(_T, self._walk(obj))

    def _walk(self, obj: object) -> object:
        rule = self.rules.get(type(obj))
        if rule is not None:
            obj = rule(obj)
            if isinstance(obj, ProbeSpec | OutputSpec | TableSpec | TargetSpec):
                return obj  # their expressions are the plan's text: nothing named there
        if isinstance(obj, tuple):
            items = tuple(self._walk(x) for x in obj)
            return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type | Span):
            changes = {}
            for f in dataclasses.fields(obj):
                if not f.init:
                    continue  # derived from the others (`ResolvedPlan.spans`): made anew
                value = getattr(obj, f.name)
                new = self._walk(value)
                if new is not value:
                    changes[f.name] = new
            return replace(obj, **changes) if changes else obj
        return obj
