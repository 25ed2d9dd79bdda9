"""Build the small USDT fixtures of tests/unit/data/sdt_listing/ once per test session.

`build_fixtures(tmpdir) -> dict[name, path]` with names `pie`, `nopie`, `lib`. Callers
skip with the reason `missing_toolchain()` gives when gcc or sys/sdt.h is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SRC = Path(__file__).parent / "data" / "sdt_listing"


def missing_toolchain() -> str | None:
    """Why the fixtures cannot be built here, or None."""
    if shutil.which("gcc") is None:
        return "gcc is not installed"
    probe = subprocess.run(["gcc", "-E", "-x", "c", "-", "-o", os.devnull],
                           input="#include <sys/sdt.h>\n", capture_output=True, text=True)
    if probe.returncode != 0:
        return "sys/sdt.h is not installed (Debian: systemtap-sdt-dev)"
    return None


def build_fixtures(out: Path) -> dict[str, str]:
    def cc(*args: str) -> None:
        subprocess.run(["gcc", "-O1", "-g0", *args], check=True, cwd=out)

    cc("-fPIC", "-shared", "-o", "libsdtdemo.so", str(SRC / "lib.c"))
    for name, flags in (("pie", ["-fPIE", "-pie"]), ("nopie", ["-fno-pie", "-no-pie"])):
        cc(*flags, "-D_SDT_HAS_SEMAPHORES=1", "-c", "-o", f"gated-{name}.o",
           str(SRC / "gated.c"))
        cc(*flags, "-o", f"prog-{name}", str(SRC / "prog.c"), f"gated-{name}.o")
    return {"pie": str(out / "prog-pie"), "nopie": str(out / "prog-nopie"),
            "lib": str(out / "libsdtdemo.so")}
