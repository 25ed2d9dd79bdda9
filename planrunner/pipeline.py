"""The pipeline, in order. Every command calls these stages and nothing else:

    load    plan/           path + --set      -> Plan
    resolve resolve/        Plan + --pid      -> ResolvedPlan   (binaries, sites, types)
    render  render/         ResolvedPlan      -> RenderedProgram (the C, attach list)
    execute runtime/        RenderedProgram   -> records and map snapshots -> output/

Commands load and resolve through load_resolved, which also resolves what a plan with
schema errors still has (every mistake at once), and compile_plan adds render;
compile_plans does it for several plans at once, merged into one program (plan_set.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from planrunner.errors import PlanError, PlanSchemaError
from planrunner.plan import load_plan
from planrunner.timing import mark

if TYPE_CHECKING:  # annotations only: `validate` never renders (render/model.py: ~10 ms)
    from planrunner.plan.model import Plan
    from planrunner.render.model import RenderedProgram
    from planrunner.resolve.model import ResolvedPlan


def resolve(plan: Plan, pid: int | None = None,
            command: list[str] | None = None) -> ResolvedPlan:
    from planrunner.resolve import resolve_plan

    return resolve_plan(plan, pid, command)


def load_resolved(path: str, overrides: dict[str, str], pid: int | None = None,
                  command: list[str] | None = None, *, require_params: bool = True,
                  source: bytes | None = None) -> tuple[Plan, ResolvedPlan]:
    """load -> resolve. A plan with schema errors fails with them, those of building the
    rest, and those resolve finds in the rest (a probe not in its binary, an offset
    inside an instruction): every mistake at once."""
    try:
        plan = load_plan(path, overrides, require_params=require_params, source=source)
    except PlanSchemaError as err:
        partial = err.partial
        if partial is not None:
            from planrunner.plan import merged_diagnostics

            try:
                resolve(cast("Plan", partial), pid, command)
            except PlanError as more:
                raised = PlanSchemaError(merged_diagnostics(err.diagnostics,
                                                            more.diagnostics))
                raise raised from None
        raise
    mark("plan-loaded")
    resolved = resolve(plan, pid, command)
    mark("resolved")
    return plan, resolved


def render(resolved: ResolvedPlan, plan_only: bool = False) -> RenderedProgram:
    from planrunner.render.program import render_program

    return render_program(resolved, plan_only)


def compile_plan(path: str, overrides: dict[str, str], pid: int | None = None,
                 command: list[str] | None = None, source: bytes | None = None
                 ) -> tuple[Plan, ResolvedPlan, RenderedProgram]:
    """load -> resolve -> render: everything `render` and `run` do before the kernel
    (`source`: the plan's bytes, when the caller read them)."""
    plan, resolved = load_resolved(path, overrides, pid, command, source=source)
    return plan, resolved, render(resolved)


def compile_plans(paths: list[str], sets: dict[str, str], pid: int | None = None,
                  command: list[str] | None = None,
                  sources: list[bytes | None] | None = None
                  ) -> tuple[list[Plan], Plan, ResolvedPlan, RenderedProgram]:
    """compile_plan of several plans, merged into one program (plan_set.py): every plan
    is loaded and resolved on its own; the mistakes of all of them are raised together,
    before anything renders. The plans, the merged plan, its resolved plan, the program."""
    from planrunner import plan_set

    sources = sources or [None] * len(paths)
    if len(paths) == 1:
        plan, resolved = load_resolved(paths[0], sets, pid, command, source=sources[0])
        program = render(resolved)
        mark("rendered")
        return [plan], plan, resolved, program
    names = [plan_set.declared(p, s) for p, s in zip(paths, sources, strict=True)]
    failed: list[PlanError] = []
    try:
        each = plan_set.split_overrides(names, sets)
    except PlanError as err:  # told with the plans' own mistakes (a plan that does not
        failed.append(err)    # parse declares nothing): checked without their values
        each = [{} for _ in paths]
    loaded: list[tuple[Plan, ResolvedPlan]] = []
    for path, own, source in zip(paths, each, sources, strict=True):
        try:
            loaded.append(load_resolved(path, own, pid, command, source=source,
                                        require_params=not failed))
        except PlanError as err:
            failed.append(err)
    if failed:
        error = PlanError([d for err in failed for d in err.diagnostics])
        error.exit_code = max(err.exit_code for err in failed)
        raise error
    plan, resolved = plan_set.merge(loaded)
    return [p for p, _ in loaded], plan, resolved, render(resolved)
