"""USDT probes of one ELF file: notes grouped by `provider:name`, with file offsets.

`read_probes(path) -> tuple[UsdtProbe, ...]`: one UsdtProbe per provider:name in order of
first appearance; each note becomes a ProbeSite (pc after the `.stapsdt.base` adjustment,
the file offset uprobes attach to, the semaphore's vaddr and file offset - the kernel's
ref_ctr_offset - and the decoded arguments). A probe inlined in several places has several
sites, possibly each with its own semaphore (bpftrace#3601), so semaphores are per site.
`group_notes(notes)` is the grouping alone, for callers that need only names;
`read_probes(path, only=...)` decodes the operands of the probes asked for alone
(`validate` and `run` need 2 of libjvm.so's 500 probes: decoding all took ~15 ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planrunner.elf.reader import open_binary, read_notes, vaddr_to_offset

if TYPE_CHECKING:  # `list` without -v needs only the grouping: keep its imports light
    from collections.abc import Callable

    from planrunner.elf.stapsdt import NoteRecord
    from planrunner.usdt.model import ArgOperand, UsdtProbe


def group_notes(notes: tuple[NoteRecord, ...]) -> dict[tuple[str, str], list[NoteRecord]]:
    """Notes keyed by (provider, name); dict order is order of first appearance."""
    groups: dict[tuple[str, str], list[NoteRecord]] = {}
    for note in notes:
        groups.setdefault((note.provider, note.name), []).append(note)
    return groups


def read_probes(path: str, only: Callable[[str, str], bool] | None = None
                ) -> tuple[UsdtProbe, ...]:
    """Every USDT probe of the ELF file at `path` (empty when it has none), or those
    for which `only(provider, name)` is true."""
    from planrunner.usdt.model import ProbeSite, UsdtProbe
    from planrunner.usdt.operands import parse_args

    info = open_binary(path)
    # argument strings repeat (libjvm: 531 notes, 128 texts)
    decoded: dict[str, tuple[ArgOperand, ...]] = {}

    def decode(text: str) -> tuple[ArgOperand, ...]:
        args = decoded.get(text)
        if args is None:
            args = decoded[text] = parse_args(text, info.machine)
        return args

    probes = []
    for (provider, name), notes in group_notes(read_notes(path)).items():
        if only is not None and not only(provider, name):
            continue
        sites = tuple(
            ProbeSite(
                pc=n.pc,
                file_offset=vaddr_to_offset(info, n.pc),
                semaphore=n.semaphore,
                semaphore_offset=vaddr_to_offset(info, n.semaphore) if n.semaphore else 0,
                args_text=n.args,
                args=decode(n.args),
            )
            for n in notes)
        probes.append(UsdtProbe(path, provider, name, sites))
    return tuple(probes)
