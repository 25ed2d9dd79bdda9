"""A Scope made of a dict, for checking and lowering expressions without a plan."""

from __future__ import annotations

from collections.abc import Iterable

from planrunner.expr.check import Symbol


class DictScope:
    def __init__(self, symbols: dict[str, Symbol]) -> None:
        self.symbols = symbols

    def lookup(self, name: str) -> Symbol | None:
        return self.symbols.get(name)

    def names(self) -> Iterable[str]:
        return self.symbols.keys()
