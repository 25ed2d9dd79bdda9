"""Several plans in one program (planrunner/plan_set.py, pipeline.compile_plans): names
qualified `PLAN.NAME`, output ids renumbered, params to the plan that declares them,
every plan's mistakes at once; one plan alone exactly as before. Rendered against the
committed golden fixtures (tests/golden/*/plan.yaml); no root, no bcc."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner import plan_set, run_cache
from planrunner.cli import build_parser
from planrunner.errors import PlanError, UsageError
from planrunner.pipeline import compile_plan, compile_plans
from tests.golden_headers import to_golden

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
NESTED = "tests/golden/span_nested/plan.yaml"  # name: span-nested, nested span `call`
MIXED = "tests/golden/agg_mixed/plan.yaml"  # name: agg-mixed, print/count/hist of tick
USDT = "tests/golden/usdt_print/plan.yaml"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the golden plans name their binaries relative to the repo


def test_one_plan_is_compiled_as_before() -> None:
    _plans, plan, resolved, program = compile_plans([NESTED], {})
    assert program.c_source == compile_plan(NESTED, {})[2].c_source
    assert to_golden(program.c_source) == (GOLDEN / "span_nested" / "expected.bpf.c"
                                           ).read_text()
    assert [p.name for p in program.prints] == ["enter", "call"]


def test_plans_merge_with_qualified_names_and_distinct_ids() -> None:
    plans, plan, resolved, program = compile_plans([NESTED, MIXED, USDT], {})
    assert [p.name for p in plans] == ["span-nested", "agg-mixed", "usdt-print"]
    assert plan.name == "span-nested+agg-mixed+usdt-print"
    names = [p.name for p in program.prints] + [a.name for a in program.aggregates]
    assert all(n.split(".", 1)[0] in {p.name for p in plans} for n in names), names
    assert {"span-nested.enter", "span-nested.call", "agg-mixed.tick"} <= set(names)
    ids = [p.layout.output_id for p in program.prints]
    assert len(ids) == len(set(ids))
    maps = [a.map_name for a in program.aggregates]
    assert len(maps) == len(set(maps))
    fns = [s.fn_name for s in program.sites]
    assert len(fns) == len(set(fns))
    c = program.c_source
    # the nested span's `depth` (a DepthRef in the typed expressions) follows its span
    assert "pr_depth_span_nested_call" in c and "pr_depth_call" not in c
    assert "pr_span_nested_enter_s0" in c and "pr_agg_mixed_tick_s0" in c


def test_params_go_to_the_plan_that_declares_them() -> None:
    plans = [("a", frozenset({"x", "y"})), ("b", frozenset({"x", "z"}))]
    assert plan_set.split_overrides(plans, {"y": "1", "z": "2", "a.x": "3", "b.x": "4"}) \
        == [{"y": "1", "x": "3"}, {"z": "2", "x": "4"}]
    with pytest.raises(UsageError) as err:
        plan_set.split_overrides(plans, {"x": "1", "c.x": "2", "w": "3"})
    messages = [d.message for d in err.value.diagnostics]
    assert messages == ["--set x=1: several plans declare 'x' (a, b)",
                        "--set c.x=2: no plan of this run is named 'c'",
                        "--set w=3: no plan of this run has a param 'w'"]
    assert err.value.diagnostics[0].hints == ("say which: --set a.x=1",)


def test_declared_reads_name_and_params(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text("planrunner: 1\nname: web\nparams: {t: {type: int, default: 1}}\n")
    assert plan_set.declared(str(p)) == ("web", frozenset({"t"}))
    q = tmp_path / "unnamed.yaml"
    q.write_text("planrunner: 1\n")
    assert plan_set.declared(str(q)) == ("unnamed", frozenset())


def test_every_plans_mistakes_are_raised_together(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("planrunner: 1\nname: bad\nprobes: {x: {usdt: 'a:b:c'}}\n"
                   "outputs:\n  - {count: y}\n")
    worse = tmp_path / "worse.yaml"
    worse.write_text("planrunner: 1\nname: worse\nprobes: [1]\n")
    with pytest.raises(PlanError) as err:
        compile_plans([MIXED, str(bad), USDT, str(worse)], {})
    where = {d.span.path for d in err.value.diagnostics if d.span}
    assert where == {str(bad), str(worse)}
    assert err.value.exit_code == 1


def test_two_plans_of_one_name_are_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy.yaml"
    copy.write_text((ROOT / MIXED).read_text())
    with pytest.raises(PlanError, match="two plans of this run are named 'agg-mixed'"):
        compile_plans([MIXED, str(copy)], {})


def test_run_cache_key_covers_every_plan() -> None:
    one = run_cache.plans_part(["a.yaml"], [b"A"])
    assert one == ("a.yaml", b"A")  # one plan: the key is what it always was
    both = run_cache.plans_part(["a.yaml", "b.yaml"], [b"A", b"B"])
    assert both != run_cache.plans_part(["a.yaml", "b.yaml"], [b"A", b"C"])
    assert both != run_cache.plans_part(["a.yaml", "b.yaml"], [b"AB", b""])
    keys = {run_cache.run_key(*part, [], [], None, False, environ={}, cwd="/",
                              kernel="k")
            for part in (both, run_cache.plans_part(["a.yaml", "b.yaml"], [b"A", b"C"]))}
    assert len(keys) == 2


def test_run_takes_several_plans_and_folders(tmp_path: Path) -> None:
    from planrunner.commands.common import plan_paths

    args = build_parser("run").parse_args(["run", "a.yaml", "b.toml", "--set", "a.x=1"])
    assert args.plan == ["a.yaml", "b.toml"] and args.overrides == ["a.x=1"]
    (tmp_path / "b.yaml").write_text("")
    (tmp_path / "a.toml").write_text("")
    (tmp_path / "notes.txt").write_text("")
    assert plan_paths([str(tmp_path), str(tmp_path / "a.toml")]) == \
        [str(tmp_path / "a.toml"), str(tmp_path / "b.yaml")]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="a folder without plan files"):
        plan_paths([str(empty)])


def test_prometheus_names_each_metric_under_its_plan() -> None:
    pytest.importorskip("prometheus_client", reason="--prometheus needs prometheus_client")
    from planrunner.prometheus.config import exporter_config

    plans, plan, _resolved, program = compile_plans([MIXED, NESTED], {})
    config = exporter_config(("127.0.0.1", 1), plan.name, plan.description, program,
                             tuple((p.name, p.description) for p in plans))
    assert {f.output: f.name for f in config.families} == {
        "agg-mixed.tick_count": "planrunner_agg_mixed_tick_count",
        "agg-mixed.tick_hist": "planrunner_agg_mixed_tick_hist"}


def test_a_set_error_comes_with_the_plans_mistakes(tmp_path: Path) -> None:
    """`--set x=1` where only a plan that does not parse declares `x`: both are told."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("planrunner: 1\nparams: {x: {type: int}}\nprobes: [\n")
    with pytest.raises(PlanError) as err:
        compile_plans([MIXED, str(broken)], {"x": "1"})
    messages = [d.message for d in err.value.diagnostics]
    assert messages[0] == "--set x=1: no plan of this run has a param 'x'"
    assert any(d.span is not None and d.span.path == str(broken)
               for d in err.value.diagnostics), messages
    assert err.value.exit_code == 2
