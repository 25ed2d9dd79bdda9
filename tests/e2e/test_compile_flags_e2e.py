"""The cflags a plan's program is compiled with (bcc_backend.compile_flags): one
optimization pipeline (bcc's -O3, not clang's -O2 before it), and no debug info, whose
LLVM pass costs the square of the probe sites: not even for sleepable sites, whose
task-storage scratch maps bcc would create only with the program's BTF (bcc is given
hashes, and the image holds task storage: runtime_helpers.h PR_TASK_STORAGE).

bcc loads the BTF it makes from the debug info into the kernel when it compiles, as
an fd of its own (anon_inode:btf): counting those fds tells whether it made one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planrunner.render.model import RenderedProgram
from planrunner.runtime import bcc_backend
from planrunner.runtime.features import detect
from planrunner.runtime.registry_pin import TRACERS_PIN
from tests.e2e.conftest import write_plan

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (bcc, BPF)")


def _btf_fds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:btf"
        except OSError:  # the listing's own fd, closed since
            pass
    return count


def _program(tmp_path: Path, build: Path) -> RenderedProgram:
    from planrunner.pipeline import compile_plan

    plan = write_plan(tmp_path, f"""
planrunner: 1
name: flags
targets: {{s: {{binary: {build / 'libstrs.so'}}}}}
probes:
  p0: {{uprobe: s:strs_take, args: [{{name: k, type: int32}}]}}
  text: {{uprobe: s:strs_take}}
outputs:
  - {{count: p0, by: [k]}}
  - print: text
    fields: [{{d: "str(arg2)"}}]
""")
    _p, _r, program = compile_plan(plan, {})
    return program


def _compiled_btf(cflags: list[str], program: RenderedProgram, load: bool = True) -> int:
    """How many BTF bcc loaded compiling `program`, whose thunks the kernel then accepts
    if `load` (bcc loads them in-process, with that BTF's function info if any)."""
    before = _btf_fds()
    bpf = bcc_backend.compile_bcc(program.c_source, cflags)
    try:
        made = _btf_fds() - before
        for site in program.sites if load else ():
            assert bpf.load_func(site.fn_name.encode(), bpf.KPROBE).fd >= 0
        return made
    finally:
        bpf.cleanup()


def test_a_program_without_sleepable_sites_is_compiled_without_debug_info(
        tmp_path, fixtures_built) -> None:
    program = _program(tmp_path, fixtures_built)
    assert program.has_sleepable  # the string read: sleepable where the kernel allows
    cflags = bcc_backend.compile_flags(program, TRACERS_PIN, sleepable=False)
    assert cflags[-1] == "-g0"
    assert _compiled_btf(cflags, program) == 0
    # the same program with bcc's own -g: it makes and loads a BTF (what -g0 saves)
    assert _compiled_btf(cflags[:-1], program) == 1


@pytest.mark.skipif(os.geteuid() == 0 and not detect().sleepable,
                    reason="this kernel has no sleepable uprobes")
def test_sleepable_sites_compile_without_debug_info_and_load_with_task_storage(
        tmp_path, fixtures_built) -> None:
    """Compiled for sleepable loads: no BTF made, the scratch map in the image is task
    storage (bcc created a hash), and the loader creates it and loads the sleepable
    thunk on it (the verifier refuses bpf_task_storage_get on any other map)."""
    from planrunner.runtime import compile_cache as cc
    from planrunner.runtime.kernel.bpf import (
        BPF_F_SLEEPABLE,
        BPF_MAP_TYPE_TASK_STORAGE,
        BPF_PROG_TYPE_KPROBE,
        BPF_TRACE_UPROBE_MULTI,
    )

    program = _program(tmp_path, fixtures_built)
    cflags = bcc_backend.compile_flags(program, TRACERS_PIN, sleepable=True)
    assert cflags[-1] == "-g0" and f"-D{program.sleepable_switch}" in cflags
    assert _compiled_btf(cflags, program, load=False) == 0
    assert program.task_storage_maps
    image = bcc_backend.compile_program(program.c_source, cflags, {},
                                        task_storage=program.task_storage_maps)
    kinds = {m.name: (m.map_type, m.max_entries) for m in image.maps}
    assert {kinds[n] for n in program.task_storage_maps} == {(BPF_MAP_TYPE_TASK_STORAGE, 0)}
    sleepable = [s for s in program.sites if s.sleepable]
    assert sleepable
    loaded = cc.LoadedProgram(image)
    try:
        for site in sleepable:
            assert loaded.load_func(site.fn_name, BPF_PROG_TYPE_KPROBE,
                                    BPF_TRACE_UPROBE_MULTI, BPF_F_SLEEPABLE) >= 0
    finally:
        loaded.close()
    # the same C compiled as a hash-scratch program is refused where it needs task storage
    plain = bcc_backend.compile_program(program.c_source, cflags, {})
    refused = cc.LoadedProgram(plain)
    try:
        with pytest.raises(cc.CacheLoadError):
            refused.load_func(sleepable[0].fn_name, BPF_PROG_TYPE_KPROBE,
                              BPF_TRACE_UPROBE_MULTI, BPF_F_SLEEPABLE)
    finally:
        refused.close()


def _instructions(cflags: list[str], program: RenderedProgram) -> dict[str, int]:
    """BPF instructions of each function bcc compiles, after the kernel accepted each
    of the program's thunks."""
    from bcc import lib

    bpf = bcc_backend.compile_bcc(program.c_source, cflags)
    try:
        for site in program.sites:
            assert bpf.load_func(site.fn_name.encode(), bpf.KPROBE).fd >= 0
        names = [lib.bpf_function_name(bpf.module, i)
                 for i in range(lib.bpf_num_functions(bpf.module))]
        return {n.decode(): lib.bpf_function_size(bpf.module, n) // 8 for n in names}
    finally:
        bpf.cleanup()


def test_the_module_is_optimized_once_by_bcc_alone(tmp_path, fixtures_built) -> None:
    """clang's own -O2 pipeline is skipped (bcc's -O3 optimizes alone: ~40% of a
    plan's clang CPU, BENCHMARKS.md issue 28 item 3): the same functions, each
    verified, and no more instructions than with both pipelines."""
    program = _program(tmp_path, fixtures_built)
    cflags = bcc_backend.compile_flags(program, TRACERS_PIN, sleepable=False)
    single = list(bcc_backend.SINGLE_OPTIMIZATION)
    assert cflags[2:2 + len(single)] == single
    once = _instructions(cflags, program)
    twice = _instructions(cflags[:2] + cflags[2 + len(single):], program)
    assert once.keys() == twice.keys()
    assert sum(once.values()) <= sum(twice.values()), (once, twice)
