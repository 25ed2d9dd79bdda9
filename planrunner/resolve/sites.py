"""Where each plan probe attaches: USDT locations, uprobe symbols and tracepoints.

Finds the binary's probe or symbol (with did-you-mean hints), and builds the argument
types a probe offers, before any expression is checked. Pure except for reading ELF
files and tracefs format files.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from planrunner.diagnostics import Span, did_you_mean
from planrunner.elf.golang import GO_INT_REGS, GOROUTINE_INDEX, GOROUTINE_REG, Abi
from planrunner.elf.reader import host_machine, open_binary, read_notes, vaddr_to_offset
from planrunner.errors import ResolveError
from planrunner.expr.types import BoolType, IntType, StrType, Type
from planrunner.plan.model import ArgSpec, ProbeSpec
from planrunner.probe_kinds import kind
from planrunner.registers import Arm64Reg, Register, X86Reg, arm64_x
from planrunner.resolve.model import BinaryRef, TracepointField
from planrunner.usdt.model import ArgOperand, Mem, Reg, UsdtProbe
from planrunner.usdt.probes import group_notes, read_probes

if TYPE_CHECKING:
    from planrunner.elf.symbols import Symbol

VALUE_TYPES: dict[str, IntType] = {
    "int8": IntType(8, True), "int16": IntType(16, True), "int32": IntType(32, True),
    "int64": IntType(64, True), "uint8": IntType(8, False), "uint16": IntType(16, False),
    "uint32": IntType(32, False), "uint64": IntType(64, False),
    "pointer": IntType(64, False),
}

# x86-64 SysV integer argument registers at function entry; later arguments are on the
# stack above the return address.
X86_64_ARG_REGS = (X86Reg.RDI, X86Reg.RSI, X86Reg.RDX, X86Reg.RCX, X86Reg.R8, X86Reg.R9)
AARCH64_ARG_REGS = tuple(arm64_x(i) for i in range(8))
MAX_UPROBE_ARGS = 12


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
                 ) -> tuple[tuple[tuple[int, int], ...], tuple[str, ...], Abi]:
    """((pc, file offset) per function named SYMBOL, at +OFFSET; notes for the summary;
    the functions' calling convention). Several functions share a name when they are
    local to different files (static C functions in a binary with its .symtab): each is
    probed. A Go function (elf/golang.py) is probed after its stack check, and its
    return at each RET (a uretprobe would break the goroutine stack)."""
    assert spec.symbol is not None
    # lazily: a plan without uprobes needs no symbol table reader (it imports subprocess)
    from planrunner.elf.golang import function_abi

    funcs = _functions(spec, binary)
    notes: list[str] = []
    if len(funcs) > 1:
        notes.append(f"{len(funcs)} functions are named '{spec.symbol}' (at "
                     f"{', '.join(f'{s.value:#x}' for s in funcs)}): probing each")
    locations = []
    abis: set[Abi] = set()
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
        if not spec.offset:
            from planrunner.elf.instructions import evex_error, starts_evex

            if starts_evex(binary.path, start, binary.machine):
                raise _at(evex_error(str(spec.symbol), binary.path, start, binary.machine),
                          spec)
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
        try:
            abi = function_abi(binary.path, sym.name, start)
        except ResolveError as err:
            raise _at(err, spec) from None
        abis.add(abi)
        if abi == "c" or spec.offset:
            pcs = [start + spec.offset]
        else:
            pcs = _go_pcs(spec, binary, sym.name, start, size, abi, notes)
        locations += [(pc, vaddr_to_offset(binary.path, pc)) for pc in pcs]
    if len(abis) > 1:
        raise ResolveError(f"the functions named '{spec.symbol}' in {binary.display} use "
                           f"different calling conventions ({', '.join(sorted(abis))})",
                           spec.spec_span, hints=("probe each by its own name",))
    return tuple(locations), tuple(notes), abis.pop()


def _functions(spec: ProbeSpec, binary: BinaryRef) -> list[Symbol]:
    """The functions named SYMBOL: from the symbol tables, else (a stripped Go program)
    from the Go function table."""
    from planrunner.elf.golang import go_functions, is_go
    from planrunner.elf.symbols import Symbol, lookup_symbol

    try:
        syms = lookup_symbol(binary.path, str(spec.symbol))
        code = [s for s in syms if s.value and s.type in _CODE_TYPES]
        funcs = list({s.value: s for s in code or [s for s in syms if s.value]}.values())
        if not funcs and is_go(binary.path):
            funcs = [Symbol(f.name, f.entry, f.end - f.entry, "STT_FUNC")
                     for f in go_functions(binary.path).values() if f.name == spec.symbol]
    except ResolveError as err:
        raise _at(err, spec) from None
    if not funcs:
        raise ResolveError(
            f"symbol '{spec.symbol}' not found in {binary.display} (.symtab and .dynsym)",
            spec.spec_span,
            hints=("check the name with `nm -D` or `nm`; a stripped binary only exports "
                   ".dynsym symbols",))
    return funcs


def _go_pcs(spec: ProbeSpec, binary: BinaryRef, name: str, start: int, size: int,
            abi: Abi, notes: list[str]) -> list[int]:
    """Where a Go function's uprobe (after the stack check) or return probes (each RET)
    sit."""
    from planrunner.elf.golang import go_functions, go_sites

    if not size:
        size = go_functions(binary.path)[start].end - start
    try:
        sites = go_sites(binary.path, start, size, binary.machine)
    except ResolveError as err:
        raise _at(err, spec) from None
    if not kind(spec.kind).returns:
        if sites.checked:
            notes.append(f"'{name}' is a Go function: probed after its stack check "
                         f"(+{sites.entry}), which restarts the function when the "
                         "goroutine stack grows: one event per call")
        return [start + sites.entry]
    if abi == "go-abi0":
        raise ResolveError(
            f"'{name}' is a Go assembly function (ABI0): its results are on the stack, "
            "not in registers", spec.spec_span,
            hints=("probe its entry with a uprobe, or trace the Go function that calls it",))
    if not sites.returns:
        raise ResolveError(
            f"Go function '{name}' has no RET instruction: it never returns normally "
            "(it panics, exits or loops, or a wrapper jumps to another function)",
            spec.spec_span,
            hints=("probe its entry with a uprobe",))
    count = len(sites.returns)
    notes.append(f"'{name}' is a Go function: its return is probed at its {count} RET "
                 f"instruction{'s' if count != 1 else ''} "
                 f"({', '.join(f'+{o}' for o in sites.returns)}), as a uretprobe would "
                 "break the goroutine stack")
    return [start + o for o in sites.returns]


def _at(err: ResolveError, spec: ProbeSpec) -> ResolveError:
    """A symbol-level error, located at the probe's spec in the plan."""
    return ResolveError(err.diagnostics[0].message, spec.spec_span,
                        hints=err.diagnostics[0].hints)


def register_arg(index: int, size: int, signed: bool, machine: str,
                 abi: Abi = "c") -> ArgOperand:
    """Argument `index` (1-based) of a function at its entry, per the machine's ABI (or
    Go's: the register ABI's integer registers, or ABI0's stack slots)."""
    if abi == "go":  # locate_uprobe offers no more than these and `goroutine`
        reg = GOROUTINE_REG if index == GOROUTINE_INDEX else GO_INT_REGS[index - 1]
        return _in_register(reg, size, signed)
    if abi == "go-abi0":
        return ArgOperand(f"{8 * index}(%rsp)", size, signed, False,
                          Mem(_whole(X86Reg.RSP), 8 * index))
    if machine == "EM_AARCH64":
        if index <= len(AARCH64_ARG_REGS):
            return _in_register(AARCH64_ARG_REGS[index - 1], size, signed)
        disp = 8 * (index - 1 - len(AARCH64_ARG_REGS))
        return ArgOperand(f"[sp, {disp}]", size, signed, False,
                          Mem(_whole(Arm64Reg.SP), disp))
    if index <= len(X86_64_ARG_REGS):
        return _in_register(X86_64_ARG_REGS[index - 1], size, signed)
    disp = 8 * (index - len(X86_64_ARG_REGS))  # (%rsp) holds the return address
    return ArgOperand(f"{disp}(%rsp)", size, signed, False, Mem(_whole(X86Reg.RSP), disp))


def return_value(size: int, signed: bool, machine: str) -> ArgOperand:
    return _in_register(Arm64Reg.X0 if machine == "EM_AARCH64" else X86Reg.RAX, size,
                        signed)


def _whole(reg: Register) -> Reg:
    """The whole register, named as its assembler writes it."""
    return Reg(reg, reg.value)


def _in_register(reg: Register, size: int, signed: bool) -> ArgOperand:
    text = reg.value if isinstance(reg, Arm64Reg) else f"%{reg.value}"
    return ArgOperand(text, size, signed, False, _whole(reg))


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
