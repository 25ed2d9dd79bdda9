"""Arguments shared by the commands that take a plan (validate, render, run).

`--plans DIR` (repeatable) adds a folder of the user's own plans, searched before
$PLANRUNNER_PATH and the bundled plans. The folders travel with the PLAN argument itself
(a `PlanName`, a str), so `plan_path(args.plan)` honours them wherever it is called.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from planrunner.diagnostics import Diagnostic
    from planrunner.plan.model import ParamSpec


class PlanName(str):
    """The PLAN argument as typed, carrying the --plans folders given on the same line."""

    dirs: list[str]


def _plan_dirs(namespace: argparse.Namespace) -> list[str]:
    # One list per parse, shared by PLAN and --plans whatever their order on the line.
    dirs = getattr(namespace, "plans", None)
    if dirs is None:
        dirs = []
        namespace.plans = dirs
    return dirs


class _PlanAction(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        dirs = _plan_dirs(namespace)
        names = [PlanName(v) for v in (values if isinstance(values, list) else [values])]
        for name in names:
            name.dirs = dirs
        setattr(namespace, self.dest, names if self.nargs == "+" else names[0])


class _PlansDirAction(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        _plan_dirs(namespace).append(str(values))


def add_plans_argument(parser: argparse.ArgumentParser) -> None:
    """`--plans DIR`: also look for plans given by name in DIR (repeatable)."""
    parser.add_argument("--plans", action=_PlansDirAction, default=None, metavar="DIR",
                        help="also look for plans given by name in DIR (repeatable; "
                             "before $PLANRUNNER_PATH and the bundled plans)")


class _HelpWithParams(argparse.Action):
    """-h after PLAN (`planrunner run mysql-slow -h`) also lists that plan's params."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # noqa: A002
        super().__init__(option_strings, dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        parser.print_help()
        plan = getattr(namespace, "plan", None)
        if isinstance(plan, list):  # run A B: the params of the first
            plan = plan[0]
        if plan:
            from planrunner.errors import PlanError
            from planrunner.plan import load_plan

            try:
                params = load_plan(plan_path(plan), {}, require_params=False).params
            except PlanError as err:
                print(f"\nplan params: {plan} cannot be read ({err.diagnostics[0].message})")
            else:
                print(f"\nplan params of {plan}:" if params else f"\n{plan} has no params")
                for line in param_lines(params):
                    print(f"  {line}")
        parser.exit()


def add_plan_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str,  # noqa: A002
                    pid: bool = True, several: bool = False) -> argparse.ArgumentParser:
    """The subcommand parser of a command that takes a plan (validate, render, run);
    `several`: PLAN... (args.plan a list), plan files, names or folders of plans."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, add_help=False)
    parser.add_argument("-h", "--help", action=_HelpWithParams,
                        help="show this help message (and, after PLAN, its params) and exit")
    if several:
        parser.add_argument("plan", metavar="PLAN", action=_PlanAction, nargs="+",
                            help="plan file (.yaml, .toml), library plan name or folder of "
                                 "plans; several run together in one program")
    else:
        parser.add_argument("plan", metavar="PLAN", action=_PlanAction,
                            help="plan file (.yaml, .toml) or library plan name")
    add_plans_argument(parser)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="NAME=VALUE", help="set a plan param (repeatable)")
    if pid:
        from planrunner.commands.scope_args import add_scope_arguments

        add_scope_arguments(parser)
    return parser


def overrides(args: argparse.Namespace) -> dict[str, str]:
    from planrunner.plan.params import parse_overrides  # lazily: every command imports us

    return parse_overrides(args.overrides)


def plan_path(name: str, extra: list[str] | None = None) -> str:
    """A plan path as given, or a library plan found by name in `extra` (default: the
    --plans folders that came with `name`), $PLANRUNNER_PATH, then the bundled plans."""
    import os

    if os.path.exists(str(name)):  # a file: the library (and pathlib) is not needed
        return str(name)
    from planrunner.library import find_plan

    if extra is None:
        extra = getattr(name, "dirs", None)
    return find_plan(str(name), extra)


def plan_paths(names: list[str]) -> list[str]:
    """plan_path of each name; a folder gives its plan files (.yaml, .yml, .toml), in
    name order. The same file twice is one plan."""
    import os

    paths: list[str] = []
    for name in names:
        if os.path.isdir(name):
            from planrunner.plan import SUFFIXES  # only then: a warm run imports no plan/

            found = sorted(os.path.join(name, f) for f in os.listdir(name)
                           if os.path.splitext(f)[1].lower() in SUFFIXES)
            if not found:
                from planrunner.errors import UsageError

                raise UsageError(f"{name}: a folder without plan files (.yaml, .yml, .toml)")
            paths += found
        else:
            paths.append(plan_path(name))
    return list(dict.fromkeys(paths))


def param_lines(params: Iterable[ParamSpec]) -> list[str]:
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


def print_diagnostics(diags: Iterable[Diagnostic], stderr: TextIO) -> None:
    """Render each diagnostic with its source line and caret. The lines are those of the
    text the plan loader read (bounded, plan/limits.py): the file is never opened again,
    which could block (a FIFO), never end (/dev/zero) or show another text."""
    from planrunner.diagnostics import render
    from planrunner.plan.limits import source_read

    for diag in diags:
        text = source_read(diag.span.path) if diag.span is not None else None
        print(render(diag, text), file=stderr)
