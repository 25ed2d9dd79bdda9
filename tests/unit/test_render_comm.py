"""Where a program reads the current comm (a record's header, the `comm` builtin), it
asks the loader for task_struct.comm's offset as an optional BTF constant
(RenderedProgram.btf_constants): with it the C reads the comm with two plain loads, without
it through bpf_get_current_comm (templates/runtime_helpers.h pr_current_comm). A program
that reads no comm asks for nothing, so its first run parses no BTF."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.elf.btf import TASK_COMM
from planrunner.pipeline import compile_plan
from planrunner.render.program import TASK_COMM_OFFSET

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("case", "reads_comm"), [
    ("usdt_print", True),  # a print record's header
    ("agg_avg", True),  # by: [comm]
    ("agg_count", False),
])
def test_the_comm_offset_is_asked_for_where_a_comm_is_read(
        case: str, reads_comm: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the plans name the committed binaries relative to the repo
    program = compile_plan(f"tests/golden/{case}/plan.yaml", {})[2]
    assert program.btf_constants == ((TASK_COMM_OFFSET,) if reads_comm else ())
    assert TASK_COMM_OFFSET == ("PR_TASK_COMM_OFFSET", TASK_COMM)
    c = program.c_source
    assert "bpf_get_current_comm(" not in c.split("pr_current_comm(char *dst)")[1].split(
        "#else")[0]  # the BTF branch calls no helper
    assert ("pr_current_comm(pr_comm);" in c) == (case == "agg_avg")
    assert "PR_TASK_COMM_OFFSET" not in [c.macro for c in program.runtime_constants]
