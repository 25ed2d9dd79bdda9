"""The plan builder: validated data -> Plan, with every semantic error collected."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.errors import PlanSemanticError, UsageError
from planrunner.expr.ast import Name
from planrunner.plan import load_plan, validate_schema_only
from planrunner.plan.model import Plan

VALID = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "valid"


def _strip_spans(plan: Plan) -> object:
    """The plan's content without positions or source text (to compare YAML and TOML)."""
    import dataclasses

    def walk(node: object) -> object:
        if dataclasses.is_dataclass(node):
            return {f.name: walk(getattr(node, f.name)) for f in dataclasses.fields(node)
                    if "span" not in f.name and f.name not in ("path", "source_text")}
        if isinstance(node, tuple | list):
            return [walk(x) for x in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return walk(plan)


def test_yaml_and_toml_spell_the_same_plan() -> None:
    yaml_plan = load_plan(VALID / "kitchen-sink.yaml", {})
    toml_plan = load_plan(VALID / "kitchen-sink.toml", {})
    assert _strip_spans(yaml_plan) == _strip_spans(toml_plan)


def test_kitchen_sink_values() -> None:
    plan = load_plan(VALID / "kitchen-sink.yaml", {})
    assert plan.name == "kitchen-sink"
    assert plan.param_values == {"app": "/usr/local/bin/app", "bid": "3F2A00FF",
                                 "min_bytes": 64, "verbose": False, "ratio": 0.5,
                                 "interval": 1_500_000_000}
    app, jvm, cxx = plan.targets
    assert (app.binary, app.build_id) == ("/usr/local/bin/app", "3f2a00ff")
    assert jvm.binary.endswith("libjvm.so")  # from a YAML merge key
    assert cxx.binary == "${literal}"  # $${ escapes
    method = plan.probe("method")
    assert (method.target, method.provider, method.probe) == ("jvm", None, "method__entry")
    assert [(a.index, a.name, a.type, a.size) for a in method.args] == [
        (1, "thread", "uint64", None), (2, "class", "string", None),
        (3, "class_len", "int32", None), (4, "method", "string", 64)]
    assert isinstance(method.args[1].length, Name) and method.args[1].length.ident == "arg3"
    compute = plan.probe("compute")
    assert (compute.kind, compute.target, compute.symbol, compute.offset) == (
        "uprobe", "app", "fx_compute", 16)
    assert plan.probe("write").offset == 16
    ret = plan.probe("compute_ret")
    assert ret.symbol == "ns::Widget::compute(int, char const*)"
    assert (ret.retval.index, ret.retval.type, ret.retval.size) == (0, "string", 256)
    exit_ = plan.probe("exit")
    assert (exit_.category, exit_.event, exit_.target) == ("sched", "sched_process_exit", None)
    call, keyed = plan.probe("call"), plan.probe("keyed")
    assert (call.begin, call.end, call.key) == ("compute", "compute_ret", None)
    assert keyed.key.ident == "pid"
    # A block scalar's expression starts on the line after `|`.
    assert (keyed.where.span.line, keyed.where.span.column) == (48, 7)


def test_outputs() -> None:
    plan = load_plan(VALID / "kitchen-sink.yaml", {})
    kinds = [(o.index, o.name, o.kind, o.probe) for o in plan.outputs]
    # unnamed: its probe's name, then with its kind where another output has that
    assert kinds == [(0, "methods", "print", "method"), (1, "exit", "count", "exit"),
                     (2, "call", "hist", "call"), (3, "write", "lhist", "write"),
                     (4, "write_sum", "sum", "write"), (5, "call_avg", "avg", "call"),
                     (6, "call_min", "min", "call"), (7, "call_max", "max", "call")]
    printed, counted, _, lhist, summed = plan.outputs[:5]
    assert [f.key for f in printed.fields] == ["time", "thread", "cls", "method"]
    assert printed.format == "{thread} {cls}.{method}"
    assert (counted.every_ns, counted.top, [f.key for f in counted.by]) == (
        2_000_000_000, 5, ["comm"])
    assert (lhist.lhist_min, lhist.lhist_max, lhist.lhist_step) == (0, 4096, 512)
    assert [f.key for f in summed.by] == ["pid", "fd"]
    assert (plan.settings.string_size, plan.settings.map_size,
            plan.settings.ringbuf_pages) == (256, 4096, 64)


def test_field_keys_and_defaults() -> None:
    plan = load_plan(VALID / "postgres-slow.yaml", {})
    fields = plan.outputs[0].fields
    assert [f.key for f in fields] == ["time", "pid", "latency_ns", "query"]
    assert [f.expr.ident for f in fields] == ["time", "pid", "latency", "begin.query"]
    # ringbuf_pages unset: render sizes the ring from the records (default_ring_pages)
    assert plan.settings.string_size == 128 and plan.settings.ringbuf_pages is None


def test_overrides_bind_and_substitute() -> None:
    plan = load_plan(VALID / "postgres-slow.yaml",
                     {"threshold": "250us", "postgres": "/usr/lib/postgresql/15/bin/postgres"})
    assert plan.param_values["threshold"] == 250_000
    assert plan.target("pg").binary == "/usr/lib/postgresql/15/bin/postgres"
    assert plan.params[0].default == 10_000_000  # the spec keeps the plan's default


def _write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_required_params(tmp_path: Path) -> None:
    path = _write(tmp_path, "planrunner: 1\nparams:\n  bin: {type: string, required: true}\n"
                  "targets: {app: {binary: '${bin}'}}\nprobes: {p: {usdt: app:x}}\n"
                  "outputs: [{print: p}]\n")
    with pytest.raises(UsageError):
        load_plan(path, {})
    assert load_plan(path, {"bin": "/x"}).target("app").binary == "/x"
    lenient = load_plan(path, {}, require_params=False)
    assert lenient.param_values == {} and lenient.target("app").binary == "${bin}"


def test_schema_only_skips_semantic_checks(tmp_path: Path) -> None:
    path = _write(tmp_path, "planrunner: 1\nprobes: {p: {usdt: nowhere:x}}\n"
                  "outputs: [{print: q}]\n")
    assert validate_schema_only(path).data["outputs"] == [{"print": "q"}]
    with pytest.raises(PlanSemanticError) as info:
        load_plan(path, {})
    assert [d.message for d in info.value.diagnostics] == [
        "unknown target 'nowhere'", "unknown probe 'q'"]


@pytest.mark.parametrize(("spec", "symbol", "offset"), [
    ("app:main", "main", 0),
    ("app:main+0x1f", "main", 31),
    ("app:main+12", "main", 12),
    ("app:main+010", "main", 10),
    ("app:_Z16dispatch_command19enum_server_commandP3THDPcjb",
     "_Z16dispatch_command19enum_server_commandP3THDPcjb", 0),
    ("app:ns::operator+(int)", "ns::operator+(int)", 0),
    ("app:ns::operator++", "ns::operator++", 0),
    ("app:std::map<int, int>::find(int const&)+0x8", "std::map<int, int>::find(int const&)", 8),
])
def test_uprobe_specs(tmp_path: Path, spec: str, symbol: str, offset: int) -> None:
    path = _write(tmp_path, f"planrunner: 1\ntargets: {{app: {{binary: /a}}}}\n"
                  f"probes: {{p: {{uprobe: '{spec}'}}}}\noutputs: [{{print: p}}]\n")
    probe = load_plan(path, {}).probe("p")
    assert (probe.target, probe.symbol, probe.offset) == ("app", symbol, offset)


@pytest.mark.parametrize(("spec", "message"), [
    ("app", "bad uprobe spec 'app': expected TARGET:SYMBOL"),
    ("app:", "bad uprobe spec 'app:': no symbol after 'app:'"),
    ("app:+8", "bad uprobe spec 'app:+8': no symbol after 'app:'"),
    ("ns::f", "bad uprobe spec 'ns::f': a C++ name needs its target first"),
    ("/usr/bin/app:main", "bad uprobe spec '/usr/bin/app:main': expected TARGET:SYMBOL"),
    ("ap:main", "unknown target 'ap'"),
])
def test_bad_uprobe_specs(tmp_path: Path, spec: str, message: str) -> None:
    path = _write(tmp_path, f"planrunner: 1\ntargets: {{app: {{binary: /a}}}}\n"
                  f"probes: {{p: {{uprobe: '{spec}'}}}}\noutputs: [{{print: p}}]\n")
    with pytest.raises(PlanSemanticError) as info:
        load_plan(path, {})
    assert [d.message for d in info.value.diagnostics] == [message]


@pytest.mark.parametrize(("name", "message"), [
    ("pid", "argument name 'pid' is taken by a builtin"),
    ("arg2", "argument name 'arg2' is taken by a builtin"),
    ("latency", "argument name 'latency' is taken by a builtin"),
    ("2x", "argument name '2x' is not an identifier"),
])
def test_bad_arg_names(tmp_path: Path, name: str, message: str) -> None:
    path = _write(tmp_path, f"planrunner: 1\ntargets: {{app: {{binary: /a}}}}\n"
                  f"probes: {{p: {{usdt: 'app:x', args: [{{name: '{name}'}}]}}}}\n"
                  "outputs: [{print: p}]\n")
    with pytest.raises(PlanSemanticError) as info:
        load_plan(path, {})
    (diag,) = info.value.diagnostics
    assert (diag.message, diag.span.line, diag.span.column) == (message, 3, 44)  # after the quote


def test_expression_error_columns_in_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, 'planrunner = 1\n[probes.p]\ntracepoint = "a:b"\n'
                  'where = "pid == (1"\n[[outputs]]\nprint = "p"\n', "p.toml")
    with pytest.raises(PlanSemanticError) as info:
        load_plan(path, {})
    (diag,) = info.value.diagnostics
    assert (diag.span.line, diag.span.column) == (4, 17)  # the '(' inside the quotes


def test_mutated_plans_fail_only_with_plan_errors(tmp_path: Path) -> None:
    """Random edits of the valid plans either load or raise PlanError: no internal crash."""
    import random

    from planrunner.errors import PlanError

    rng = random.Random(1234)
    sources = {p.name: p.read_text() for p in sorted(VALID.iterdir())}
    alphabet = ' :-{}[],"\'\n#&*!|>0123456789abxz$.+'
    failures = 0
    for _ in range(600):
        name, text = rng.choice(sorted(sources.items()))
        chars = list(text)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(chars))
            op = rng.random()
            if op < 0.4:
                chars[pos] = rng.choice(alphabet)
            elif op < 0.7:
                del chars[pos]
            else:
                chars.insert(pos, rng.choice(alphabet))
        path = tmp_path / name
        path.write_text("".join(chars))
        try:
            load_plan(path, {})
        except PlanError as err:
            failures += 1
            assert all(d.message for d in err.diagnostics)
    assert failures > 100  # the edits do break plans; the test would notice a silent loader
