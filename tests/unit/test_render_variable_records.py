"""Which print records are variable (render/bodies.py layout_for, render/layout.py
RecordLayout.variable): those that end with a string whose length the body knows before
it reserves (a string argument, a `str(...)` read) and whose buffer is longer than the
smallest size class; and the C reserves one constant size per class."""

from __future__ import annotations

from pathlib import Path

from planrunner.diagnostics import Span
from planrunner.expr.typed import ArgRef, BuiltinRef, CaptureRef, TExpr, TRef, TStrRead
from planrunner.expr.types import INT64, UINT64, StrType
from planrunner.pipeline import compile_plan
from planrunner.render.bodies import Body, layout_for, print_block
from planrunner.resolve.model import ArgSlot

SPAN = Span("plan.yaml", 1, 1)
ROOT = Path(__file__).resolve().parents[2]


def arg_str(index: int, size: int) -> TRef:
    return TRef(f"s{index}", ArgRef(index), StrType(size), SPAN)


def test_a_record_ending_with_a_string_argument_is_variable() -> None:
    fields: list[tuple[str, TExpr]] = [("s", arg_str(2, 129)),
                                       ("n", TRef("n", ArgRef(1), INT64, SPAN))]
    layout = layout_for(0, fields)
    assert layout.variable and layout.last_string is not None
    assert layout.last_string.key == "s" and layout.sizes == (80, 128, 200)


def test_a_str_read_is_variable_too() -> None:
    read = TStrRead(TRef("p", ArgRef(1), UINT64, SPAN), 100, None, SPAN)
    assert layout_for(0, [("r", read)]).variable


def test_records_whose_last_string_has_no_known_length_or_is_short_are_whole() -> None:
    comm = TRef("comm", BuiltinRef("comm"), StrType(16), SPAN)
    capture = TRef("c", CaptureRef("c", arg_str(1, 64)), StrType(65), SPAN)
    assert not layout_for(0, [("comm", comm)]).variable
    assert not layout_for(0, [("c", capture)]).variable
    assert not layout_for(0, [("s", arg_str(1, 16))]).variable  # 16 bytes: no shorter size
    assert layout_for(0, [("s", arg_str(1, 17))]).variable
    assert not layout_for(0, [("n", TRef("n", ArgRef(1), INT64, SPAN))]).variable
    # the last string in the record is the one that counts: here the capture
    mixed = layout_for(0, [("s", arg_str(1, 64)), ("c", capture)])
    assert not mixed.variable


def test_each_size_is_reserved_as_a_constant_and_the_copy_stays_within_it() -> None:
    body = Body("pr_scratch_p", {2: ArgSlot(2, "s", "string", 128, False, 0)})
    fields: list[tuple[str, TExpr]] = [("s", arg_str(2, 129))]
    layout = layout_for(0, fields)
    c = "\n".join(print_block(layout, fields, None, body))
    assert "pr_len_0 = sc->n2;" in c
    for size, room in ((72, 16), (120, 64)):
        assert (f"pr_len_0 <= {room}) {{\n    pr_size_0 = {size};\n"
                f"    ev = pr_events.ringbuf_reserve({size});\n    if (ev)\n"
                f"        bpf_probe_read_kernel_str(ev->f0, {room}, (sc->s2));") in c
    assert "bpf_probe_read_kernel_str(ev->f0, 129, (sc->s2));" in c
    assert c.count("ringbuf_reserve(") == 3
    assert c.endswith("pr_events.ringbuf_submit(ev, pr_wakeup_flags(pr_size_0));")


def test_the_direct_path_reads_the_string_into_the_smallest_record_first() -> None:
    body = Body("pr_scratch_p", {2: ArgSlot(2, "s", "string", 128, False, 0)},
                direct=frozenset({2}))
    fields: list[tuple[str, TExpr]] = [("s", arg_str(2, 129))]
    c = "\n".join(print_block(layout_for(0, fields), fields, None, body))
    head = c.split("if (pr_st_0 == PR_STR_TRUNCATED)")[0]
    assert "struct pr_rec_0 *ev = pr_events.ringbuf_reserve(72);" in head
    assert "pr_st_0 = pr_read_str(ev->f0, 16, a->v2, PR_NOFAULT, &pr_len_0);" in head
    assert "sc->" not in head  # the scratch only when the string is longer
    assert "pr_events.ringbuf_discard(ev, BPF_RB_NO_WAKEUP);" in c
    assert "pr_read_str(sc->s2, 129, a->v2, PR_NOFAULT, &pr_len_0);" in c
    assert "ev->f0_st = pr_st_0;" in c


PLAN = """planrunner: 1
name: direct
targets: {{d: {{binary: {root}/tests/fixtures/elf/bin/demo}}}}
probes:
  p:
    usdt: d:demo:request__start
    args: [{{name: id}}, {{name: path, type: string}}]
{where}outputs:
  - print: p
    fields: [{fields}]
{more}"""


def _direct(tmp_path: Path, fields: str = "id, path", where: str = "",
            more: str = "") -> bool:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(root=ROOT, fields=fields, where=where, more=more))
    c = compile_plan(str(plan), {})[2].c_source
    return "pr_st_0 = pr_read_str(ev->" in c


def test_only_a_string_the_print_alone_reads_takes_the_direct_path(tmp_path: Path) -> None:
    assert _direct(tmp_path)
    assert not _direct(tmp_path, where='    where: startswith(path, "/api")\n')
    assert not _direct(tmp_path, fields='path, {p2: "path"}')
    assert not _direct(tmp_path, more="  - count: p\n    by: [path]\n")
    assert _direct(tmp_path, fields="path, id", more="  - count: p\n    by: [id]\n")


def test_the_scratch_is_looked_up_only_when_nothing_else_needs_it(tmp_path: Path) -> None:
    def lazy(more: str = "") -> bool:
        plan = tmp_path / "plan.yaml"
        plan.write_text(PLAN.format(root=ROOT, fields="id, path", where="", more=more))
        c = compile_plan(str(plan), {})[2].c_source
        body = c[c.index("pr_body_p("):]
        top = body[:body.index("do {")]
        return "task_storage_get" not in top and "task_storage_get" in body
    assert lazy()
    assert lazy("  - count: p\n    by: [id]\n")
    assert not lazy('  - count: p\n    by: [{t: \'"x"\'}]\n')  # the literal's buffer


def test_the_scratch_knows_whose_buffers_it_holds() -> None:
    """render/program.py makes the scratch lazy from these typed members (each with the
    string it belongs to), never by reading back the C it declared."""
    slots = {i: ArgSlot(i, f"s{i}", "string", 64, False, 64) for i in (1, 2)}
    body = Body("pr_scratch_p", slots, direct=frozenset({1}))
    for decl in ("char s1[65];", "__s64 st1;", "__u32 n1;"):
        body.member(decl, string_of=1)
    assert body.scratch_only_for_direct_strings()
    assert body.members == ("char s1[65];", "__s64 st1;", "__u32 n1;")
    body.member("__u32 n2;", string_of=2)  # a string not read into its record
    assert not body.scratch_only_for_direct_strings()
    other = Body("pr_scratch_p", slots, direct=frozenset({1}))
    other.member("char s1[65];", string_of=1)
    assert other.alloc(8) == "sc->t0"  # a buffer of anything else
    assert other.members == ("char s1[65];", "char t0[8];")
    assert not other.scratch_only_for_direct_strings()
