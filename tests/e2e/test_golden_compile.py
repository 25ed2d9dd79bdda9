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


SLEEPABLE = [g for g in GOLDENS if "#ifdef PR_SLEEPABLE" in g.read_text()]


@pytest.mark.parametrize("golden", SLEEPABLE, ids=[g.parent.name for g in SLEEPABLE])
def test_sleepable_golden_compiles_and_verifies(golden: Path) -> None:
    """The same goldens as the loader compiles them on a kernel with sleepable uprobes:
    with PR_SLEEPABLE, every uprobe thunk loaded BPF_F_SLEEPABLE (runtime/progload.py)."""
    import os

    from bcc import BPF, lib

    from planrunner.runtime.features import detect
    from planrunner.runtime.progload import BPF_F_SLEEPABLE, load_program
    from planrunner.runtime.uprobe_links import BPF_TRACE_UPROBE_MULTI

    if not detect().sleepable:
        pytest.skip("this kernel has no sleepable uprobes")
    text = from_golden(golden.read_text())
    thunks = re.findall(r"^int (pr_\w+)\(struct pt_regs \*ctx\)$", text, re.M)
    bpf = BPF(text=text.encode(), cflags=["-Wno-macro-redefined", "-Wno-unused-function",
                                          "-DPR_SLEEPABLE"])
    try:
        for fn in thunks:
            name = fn.encode()
            fd, err, log = load_program(
                lib.bpf_function_start(bpf.module, name),
                lib.bpf_function_size(bpf.module, name), lib.bpf_module_license(bpf.module),
                BPF.KPROBE, BPF_F_SLEEPABLE, BPF_TRACE_UPROBE_MULTI, fn)
            assert fd >= 0, (fn, os.strerror(err), log)
            os.close(fd)
    finally:
        bpf.cleanup()
