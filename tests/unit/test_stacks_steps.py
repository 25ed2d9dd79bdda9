"""stacks: one CFI step and one frame-pointer step on hand-made rows and windows,
including the aarch64 cases the x86-64 fixture cannot reach (a leaf whose return
address is still in the link register), and the rules a step must refuse."""

from __future__ import annotations

from typing import Any

import pytest

from planrunner.stacks import unwind_dwarf
from planrunner.stacks.capture import AARCH64, X86_64, StackWindow
from planrunner.stacks.cfi import CfaRow
from planrunner.stacks.modules import Mapping
from planrunner.stacks.state import Stop, UnwindState
from planrunner.stacks.unwind_fp import fp_step

MAP = Mapping(0x400000, 0x500000, 0, "r-xp", "/fake", 0, 1, "ab" * 20, 0)
SP = 0x7FFF0000


class _Rows:
    def __init__(self, row: CfaRow | None) -> None:
        self.row = row

    def row_at(self, vaddr: int) -> CfaRow | None:
        return self.row


def step(monkeypatch: pytest.MonkeyPatch, row: CfaRow | None, regs: dict[int, int],
         words: list[int], arch: Any = X86_64, first: bool = True) -> UnwindState | Stop:
    monkeypatch.setattr(unwind_dwarf, "module_cfi", lambda path, build_id: _Rows(row))
    window = StackWindow(SP, b"".join(w.to_bytes(8, "little") for w in words))
    return unwind_dwarf.dwarf_step(UnwindState(0x401000, regs, first), MAP, window, arch)


def test_x86_function_body(monkeypatch: pytest.MonkeyPatch) -> None:
    # after push %rbp; push %rbx: CFA = rsp + 24, rbp at CFA - 16, rbx at CFA - 24
    row = CfaRow(7, 24, {16: ("OFFSET", -8), 6: ("OFFSET", -16), 3: ("OFFSET", -24)}, 16)
    got = step(monkeypatch, row, {7: SP, 6: 1}, [0x33, 0x66, 0x402000])
    assert isinstance(got, UnwindState)
    assert got.pc == 0x402000 and got.regs[7] == SP + 24 and got.regs[6] == 0x66
    assert got.regs[3] == 0x33 and not got.first


def test_aarch64_leaf_returns_through_the_link_register(
        monkeypatch: pytest.MonkeyPatch) -> None:
    leaf = CfaRow(31, 0, {}, 30)  # no frame, no rule for x30: same value
    got = step(monkeypatch, leaf, {31: SP, 29: SP + 64, 30: 0x403000}, [], AARCH64)
    assert isinstance(got, UnwindState) and got.pc == 0x403000
    assert got.regs[31] == SP and 30 not in got.regs  # the caller's lr is unknown now
    framed = CfaRow(29, 16, {29: ("OFFSET", -16), 30: ("OFFSET", -8)}, 30)
    got = step(monkeypatch, framed, {31: SP, 29: SP}, [SP + 48, 0x404000], AARCH64,
               first=False)
    assert isinstance(got, UnwindState)
    assert (got.pc, got.regs[31], got.regs[29], got.regs[30]) == (0x404000, SP + 16,
                                                                  SP + 48, 0x404000)


def test_aarch64_pointer_authentication_bits_are_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    signed = 0x2A_0000_0040_4000  # PAC in bits 48 and up, as paciasp leaves x30
    framed = CfaRow(29, 16, {29: ("OFFSET", -16), 30: ("OFFSET", -8)}, 30)
    got = step(monkeypatch, framed, {31: SP, 29: SP}, [SP + 48, signed], AARCH64)
    assert isinstance(got, UnwindState) and got.pc == 0x40_4000
    window = StackWindow(SP, b"".join(w.to_bytes(8, "little") for w in (SP + 48, signed)))
    got = fp_step(UnwindState(1, {31: SP, 29: SP}, True), window, AARCH64)
    assert isinstance(got, UnwindState) and got.pc == 0x40_4000


@pytest.mark.parametrize(("row", "regs", "reason"), [
    (None, {7: SP}, "no-cfi"),
    (CfaRow(None, 0, {16: ("OFFSET", -8)}, 16), {7: SP}, "cfa-expression"),
    (CfaRow(10, 8, {16: ("OFFSET", -8)}, 16), {7: SP}, "unknown-register"),
    (CfaRow(7, 8, {16: ("EXPRESSION", b"")}, 16), {7: SP}, "ra-expression"),
    (CfaRow(7, 8, {16: ("UNDEFINED", None)}, 16), {7: SP}, "end"),
    (CfaRow(7, 8, {}, 16), {7: SP}, "no-return-address"),
    (CfaRow(7, 4096, {16: ("OFFSET", -8)}, 16), {7: SP}, "outside-window"),
    (CfaRow(7, -64, {16: ("OFFSET", -8)}, 16), {7: SP + 128}, "loop"),
])
def test_a_step_refuses_what_it_cannot_follow(monkeypatch: pytest.MonkeyPatch,
                                              row: CfaRow | None, regs: dict[int, int],
                                              reason: str) -> None:
    got = step(monkeypatch, row, regs, [0x402000] * 32)
    assert got == Stop(reason)


def test_frame_pointer_step() -> None:
    window = StackWindow(SP, b"".join(w.to_bytes(8, "little")
                                      for w in (0, 0, SP + 48, 0x402000)))
    got = fp_step(UnwindState(0x401000, {7: SP, 6: SP + 16}, True), window, X86_64)
    assert isinstance(got, UnwindState)
    assert (got.pc, got.regs[7], got.regs[6]) == (0x402000, SP + 32, SP + 48)
    for bad_fp in (SP + 17, SP - 16, 0):  # misaligned, below sp, a general register
        assert fp_step(UnwindState(1, {7: SP, 6: bad_fp}, True), window,
                       X86_64) == Stop("bad-fp")
    assert fp_step(UnwindState(1, {7: SP, 6: SP + 24}, True), window,
                   X86_64) == Stop("outside-window")
