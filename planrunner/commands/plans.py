"""`planrunner plans`: the library plans (bundled, $PLANRUNNER_PATH, --plans DIR)."""

from __future__ import annotations

import argparse
from typing import TextIO

from planrunner.commands.common import add_plans_argument, param_lines


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
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
