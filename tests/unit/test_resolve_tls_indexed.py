"""Resolving and rendering absolute indexed and thread-local operands against the
fixtures built from indexed.c, tls.c and libtls.c: symbols get their link-time values,
`%fs:var@tpoff` its offset from the thread pointer, and the rendered C names the
kernel's task_struct offset as a macro, so it is the same whatever the kernel."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from planrunner.elf import btf
from planrunner.elf.symbols import lookup_symbol
from planrunner.errors import PlanError
from planrunner.pipeline import compile_plan
from planrunner.usdt.model import SymMem, TlsMem
from tests.unit.test_btf import Builder
from tests.unit.test_tls_indexed_fixtures import built  # noqa: F401 - a fixture


def _plan(tmp_path: Path, binary: Path, probe: str, nargs: int) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(json.dumps({
        "planrunner": 1, "name": "p", "targets": {"t": {"binary": str(binary)}},
        "probes": {"p": {"usdt": f"t:{probe}"}},
        "outputs": [{"print": "p", "fields": [f"arg{i}" for i in range(1, nargs + 1)]}]}))
    return str(path)


def _address(binary: Path, name: str) -> int:
    (sym,) = lookup_symbol(str(binary), name)
    return sym.value


def test_absolute_indexed_symbols_get_their_link_time_address(
        built: Path, tmp_path: Path) -> None:  # noqa: F811
    binary = built / "indexed_O2"
    _, resolved, program = compile_plan(_plan(tmp_path, binary, "idx:bytes", 4), {})
    (site,) = resolved.probes[0].sites
    ops = [a.operand for a in site.args[1:]]
    assert all(isinstance(op, SymMem) for op in ops)
    assert [op.value for op in ops if isinstance(op, SymMem)] == [
        _address(binary, "ctab"), _address(binary, "htab"), _address(binary, "ctab") + 3,
        _address(binary, "big") - 8]
    assert program.runtime_constants == ()
    assert f"(__u64)ctx->ip - {site.pc:#x}ULL + {_address(binary, 'big') - 8:#x}ULL" \
        in program.c_source


def test_thread_local_offsets_and_a_host_independent_program(
        built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    binary = built / "tls_O2"
    plan = _plan(tmp_path, binary, "tls:exe", 4)
    _, resolved, program = compile_plan(plan, {})
    (site,) = resolved.probes[0].sites
    tpoffs = [a.operand.tpoff for a in site.args[1:] if isinstance(a.operand, TlsMem)]
    assert tpoffs == [-64, -32, -32, -48]  # tv, tl (+16 is the disp), tl, tc
    assert program.runtime_constants == (("PR_TASK_FSBASE_OFFSET", btf.THREAD_POINTER),)
    assert "#ifndef PR_TASK_FSBASE_OFFSET" in program.c_source
    # another kernel's BTF (fsbase elsewhere) renders the very same C
    b = Builder()
    long_t = b.add("long", btf.INT, 0, 8, struct.pack("<I", (1 << 24) | 64))
    thread = b.struct("thread_struct", 16, [("sp", long_t, 0), ("fsbase", long_t, 64)])
    b.struct("task_struct", 64, [("state", long_t, 0), ("thread", thread, 8 * 40)])
    (tmp_path / "btf").write_bytes(b.blob())
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(tmp_path / "btf"))
    assert compile_plan(plan, {})[2].c_source == program.c_source
    assert btf.runtime_cflags(program.runtime_constants) == ["-DPR_TASK_FSBASE_OFFSET=48"]


def test_a_stripped_binary_cannot_resolve_an_absolute_symbol(
        built: Path, tmp_path: Path) -> None:  # noqa: F811
    if shutil.which("strip") is None:
        pytest.skip("strip is not installed")
    stripped = tmp_path / "indexed_stripped"
    subprocess.run(["strip", "-o", str(stripped), str(built / "indexed_O2")], check=True)
    with pytest.raises(PlanError, match="names symbol 'table', which is not in the "
                                           "symbol table"):
        compile_plan(_plan(tmp_path, stripped, "idx:table", 2), {})


def test_tpoff_in_a_shared_library_is_refused(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    src = tmp_path / "lib.c"
    src.write_text('#include <sys/sdt.h>\n__thread int ltv = 3;\n'
                   'void f(void) { __asm__ __volatile__('
                   'STAP_PROBE_ASM(l, p, -4@%%fs:ltv@tpoff) : : : "memory"); }\n')
    lib = tmp_path / "lib.so"
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", "-o", str(lib), str(src)], check=True)
    with pytest.raises(PlanError, match="is a shared library, whose TLS block is placed"):
        compile_plan(_plan(tmp_path, lib, "l:p", 1), {})
