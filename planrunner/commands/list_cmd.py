"""`planrunner list TARGET... [--pid PID] [-v|-vv] [--format text|json] [FILTER]`
and `planrunner list --tracepoints [PATTERN...]` (or `list 'tracepoint:CAT:EVENT'`).

Lists the USDT probes of programs and libraries, like bcc's `tplist -l`/`-p`: one line per
probe (`PATH provider:name`); `-v` adds location and argument counts and the semaphore
(address and file offset); `-vv` adds every location and decoded argument; `--format json`
prints all of it as one JSON document. With `--pid` and no target, every executable ELF
object mapped in that process is listed. The last positional is a FILTER (an fnmatch glob
on `provider:name`, or on the name alone) when it contains `*?[:` and is not the only
target; a plain trailing name that resolves to no target is a FILTER too.
Kernel tracepoints come from tracefs (planrunner/tracefs.py): with `--tracepoints` every
positional is a CATEGORY:EVENT glob; without it, a positional starting `tracepoint:` is
one. Options may come anywhere on the line (commands/intermixed.py).
Imports only the ELF reader and the USDT model: startup time matters here.
"""

from __future__ import annotations

import argparse
from typing import TextIO

_GLOB_CHARS = set("*?[:")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    from planrunner.commands.intermixed import intermixed

    p = subparsers.add_parser(
        name, help="list the USDT probes of programs and libraries, or kernel tracepoints",
        description="List USDT probes (SystemTap SDT notes). TARGET is a path, a program "
                    "on PATH, or a library name (c, pthread, python3.11); FILTER is a glob "
                    "on provider:name, e.g. 'postgresql:query__*'. Kernel tracepoints: "
                    "--tracepoints [CATEGORY:EVENT glob], or 'tracepoint:sched:*' as a "
                    "TARGET. Options may come anywhere on the line.")
    p.add_argument("targets", nargs="*", metavar="TARGET... [FILTER]",
                   help="programs or libraries, optionally followed by a provider:name glob")
    from planrunner.commands.pids import pid_arg

    p.add_argument("-p", "--pid", type=pid_arg,
                   help="resolve names in this process; alone, list all its mapped objects")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="-v: counts and semaphores; -vv: every location and argument")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("-t", "--tracepoints", action="store_true",
                   help="list kernel tracepoints instead (positionals are CATEGORY:EVENT "
                        "globs, e.g. 'syscalls:sys_enter_open*', 'sched:*'); -v shows "
                        "their fields with C types")
    p.set_defaults(func=run)
    intermixed(p)


def split_filter(positionals: list[str], has_pid: bool) -> tuple[list[str], str | None]:
    """Separate the trailing FILTER (if any) from the targets."""
    if positionals and _GLOB_CHARS & set(positionals[-1]) and (
            len(positionals) > 1 or has_pid):
        return positionals[:-1], positionals[-1]
    return positionals, None


def split_tracepoints(positionals: list[str], all_tracepoints: bool
                      ) -> tuple[list[str], list[str]]:
    """(USDT positionals, tracepoint globs without their `tracepoint:` prefix)."""
    if all_tracepoints:
        return [], [p.removeprefix("tracepoint:") for p in positionals]
    usdt = [p for p in positionals if not p.startswith("tracepoint:")]
    tps = [p.removeprefix("tracepoint:") for p in positionals if p.startswith("tracepoint:")]
    return usdt, tps


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner.errors import UsageError
    from planrunner.kernel_probes import PREFIXES, kernel_function_message

    for spec in args.targets:
        if spec.startswith(PREFIXES):
            message, hints = kernel_function_message(spec.split(":", 1)[0])
            raise UsageError(message, hints=hints)
    positionals, tp_patterns = split_tracepoints(list(args.targets), args.tracepoints)
    if args.tracepoints and args.pid is not None:
        raise UsageError("--pid applies to USDT probes, not to --tracepoints",
                         hints=("kernel tracepoints are the same for every process",))
    if positionals or args.pid is not None or not (args.tracepoints or tp_patterns):
        return _list_usdt(args, positionals, stdout, stderr, tp_patterns)
    return _list_tracepoints(args, tp_patterns, stdout, stderr)


def _list_tracepoints(args: argparse.Namespace, patterns: list[str], stdout: TextIO,
                      stderr: TextIO, document: dict[str, object] | None = None) -> int:
    from planrunner import tracepoint_listing as tpl

    root = tpl.root_or_error()
    pats: list[str | None] = list(patterns) or [None]
    events = tpl.names(root, pats)
    if args.format == "json":
        import json

        doc = dict(document or {})
        doc["tracepoints"] = tpl.json_items(root, events)
        json.dump(doc, stdout, indent=2)
        stdout.write("\n")
    else:
        for line in tpl.text_lines(root, events, args.verbose):
            stdout.write(line + "\n")
    if not events:
        message, hints = tpl.nothing_found(root, pats)
        print(f"planrunner: {message}", file=stderr)
        for hint in hints:
            print(f"  hint: {hint}", file=stderr)
    return 0


def _list_usdt(args: argparse.Namespace, positionals: list[str], stdout: TextIO,
               stderr: TextIO, extra_tracepoints: list[str] | None = None) -> int:
    from planrunner.errors import UsageError
    from planrunner.targets import resolve_target
    from planrunner.usdt import listing

    specs, pattern = split_filter(positionals, args.pid is not None)
    if not specs and args.pid is None:
        raise UsageError("give at least one TARGET, or --pid PID",
                         hints=("e.g. `planrunner list /usr/lib/postgresql/15/bin/postgres`",))
    if specs:
        notes: list[str] = []
        paths = _resolve_all(specs, args.pid, notes)
        for note in dict.fromkeys(notes):
            print(f"planrunner: note: {note}", file=stderr)
        if pattern is None and len(specs) > 1 and paths[-1] is None and "/" not in specs[-1]:
            # `list python3.11 gc__done`: a trailing plain name that is no target is
            # a probe name (reported on stderr if nothing matches).
            specs, pattern, paths = specs[:-1], specs[-1], paths[:-1]
        found: list[str] = list(dict.fromkeys(p or resolve_target(s, args.pid)
                                              for s, p in zip(specs, paths, strict=True)))
    else:
        from planrunner.elf.procmaps import executable_objects

        found = _readable(executable_objects(args.pid), stderr)
    if args.format == "json":
        import json

        doc = listing.json_document(listing.probe_details(found, pattern))
        if extra_tracepoints:
            return _list_tracepoints(args, extra_tracepoints, stdout, stderr, doc)
        json.dump(doc, stdout, indent=2)
        stdout.write("\n")
        return 0
    if args.verbose:
        lines = listing.text_lines(listing.probe_details(found, pattern), args.verbose)
    else:
        lines = listing.name_lines(listing.probe_names(found, pattern))
    count = 0
    for line in lines:
        stdout.write(line + "\n")
        count += 1
    go_lines = _go_lines(found, pattern, args.verbose) if args.verbose else []
    for line in go_lines:
        stdout.write(line + "\n")
    if not count and not go_lines:
        where = ", ".join(found) if specs else f"process {args.pid}"
        what = f" matching '{pattern}'" if pattern else ""
        print(f"planrunner: no USDT probes{what} in {where}", file=stderr)
    if extra_tracepoints:
        return _list_tracepoints(args, extra_tracepoints, stdout, stderr)
    return 0


def _go_lines(paths: list[str], pattern: str | None, verbose: int) -> list[str]:
    """For each Go program: what its functions' uprobes read (abi go); with -vv and a
    FILTER, each matching Go function with its ABI, entry probe and RET sites."""
    from fnmatch import fnmatchcase

    from planrunner.elf import golang
    from planrunner.errors import ResolveError

    out = []
    for path in paths:
        if not golang.is_go(path):
            continue
        try:
            funcs = golang.go_functions(path)
        except ResolveError as err:
            out.append(f"{path}: a Go program: {err.diagnostics[0].message}")
            continue
        out.append(f"{path}: a Go program ({len(funcs)} Go functions); uprobes on them use "
                   "abi go: integer words arg1..arg9 in rax, rbx, rcx, rdi, rsi, r8, r9, "
                   "r10, r11, retval = the first result (rax); entry probed after the "
                   "stack check, return at each RET")
        if verbose < 2 or not pattern:
            continue
        from planrunner.elf.reader import open_binary
        from planrunner.elf.symbols import find_symbols

        machine = open_binary(path).machine
        names = {s.value: s.name for s in find_symbols(path) if s.value in funcs}
        for entry, func in sorted(funcs.items()):
            name = names.get(entry, func.name)
            if not (fnmatchcase(func.name, pattern) or fnmatchcase(name, pattern)):
                continue
            abi = golang.function_abi(path, name, entry)
            sites = golang.go_sites(path, entry, func.end - entry, machine)
            where = (f"entry +{sites.entry} (after the stack check)" if sites.checked
                     else "entry +0 (no stack check)")
            rets = ", ".join(f"+{o}" for o in sites.returns) or "none"
            out.append(f"{path} {name}  {entry:#x}, abi {abi}, {where}, RET at {rets}")
    return out


def _resolve_all(specs: list[str], pid: int | None, notes: list[str]) -> list[str | None]:
    """Resolved paths; None where the spec does not resolve (re-raised by the caller).
    How a path was chosen (a container's file, not the host's) is added to `notes`."""
    from planrunner.errors import ResolveError
    from planrunner.targets import resolve_target

    out: list[str | None] = []
    for spec in specs:
        try:
            out.append(resolve_target(spec, pid, notes=notes))
        except ResolveError:
            out.append(None)
    return out


def _readable(paths: tuple[str, ...], stderr: TextIO) -> list[str]:
    """The mapped objects planrunner can read; the others are reported and skipped."""
    from planrunner.elf.reader import open_binary
    from planrunner.errors import ResolveError

    out = []
    for path in paths:
        try:
            open_binary(path)
        except ResolveError as err:
            print(f"planrunner: warning: skipped {err.diagnostics[0].message}", file=stderr)
        else:
            out.append(path)
    return out
