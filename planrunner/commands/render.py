"""`planrunner render PLAN`: the dry run. Prints exactly the C that `run` would load."""

from __future__ import annotations

import argparse
from typing import TextIO

from planrunner.commands.common import add_plan_parser, overrides, plan_path


def register(sub: argparse._SubParsersAction, name: str) -> None:
    parser = add_plan_parser(
        sub, name, help="print the BPF C a plan compiles to (nothing is loaded)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner.pipeline import compile_plan

    _plan, _resolved, program = compile_plan(plan_path(args.plan), overrides(args), args.pid)
    stdout.write(program.c_source)
    return 0
