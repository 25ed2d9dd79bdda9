"""Where each plan probe attaches: USDT locations, uprobe symbols and tracepoints.

Finds the binary's probe or symbol (with did-you-mean hints), and builds the argument
types a probe offers, before any expression is checked. Pure except for reading ELF
files and tracefs format files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from planrunner.diagnostics import Span, did_you_mean
from planrunner.elf.reader import host_machine, open_binary, read_notes, vaddr_to_offset
from planrunner.errors import ResolveError
from planrunner.expr.types import BoolType, IntType, StrType, Type
from planrunner.plan.model import ArgSpec, ProbeSpec
from planrunner.resolve.model import BinaryRef, TracepointField
from planrunner.usdt.model import ArgOperand, Mem, ProbeSite, Reg, UsdtProbe
from planrunner.usdt.probes import group_notes, read_probes

VALUE_TYPES: dict[str, IntType] = {
    "int8": IntType(8, True), "int16": IntType(16, True), "int32": IntType(32, True),
    "int64": IntType(64, True), "uint8": IntType(8, False), "uint16": IntType(16, False),
    "uint32": IntType(32, False), "uint64": IntType(64, False),
    "pointer": IntType(64, False),
}

# x86-64 SysV integer argument registers (pt_regs members) at function entry; later
# arguments are on the stack above the return address.
X86_64_ARG_REGS = (("di", "rdi"), ("si", "rsi"), ("dx", "rdx"), ("cx", "rcx"),
                   ("r8", "r8"), ("r9", "r9"))
AARCH64_ARG_REGS = tuple((f"regs[{i}]", f"x{i}") for i in range(8))
MAX_UPROBE_ARGS = 12


@dataclass(frozen=True, slots=True)
class Located:
    """A probe's sites in one binary, plus what its arguments are."""

    binary: BinaryRef
    sites: tuple[ProbeSite, ...]
    arg_count: int


def find_usdt(spec: ProbeSpec, binary: BinaryRef) -> UsdtProbe:
    matches = read_probes(binary.path, only=lambda provider, name: name == spec.probe and (
        spec.provider is None or provider == spec.provider))
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        providers = ", ".join(sorted(p.provider for p in matches))
        raise ResolveError(
            f"probe '{spec.probe}' is defined by several providers in {binary.display}: "
            f"{providers}", spec.spec_span,
            hints=(f"name the provider, e.g. '{spec.target}:{matches[0].qualified}'",))
    keys = group_notes(read_notes(binary.path))  # names only: no operand is decoded
    names = {f"{p}:{n}" for p, n in keys} | {n for _, n in keys}
    wanted = f"{spec.provider}:{spec.probe}" if spec.provider else str(spec.probe)
    guess = did_you_mean(wanted, names)
    hints = [f"did you mean '{guess}'?"] if guess else []
    if not keys:
        hints.append(f"{binary.display} has no USDT probes (no .note.stapsdt section)")
    else:
        hints.append(f"`planrunner list {binary.display}` shows its {len(keys)} probes")
    raise ResolveError(f"probe '{wanted}' not found in {binary.display}", spec.spec_span,
                       hints=tuple(hints))


def usdt_arg_types(probe: UsdtProbe) -> dict[int, Type]:
    """Types of arg1..argN from the first site's operands (size and sign)."""
    types: dict[int, Type] = {}
    for i, arg in enumerate(probe.sites[0].args, start=1):
        size = arg.size if arg.size in (1, 2, 4, 8) else 8
        types[i] = IntType(size * 8, arg.signed)
    return types


def declared_type(arg: ArgSpec, string_size: int) -> Type | None:
    if arg.type is None:
        return None
    if arg.type == "string":
        return StrType((arg.size or string_size) + 1)
    if arg.type == "bool":  # read as a byte; true when non-zero, printed as true/false
        return BoolType()
    return VALUE_TYPES[arg.type]


# Symbols that name code; a variable sharing the function's name is not probed with it.
_CODE_TYPES = frozenset({"STT_FUNC", "STT_GNU_IFUNC", "STT_NOTYPE"})


def uprobe_sites(spec: ProbeSpec, binary: BinaryRef
                 ) -> tuple[tuple[tuple[int, int], ...], tuple[str, ...]]:
    """((pc, file offset) per function named SYMBOL, at +OFFSET; notes for the summary).
    Several functions share a name when they are local to different files (static C
    functions in a binary with its .symtab): each is probed."""
    assert spec.symbol is not None
    # lazily: a plan without uprobes needs no symbol table reader (it imports subprocess)
    from planrunner.elf.symbols import lookup_symbol

    try:
        syms = lookup_symbol(binary.path, spec.symbol)
    except ResolveError as err:
        raise _at(err, spec) from None
    code = [s for s in syms if s.value and s.type in _CODE_TYPES]
    funcs = list({s.value: s for s in code or [s for s in syms if s.value]}.values())
    if not funcs:
        raise ResolveError(
            f"symbol '{spec.symbol}' not found in {binary.display} (.symtab and .dynsym)",
            spec.spec_span,
            hints=("check the name with `nm -D` or `nm`; a stripped binary only exports "
                   ".dynsym symbols",))
    notes: list[str] = []
    if len(funcs) > 1:
        notes.append(f"{len(funcs)} functions are named '{spec.symbol}' (at "
                     f"{', '.join(f'{s.value:#x}' for s in funcs)}): probing each")
    locations = []
    for sym in funcs:
        start, size = sym.value, sym.size
        if sym.type == "STT_GNU_IFUNC":  # the resolver: probe what it picks (elf/ifunc.py)
            from planrunner.elf.ifunc import resolve_ifunc

            try:
                impl = resolve_ifunc(binary.path, sym)
            except ResolveError as err:
                raise _at(err, spec) from None
            start, size = impl.vaddr, impl.size
            where = f"{impl.name} at {impl.vaddr:#x}" if impl.name else f"at {impl.vaddr:#x}"
            notes.append(f"'{sym.name}' is an IFUNC: probing the implementation it resolves "
                         f"to on this machine, {where}")
        if size and spec.offset >= size:
            raise ResolveError(f"offset {spec.offset} is past the end of '{spec.symbol}' "
                               f"({size} bytes)", spec.spec_span)
        if spec.offset:  # a uprobe inside an instruction corrupts it (elf/instructions.py)
            from planrunner.elf.instructions import check_offset

            try:
                check_offset(binary.path, str(spec.symbol), start, size, spec.offset,
                             binary.machine)
            except ResolveError as err:
                raise _at(err, spec) from None
        pc = start + spec.offset
        locations.append((pc, vaddr_to_offset(binary.path, pc)))
    return tuple(locations), tuple(notes)


def _at(err: ResolveError, spec: ProbeSpec) -> ResolveError:
    """A symbol-level error, located at the probe's spec in the plan."""
    return ResolveError(err.diagnostics[0].message, spec.spec_span,
                        hints=err.diagnostics[0].hints)


def register_arg(index: int, size: int, signed: bool, machine: str) -> ArgOperand:
    """Argument `index` (1-based) of a function at its entry, per the machine's ABI."""
    if machine == "EM_AARCH64":
        if index <= len(AARCH64_ARG_REGS):
            field, name = AARCH64_ARG_REGS[index - 1]
            return ArgOperand(name, size, signed, False, Reg(field, name))
        disp = 8 * (index - 1 - len(AARCH64_ARG_REGS))
        return ArgOperand(f"[sp, {disp}]", size, signed, False, Mem(Reg("sp", "sp"), disp))
    if index <= len(X86_64_ARG_REGS):
        field, name = X86_64_ARG_REGS[index - 1]
        return ArgOperand(f"%{name}", size, signed, False, Reg(field, name))
    disp = 8 * (index - len(X86_64_ARG_REGS))  # (%rsp) holds the return address
    return ArgOperand(f"{disp}(%rsp)", size, signed, False, Mem(Reg("sp", "rsp"), disp))


def return_value(size: int, signed: bool, machine: str) -> ArgOperand:
    if machine == "EM_AARCH64":
        return ArgOperand("x0", size, signed, False, Reg("regs[0]", "x0"))
    return ArgOperand("%rax", size, signed, False, Reg("ax", "rax"))


def binary_ref(path: str, display: str, build_id_wanted: str | None,
               span: Span) -> BinaryRef:
    """The target at `path` if planrunner can trace it here; every refusal (not ELF,
    truncated, an object file, 32-bit, another machine's, another build) is located at
    the target's `binary:` value."""
    try:
        info = open_binary(path)
    except ResolveError as err:
        raise ResolveError([replace(d, span=d.span or span) for d in err.diagnostics]
                           ) from None
    if info.elfclass != 2:  # 32-bit: another ABI for arguments, registers and operands
        raise ResolveError(
            f"{display} is a 32-bit ELF file ({info.machine}): planrunner traces 64-bit "
            "programs only (x86-64, aarch64)", span,
            hints=("point the target at the 64-bit build of the program or library",))
    host = host_machine()
    if host is not None and info.machine != host:
        # the kernel runs its own architecture's programs only; and the operands and
        # registers read are the running machine's
        raise ResolveError(
            f"{display} is an ELF file for {info.machine}, but this machine "
            f"({os.uname().machine}) runs {host} programs: its code never runs here, so "
            "it cannot be traced", span,
            hints=("point the target at the build of the program for this machine "
                   "(`file` names a binary's architecture)",))
    if build_id_wanted and (info.build_id or "").lower() != build_id_wanted.lower():
        raise ResolveError(
            f"build id mismatch for {display}: the plan pins {build_id_wanted}, "
            f"the file has {info.build_id or 'no build id'}", span,
            hints=("the binary changed since the plan was written: check the probes "
                   "still match, then update build_id",))
    return BinaryRef(path, display, info.build_id, info.machine,
                     (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))


def tracepoint_fields(spec: ProbeSpec) -> tuple[TracepointField, ...]:
    """The fields of tracepoint CATEGORY:EVENT (planrunner/tracefs.py reads its format;
    the common_ header every event shares is left out)."""
    from planrunner import tracefs

    root = tracefs.find_root()
    category, event = str(spec.category), str(spec.event)
    try:
        if root is None:
            raise OSError("tracefs is not mounted")
        fmt = tracefs.read_format(root, category, event)
    except OSError:
        raise ResolveError(f"tracepoint '{category}:{event}' does not exist on this kernel",
                           spec.spec_span, hints=_tracepoint_hints(root, category, event)
                           ) from None
    return tuple(TracepointField(f.name, f.offset, f.size, f.signed, f.is_string,
                                 f.array_len) for f in fmt.own_fields)


def _tracepoint_hints(root: str | None, category: str, event: str) -> tuple[str, ...]:
    import os

    if root is None:
        return ("tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing",)
    events = f"{root}/events"
    if os.path.isdir(f"{events}/{category}"):
        guess = did_you_mean(event, os.listdir(f"{events}/{category}"))
        if guess:
            return (f"did you mean '{category}:{guess}'?",)
        return (f"`planrunner list --tracepoints '{category}:*'` lists its events",)
    guess = did_you_mean(category, os.listdir(events))
    if guess:
        return (f"no category '{category}': did you mean '{guess}'?",)
    return (f"no category '{category}': `planrunner list --tracepoints` lists them",)
