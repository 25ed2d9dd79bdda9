"""elf/golang.py and the resolution of uprobes on Go functions (issue 22 item 6), on the
real Go fixture (tests/fixtures/go/growstack.go, built by Go):

- the program is recognised as Go, its function table (.gopclntab) read: main.compute at
  the address its ELF symbol gives, and found by name in a stripped copy;
- the entry probe is the instruction after the prologue's JBE (the stack check whose
  morestack path restarts the function), the return probes every RET: both checked
  against objdump's disassembly, independently of capstone;
- arguments are read from Go's registers (rax, rbx, ...), not the C ones (rdi, rsi, ...),
  and `validate` says `abi go`;
- an `.abi0` (assembly) function takes its arguments on the stack and has no return
  probe; argument 10 is refused; a C program keeps the C ABI.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planrunner.cli import main
from planrunner.elf import golang
from planrunner.elf.symbols import lookup_symbol
from planrunner.plan import load_plan
from planrunner.resolve import resolve_plan

pytest.importorskip("capstone")
if shutil.which("objdump") is None:
    pytest.skip("needs objdump (binutils) to check the disassembly", allow_module_level=True)

C_PROGRAM = Path(__file__).parents[1] / "fixtures" / "elf" / "bin" / "simple_pie"


def _disassembly(binary: Path, symbol: str) -> list[tuple[int, str]]:
    """(offset from the function's start, instruction text) per instruction, by objdump."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "intel",
                          f"--disassemble={symbol}", str(binary)],
                         capture_output=True, text=True, check=True).stdout
    rows = [(int(m.group(1), 16), m.group(2).strip())
            for m in re.finditer(r"^\s*([0-9a-f]+):\t(.*)$", out, re.M)]
    return [(a - rows[0][0], text) for a, text in rows]


def _plan(tmp_path: Path, binary: Path, probes: str) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(f"planrunner: 1\nname: go\ntargets: {{g: {{binary: {binary}}}}}\n"
                    f"probes:\n{probes}outputs: [{{count: e}}]\n")
    return str(path)


def _resolve(plan: str):  # type: ignore[no-untyped-def]
    return resolve_plan(load_plan(plan))


def test_a_go_program_is_recognised_and_its_function_table_read(go_growstack):
    assert golang.is_go(str(go_growstack))
    assert not golang.is_go(str(C_PROGRAM))
    funcs = golang.go_functions(str(go_growstack))
    [sym] = lookup_symbol(str(go_growstack), "main.compute")
    assert funcs[sym.value].name == "main.compute"
    assert funcs[sym.value].end - sym.value >= sym.size  # the next function's entry
    assert golang.function_abi(str(go_growstack), "main.compute", sym.value) == "go"
    [asm] = lookup_symbol(str(go_growstack), "runtime.abort.abi0")
    assert golang.function_abi(str(go_growstack), asm.name, asm.value) == "go-abi0"
    assert golang.function_abi(str(C_PROGRAM), "main", 0x1040) == "c"


def test_the_entry_is_after_the_stack_check_and_the_returns_are_every_ret(go_growstack):
    insns = _disassembly(go_growstack, "main.compute")
    [sym] = lookup_symbol(str(go_growstack), "main.compute")
    sites = golang.go_sites(str(go_growstack), sym.value, sym.size, "EM_X86_64")
    # objdump: the stack guard compare (g.stackguard0 at [r14+0x10]), its JBE, and the
    # instruction after it; the morestack path jumps back to the entry
    check = next(i for i, (_o, text) in enumerate(insns) if "[r14+0x10]" in text)
    assert insns[check][1].startswith("cmp")
    assert insns[check + 1][1].startswith("jbe")
    assert sites.checked and sites.entry == insns[check + 2][0] > 0
    assert sites.returns == tuple(o for o, text in insns if text.split()[0] == "ret")
    assert len(sites.returns) >= 1


def test_a_function_with_two_returns_gets_two_return_sites(go_growstack):
    insns = _disassembly(go_growstack, "main.grow")
    [sym] = lookup_symbol(str(go_growstack), "main.grow")
    sites = golang.go_sites(str(go_growstack), sym.value, sym.size, "EM_X86_64")
    rets = tuple(o for o, text in insns if text.split()[0] == "ret")
    assert len(rets) == 2 and sites.returns == rets


def test_uprobe_and_return_sites_read_go_registers(go_growstack, tmp_path):
    plan = _plan(tmp_path, go_growstack,
                 "  e: {uprobe: 'g:main.compute', args: [{name: n}, {name: m}]}\n"
                 "  r: {uretprobe: 'g:main.grow'}\n"
                 "  s: {span: {begin: e, end: r}}\n")
    text = Path(plan).read_text().replace("[{count: e}]", "[{print: s, fields: "
                                          "[begin.n, begin.m, end.retval]}]")
    Path(plan).write_text(text)
    resolved = _resolve(plan)
    [entry] = resolved.probe("e").sites
    [sym] = lookup_symbol(str(go_growstack), "main.compute")
    sites = golang.go_sites(str(go_growstack), sym.value, sym.size, "EM_X86_64")
    assert (entry.kind, entry.pc) == ("uprobe", sym.value + sites.entry)
    assert [a.text for a in entry.args if a] == ["%rax", "%rbx", "%r14"]  # n, m, key
    returns = resolved.probe("r").sites
    [grow] = lookup_symbol(str(go_growstack), "main.grow")
    assert [s.kind for s in returns] == ["uprobe", "uprobe"]  # never a uretprobe
    assert [s.pc - grow.value for s in returns] == list(
        golang.go_sites(str(go_growstack), grow.value, grow.size, "EM_X86_64").returns)
    assert all(s.args[0] is not None and s.args[0].text == "%rax" for s in returns)
    assert resolved.probe("e").abi == resolved.probe("r").abi == "go"
    # the span's default key: the goroutine (R14 holds the current g), not the thread
    span = resolved.probe("s")
    assert span.key_begin is not None and span.key_end is not None
    [g_slot] = [s for s in resolved.probe("e").slots if s.name == "goroutine"]
    assert entry.args[g_slot.index] is not None and entry.args[g_slot.index].text == "%r14"


def test_validate_shows_the_go_abi_and_the_probe_places(go_growstack, tmp_path):
    plan = _plan(tmp_path, go_growstack,
                 "  e: {uprobe: 'g:main.compute', args: [{name: n}]}\n"
                 "  x: {uretprobe: 'g:main.compute'}\n  s: {span: {begin: e, end: x}}\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", plan], out, err) == 0, err.getvalue()
    text = out.getvalue()
    assert text.count("    abi go: Go's register ABI: integer words arg1..arg9 in rax, "
                      "rbx, rcx") == 2
    assert "'main.compute' is a Go function: probed after its stack check (+" in text
    assert "its return is probed at its 1 RET instruction (+" in text
    assert "  s: span e -> x (by goroutine: both ends are Go functions)\n" in text


def test_list_vv_shows_the_abi_of_go_functions(go_growstack):
    out, err = io.StringIO(), io.StringIO()
    assert main(["list", "-vv", str(go_growstack), "main.compute"], out, err) == 0
    [sym] = lookup_symbol(str(go_growstack), "main.compute")
    sites = golang.go_sites(str(go_growstack), sym.value, sym.size, "EM_X86_64")
    assert (f"{go_growstack} main.compute  {sym.value:#x}, abi go, entry +{sites.entry} "
            f"(after the stack check), RET at +{sites.returns[0]}\n") in out.getvalue()
    assert "a Go program (" in out.getvalue() and "uprobes on them use abi go" in (
        out.getvalue())


def test_a_stripped_go_program_is_probed_by_its_function_table(go_growstack, tmp_path):
    if shutil.which("strip") is None:
        pytest.skip("needs strip (binutils)")
    stripped = tmp_path / "growstack"
    subprocess.run(["strip", "-o", str(stripped), str(go_growstack)], check=True)
    assert lookup_symbol(str(stripped), "main.compute") == []
    [sym] = lookup_symbol(str(go_growstack), "main.compute")
    plan = _plan(tmp_path, stripped, "  e: {uprobe: 'g:main.compute', args: [{name: n}]}\n")
    [site] = _resolve(plan).probe("e").sites
    sites = golang.go_sites(str(go_growstack), sym.value, sym.size, "EM_X86_64")
    assert site.pc == sym.value + sites.entry


def test_assembly_functions_take_stack_arguments_and_have_no_return_probe(go_growstack,
                                                                          tmp_path):
    plan = _plan(tmp_path, go_growstack,
                 "  e: {uprobe: 'g:runtime.args.abi0', args: [{name: a}]}\n")
    Path(plan).write_text(Path(plan).read_text().replace("[{count: e}]",
                                                         "[{print: e, fields: [a]}]"))
    [site] = _resolve(plan).probe("e").sites
    assert site.args[1] is not None and site.args[1].text == "8(%rsp)"
    plan = _plan(tmp_path, go_growstack, "  e: {uretprobe: 'g:runtime.args.abi0'}\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", plan], out, err) == 1
    assert "Go assembly function (ABI0): its results are on the stack" in err.getvalue()


def test_a_tenth_argument_is_refused_at_its_place(go_growstack, tmp_path):
    plan = _plan(tmp_path, go_growstack,
                 "  e: {uprobe: 'g:main.compute', args: ["
                 + "{type: int64}, " * 9 + "{name: far}]}\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", plan], out, err) == 1
    assert re.search(r"plan\.yaml:\d+:\d+: error: argument 10 of Go function "
                     r"'main\.compute' is not in a register", err.getvalue())


def test_c_functions_keep_the_c_abi(tmp_path):
    plan = _plan(tmp_path, C_PROGRAM, "  e: {uprobe: 'g:main', args: [{name: a}]}\n")
    Path(plan).write_text(Path(plan).read_text().replace("[{count: e}]",
                                                         "[{print: e, fields: [a]}]"))
    probe = _resolve(plan).probe("e")
    assert probe.abi == "c"
    assert [a.text for a in probe.sites[0].args if a] == ["%rdi"]
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", plan], out, err) == 0
    assert "abi" not in out.getvalue()
