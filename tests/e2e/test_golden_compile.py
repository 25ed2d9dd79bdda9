"""Every golden program compiles with bcc and every thunk passes the BPF verifier
(the goldens are never the only check of the C)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.golden_headers import from_golden

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = sorted((ROOT / "tests" / "golden").glob("*/expected.bpf.c"))


@pytest.mark.parametrize("golden", GOLDENS, ids=[g.parent.name for g in GOLDENS])
def test_golden_compiles_and_verifies(golden: Path) -> None:
    from bcc import BPF

    text = from_golden(golden.read_text())
    thunks = re.findall(r"^int (pr_\w+)\((?:struct pt_regs \*ctx|void \*ctx|"
                        r"struct bpf_perf_event_data \*ctx)\)$", text, re.M)
    assert thunks, "a program without thunks"
    bpf = BPF(text=text.encode(), cflags=["-Wno-macro-redefined", "-Wno-unused-function"])
    try:
        for fn in thunks:
            kind = (BPF.TRACEPOINT if fn.endswith("_tp") else
                    BPF.PERF_EVENT if fn.endswith("_perf") else BPF.KPROBE)
            assert bpf.load_func(fn.encode(), kind).fd >= 0
    finally:
        bpf.cleanup()
