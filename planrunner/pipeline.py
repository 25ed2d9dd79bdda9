"""The pipeline, in order. Every command calls these stages and nothing else:

    load    plan/           path + --set      -> Plan
    resolve resolve/        Plan + --pid      -> ResolvedPlan   (binaries, sites, types)
    render  render/         ResolvedPlan      -> RenderedProgram (the C, attach list)
    execute runtime/        RenderedProgram   -> records and map snapshots -> output/
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planrunner.plan import load_plan

if TYPE_CHECKING:  # annotations only: `validate` never renders (render/model.py: ~10 ms)
    from planrunner.plan.model import Plan
    from planrunner.render.model import RenderedProgram
    from planrunner.resolve.model import ResolvedPlan


def load(path: str, overrides: dict[str, str]) -> Plan:
    return load_plan(path, overrides)


def resolve(plan: Plan, pid: int | None = None,
            command: list[str] | None = None) -> ResolvedPlan:
    from planrunner.resolve import resolve_plan

    return resolve_plan(plan, pid, command)


def render(resolved: ResolvedPlan, plan_only: bool = False) -> RenderedProgram:
    from planrunner.render.program import render_program

    return render_program(resolved, plan_only)


def compile_plan(path: str, overrides: dict[str, str], pid: int | None = None,
                 command: list[str] | None = None
                 ) -> tuple[Plan, ResolvedPlan, RenderedProgram]:
    """load -> resolve -> render: everything `render` and `run` do before the kernel."""
    plan = load(path, overrides)
    resolved = resolve(plan, pid, command)
    return plan, resolved, render(resolved)
