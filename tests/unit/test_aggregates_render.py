"""render/aggregates.py: the C of each aggregation, checked for what it must do.

The bucket arithmetic (log2 and linear slots) is compiled with gcc and run over edge
values, and must agree with records.py's index functions, which the runtime uses to
label the buckets. The rest checks the structure the runtime and the verifier rely on.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from planrunner.records import lhist_bucket_index, log2_bucket_index
from planrunner.render.aggregates import lhist_slot_lines, log2_slot_lines
from planrunner.render.layout import KeyField, KeyLayout

ROOT = Path(__file__).resolve().parents[2]
AGG = "tests/fixtures/elf/bin/agg"
U64 = (1 << 64) - 1

LOG2_VALUES = sorted({0, 1, 2, 3, 4, 5, 7, 8, 9, 1000, U64, 1 << 63, (1 << 63) - 1,
                      *(1 << k for k in range(64)), *((1 << k) - 1 for k in range(1, 65)),
                      *((1 << k) + 1 for k in range(1, 63))})


def _run_c(tmp_path: Path, body: str, values: list[int], ctype: str) -> list[int]:
    """Compile `body` (statements reading `x`, setting `slot`) and run it over values."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    src = tmp_path / "slot.c"
    src.write_text(
        "#include <stdio.h>\n#include <stdlib.h>\n"
        "typedef unsigned long long __u64; typedef long long __s64;\n"
        "int main(int argc, char **argv) {\n"
        "    for (int i = 1; i < argc; i++) {\n"
        f"        {ctype} x = ({ctype})strtoull(argv[i], 0, 0);\n"
        "        __u64 slot = 0;\n"
        f"{body}\n"
        "        printf(\"%llu\\n\", slot);\n"
        "    }\n    return 0;\n}\n")
    exe = tmp_path / "slot"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    args = [str(v & U64) for v in values]
    out = subprocess.run([str(exe), *args], capture_output=True, text=True, check=True).stdout
    return [int(line) for line in out.split()]


def test_log2_slot_matches_records_for_every_power_edge(tmp_path: Path) -> None:
    body = "\n".join(log2_slot_lines("x", "slot"))
    got = _run_c(tmp_path, body, LOG2_VALUES, "__u64")
    assert got == [log2_bucket_index(v) for v in LOG2_VALUES]


def test_log2_of_a_negative_value_is_the_top_bucket(tmp_path: Path) -> None:
    """Values are taken as unsigned 64-bit (records.py): -1 lands in slot 64."""
    body = "\n".join(log2_slot_lines("x", "slot"))
    assert _run_c(tmp_path, body, [-1, -(1 << 62)], "__u64") == [64, 64]


@pytest.mark.parametrize(("lo", "hi", "step"), [(100, 900, 100), (-300, 300, 100), (0, 10, 3),
                                                (-10, -2, 4), (5, 6, 1)])
def test_lhist_slot_matches_records_signed(tmp_path: Path, lo: int, hi: int, step: int) -> None:
    values = sorted({lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, (lo + hi) // 2, -(1 << 63),
                     (1 << 63) - 1, 0, -1, *range(lo - step, hi + step)})
    body = "\n".join(lhist_slot_lines("x", "slot", lo, hi, step, signed=True))
    got = _run_c(tmp_path, body, values, "__s64")
    assert got == [lhist_bucket_index(v, lo, hi, step) for v in values]


@pytest.mark.parametrize(("lo", "hi", "step"), [(100, 900, 100), (-300, 300, 100),
                                                (-10, -2, 4), (0, 1 << 62, 1 << 60)])
def test_lhist_slot_matches_records_unsigned(tmp_path: Path, lo: int, hi: int,
                                             step: int) -> None:
    """A uint64 value is compared unsigned: 2**63 and above are overflow, never under."""
    values = sorted({0, 1, max(lo, 0), max(hi - 1, 0), max(hi, 0), hi + 1 if hi > 0 else 0,
                     1 << 63, U64, (1 << 63) - 1,
                     *range(max(lo, 0), min(max(hi, 0) + 2, max(lo, 0) + 1000))})
    body = "\n".join(lhist_slot_lines("x", "slot", lo, hi, step, signed=False))
    got = _run_c(tmp_path, body, values, "__u64")
    assert got == [lhist_bucket_index(v, lo, hi, step) for v in values]


def _compile(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(ROOT)
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    return compile_plan(str(plan), {})[2]


def _plan(outputs: str, probes: str = "  value: {usdt: a:agg:value}\n",
          settings: str = "") -> str:
    return (f"planrunner: 1\nname: t\ntargets:\n  a: {{binary: {AGG}}}\nprobes:\n{probes}"
            f"outputs:\n{outputs}{settings}")


def test_models_carry_what_the_reader_needs(tmp_path, monkeypatch) -> None:
    program = _compile(tmp_path, _plan(
        "  - count: value\n    name: c\n    by: [arg1, comm, {big: \"arg1 > 5\"}]\n"
        "    every: 2s\n    top: 3\n"
        "  - lhist: value\n    value: arg1\n    range: {min: 0, max: 10, step: 5}\n",
        settings="settings: {map_size: 77}\n"), monkeypatch)
    count, lhist = program.aggregates
    assert (count.name, count.kind, count.map_name, count.lost_map) == \
        ("c", "count", "pr_agg_0", "pr_agg_0_lost")
    assert count.key == KeyLayout((KeyField("arg1", "int"), KeyField("comm", "str", size=16),
                                 KeyField("big", "bool")))
    assert (count.every_ns, count.top, count.map_size, count.value_label) == \
        (2_000_000_000, 3, 77, "count")
    assert (lhist.lhist, lhist.value_label, lhist.value_signed) == ((0, 10, 5), "arg1", True)
    c = program.c_source
    assert "BPF_PERCPU_HASH(pr_agg_0, struct pr_agg_0_key, __u64, 77);" in c
    assert ("struct pr_agg_0_key {\n    __s64 k0;\n    char k1[16];\n    __u64 k2;\n"
            "} __attribute__((aligned(8)));") in c
    assert "struct pr_agg_1_key {\n    __u64 slot;\n} __attribute__((aligned(8)));" in c


def test_string_keys_are_zeroed_then_copied_up_to_the_nul(tmp_path, monkeypatch) -> None:
    program = _compile(tmp_path, _plan("  - count: value\n    by: [comm]\n"), monkeypatch)
    c = program.c_source
    assert "struct pr_agg_0_key agg0_key;" in c  # in the per-CPU scratch, not the stack
    zero = c.index("__builtin_memset(pr_k, 0, 16);")
    copy = c.index("bpf_probe_read_kernel_str(pr_k->k0, 16, (pr_comm));")
    assert zero < copy < c.index("pr_agg_0.lookup_or_try_init(pr_k, &pr_init);")


def test_big_keys_are_zeroed_in_chunks_clang_can_inline(tmp_path, monkeypatch) -> None:
    program = _compile(tmp_path, _plan(
        "  - count: value\n    by: [{s: \"str(arg1, 600)\"}, {t: \"str(arg1)\"}]\n",
        settings="settings: {string_size: 700}\n"), monkeypatch)
    c = program.c_source
    assert "char k0[608];" in c and "char k1[704];" in c  # 601 and 701 rounded up to 8
    assert "__builtin_memset(pr_k, 0, 512);" in c
    assert ('asm volatile("" ::: "memory");\n'  # or clang merges them back into one
            "            __builtin_memset((char *)pr_k + 512, 0, 512);") in c
    assert "__builtin_memset((char *)pr_k + 1024, 0, 288);" in c
    assert "bpf_probe_read_kernel_str(pr_k->k0, 601, " in c


def test_where_comes_first_and_map_full_is_counted(tmp_path, monkeypatch) -> None:
    program = _compile(tmp_path, _plan("  - sum: value\n    value: arg1\n"
                                       "    where: arg1 > 10\n"), monkeypatch)
    c = program.c_source
    block = c[c.index("/* output 0: sum */"):]
    assert block.index("if (!((((__s64)(a->v1)) > 10LL))) break;") < block.index("pr_kv")
    full = block[block.index("if (!pr_v) {"):block.index("*pr_v += pr_x;")]
    assert "pr_count(PR_LOST_MAPFULL);" in full and "pr_agg_0_lost.lookup" in full
    assert full.split()[-2:] == ["break;", "}"]


def test_uint64_values_are_kept_unsigned(tmp_path, monkeypatch) -> None:
    probes = ("  start: {usdt: a:agg:work__start}\n  done: {usdt: a:agg:work__done}\n"
              "  work: {span: {begin: start, end: done}}\n")
    program = _compile(tmp_path, _plan("  - max: work\n    value: latency\n", probes),
                       monkeypatch)
    (agg,) = program.aggregates
    assert (agg.value_signed, agg.unit, agg.value_label) == (False, "ns", "latency_ns")
    assert "    __u64 v;\n};" in program.c_source
    assert "__u64 pr_x = (__u64)(((__u64)(pr_latency_work)));" in program.c_source


def test_every_kind_updates_its_value_its_own_way(tmp_path, monkeypatch) -> None:
    outs = "".join(f"  - {k}: value\n    value: arg1\n" for k in ("sum", "min", "max", "avg"))
    c = _compile(tmp_path, _plan("  - count: value\n" + outs), monkeypatch).c_source

    def block(i: int) -> str:
        return c[c.index(f"/* output {i}:"):c.index("} while (0);", c.index(f"/* output {i}:"))]

    assert block(0).rstrip().endswith("*pr_v += 1;")
    assert block(1).rstrip().endswith("*pr_v += pr_x;")
    assert "if (pr_v->n == 0 || pr_x < pr_v->v)\n" in block(2)
    assert "if (pr_v->n == 0 || pr_x > pr_v->v)\n" in block(3)
    assert "pr_v->n += 1;\n" in block(4) and "pr_v->sum += pr_x;" in block(4)


def test_value_units_come_from_types_not_text(tmp_path, monkeypatch) -> None:
    """A histogram of a latency is in ns; of `latency / 1000` it is not (it once was,
    from a text test on the generated C)."""
    probes = ("  start: {usdt: a:agg:work__start}\n  done: {usdt: a:agg:work__done}\n"
              "  work: {span: {begin: start, end: done}}\n")
    program = _compile(tmp_path, _plan(
        "  - hist: work\n    value: latency\n"
        "  - hist: work\n    value: latency / 1000\n"
        "  - sum: work\n    value: latency + latency\n"
        "  - max: work\n    value: begin.arg1\n", probes=probes), monkeypatch)
    assert [a.unit for a in program.aggregates] == ["ns", None, "ns", None]
