"""Spans on spans, a key per side and open-span outputs (issue 27): what the plan
format accepts, the C it makes, and each misuse as a located error.

Against the committed demo fixture (tests/fixtures/elf/bin/demo): its USDT probes and
its `main` (a uprobe and a uretprobe), so nothing here needs root or bcc."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.errors import PlanError
from planrunner.pipeline import compile_plan
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.tracefs import find_root

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "tests" / "fixtures" / "elf" / "bin" / "demo"

HEAD = f"""planrunner: 1
targets:
  app: {{binary: {DEMO}}}
probes:
  start: {{usdt: app:request__start, args: [{{name: id}}, {{name: path, type: string}}]}}
  done: {{usdt: app:request__done, args: [{{name: id}}, {{name: status}}]}}
  enter: {{uprobe: app:main, args: [{{name: size, type: uint64}}]}}
  leave: {{uretprobe: app:main}}
"""


def _compile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + text)
    return compile_plan(str(path), {})[2].c_source


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(PlanError) as info:
        _compile(tmp_path, text)
    return "\n".join(f"{d.span}: {d.message} | {' / '.join(d.hints)}"
                     for d in info.value.diagnostics)


LEAKS = """  call:
    span: {begin: enter, end: leave}
    where: end.retval != 0
  live:
    span: {begin: call, end: done, key: {begin: end.retval, end: id}}
outputs:
  - {sum: live, name: bytes, open: true, value: begin.begin.size, by: [begin.ustack]}
  - {count: live, name: blocks, open: true, by: [begin.ustack]}
  - {print: live, fields: [latency, begin.begin.size, end.status]}
"""


def test_a_span_on_a_span_begins_inside_its_end_with_its_values(tmp_path: Path) -> None:
    c = _compile(tmp_path, LEAKS)
    # live begins where call ends: in call's end block, keyed by call's end's retval
    call_end = c.index("struct pr_span_call *pr_bg_call = pr_span_call.lookup(")
    live_begin = c.index("struct pr_span_live *bv = &sc->pr_span_live;")
    assert call_end < live_begin
    # begin.begin.size is call's capture, kept again by live
    assert "bv->c1 = (__s64)(((__u64)(pr_bg_call->c0)));" in c
    # the begin's key is call's end's retval; live's map keeps no LRU (open outputs)
    assert 'BPF_TABLE("hash", struct pr_span_key, struct pr_span_live' in c
    assert 'BPF_TABLE("lru_hash", __u64, struct pr_span_call' in c


def test_open_outputs_add_at_the_begin_and_take_off_at_the_end(tmp_path: Path) -> None:
    c = _compile(tmp_path, LEAKS)
    # added when live begins (and a replaced begin is taken off first), taken off when
    # it ends, each only if it was added (og)
    # one value for all CPUs (a key is deleted when its last begin ends)
    assert "BPF_HASH(pr_agg_0, struct pr_agg_0_key, __u64, 10240);" in c
    assert c.count("__sync_fetch_and_add(pr_v, (__u64)pr_x);") == 1
    assert c.count("__sync_fetch_and_add(pr_v, -(__u64)pr_x);") == 2
    assert c.count("__sync_fetch_and_add(pr_v, (__u64)1);") == 1
    assert c.count("__sync_fetch_and_add(pr_v, -(__u64)1);") == 2
    assert c.count("    pr_agg_1.delete(pr_k);") == 2
    assert "if (pr_bg_live->og & 1)" in c and "if (pr_bg_live->og & 2)" in c
    # the begin's stack (copied: unwind auto) is kept as the hash of its copy, with
    # its process
    assert "bv->c0 = (__s64)pr_h_pr_span_live_c0;" in c
    assert "pr_k->k0 = pr_bg_live->c0;" in c and "pr_k->k0_pid = pr_bg_live->c0_pid;" in c


def test_open_outputs_are_gauges_in_the_program_model(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + LEAKS)
    program = compile_plan(str(path), {})[2]
    kinds = {a.name: (a.kind, a.gauge, a.key) for a in program.aggregates}
    copied = KeyLayout((KeyField("ustack", "ucopy", limit=64, unwind="auto"),))
    assert kinds == {"bytes": ("sum", True, copied), "blocks": ("count", True, copied)}


def test_a_key_per_side_that_does_not_fit_its_probe_is_located(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s:
    span: {begin: enter, end: done, key: {begin: retval, end: id}}
outputs:
  - count: s
""")
    assert err.startswith(f"{tmp_path}/p.yaml:10:50: span 's': the begin key 'retval' "
                          "does not fit its begin 'enter': unknown name 'retval'"), err
    assert "the begin key is read when 'enter' fires" in err


def test_a_key_per_side_needs_both_sides(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s:
    span: {begin: enter, end: done, key: {begin: size}}
outputs:
  - count: s
""")
    assert err.startswith(f"{tmp_path}/p.yaml:10:37: span 's': a key per side has no "
                          "`end` | give one expression per side"), err


def test_a_span_on_a_span_that_loops_is_located(tmp_path: Path) -> None:
    err = _error(tmp_path, """  a:
    span: {begin: b, end: done}
  b:
    span: {begin: start, end: a}
outputs:
  - count: a
""")
    assert err == (f"{tmp_path}/p.yaml:10:19: span 'a' begins at a span that leads back "
                   "to it: a -> b -> a | a span on a span uses that span's pairing as its "
                   "event: the chain must end at usdt, uprobe, uretprobe or tracepoint "
                   "probes"), err


def test_an_open_output_of_a_probe_without_begins_is_located(tmp_path: Path) -> None:
    err = _error(tmp_path, """outputs:
  - {count: done, open: true}
""")
    assert err.startswith(f"{tmp_path}/p.yaml:10:13: output 'done' counts the open spans "
                          "of 'done', which is not a span: it has no begins"), err


def test_an_open_output_knows_only_the_begin(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s: {span: {begin: start, end: done, key: id}}
outputs:
  - {sum: s, open: true, value: latency}
""")
    assert ":11:34: unknown name 'latency'" in err or "'latency' is not known" in err, err
    assert "a begin still open has no end yet" in err, err


def test_open_applies_to_counts_and_sums(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s: {span: {begin: start, end: done, key: id}}
outputs:
  - {hist: s, open: true, value: begin.id}
""")
    assert "`open` applies to count and sum outputs, not hist" in err, err


def test_a_nested_span_cannot_be_on_a_span(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s: {span: {begin: start, end: done, key: id}}
  n: {span: {begin: s, end: done, nested: true}}
outputs:
  - count: n
""")
    assert "nested span 'n' cannot begin at span 's'" in err, err


def test_print_of_a_copied_begin_stack_is_refused(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s: {span: {begin: start, end: done, key: id}}
outputs:
  - {print: s, fields: [begin.ustack]}
""")
    assert "a span keeps a copied stack for aggregation keys only" in err, err


needs_tracefs = pytest.mark.skipif(find_root() is None, reason="tracefs is not mounted")

OFFCPU = """planrunner: 1
stack: {unwind: auto}
probes:
  out: {tracepoint: sched:sched_switch}
  in: {tracepoint: sched:sched_switch, all_processes: true}
  offcpu:
    span: {begin: out, end: in, key: {begin: prev_pid, end: next_pid}, scope: global}
outputs:
  - {sum: offcpu, value: latency, by: [begin.kstack, begin.ustack]}
"""


@needs_tracefs
def test_all_processes_leaves_a_tracepoint_unscoped_and_its_stack_is_the_tasks(
        tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(OFFCPU)
    c = compile_plan(str(path), {})[2].c_source
    out_thunk = c[c.index("int pr_out_tp(void *ctx)"):]
    in_thunk = c[c.index("int pr_in_tp(void *ctx)"):]
    assert out_thunk.index("pr_skip(PR_CFG_SCOPE_TRACEPOINT, pr_id)") < out_thunk.index("}")
    assert "pr_skip" not in in_thunk[:in_thunk.index("}")]
    # a tracepoint's ctx is its fields: the user registers are the task's
    assert "bpf_task_pt_regs(bpf_get_current_task_btf())" in out_thunk
    assert "ctx->ip" not in c
    # the key per side, read from each side's own field
    assert "pr_key = (__u64)(((__s32)(a->v" in c


def test_all_processes_applies_to_tracepoints_only(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s: {span: {begin: start, end: done, key: id}}
  x: {uprobe: app:main, all_processes: true}
outputs:
  - count: s
""")
    assert "`all_processes` applies to tracepoint probes, not to a uprobe probe" in err


def test_several_ends_each_close_the_span(tmp_path: Path) -> None:
    c = _compile(tmp_path, """  s:
    span: {begin: enter, end: [done, start], key: {begin: size, end: id}}
outputs:
  - {count: s, name: open_n, open: true}
  - {count: s, name: closed}
""")
    for probe in ("done", "start"):
        body = c[c.index(f"pr_body_{probe}("):]
        body = body[:body.index("\n}\n")]
        assert "struct pr_span_s *pr_bg_s = pr_span_s.lookup(&pr_key);" in body, probe
        assert "pr_span_s.delete(&pr_key);" in body, probe


def test_an_end_that_gives_a_value_otherwise_is_located(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s:
    span: {begin: enter, end: [done, leave], key: {begin: size, end: id}}
outputs:
  - count: s
""")
    assert err.startswith(f"{tmp_path}/p.yaml:10:38: span 's' reads its ends' values as "
                          "its first end 'done' gives them, but its end 'leave' gives "
                          "other ones: span 's': the end key 'id' does not fit its end "
                          "'leave': unknown name 'id'"), err


def test_a_nested_span_has_one_end(tmp_path: Path) -> None:
    err = _error(tmp_path, """  s:
    span: {begin: enter, end: [done, leave], nested: true}
outputs:
  - count: s
""")
    assert "nested span 's' has several ends" in err, err


def test_u64_reads_a_word_of_user_memory_for_a_key(tmp_path: Path) -> None:
    c = _compile(tmp_path, """  call: {span: {begin: enter, end: leave}}
  block:
    span: {begin: call, end: done, key: {begin: "u64(begin.size)", end: id}}
outputs:
  - {count: block, open: true}
""")
    # read at the begin's event (call's end, main's return), into zeroed scratch
    assert "bpf_probe_read_user(sc->t0, 8, (void *)((__u64)(pr_bg_call->c0)));" in c
    assert "pr_key.k = (__u64)((*(__u64 *)sc->t0));" in c


def test_u64_needs_a_full_width_address(tmp_path: Path) -> None:
    err = _error(tmp_path, """outputs:
  - {count: done, by: [{w: "u64(status)"}]}
""")
    assert "u64() needs an address, but 'status' is a 4-byte int32" in err, err
