"""`planrunner render PLAN`: the dry run. Prints exactly the C that `run` would load."""

from __future__ import annotations

import argparse
from typing import TextIO

from planrunner.commands.common import add_plan_parser, overrides, plan_path, print_diagnostics


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = add_plan_parser(
        sub, name, help="print the BPF C a plan compiles to (nothing is loaded)")
    parser.add_argument("--plan-only", action="store_true",
                        help="leave out the helpers every plan shares (one comment line "
                             "each), for reviewing what this plan adds")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner.commands.scope_args import check_scope, first_pid
    from planrunner.pipeline import load_resolved, render

    check_scope(args)  # checked; the C is the same whatever the scope
    _plan, resolved = load_resolved(plan_path(args.plan), overrides(args), first_pid(args))
    print_diagnostics(resolved.warnings, stderr)
    stdout.write(render(resolved, plan_only=args.plan_only).c_source)
    return 0
