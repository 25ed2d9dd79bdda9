"""`planrunner run PLAN...`: validate, compile, attach, print records until told to stop.
Several plans run as one program (plan_set.py: their names become `PLAN.NAME`).

Wires the pieces together: the compiled program, the output view, the bcc backend
(runtime/bcc_backend.py) and, with --prometheus, the Prometheus live view; the
session (runtime/session.py) knows none of them by name.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import TYPE_CHECKING, TextIO, cast

from planrunner.commands.common import add_plan_parser, overrides, plan_paths, print_diagnostics
from planrunner.errors import UsageError

if TYPE_CHECKING:
    from planrunner import run_cache
    from planrunner.output.base import LiveView, View
    from planrunner.records import PrintSchema
    from planrunner.render.model import PrintOutput, RenderedProgram
    from planrunner.run_cache import CompiledRun
    from planrunner.runtime.bcc_backend import BccBackend
    from planrunner.runtime.compile_cache import ProgramCache
    from planrunner.runtime.scope import Scope


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = add_plan_parser(sub, name, help="trace with a plan (or several at once)",
                             several=True)
    parser.add_argument("-c", "--command", metavar="'CMD ARGS'",
                        help="start CMD with everything attached; end when it exits "
                             "(its exit status becomes planrunner's)")
    parser.add_argument("-f", "--format", default="text",
                        choices=("text", "json", "csv", "folded", "pprof"),
                        help="output view (default: text; folded: stacks only, "
                             "`comm;outer;...;inner COUNT` per stack; pprof: counts by "
                             "stack as gzipped profile.proto, needs -o)")
    parser.add_argument("--flamegraph", metavar="FILE.svg",
                        help="also write a flame graph of the plan's stacks to FILE.svg "
                             "(open it in a browser: hover, search, click to zoom)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write records to FILE")
    parser.add_argument("-d", "--duration", metavar="D",
                        help="stop after D (e.g. 10s, 500ms; a bare number is seconds; at "
                             "most 365 days)")
    parser.add_argument("-n", "--max-events", type=int, metavar="N",
                        help="stop after N records")
    parser.add_argument("--prometheus", metavar="HOST:PORT",
                        help="also serve the plan's aggregations as Prometheus metrics at "
                             "http://HOST:PORT/metrics (:PORT alone: loopback only)")
    parser.add_argument("--otlp", nargs="?", const="", metavar="URL",
                        help="also export spans, log records and metrics over OTLP to URL "
                             "(default: $OTEL_EXPORTER_OTLP_ENDPOINT, else "
                             "http://localhost:4318; see the OTLP section of README.md)")
    parser.add_argument("--follow-children", action="store_true",
                        help="with -c or --pid: also trace the processes they start "
                             "(and theirs), from their fork on")
    parser.add_argument("--no-cache", action="store_true",
                        help="compile the BPF program even if this plan was compiled before "
                             "(the cache of compiled programs is neither read nor written)")
    parser.set_defaults(func=run)


MAX_DURATION_S = 365 * 86400  # a year: far past any trace, far below what timers take


def parse_seconds(text: str | None) -> float | None:
    if text is None:
        return None
    import math

    try:
        seconds = float(text)
    except ValueError:
        from planrunner.param_values import parse_duration  # not for a bare number

        try:
            seconds = parse_duration(text) / 1e9
        except ValueError as exc:
            raise UsageError(f"--duration: {exc}") from None
    # 0, nan and inf would each mean "no limit" further down: refuse them, as negatives.
    # So is a time longer than MAX_DURATION_S (the output's timer takes no more than
    # ~292 years: 1e10 ended in an OverflowError): refused, not clamped, like inf.
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_DURATION_S:
        raise UsageError(f"--duration must be a positive, finite time of at most "
                         f"{MAX_DURATION_S // 86400} days, not '{text}'",
                         hints=("e.g. --duration 10s, --duration 1.5 (seconds) or 500ms; "
                                "leave --duration out to trace until Ctrl-C",))
    return seconds


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner.commands.scope_args import first_pid, scope_from_args
    from planrunner.runtime.compile_cache import open_cache
    from planrunner.timing import mark

    mark("command")
    if args.pid and args.command:
        raise UsageError("--pid and -c cannot be used together")
    scope = scope_from_args(args)
    pid = first_pid(args)
    if args.max_events is not None and args.max_events < 1:
        raise UsageError("--max-events must be at least 1")
    if args.format == "pprof":  # before compiling: a binary file, never stdout
        from planrunner.output.pprof import check_destination

        check_destination(args.output)
    command = shlex.split(args.command) if args.command else None
    duration = parse_seconds(args.duration)
    address = None
    if args.prometheus:  # only then: the exporter's modules are not needed otherwise
        from planrunner.prometheus.config import parse_address

        address = parse_address(args.prometheus)
    if args.otlp is not None:  # a bad URL or OTEL_* variable is said before compiling
        from planrunner.otlp.config import otlp_config

        otlp_config(args.otlp, "", os.environ)
    cache = open_cache(stderr, not args.no_cache)
    paths = plan_paths(args.plan)  # a library plan is looked up once
    key, compiled, sources = _cached_run(args, paths, stderr, cache, pid, address is None)
    worker = None
    # the program most likely needs compiling too: the worker starts first, to import bcc
    # while this process imports and renders (not for a user: loading will say why not)
    if compiled is None and os.geteuid() == 0:
        from planrunner.runtime.compile_worker import CompileWorker

        worker = CompileWorker(stderr)
        worker.start()
        mark("worker-spawned")
    from planrunner.render.model import MAX_TRACERS
    from planrunner.runtime.bcc_backend import BccBackend
    from planrunner.runtime.scope import register_run

    backend = BccBackend(cache=cache, worker=worker)
    try:  # the session closes the backend; this is for an error before it starts
        # first: runs attached already ignore us from now (and the worker, a
        # planrunner process too: its Python would fire a Python plan's probes)
        registered = register_run(backend)
        if worker is not None:
            registered = register_run(backend, tgid=worker.pid) and registered
        if not registered:
            stderr.write(f"warning: {MAX_TRACERS} planrunner runs are active: other runs "
                         "may record this one's events\n")
        if compiled is None:
            compiled = _compile(args, paths, stderr, cache, key, pid, command, sources)
        return _run(args, stdout, stderr, backend, scope, pid, command, duration, address,
                    compiled)
    finally:
        backend.close()


def _cached_run(args: argparse.Namespace, paths: list[str], stderr: TextIO,
                cache: ProgramCache | None, pid: int | None, cacheable: bool
                ) -> tuple[str | None, CompiledRun | None, list[bytes | None] | None]:
    """The run cache's key for this run of the plans at `paths` (None: not cached), what
    a run of the same plans with the same inputs computed before, if it did
    (planrunner/run_cache.py: the key and what is checked), and the plans' bytes, read
    here once and bounded, for the compile to parse (None: it reads them itself)."""
    if cache is None or not cacheable:  # --prometheus: needs the plan itself
        return None, None, None
    from planrunner import run_cache
    from planrunner.plan_file import NotAPlanFile, PlanTooLarge, read_plan_bytes

    try:  # bounded, and never a FIFO's open() that waits (plan_file.py)
        plan_bytes = [read_plan_bytes(path) for path in paths]
    except (OSError, PlanTooLarge, NotAPlanFile):
        return None, None, None  # compile_plan says what is wrong
    key, values = _run_key(args, paths, plan_bytes, pid, stderr,
                           run_cache.read_value_params(cache, _params_key(paths, plan_bytes)))
    hit = run_cache.lookup(cache, key, pid)
    if hit is not None:
        stderr.write(hit.warnings)
        hit = run_cache.with_values(hit, values)
    return key, hit, list(plan_bytes)


def _params_key(paths: list[str], plan_bytes: list[bytes]) -> str:
    from planrunner import run_cache

    return run_cache.params_key(*run_cache.plans_part(paths, plan_bytes))


def _run_key(args: argparse.Namespace, paths: list[str], plan_bytes: list[bytes],
             pid: int | None, stderr: TextIO, params: run_cache.ValueParams
             ) -> tuple[str, dict[str, int]]:
    """The run cache's key: one plan's path and bytes, as always (several: each,
    length-prefixed), the `--set` values with those of `params` by class only (and
    those values)."""
    from planrunner import run_cache

    sets, values = run_cache.mask_sets(args.overrides or [], params) if params else (
        args.overrides or [], {})
    return run_cache.run_key(*run_cache.plans_part(paths, plan_bytes), sets,
                             pid is not None, args.command, stderr.isatty()), values


def _compile(args: argparse.Namespace, paths: list[str], stderr: TextIO,
             cache: ProgramCache | None, key: str | None, pid: int | None,
             command: list[str] | None, sources: list[bytes | None] | None) -> CompiledRun:
    """load -> resolve -> render of the plans at `paths`, one program for all
    (`sources`: their bytes, read for the key), stored in the run cache under `key`
    when there is one, with the inputs the compile declared (planrunner/inputs.py)."""
    import io

    from planrunner import inputs, run_cache
    from planrunner.pipeline import compile_plans

    warnings = io.StringIO()
    with inputs.recording() as log:
        plans, plan, resolved, program = compile_plans(paths, overrides(args), pid, command,
                                                       sources)
        print_diagnostics(resolved.warnings, warnings)
    stderr.write(warnings.getvalue())
    # One file per output for CSV with several outputs; aggregations in plan order.
    # An output a table joins prints only in the table.
    joined = plan.joined()
    shown = sorted([(o.index, o.name) for o in plan.outputs if o.name not in joined]
                   + [(t.index, t.name) for t in plan.tables])
    params: run_cache.ValueParams = tuple(
        (p.name, p.type, p.default if isinstance(p.default, int) else None)
        for p in plan.params if p.name in resolved.value_params)
    run = run_cache.CompiledRun(program, warnings.getvalue(), tuple(n for _, n in shown),
                                bool(plan.tables), plan.name, plan.description,
                                tuple((p.name, p.description) for p in plans), params)
    if cache is not None and key is not None and sources is not None:
        plan_bytes = [b for b in sources if b is not None]
        if len(plan_bytes) == len(paths):  # stored under the key the next run will make
            run_cache.store_value_params(cache, _params_key(paths, plan_bytes), params)
            key = _run_key(args, paths, plan_bytes, pid, stderr, params)[0]
            run_cache.store(cache, key, log, run)
    return run


def _run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO, backend: BccBackend,
         scope: Scope, pid: int | None, command: list[str] | None, duration: float | None,
         address: tuple[str, int] | None, compiled: CompiledRun) -> int:
    from planrunner.output.destination import open_view
    from planrunner.runtime.session import RunOptions, run_session

    program = compiled.program
    live: list[LiveView] = []
    if address is not None:
        from planrunner.prometheus import PrometheusView
        from planrunner.prometheus.config import exporter_config

        prom = exporter_config(address, compiled.plan_name, compiled.description, program,
                               compiled.plans)
        live.append(PrometheusView(prom, stderr))
    # A terminal gets one table redrawn in place; a pipe or a file plain intervals (and
    # so do plans with print records: they scroll, the live table is redrawn over them).
    live_table = (args.format == "text" and args.output in (None, "-") and compiled.has_tables
                  and not program.prints and stdout.isatty())
    options: dict[str, object] = {}
    held = _held_stderr(stderr) if live_table else None
    if held is not None:  # what the session reports while the table is up comes after it
        options = {"live": True, "held_stderr": held}
        stderr = held
    # Without the live table, the view is built on first use, once tracing has begun
    # (output/base.py DeferredView): its modules are not imported before "Tracing".
    if args.format == "pprof":  # one profile file per output, checked before attaching
        from planrunner.commands.pprof_check import check_pprof
        from planrunner.output.pprof import PprofFilesView

        view: View = PprofFilesView(check_pprof(program, args.output, list(compiled.shown),
                                                compiled.plan_name), compiled.plan_name)
    else:
        view = open_view(args.format, args.output, stdout,
                         _schemas(program) if live_table else lambda: _schemas(program),
                         list(compiled.shown), stderr, **options)
    try:
        if args.flamegraph:
            from planrunner.output.folded import FlameGraphTap

            view = FlameGraphTap(view, args.flamegraph, compiled.plan_name)
        otlp = None
        if args.otlp is not None:  # imported only then (planrunner/otlp/)
            from planrunner.otlp.config import otlp_config
            from planrunner.otlp.view import OtlpTap

            view = otlp = OtlpTap(view, otlp_config(args.otlp, compiled.plan_name, os.environ),
                                  program, stderr)
        opts = RunOptions(pid if len(scope.pids) == 1 else None, command, duration,
                          args.max_events, scope)
        status = run_session(program, opts, view, stderr, backend, live)
        return otlp.finish(status, command is not None) if otlp is not None else status
    finally:
        try:
            view.close()
        except BrokenPipeError:  # its last flush, to a closed stdout: the status stays
            _silence(stdout)
        if stdout is sys.stdout and args.output in (None, "-"):
            try:
                stdout.flush()
            except BrokenPipeError:
                pass


def _silence(stdout: TextIO) -> None:
    """After `| head` closed stdout, fd 1 goes to /dev/null: the interpreter's final
    flush of what the view still buffers must not fail again."""
    if stdout is sys.stdout:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def _schemas(program: RenderedProgram) -> list[PrintSchema]:
    return [print_schema(p) for p in program.prints]


def print_schema(p: PrintOutput) -> PrintSchema:
    """What the views know of print output `p`."""
    from planrunner.records import PrintSchema

    fields = p.layout.fields
    # the decoder (runtime/decode.py) gives ints for int and uint fields, a bool for a
    # bool field; only the others (strings, stacks, symbols) may be None
    return PrintSchema(p.name, p.probe, tuple(f.key for f in fields), p.format,
                       tuple(f.key for f in fields if f.kind in ("stack", "ucopy")),
                       nullable=tuple(f.key for f in fields
                                      if f.kind not in ("int", "uint", "bool")),
                       bools=tuple(f.key for f in fields if f.kind == "bool"))


def _held_stderr(stderr: TextIO) -> TextIO | None:
    """stderr held back while the live table is up; None without Rich (plain intervals)."""
    try:
        from planrunner.output.live_table import HeldStream
    except ImportError:  # a bare install without Rich
        return None
    return cast(TextIO, HeldStream(stderr))
