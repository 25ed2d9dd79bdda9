"""Stacks through the pipeline without BPF: the plan's stack:/profile/interval, what the
renderer declares, the readers (stack ids, build-id frames, merged aggregation rows) over
a fake stack source, and the views (text, JSON, CSV, folded)."""

from __future__ import annotations

import ctypes as ct
import io
import json
import os
from pathlib import Path

import pytest

from planrunner.errors import PlanError
from planrunner.output import make_view
from planrunner.output.folded import snapshot_lines
from planrunner.plan import load_plan
from planrunner.records import AggRow, AggSnapshot, PrintSchema, Stack
from planrunner.render.layout import KeyField, KeyLayout, LayoutField
from planrunner.render.model import AggregateOutput, RenderedProgram, StackMaps
from planrunner.render.stacks import ustack_copy_lines
from planrunner.runtime.aggregates import build_rows
from planrunner.runtime.stacks import EFAULT, StackResolver
from planrunner.stacks.frame import Frame
from planrunner.stacks.timeline import MapsTimeline, Mmap

HEAD = "planrunner: 1\n"


def _plan(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + text)
    return load_plan(path, {})


def test_stack_profile_and_interval_build(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """
stack: {unwind: dwarf, bytes: 8192}
probes:
  cpu: {profile: {hz: 99}, stack: {unwind: fp}}
  tick: {interval: 250ms}
outputs:
  - count: cpu
    by: [comm, "ustack(5)"]
  - count: tick
""")
    cpu, tick = plan.probes
    assert (cpu.kind, cpu.hz, tick.kind, tick.period_ns) == ("profile", 99, "interval",
                                                             250_000_000)
    assert plan.stack_of(cpu).unwind == "fp"
    assert (plan.stack_of(tick).unwind, plan.stack_of(tick).bytes) == ("dwarf", 8192)
    assert [f.key for f in plan.outputs[0].by] == ["comm", "ustack"]


def test_default_stack_is_auto_16k(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "probes: {t: {interval: 1s}}\noutputs: [{count: t}]\n")
    assert (plan.stack.unwind, plan.stack.bytes) == ("auto", 16384)


@pytest.mark.parametrize("text,message", [
    ("probes: {t: {interval: 100us}}\noutputs: [{count: t}]\n", "shorter than 1ms"),
    ("probes: {c: {profile: {hz: 99}, args: [{name: x}]}}\noutputs: [{count: c}]\n",
     "a profile probe takes no args"),
    ("stack: {unwind: dwarf, bytes: 100}\nprobes: {t: {interval: 1s}}\n"
     "outputs: [{count: t}]\n", "100"),
])
def test_stack_and_sampling_mistakes(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(PlanError) as info:
        _plan(tmp_path, text)
    assert message in str(info.value)


def test_a_stack_is_no_condition_and_no_value(tmp_path: Path) -> None:
    from planrunner.resolve import resolve_plan

    plan = _plan(tmp_path, "probes: {t: {interval: 1s, where: ustack}}\n"
                           "outputs: [{count: t}]\n")
    with pytest.raises(PlanError) as info:
        resolve_plan(plan)
    assert "a condition must be a bool or an integer, got user stack" in str(info.value)


def test_the_copy_reads_whole_then_in_shrinking_pieces_within_bounds() -> None:
    lines = ustack_copy_lines("ev->f0_", 1024)
    assert "bpf_probe_read_user(ev->f0_data, 1024, (void *)a->u_regs[1]) == 0" in lines[6]
    pieces = [ln for ln in lines if "pr_got <=" in ln]
    # each piece starts where the others ended and ends within the buffer
    assert [ln.split("pr_got <= ")[1].split(" ")[0] for ln in pieces] == ["512", "768"]


def test_ucopy_layout_is_the_capture_contract() -> None:
    f = LayoutField("ustack", "ucopy", "f0", 4096, "user", 64, "auto")
    assert f.byte_size == 48 + 4096 and f.struct_format == "4144s"
    assert f.c_members[:2] == ("__u32 f0_pid;", "__u32 f0_len;")


class FakeSource:
    def __init__(self) -> None:
        self.ips = {7: [0xffffffff81000010, 0xffffffff81000020, 0]}

    def stack_ips(self, map_name: str, stack_id: int) -> list[int] | None:
        return self.ips.get(stack_id)

    def drain_copies(self, map_name: str) -> list[tuple[int, bytes]]:
        return []


def test_kernel_ids_efault_and_lost() -> None:
    from planrunner.stacks.kallsyms import KernelSymbols

    r = StackResolver(FakeSource())
    r._kernel = KernelSymbols.parse("ffffffff81000000 T start_kernel\n"
                                    "ffffffff81000018 t other\n"
                                    "ffffffff81000100 T _etext\n")
    got = r.kernel("k", 7, 32)
    assert [(f.symbol, f.offset) for f in got.frames] == [("start_kernel", 0x10),
                                                          ("other", 8)]
    assert r.kernel("k", 7, 1).frames == got.frames[:1]
    assert r.kernel("k", -EFAULT, 32) == Stack("kernel", ())  # user mode: no stack
    assert r.kernel("k", -17, 32).lost and r.lost == 1


class FakeFeed:
    def __init__(self, timeline: MapsTimeline) -> None:
        self.timeline = timeline
        self.drains = 0

    def drain(self) -> None:
        self.drains += 1


def test_user_stack_ids_symbolize_over_the_maps_the_kernel_reported() -> None:
    """A frame-pointer stack is addresses: symbolized over the process's maps at the
    event (print records: their ts) or, without a time (aggregations), the image that
    holds the addresses; the pid is never read (no such process here)."""
    from planrunner.elf.reader import open_binary
    from planrunner.stacks.symtab import ModuleSymbols

    exe, pid, base = "/usr/bin/python3.11", 4_000_000, 0x5555_0000_0000
    seg = next(s for s in open_binary(exe).segments if s.executable)
    table = ModuleSymbols.load(exe)
    i = table.names.index("Py_BytesMain")
    page = seg.offset & ~0xFFF
    start = base + page
    bias = start - (page + seg.vaddr - seg.offset)
    tl = MapsTimeline()
    tl.exec(pid, 100)
    st = os.stat(exe)  # the symbolizer trusts a file that is still the one mapped
    tl.mmap(pid, 110, Mmap(start, start + seg.filesz + 0x1000, page, 5, st.st_dev,
                           st.st_ino, exe))
    src = FakeSource()
    src.ips[3] = [bias + table.starts[i] + 4, 0]
    r = StackResolver(src, feed=FakeFeed(tl))
    at_event = r.user_ids("u", pid, 3, 64, time_ns=200)
    assert [(f.symbol, f.offset, f.module) for f in at_event.frames] == \
        [("Py_BytesMain", 4, exe)]
    assert r.user_ids("u", pid, 3, 64) == at_event  # an aggregation key: no time
    before = r.user_ids("u", pid, 3, 64, time_ns=50)  # before the exec: not this image
    assert [(f.symbol, f.module) for f in before.frames] == [(None, "")]


F = [Frame(0x10, "inner", 2, "/bin/fx"), Frame(0x20, "outer", 4, "/bin/fx")]


class StackKey(ct.Structure):
    _fields_ = [("k0", ct.c_int64), ("k0_pid", ct.c_uint64)]


def test_rows_equal_once_symbolized_are_merged() -> None:
    """Two stack ids in two processes with the same frames are one row."""
    class Resolver:
        def user_ids(self, m: str, pid: int, sid: int, limit: int) -> Stack:
            return Stack("user", tuple(F[:limit]))

    agg = AggregateOutput("o", "p", "count", "pr_agg_0",
                          KeyLayout((KeyField("ustack", "ustack", limit=1),)),
                          "count", None, None, None, None, 10)
    prog = RenderedProgram("", (), (), (agg,), "t",
                           stack_maps=StackMaps(user=("pr_ustacks", 64)))
    items = [(StackKey(1, 100), (ct.c_uint64 * 2)(3, 0)),
             (StackKey(2, 200), (ct.c_uint64 * 2)(1, 1))]
    (row,) = build_rows(agg, items, Resolver(), prog)  # type: ignore[arg-type]
    assert row.count == 5 and row.key == (("ustack", Stack("user", (F[0],))),)


def _snap(kind: str = "count") -> AggSnapshot:
    key = (("comm", "fx"), ("ustack", Stack("user", tuple(F))))
    rows = (AggRow(key, sum=30) if kind == "sum" else AggRow(key, count=3),)
    return AggSnapshot("o", kind, "count", None, ("comm", "ustack"), None, 0.0, rows)


def test_folded_lines_outermost_first_with_comm() -> None:
    assert snapshot_lines(_snap()) == ["fx;outer;inner 3"]
    assert snapshot_lines(_snap("sum")) == ["fx;outer;inner 30"]


REC = {"time": "2026-12-03T02:41:07.123456Z", "ts_ns": 9, "pid": 1, "tid": 1, "comm": "c",
       "probe": "p", "output": "0", "n": 5, "ustack": Stack("user", tuple(F))}
SCHEMA = PrintSchema("0", "p", ("n", "ustack"), None, ("ustack",))


def test_text_json_csv_show_a_stack() -> None:
    out = io.StringIO()
    view = make_view("text", out, [SCHEMA], tz=None)
    view.records([REC])
    lines = out.getvalue().splitlines()
    assert lines[0].split()[-1] == "n" and "ustack" not in lines[0]
    assert lines[2:] == ["    inner+0x2 [fx]", "    outer+0x4 [fx]"]
    out = io.StringIO()
    make_view("json", out, [SCHEMA]).records([REC])
    assert json.loads(out.getvalue())["ustack"][0] == {
        "address": 16, "symbol": "inner", "offset": 2, "module": "/bin/fx",
        "line": None, "kind": "native"}
    out = io.StringIO()
    make_view("csv", out, [SCHEMA]).records([REC])
    assert "inner+0x2 [fx];outer+0x4 [fx]" in out.getvalue()


def test_text_aggregation_frames_follow_the_row() -> None:
    out = io.StringIO()
    make_view("text", out, [], tz=None).aggregate(_snap())
    text = out.getvalue().splitlines()
    assert text[1].split() == ["comm", "count"]
    assert text[2].split() == ["fx", "3"]
    assert text[3:5] == ["    inner+0x2 [fx]", "    outer+0x4 [fx]"]


ROOT = Path(__file__).resolve().parents[2]


def test_a_probe_that_captures_stacks_is_not_sleepable(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Its scratch holds a stack copy (per-CPU): only string-reading probes without
    stacks may be loaded sleepable."""
    from planrunner.pipeline import compile_plan

    monkeypatch.chdir(ROOT)
    plan = tmp_path / "p.yaml"
    plan.write_text(HEAD + """
targets:
  t: {binary: tests/fixtures/elf/bin/operands_O2}
probes:
  s:
    usdt: t:operands:string
    args: [{name: text, type: string, size: 32}]
  s2:
    usdt: t:operands:string
    args: [{name: text, type: string, size: 32}]
outputs:
  - print: s
    fields: [text, ustack]
  - print: s2
    fields: [text]
""")
    program = compile_plan(str(plan), {})[2]
    sleepable = {s.probe: s.sleepable for s in program.sites}
    assert sleepable == {"s": False, "s2": True}
    assert program.stack_maps.seen and program.stack_maps.copies is None
