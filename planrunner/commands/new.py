"""`planrunner new TARGET [PROBE...] [--toml] [-o FILE [--force]]`: write a starter plan.

TARGET is what `list` takes (a path, a program on PATH, a library short name); PROBE
is a probe name, `provider:name`, or a glob on either (none: every probe, up to
--max). `new tracepoint:CAT:EVENT` (a glob too) starts from kernel tracepoints;
`new --uprobe TARGET SYMBOL...` from function entries. The plan goes to stdout, or to
FILE (never over an existing file without --force); `-o x.toml` implies --toml. The
text itself comes from planrunner/starter.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from planrunner.errors import ResolveError
    from planrunner.starter import StarterPlan
    from planrunner.usdt.model import UsdtProbe


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    from planrunner.commands.intermixed import intermixed
    from planrunner.starter import DEFAULT_CAP

    p = sub.add_parser(
        name, help="write a starter plan for the probes of a program or library",
        description="Write a starter plan: the chosen USDT probes of TARGET with their "
                    "arguments typed from the ELF notes, one print output each, and "
                    "comments pointing at the plan format. TARGET may also be "
                    "tracepoint:CATEGORY:EVENT, or with --uprobe a binary followed by "
                    "function names.")
    p.add_argument("target", metavar="TARGET",
                   help="a path, a program on PATH, a library short name (c, pthread), "
                        "or tracepoint:CATEGORY:EVENT")
    p.add_argument("probes", nargs="*", metavar="PROBE",
                   help="probes to include: name, provider:name or a glob (default: all, "
                        "up to --max); with --uprobe, function names")
    p.add_argument("--toml", action="store_true", help="write TOML instead of YAML")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE instead of stdout (FILE.toml implies --toml)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--uprobe", action="store_true",
                   help="PROBEs are function names of TARGET, probed at their entry")
    p.add_argument("--max", type=int, default=DEFAULT_CAP, metavar="N",
                   help=f"at most N probes when no PROBE is named (default {DEFAULT_CAP})")
    p.set_defaults(func=run)
    intermixed(p)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner import starter
    from planrunner.errors import UsageError
    from planrunner.kernel_probes import PREFIXES, kernel_function_message

    command = "planrunner new " + " ".join(
        [args.target, *args.probes] + (["--uprobe"] if args.uprobe else []))
    target: str = args.target
    if target.startswith(PREFIXES):
        message, hints = kernel_function_message(target.split(":", 1)[0])
        raise UsageError(message, hints=hints)
    if target.startswith("tracepoint:"):
        if args.uprobe:
            raise UsageError("--uprobe takes a program or library, not a tracepoint")
        plan = _tracepoints(command, [target, *args.probes])
    elif args.uprobe:
        if not args.probes:
            raise UsageError("--uprobe needs the function names to probe",
                             hints=(f"e.g. planrunner new --uprobe {target} malloc free",))
        plan = _uprobes(command, target, args.probes)
    else:
        plan = _usdt(command, target, args.probes, args.max)
    toml = args.toml or (args.output or "").endswith(".toml")
    if toml and args.output and args.output.endswith((".yaml", ".yml")):
        raise UsageError(f"--toml and -o {args.output}: a .yaml file holds YAML",
                         hints=("drop --toml, or name the file .toml",))
    text = starter.to_toml(plan) if toml else starter.to_yaml(plan)
    if not args.output or args.output == "-":
        stdout.write(text)
        return 0
    _write(args.output, text, args.force)
    n = len(plan.probes)
    print(f"planrunner: wrote {args.output} ({n} probe{'s' if n != 1 else ''}); check it "
          f"with `planrunner validate {args.output}`", file=stderr)
    return 0


def _usdt(command: str, spec: str, patterns: list[str], cap: int) -> StarterPlan:
    from planrunner.errors import ResolveError
    from planrunner.starter import usdt_starter
    from planrunner.targets import resolve_target
    from planrunner.usdt.listing import matches
    from planrunner.usdt.probes import read_probes

    path = resolve_target(spec)
    probes = read_probes(path)
    if not probes:
        raise ResolveError(f"{path} has no USDT probes (no .note.stapsdt notes)",
                           hints=(f"for its functions: planrunner new --uprobe {spec} "
                                  "SYMBOL...",
                                  "kernel events: planrunner new tracepoint:CATEGORY:EVENT"))
    if not patterns:
        chosen = list(probes)
        return usdt_starter(command, spec, path, chosen[:max(cap, 1)], len(chosen))
    chosen = []
    for pattern in patterns:
        found = [p for p in probes if matches(pattern, p.provider, p.name)]
        if not found:
            raise _no_probe(pattern, path, probes)
        chosen.extend(p for p in found if p not in chosen)
    return usdt_starter(command, spec, path, chosen, len(chosen))


def _no_probe(pattern: str, path: str, probes: Sequence[UsdtProbe]) -> ResolveError:
    from planrunner.diagnostics import did_you_mean
    from planrunner.errors import ResolveError

    names = [p.name for p in probes] + [f"{p.provider}:{p.name}" for p in probes]
    guess = did_you_mean(pattern, names)
    hints = [f"did you mean '{guess}'?"] if guess else []
    hints.append(f"`planrunner list {path}` shows its {len(probes)} probes")
    return ResolveError(f"no USDT probe '{pattern}' in {path}", hints=tuple(hints))


def _tracepoints(command: str, specs: list[str]) -> StarterPlan:
    from planrunner import tracepoint_listing as tpl
    from planrunner.errors import ResolveError, UsageError
    from planrunner.starter import tracepoint_starter

    root = tpl.root_or_error()
    patterns = []
    for spec in specs:
        pattern = spec.removeprefix("tracepoint:")
        if pattern.count(":") != 1:
            raise UsageError(f"'{spec}' is not tracepoint:CATEGORY:EVENT",
                             hints=("e.g. planrunner new tracepoint:sched:sched_process_exec",))
        patterns.append(pattern)
    events = tpl.names(root, patterns)
    if not events:
        message, hints = tpl.nothing_found(root, patterns)
        raise ResolveError(message, hints=hints)
    return tracepoint_starter(command, list(tpl.formats(root, events)))


def _uprobes(command: str, spec: str, symbols: list[str]) -> StarterPlan:
    from planrunner.starter import uprobe_starter
    from planrunner.targets import resolve_target

    resolve_target(spec)  # a target that does not exist is said now, not at validate
    return uprobe_starter(command, spec, symbols)


def _write(path: str, text: str, force: bool) -> None:
    from planrunner.errors import PlanError, UsageError

    try:
        with open(path, "w" if force else "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        raise UsageError(f"{path} exists; not overwritten",
                         hints=("pass --force to replace it, or choose another -o FILE",)
                         ) from None
    except OSError as exc:
        raise PlanError(f"cannot write {path}: {exc.strerror or exc}") from None
