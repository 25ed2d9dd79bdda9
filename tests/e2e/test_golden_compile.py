"""Every golden program compiles with bcc and every thunk passes the BPF verifier
(the goldens are never the only check of the C)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planrunner.runtime.bcc_backend import BASE_CFLAGS
from tests.golden_headers import from_golden

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = sorted((ROOT / "tests" / "golden").glob("*/expected.bpf.c"))


def _kernel_cflags(golden: Path, monkeypatch: pytest.MonkeyPatch,
                   btf: bool = True) -> list[str]:
    """`-DMACRO=N` for the running kernel's offsets the golden's C uses (its `#error`
    guards) and, with `btf`, its optional ones (runtime_helpers.h pr_current_comm, the
    run's own raw fork and argv-reading exec programs), as the loader defines them: from
    the golden's plan rendered again."""
    from planrunner.elf.btf import runtime_cflags
    from planrunner.pipeline import compile_plan
    from planrunner.runtime.bcc_backend import btf_cflags, own_btf_cflags

    monkeypatch.chdir(ROOT)  # plans name the committed binaries relative to the repo
    program = compile_plan(str((golden.parent / "plan.yaml").relative_to(ROOT)), {})[2]
    optional = btf_cflags(program.btf_constants) + own_btf_cflags() if btf else []
    return runtime_cflags(program.runtime_constants) + optional


@pytest.mark.parametrize("btf", [True, False], ids=["btf", "no-btf"])
@pytest.mark.parametrize("golden", GOLDENS, ids=[g.parent.name for g in GOLDENS])
def test_golden_compiles_and_verifies(golden: Path, btf: bool,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways: with the kernel's BTF (the comm from the task, the run's own BTF-only
    programs) and uprobes attached through the dispatcher (PR_DISPATCHED: the thunks it
    calls leave the scope check to it), as this kernel's loader does; and without (the
    comm by the helper, those programs compiled out, every thunk checking the scope
    itself, as on a kernel before uprobe_multi links). Every function compiled
    verifies; the run's own programs are compiled one variant each."""
    from bcc import BPF, lib

    text = from_golden(golden.read_text())
    thunks = re.findall(r"^int (pr_\w+)\((?:struct pt_regs \*ctx|void \*ctx|"
                        r"struct bpf_perf_event_data \*ctx)\)$", text, re.M)
    assert thunks, "a program without thunks"
    cflags = _kernel_cflags(golden, monkeypatch, btf) + (["-DPR_DISPATCHED"] if btf else [])
    bpf = BPF(text=text.encode(), cflags=[*BASE_CFLAGS, *cflags])  # the loader's
    try:
        compiled = [t for t in thunks if lib.bpf_function_start(bpf.module, t.encode())]
        own = {f for f in re.findall(r"^int (pr_on_exe?\w*)\(", text, re.M)
               if lib.bpf_function_start(bpf.module, f.encode())}
        assert len(own & {"pr_on_exit", "pr_on_exit_raw"}) == 1, own  # one exit program
        # one exec program, and the execve ones only without the kernel's offsets
        assert len(own & {"pr_on_exec", "pr_on_exec_raw", "pr_on_exec_argv",
                          "pr_on_exec_argv_raw"}) == 1, own
        assert bool(own & {"pr_on_execve", "pr_on_execveat"}) is not btf, own
        for fn in compiled:
            kind = (BPF.TRACEPOINT if fn.endswith("_tp") else
                    BPF.PERF_EVENT if fn.endswith("_perf") else BPF.KPROBE)
            assert bpf.load_func(fn.encode(), kind).fd >= 0
    finally:
        bpf.cleanup()


SLEEPABLE = [g for g in GOLDENS if "#ifdef PR_SLEEPABLE" in g.read_text()]


@pytest.mark.parametrize("golden", SLEEPABLE, ids=[g.parent.name for g in SLEEPABLE])
def test_sleepable_golden_compiles_and_verifies(golden: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The same goldens as the loader compiles them on a kernel with sleepable uprobes:
    with PR_SLEEPABLE, the sleepable scratch maps task storage in the image (bcc
    is given hashes: RenderedProgram.task_storage_maps, which name the maps the C
    declares so), every uprobe thunk loaded BPF_F_SLEEPABLE by the loader
    (compile_cache.LoadedProgram), but the uprobe dispatcher, which the runtime never
    loads sleepable (the verifier refuses a prog array to a sleepable program)."""
    from planrunner.pipeline import compile_plan
    from planrunner.render.program import UPROBE_DISPATCHER
    from planrunner.runtime import compile_cache as cc
    from planrunner.runtime.bcc_backend import compile_program
    from planrunner.runtime.features import detect
    from planrunner.runtime.kernel.bpf import (
        BPF_F_SLEEPABLE,
        BPF_PROG_TYPE_KPROBE,
        BPF_TRACE_UPROBE_MULTI,
    )

    if not detect().sleepable:
        pytest.skip("this kernel has no sleepable uprobes")
    text = from_golden(golden.read_text())
    thunks = re.findall(r"^int (pr_\w+)\(struct pt_regs \*ctx\)$", text, re.M)
    cflags = [*BASE_CFLAGS, "-DPR_SLEEPABLE", *_kernel_cflags(golden, monkeypatch)]
    storage = compile_plan(str((golden.parent / "plan.yaml").relative_to(ROOT)),
                           {})[2].task_storage_maps
    assert sorted(storage) == sorted(re.findall(r"^PR_TASK_STORAGE\((\w+),", text, re.M))
    loaded = cc.LoadedProgram(compile_program(text, cflags, {}, task_storage=storage))
    try:
        for fn in thunks:
            try:
                loaded.load_func(fn, BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI,
                                 0 if fn == UPROBE_DISPATCHER else BPF_F_SLEEPABLE)
            except cc.CacheLoadError as exc:
                raise AssertionError((fn, exc.reason, exc.log_tail)) from None
    finally:
        loaded.close()
