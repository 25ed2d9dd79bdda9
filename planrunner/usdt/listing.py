"""USDT listings: which probes some ELF files hold, as text lines or one JSON document.

`probe_names(paths, pattern)` -> [(path, provider, name)] (notes only: no operand parsing);
`probe_details(paths, pattern)` -> [UsdtProbe] (sites, offsets, decoded arguments);
`text_lines(probes, verbosity)` and `json_document(probes)` render them.
`pattern` is an fnmatch glob on `provider:name`; a glob without ':' may also match the
probe name alone (`query__*`). Text from binaries is escaped before it reaches a terminal.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from planrunner.elf.reader import read_notes
from planrunner.printable import printable as _printable
from planrunner.usdt.probes import group_notes

if TYPE_CHECKING:
    from planrunner.usdt.model import ProbeSite, UsdtProbe


def matches(pattern: str | None, provider: str, name: str) -> bool:
    if not pattern:
        return True
    if fnmatchcase(f"{provider}:{name}", pattern):
        return True
    return ":" not in pattern and fnmatchcase(name, pattern)


def probe_names(paths: Sequence[str], pattern: str | None = None
                ) -> list[tuple[str, str, str]]:
    """(path, provider, name) of every matching probe, files in the order given."""
    out = []
    for path in paths:
        for provider, name in group_notes(read_notes(path)):
            if matches(pattern, provider, name):
                out.append((path, provider, name))
    return out


def probe_details(paths: Sequence[str], pattern: str | None = None) -> list[UsdtProbe]:
    from planrunner.usdt.probes import read_probes

    return [p for path in paths for p in read_probes(path)
            if matches(pattern, p.provider, p.name)]


def text_lines(probes: Sequence[UsdtProbe], verbosity: int) -> Iterator[str]:
    """`-v`: counts and semaphore per probe; `-vv`: also each location and argument."""
    from planrunner.usdt.operands import describe_operand

    described: dict[object, str] = {}  # operands are frozen and repeat across sites
    for probe in probes:
        yield f"{_head(probe.path, probe.provider, probe.name)}  {_summary(probe)}"
        if verbosity < 2:
            continue
        per_site_sema = len({s.semaphore for s in probe.sites}) > 1
        for i, site in enumerate(probe.sites, 1):
            where = f"  location {i}: pc {site.pc:#x}, file offset {site.file_offset:#x}"
            if per_site_sema:
                where += f", {_semaphore(site)}"
            yield where
            for j, arg in enumerate(site.args, 1):
                text = described.get(arg)
                if text is None:
                    text = described[arg] = describe_operand(arg)
                yield f"    arg {j}: {text}"


def name_lines(names: Sequence[tuple[str, str, str]]) -> Iterator[str]:
    for path, provider, name in names:
        yield _head(path, provider, name)


def json_document(probes: Sequence[UsdtProbe]) -> dict[str, object]:
    """Everything `-vv` shows, as plain data (addresses as integers)."""
    from planrunner.usdt.operands import describe_operand

    return {"probes": [{
        "path": p.path,
        "provider": p.provider,
        "name": p.name,
        "arg_count": p.arg_count,
        "locations": [{
            "pc": s.pc,
            "file_offset": s.file_offset,
            "semaphore": s.semaphore,
            "semaphore_offset": s.semaphore_offset,
            "args_text": s.args_text,
            "args": [{
                "text": a.text,
                "size": a.size,
                "signed": a.signed,
                "float": a.is_float,
                "readable": a.readable,
                "kind": type(a.operand).__name__,
                "description": describe_operand(a),
            } for a in s.args],
        } for s in p.sites],
    } for p in probes]}


def _head(path: str, provider: str, name: str) -> str:
    return f"{_printable(path)} {_printable(provider)}:{_printable(name)}"


def _summary(probe: UsdtProbe) -> str:
    n = len(probe.sites)
    parts = [f"{n} location{'s' if n != 1 else ''}",
             f"{probe.arg_count} arg{'s' if probe.arg_count != 1 else ''}"]
    semas = {s.semaphore for s in probe.sites}
    if len(semas) > 1:
        parts.append(f"{len(semas)} semaphores (one per location)")
    else:
        parts.append(_semaphore(probe.sites[0]))
    return ", ".join(parts)


def _semaphore(site: ProbeSite) -> str:
    if not site.semaphore:
        return "no semaphore"
    return f"semaphore {site.semaphore:#x} (file offset {site.semaphore_offset:#x})"

