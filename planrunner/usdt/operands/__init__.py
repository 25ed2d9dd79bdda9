"""Operand parsers in a registry keyed by the binary's ELF e_machine (STUB: being written)."""

from __future__ import annotations

from planrunner.usdt.model import ArgOperand, Undecodable


def parse_args(text: str, machine: str) -> tuple[ArgOperand, ...]:
    """Split a note's argument string and decode each operand for `machine` ('EM_X86_64'...)."""
    return tuple(ArgOperand(t, 8, False, False, Undecodable("not implemented")) for t in text.split())
