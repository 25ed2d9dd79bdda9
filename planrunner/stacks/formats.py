"""Stacks as text, JSON values and folded lines (pure functions over Frames).

- `frame_dict(f)` -> {"address", "symbol", "offset", "module", "line", "kind"} (JSON;
  lists innermost first, as `frames_json` returns them; a CPython frame: kind
  "python", its qualified name, file and line; a native one: kind "native", line null);
- `text_lines(frames, indent=4)` -> `    inner+0x12 [fx_stack]` per frame, innermost first,
  like bcc's `trace -U`; an unknown symbol prints the address: `    0x7f3a0c029d8f
  [libc.so.6]` (module basenames; `[unknown]` when the address is in no file); a
  CPython frame as py-spy names it, `    hot (spin.py:4) [python]`;
- `folded_line(comm, frames, count)` -> `comm;outermost;…;innermost COUNT`, and
  `fold(stacks)` merges equal stacks into sorted lines: the input of FlameGraph's
  flamegraph.pl, inferno and speedscope. A frame without a symbol folds as its module
  (`[libc.so.6]`), so unknown frames of one library merge; a CPython frame folds as
  `hot (spin.py)`, one box per function whatever its line; kernel frames get `_[k]`
  (pass kernel frames before user frames: innermost first), JIT frames named from a perf
  map `_[j]` (as FlameGraph's stackcollapse-perf.pl marks them; text and JSON: module
  `[jit]`, kind "jit"); `;` and newlines in names are replaced (they would split the
  line).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence

from planrunner.stacks.frame import Frame


def frame_dict(frame: Frame) -> dict[str, object]:
    return {"address": frame.address, "symbol": frame.symbol, "offset": frame.offset,
            "module": frame.module, "line": frame.line, "kind": frame.kind}


def frames_json(frames: Sequence[Frame]) -> list[dict[str, object]]:
    return [frame_dict(f) for f in frames]


def module_label(module: str) -> str:
    if not module:
        return "[unknown]"
    if module.startswith("["):
        return module
    return f"[{os.path.basename(module)}]"


def python_place(frame: Frame) -> str:
    """A CPython frame as py-spy names it: `hot (spin.py:4)`."""
    return f"{frame.symbol} ({os.path.basename(frame.module)}:{frame.line})"


def text_line(frame: Frame, indent: int = 4) -> str:
    if frame.kind == "python":
        return f"{' ' * indent}{python_place(frame)} [python]"
    where = (f"{frame.symbol}+{frame.offset:#x}" if frame.symbol is not None
             else f"{frame.address:#x}")
    return f"{' ' * indent}{where} {module_label(frame.module)}"


def place_name(frame: Frame) -> str:
    """A frame by its place, the same in every process that runs the code:
    `inner+0x12 [fx]`, or for a frame without a symbol its module and link-time
    offset, `[libc.so.6]+0x29d8f` (its address differs by process: ASLR); the address
    only when it is in no file."""
    if frame.kind == "python":
        return f"{python_place(frame)} [python]"
    if frame.symbol is not None:
        return f"{frame.symbol}+{frame.offset:#x} {module_label(frame.module)}"
    if frame.module:
        return f"{module_label(frame.module)}+{frame.offset:#x}"
    return f"{frame.address:#x} [unknown]"


def text_lines(frames: Sequence[Frame], indent: int = 4) -> list[str]:
    return [text_line(f, indent) for f in frames]


KERNEL_HALF = 1 << 63  # x86-64 and aarch64 kernel addresses have the top bit set


def fold_name(frame: Frame) -> str:
    if frame.kind == "python":  # one box per function: `hot (spin.py)`
        name = f"{frame.symbol} ({os.path.basename(frame.module)})"
        return name.replace(";", ":").replace("\n", " ")
    name = frame.symbol if frame.symbol is not None else module_label(frame.module)
    if frame.address >= KERNEL_HALF:
        name += "_[k]"  # stackcollapse-perf.pl's kernel annotation (flamegraph colours it)
    elif frame.kind == "jit":
        name += "_[j]"  # and its JIT one
    return name.replace(";", ":").replace("\n", " ")


def folded_line(comm: str, frames: Sequence[Frame], count: int) -> str:
    parts = [comm.replace(";", ":").replace("\n", " ")] if comm else []
    parts.extend(fold_name(f) for f in reversed(frames))
    return f"{';'.join(parts)} {count}"


def fold(stacks: Iterable[tuple[str, Sequence[Frame], int]]) -> list[str]:
    """(comm, frames innermost first, count) -> folded lines, equal stacks summed."""
    totals: Counter[str] = Counter()
    for comm, frames, count in stacks:
        key = folded_line(comm, frames, 0).rsplit(" ", 1)[0]
        totals[key] += count
    return [f"{k} {v}" for k, v in sorted(totals.items())]
