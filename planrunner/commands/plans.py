"""`planrunner plans`: the library plans (bundled, $PLANRUNNER_PATH, --plans DIR)."""

from __future__ import annotations

import argparse
from typing import TextIO

from planrunner.commands.common import add_plans_argument


def register(sub: argparse._SubParsersAction, name: str) -> None:
    parser = sub.add_parser(name, help="list the library plans with their params")
    add_plans_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner.errors import PlanError
    from planrunner.library import library_plans
    from planrunner.plan import load_plan

    for path in library_plans(args.plans):
        try:
            plan = load_plan(path, {}, require_params=False)
        except PlanError as err:
            stdout.write(f"{path.stem:<20} (invalid: {err.diagnostics[0].message})\n")
            continue
        stdout.write(f"{plan.name:<20} {plan.description}\n")
        stdout.writelines(f"{'':<22}{line}\n" for line in param_lines(plan.params))
    return 0


def param_lines(params) -> list[str]:  # type: ignore[no-untyped-def]
    """`--set NAME=<type>  help (default D)` per plan param."""
    return [f"--set {p.name}=<{p.type}>  {p.help} "
            f"({'required' if p.required else f'default {_shown(p.type, p.default)}'})"
            for p in params]


def _shown(kind: str, value: object) -> str:
    """A default as the user would type it: durations in their largest exact unit."""
    if kind == "duration" and isinstance(value, int):
        for unit, ns in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
            if value and value % ns == 0:
                return f"{value // ns}{unit}"
        return f"{value}ns"
    return repr(value)
