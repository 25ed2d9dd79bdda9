"""Command line: `main(argv, stdout, stderr) -> exit code`.

Parses arguments, dispatches to one module per subcommand (planrunner/commands/),
renders PlanErrors as located diagnostics and chooses the exit code:
0 ok; 1 invalid plan or failed run; 2 usage; 3 the machine lacks what `run` needs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TextIO

from planrunner import __version__
from planrunner.commands.common import print_diagnostics
from planrunner.errors import PlanError

# Subcommand name -> module in planrunner.commands exposing register(subparsers) and
# run(args, stdout, stderr) -> int. Imported lazily so `list` never pays for jinja2.
COMMANDS = {
    "list": "list_cmd",
    "new": "new",
    "doctor": "doctor",
    "validate": "validate",
    "render": "render",
    "run": "run",
    "schema": "schema",
    "plans": "plans",
    "show": "show",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of the subcommand `only` alone. A command line
    that starts with its subcommand needs no other: importing and registering all of them
    took ~13 ms of every `validate`, `list` and `run` (tests/unit/test_cli.py checks that
    both parsers give the same result, help and errors)."""
    parser = argparse.ArgumentParser(
        prog="planrunner",
        description="Trace user-space programs (USDT, uprobes, tracepoints) "
                    "from declarative plans.",
    )
    parser.add_argument("--version", action="version", version=f"planrunner {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            continue
        importlib.import_module(f"planrunner.commands.{module}").register(sub, name)
    return parser


def print_error(err: PlanError, stderr: TextIO) -> None:
    """Render every diagnostic of `err` with its source line and caret."""
    print_diagnostics(err.diagnostics, stderr)


def main(argv: list[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:  # argparse: --help (0) or usage error (2)
        return int(exc.code or 0)
    try:
        return int(args.func(args, stdout, stderr))
    except PlanError as err:
        print_error(err, stderr)
        return err.exit_code
    except BrokenPipeError:
        # stdout closed early (`| head`): end quietly, like a good Unix tool. Point fd 1
        # at /dev/null so the interpreter's last flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        return 0
    except KeyboardInterrupt:
        return 130
