"""`planrunner show PLAN|NAME`: print a plan file (library plans by name)."""

from __future__ import annotations

import argparse
from typing import TextIO

from planrunner.commands.common import add_plans_argument


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = sub.add_parser(name, help="print a plan file (library plans by name)")
    parser.add_argument("plan", metavar="PLAN")
    add_plans_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner.library import find_plan

    path = find_plan(args.plan, args.plans)
    with open(path, encoding="utf-8") as fh:
        stdout.write(fh.read())
    return 0
