"""Arguments shared by the commands that take a plan (validate, render, run, show)."""

from __future__ import annotations

import argparse

from planrunner.plan.params import parse_overrides


def add_plan_arguments(parser: argparse.ArgumentParser, pid: bool = True) -> None:
    parser.add_argument("plan", metavar="PLAN",
                        help="plan file (.yaml, .toml) or library plan name")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="NAME=VALUE", help="set a plan param (repeatable)")
    if pid:
        parser.add_argument("-p", "--pid", type=int, default=None,
                            help="resolve targets in this process and trace only it")


def overrides(args: argparse.Namespace) -> dict[str, str]:
    return parse_overrides(args.overrides)


def plan_path(name: str) -> str:
    """A plan path as given, or a bundled/library plan found by name."""
    from planrunner.library import find_plan

    return find_plan(name)
