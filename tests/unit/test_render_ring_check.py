"""A probe whose one effect is a print record asks the ring for room in its thunk, after
the scope check and before any operand read or the clock (templates/record_helpers.h
pr_ring_full; render/program.py ring_check_size), for its smallest record; any probe
that does something else first or besides (a `where` on it or on its print, another
output, a span, a new-process notice) does not, so that its filter sees its values and
an event it drops or counts elsewhere is never counted lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan

ROOT = Path(__file__).resolve().parents[2]
AGG = ROOT / "tests" / "fixtures" / "elf" / "bin" / "agg"
CHECK = "    if (pr_ring_full("


def _thunks(c: str) -> list[str]:
    """Each thunk's text, from its signature to its call of the body."""
    return [part.split("return pr_body_")[0] for part in c.split("\nint pr_")[1:]
            if "return pr_body_" in part and "pr_skip(" in part.split("return pr_body_")[0]]


def test_the_check_comes_before_every_read_with_the_smallest_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the plans name the committed binaries relative to the repo
    for case in ("usdt_print", "usdt_strings", "uretprobe_string"):
        program = compile_plan(f"tests/golden/{case}/plan.yaml", {})[2]
        thunks = _thunks(program.c_source)
        assert thunks, case
        sizes = {f"{CHECK}{p.layout.sizes[0]}))" for p in program.prints}
        for thunk in thunks:
            lines = thunk.splitlines()
            check = next(i for i, line in enumerate(lines) if line.startswith(CHECK))
            assert lines[check] in sizes, (case, lines[check])
            skip = next(i for i, line in enumerate(lines) if "pr_skip(" in line)
            reads = [i for i, line in enumerate(lines) if "pr_a." in line]
            assert skip < check < min(reads, default=len(lines)), (case, thunk)
            assert "bpf_ktime_get_ns" not in thunk


@pytest.mark.parametrize("case", [
    "where_strings",  # a `where` on the probe must see its values first
    "usym",  # a count besides the print, and a notice before the record
    "span_latency",  # a span begins and ends there
    "agg_count",  # no record at all
    "stack_dwarf",  # a copied user stack: a new-process notice first
])
def test_no_check_where_an_event_does_more_than_its_record(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    c = compile_plan(f"tests/golden/{case}/plan.yaml", {})[2].c_source
    assert CHECK not in c
    assert "static __always_inline int pr_ring_full(" in c  # defined, only not called


@pytest.mark.parametrize(("outputs", "checked"), [
    ("- print: v\n    fields: [where]", True),
    ("- print: v\n    fields: [where]\n    where: where > 3", False),  # the print's own
    ("- print: v\n    fields: [usym(where)]", False),  # a notice before the record
    ("- print: v\n    fields: [where]\n  - print: v\n    fields: [pid]", False),  # two
])
def test_only_one_unfiltered_print_without_a_notice_is_checked(
        tmp_path: Path, outputs: str, checked: bool) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"""planrunner: 1
name: ring-check
targets: {{a: {{binary: {AGG}}}}}
probes:
  v: {{usdt: a:agg:value, args: [{{name: where, type: uint64}}]}}
outputs:
  {outputs}
""")
    c = compile_plan(str(plan), {})[2].c_source
    assert (CHECK in c) == checked
