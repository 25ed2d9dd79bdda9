"""Params as data (resolve/scope.py Constants, expr/check.py `_pinned`, render/params.py,
run_cache.py mask_sets/with_values): which params the program reads from its params
map, which the checker compiles in, and how the run cache keys them."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.diagnostics import Span
from planrunner.errors import ExpressionError
from planrunner.expr import typed as T
from planrunner.expr.check import Symbol, check
from planrunner.expr.parser import parse_expression
from planrunner.expr.types import DURATION, UINT64, StackType
from planrunner.param_values import data_class, pack_values
from planrunner.render.params import c_of_param, declarations
from planrunner.run_cache import mask_sets
from tests.unit.dict_scope import DictScope

BASE = Span("plan.yaml", 3, 10)
ROOT = Path(__file__).resolve().parents[2]


def _scope(pins: set[str]) -> DictScope:
    return DictScope({
        "arg1": Symbol(UINT64, T.ArgRef(1)),
        "min": Symbol(UINT64, T.ParamRef("min", 5, pins), 5),
        "zero": Symbol(UINT64, T.ParamRef("zero", 0, pins), 0),
        "pause": Symbol(DURATION, T.ParamRef("pause", 1000, pins), 1000),
    })


def test_a_data_param_is_a_reference_not_a_constant() -> None:
    pins: set[str] = set()
    node = check(parse_expression("arg1 > min && arg1 * 1ns >= pause", BASE), _scope(pins),
                 string_size=8)
    refs = [n.ref.name for n in (node.left.right, node.right.right)]  # type: ignore[union-attr]
    assert refs == ["min", "pause"] and pins == set()


@pytest.mark.parametrize(("text", "pinned"), [
    ("arg1 / min", {"min"}), ("arg1 % min", {"min"}), ("arg1 << min", {"min"}),
    ("-min", {"min"}), ("ustack(min)", {"min"}), ("arg1 + min", set()),
])
def test_where_a_constant_is_needed_the_param_is_pinned(text: str, pinned: set[str]) -> None:
    pins: set[str] = set()
    scope = _scope(pins)
    scope.symbols["ustack"] = Symbol(StackType("user", 127), T.StackRef("user"))
    check(parse_expression(text, BASE), scope, string_size=8)
    assert pins == pinned


def test_a_pinned_param_keeps_the_checks_of_a_constant() -> None:
    with pytest.raises(ExpressionError, match="division by zero"):
        check(parse_expression("arg1 / zero", BASE), _scope(set()), string_size=8)


def test_the_c_of_a_param_is_a_read_of_the_map_unless_pinned() -> None:
    pins: set[str] = set()
    assert c_of_param(T.ParamRef("min", 5, pins)) == "PR_PARAM(p_min)"
    pins.add("min")
    assert c_of_param(T.ParamRef("min", 5, pins)) == "5ULL"
    decl = declarations(["a", "b"])
    assert decl[0] == "struct pr_params {\n    __u64 p_a;\n    __u64 p_b;\n};"
    assert declarations([]) == []
    assert pack_values(["a", "b"], {"b": 2, "a": 1}) == (1).to_bytes(8, "little") + (
        2).to_bytes(8, "little")


@pytest.mark.parametrize(("ptype", "value", "cls"), [
    ("int", 0, "data"), ("int", 2**64 - 1, "data"), ("int", -1, "const"),
    ("int", 2**64, "const"), ("duration", 10, "data"), ("bool", True, "const"),
    ("string", "x", "const"), ("number", 1.5, "const"),
])
def test_data_class(ptype: str, value: object, cls: str) -> None:
    assert data_class(ptype, value) == cls


PARAMS = (("min", "int", 0), ("pause", "duration", 0))


def test_data_values_share_a_key_given_or_not() -> None:
    none, values = mask_sets([], PARAMS)
    assert values == {}
    some, values = mask_sets(["min=7", "pause=5ms", "other=x"], PARAMS)
    assert values == {"min": 7, "pause": 5_000_000}
    assert some == ["other=x", *none]


def test_a_const_or_bad_value_is_keyed_as_given() -> None:
    neg, values = mask_sets(["min=-1"], PARAMS)
    assert values == {} and neg != mask_sets(["min=-2"], PARAMS)[0]
    bad, values = mask_sets(["pause=5"], PARAMS)  # no unit: the compile says so
    assert "pause=5" in bad and values == {}


def test_a_hit_gets_this_runs_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from planrunner.pipeline import compile_plan
    from planrunner.run_cache import CompiledRun, with_values

    monkeypatch.chdir(ROOT)  # the golden plan names the committed binaries relatively
    _plan, resolved, program = compile_plan("tests/golden/span_latency/plan.yaml", {})
    assert program.data_params == ("threshold",) and "threshold" in resolved.value_params
    assert program.param_values == pack_values(["threshold"], {"threshold": 5_000_000})
    run = CompiledRun(program, "", (), False, "n", "", (),
                      (("threshold", "duration", 5_000_000),))
    assert with_values(run, {"threshold": 7}).program.param_values == pack_values(
        ["threshold"], {"threshold": 7})
    assert with_values(run, {}).program.param_values == program.param_values
