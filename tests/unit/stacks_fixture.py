"""Build tests/fixtures/stacks once per test session, run each build, load its dumps.

`build(out)` -> {variant: directory} for fp_pie, fp_nopie, nofp_pie, nofp_nopie (each
holds fx_stack and its libfx.so; libfxdump.so is in `out`); `session_build(factory)`
builds once per test session; `run_dump(binary, prefix, *args)` runs the fixture,
which writes PREFIX.regs/.stack/.maps and exits; `load_dump(prefix)` -> Dump with the
capture (registers + stack window) and the dumped maps as a ProcessModules snapshot.
Callers skip with `missing_toolchain()`'s reason when gcc or make is absent.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from planrunner.stacks.capture import X86_64, StackWindow, UserRegs, UserStackCapture
from planrunner.stacks.modules import ProcessModules, modules_from_maps

SRC = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"
VARIANTS = ("fp_pie", "fp_nopie", "nofp_pie", "nofp_nopie")
CHAIN = ["inner", "middle", "lib_outer", "outer", "main"]


def missing_toolchain() -> str | None:
    if platform.machine() != "x86_64":
        return f"the stack fixture captures x86-64 registers (this is {platform.machine()})"
    for tool in ("gcc", "make"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def build(out: Path) -> dict[str, Path]:
    subprocess.run(["make", "-s", "-C", str(SRC), f"OUT={out}"], check=True,
                   capture_output=True, text=True)
    return {v: out / v for v in VARIANTS}


_BUILT: dict[str, dict[str, Path]] = {}


def session_build(factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One build for every stacks test module of a session (gcc runs ~10 times)."""
    if "builds" not in _BUILT:
        _BUILT["builds"] = build(factory.mktemp("stacks"))
    return _BUILT["builds"]


def run_dump(binary: Path, prefix: Path, *args: str) -> Path:
    subprocess.run([str(binary), str(prefix), *args], check=True, capture_output=True,
                   timeout=30)
    return prefix


@dataclass(frozen=True)
class Dump:
    capture: UserStackCapture
    modules: ProcessModules
    asked: int
    maps_text: str


def load_dump(prefix: Path) -> Dump:
    regs = dict(line.split() for line in Path(f"{prefix}.regs").read_text().splitlines())
    data = Path(f"{prefix}.stack").read_bytes()
    assert len(data) == int(regs["len"])
    sp = int(regs["sp"], 16)
    pid, start = int(regs["pid"]), int(regs["start_time"])
    capture = UserStackCapture(pid, start, X86_64,
                               UserRegs(int(regs["pc"], 16), sp, int(regs["fp"], 16)),
                               StackWindow(sp, data))
    maps_text = Path(f"{prefix}.maps").read_text()
    return Dump(capture, modules_from_maps(maps_text, pid, start), int(regs["asked"]),
                maps_text)


def dumps_of(factory: pytest.TempPathFactory, prefix: str) -> dict[str, Dump]:
    """One dump per variant of the session's build, its files named `prefix`."""
    return {v: load_dump(run_dump(d / "fx_stack", d / prefix))
            for v, d in session_build(factory).items()}


def with_word(capture: UserStackCapture, at: int, value: int) -> UserStackCapture:
    """`capture` with the word `at` bytes into its copy set to `value`."""
    data = bytearray(capture.window.data)
    data[at:at + 8] = value.to_bytes(8, "little")
    return replace(capture, window=StackWindow(capture.window.base, bytes(data)))
