"""The plan JSON Schema, its located error messages, and `planrunner schema`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from planrunner.cli import main
from planrunner.plan.load_toml import load_toml
from planrunner.plan.load_yaml import load_yaml
from planrunner.plan.validate import load_schema, schema_diagnostics
from planrunner.resources import data_dir

VALID = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "valid"


def _property_schemas(node: object, where: str = "$"):
    """Yield (location, schema) for every schema under a `properties` keyword."""
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            yield f"{where}.{name}", sub
        for key, sub in node.items():
            yield from _property_schemas(sub, f"{where}.{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _property_schemas(sub, f"{where}[{i}]")


def test_schema_is_draft_2020_12_with_id_and_descriptions() -> None:
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("/plan.schema.json")
    props = list(_property_schemas(schema))
    assert len(props) > 50
    missing = [where for where, sub in props if not sub.get("description")]
    assert missing == []
    for name in ("probe", "output", "param", "target", "arg", "settings", "span", "range"):
        assert schema["$defs"][name]["additionalProperties"] is False


def test_schema_command_prints_the_file() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["schema"], out, err) == 0
    assert json.loads(out.getvalue()) == load_schema()
    assert out.getvalue() == (data_dir("schema") / "plan.schema.json").read_text()


@pytest.mark.parametrize("plan", sorted(VALID.iterdir()), ids=lambda p: p.name)
def test_valid_plans_pass(plan: Path) -> None:
    loader = load_toml if plan.suffix == ".toml" else load_yaml
    assert schema_diagnostics(loader(str(plan), plan.read_text())) == []


def _diags(text: str) -> list[tuple[str, int, int, tuple[str, ...]]]:
    loaded = load_yaml("p.yaml", text)
    return [(d.message, d.span.line, d.span.column, d.hints) for d in schema_diagnostics(loaded)]


HEAD = "planrunner: 1\ntargets: {app: {binary: /a}}\n"


def test_no_kind_is_one_message() -> None:
    got = _diags(HEAD + "probes:\n  p:\n    where: pid == 1\noutputs: [{print: p}]\n")
    hint = "for example: usdt: TARGET:PROVIDER:NAME, or span: {begin: A, end: B}"
    assert got == [("probe 'p' needs exactly one of usdt, uprobe, uretprobe, tracepoint, "
                     "profile, interval, span", 4, 3, (hint,))]


def test_three_kinds_names_them_all() -> None:
    got = _diags(HEAD + "probes:\n  p: {usdt: a:b, uprobe: a:f, tracepoint: a:b}\n"
                 "outputs: [{print: p}]\n")
    assert [g[:3] for g in got] == [
        ("probe 'p' has 'usdt', 'uprobe' and 'tracepoint'; a probe has exactly one kind", 4, 18)]


def test_misspelt_kind_is_not_also_a_missing_kind() -> None:
    got = _diags(HEAD + "probes:\n  p: {usdtt: a:b}\noutputs: [{print: p}]\n")
    assert got == [("unknown key 'usdtt' in probe 'p'", 4, 7, ("did you mean 'usdt'?",))]


def test_unknown_key_without_a_close_match_lists_the_allowed_keys() -> None:
    got = _diags(HEAD + "probes:\n  p: {usdt: a:b}\noutputs: [{print: p, colour: red}]\n")
    assert got[0][:3] == ("unknown key 'colour' in output 0", 5, 22)
    assert got[0][3][0].startswith("allowed keys: avg, by, count, every, fields, format")


def test_errors_are_sorted_by_position_and_use_value_spans() -> None:
    text = (HEAD + "probes:\n  p: {usdt: a:b, args: [{name: 3, type: int9}]}\n"
            "outputs: [{count: p, top: 0, every: [1]}]\nsettings: {map_size: x}\n")
    got = [g[:3] for g in _diags(text)]
    assert got == [
        ("'args[0].name' in probe 'p' must be a string, got an integer (3)", 4, 32),
        ("'args[0].type' in probe 'p' must be one of int8, int16, int32, int64, uint8, uint16, "
         "uint32, uint64, pointer, bool, string; got 'int9'", 4, 41),
        ("'top' in output 0 must be at least 1, got 0", 5, 27),
        ("'every' in output 0 must be a string or an integer, got a list", 5, 37),
        ("'map_size' in 'settings' must be an integer, got a string ('x')", 6, 22),
    ]


def test_empty_section_and_missing_keys() -> None:
    got = _diags("planrunner: 1\ntargets:\n  app: {build_id: ab}\nprobes: {}\n")
    assert [g[:3] for g in got] == [
        ("the plan has no 'outputs' section", 1, 1),
        ("target 'app' is missing 'binary'", 3, 3),
        ("'probes' must define at least one probe", 4, 1),
    ]


def test_extension_keys_are_allowed_at_top_level() -> None:
    assert _diags(HEAD + "x-common: &c {}\nprobes: {p: {usdt: a:b}}\noutputs: [{print: p}]\n") == []
