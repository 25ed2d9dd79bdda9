#!/usr/bin/env python3
"""What one user stack costs planrunner.stacks in user space (no BPF): unwind a full
16 KiB stack copy that runs through Debian's libc (tests/fixtures/stacks in its qsort
mode: inner <- cmp <- libc's msort/qsort_r <- via_qsort <- deep), then symbolize it.

"first" is a process that has seen none of the modules (CFI index, FDE decoding, symbol
tables, c++filt all cold); "cached" is the median of later runs of the same stack, which
is what a long trace pays per event. Each build: fp/no-fp x PIE/non-PIE; and a real
Debian program without frame pointers: /usr/bin/python3.11 calling the fixture's
capture through ctypes (64 KiB asked), when it is installed.

    .venv/bin/python bench/stacks_unwind_cost.py [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "unit")]

from stacks_fixture import VARIANTS, build, load_dump, run_dump  # noqa: E402

from planrunner.stacks import cfi, fp_detect  # noqa: E402
from planrunner.stacks.symbolize import Symbolizer  # noqa: E402
from planrunner.stacks.unwind import unwind  # noqa: E402

PYTHON = "/usr/bin/python3.11"
PY_CALLER = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
def a(): return b() + 1
def b(): return lib.fx_capture(sys.argv[2].encode(), 65536)
a()
"""


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def measure(prefix: Path, repeat: int) -> dict[str, object]:
    dump = load_dump(prefix)
    out: dict[str, object] = {"bytes": len(dump.capture.window.data)}
    for mode in ("dwarf", "auto", "fp"):
        cfi.clear_cache()
        fp_detect._CACHE.clear()
        t0 = time.perf_counter()
        result = unwind(dump.capture, dump.modules, mode)
        first = time.perf_counter() - t0
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            unwind(dump.capture, dump.modules, mode)
            times.append(time.perf_counter() - t0)
        out[mode] = {"frames": len(result.addrs), "stop": result.stop,
                     "first_ms": _ms(first), "cached_ms": _ms(statistics.median(times))}
    result = unwind(dump.capture, dump.modules, "dwarf")
    sym = Symbolizer()
    t0 = time.perf_counter()
    sym.symbolize(result.addrs, dump.modules)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sym.symbolize(result.addrs, dump.modules)
        times.append(time.perf_counter() - t0)
    out["symbolize"] = {"first_ms": _ms(first), "cached_ms": _ms(statistics.median(times))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import elftools.dwarf.callframe  # noqa: F401 - import time is not the unwinder's
    with tempfile.TemporaryDirectory() as tmp:
        dirs = build(Path(tmp))
        rows = {v: measure(run_dump(dirs[v] / "fx_stack", dirs[v] / "q", "16384", "qsort"),
                           args.repeat) for v in VARIANTS}
        if Path(PYTHON).exists():
            prefix = Path(tmp) / "py"
            subprocess.run([PYTHON, "-c", PY_CALLER, str(Path(tmp) / "libfxdump.so"),
                            str(prefix)], check=True, timeout=60)
            rows["python3.11"] = measure(prefix, args.repeat)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'build':<11} {'mode':<6} {'frames':>6} {'stop':<15} {'first ms':>9} "
          f"{'cached ms':>9}")
    for v, row in rows.items():
        for mode in ("dwarf", "auto", "fp", "symbolize"):
            r = row[mode]
            assert isinstance(r, dict)
            print(f"{v:<11} {mode:<6} {r.get('frames', ''):>6} {r.get('stop', ''):<15} "
                  f"{r['first_ms']:>9} {r['cached_ms']:>9}")


if __name__ == "__main__":
    main()
