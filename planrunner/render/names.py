"""C identifiers made from plan names. Plan names are identifiers
([A-Za-z_][A-Za-z0-9_-]*, checked by the schema); `-` becomes `_`."""

from __future__ import annotations


def c_ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def thunk_name(probe: str, kind: str, index: int) -> str:
    """The C function attached at one site of `probe`."""
    base = f"pr_{c_ident(probe)}"
    if kind == "perf":
        return f"{base}_perf"
    if kind == "tracepoint":  # a tracepoint set has one per event
        return f"{base}_tp{index}" if index else f"{base}_tp"
    return f"{base}_s{index}"
