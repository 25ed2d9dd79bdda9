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
from typing import TYPE_CHECKING, Any, TextIO

from planrunner import __version__

if TYPE_CHECKING:
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


class _Formatter(argparse.HelpFormatter):
    """argparse's, as wide as shutil.get_terminal_size() says but without importing
    shutil (with bz2, lzma and fnmatch: ~3 ms of every start, as argparse makes a
    formatter for each argument it adds)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _terminal_columns() - 2 if width is None else width)


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns: $COLUMNS, else stdout's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        stdout = sys.__stdout__
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns if stdout else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser with _Formatter; subparsers are made of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of the subcommand `only` alone. A command line
    that starts with its subcommand needs no other: importing and registering all of them
    took ~13 ms of every `validate`, `list` and `run` (tests/unit/test_cli.py checks that
    both parsers give the same result, help and errors)."""
    parser = _Parser(
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
    from planrunner.commands.common import print_diagnostics

    print_diagnostics(err.diagnostics, stderr)


def main(argv: list[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    from planrunner.errors import PlanError

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


def run_and_exit(argv: list[str] | None = None) -> None:
    """The process's entry (`planrunner` and `python -m planrunner`): main, then exit.
    A stop that abandoned the in-process compile (runtime/session.py _load, when the
    compile worker was killed) leaves its thread inside bcc/LLVM: the interpreter's
    normal exit ran under it and crashed now and then with SIGSEGV instead of the
    stop's 128+N, so such a process flushes and ends at once. So does every other one
    with no thread left but daemons (its atexit functions run first): the interpreter's
    teardown only delays the exit (a stop's, issue 28 item 4), and where bcc compiled,
    LLVM's would hold it for seconds.

    The process's own start-up work is done here, not when planrunner is imported (a
    program importing it keeps its standard library as it was): the dataclass cache
    (planrunner/dataclass_cache.py) is installed before the first class of the package
    is made, which is why this module imports nothing of planrunner at its top but
    __version__; a Ctrl-C while the commands' modules are imported ends with 130 and no
    traceback, as one while they run does."""
    import threading

    try:
        from planrunner import dataclass_cache

        dataclass_cache.install()
        status = main(argv)
    except KeyboardInterrupt:  # while the cache or build_parser's imports are read, before
        status = 130           # main begins to catch it
    except RuntimeError as exc:  # the same inside a class's creation, wrapped by Python
        if not isinstance(exc.__cause__, KeyboardInterrupt):  # ("Error calling
            raise                                           # __set_name__")
        status = 130
    from planrunner.timing import mark

    mark("exit")  # what follows is the interpreter's end (PLANRUNNER_TIMING=1 only)
    if any(t.name == "planrunner-load" and t.is_alive() for t in threading.enumerate()):
        _flush_std()
        os._exit(status)
    if all(t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        # The interpreter's exit frees every module and object, which the kernel does
        # anyway when the process ends (its BPF programs, links and maps included): ~30 ms
        # after a run's stop here, and where bcc compiled in this process LLVM's teardown,
        # 0.3-3 s after the last line at 1000 sites (BENCHMARKS.md). What must run at exit
        # runs first (the dataclass cache's save; files are closed by whoever opened them)
        import atexit

        _flush_std()
        atexit._run_exitfuncs()
        _flush_std()
        os._exit(status)
    sys.exit(status)


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
