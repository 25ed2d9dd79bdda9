"""plan/schema_quick.py says "conforms" only when jsonschema finds no error: on every plan
shipped or in the fixtures, and on thousands of mutations of them (values swapped for
values of other types, keys dropped, renamed or added), it never says True where
jsonschema reports an error, and it agrees on the valid ones."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from planrunner.plan.load_toml import load_toml
from planrunner.plan.load_yaml import load_yaml
from planrunner.plan.schema_quick import conforms, supported
from planrunner.plan.validate import load_schema
from planrunner.resources import data_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plans"


def _plans() -> list[Path]:
    found = sorted(data_dir("plans").glob("*.yaml")) + sorted(data_dir("plans").glob("*.toml"))
    for sub in ("valid", "invalid", "unresolved"):
        found += sorted(p for p in (FIXTURES / sub).iterdir() if p.suffix in (".yaml", ".toml"))
    return found


def _data(path: Path) -> object:
    loader = load_toml if path.suffix == ".toml" else load_yaml
    try:
        return loader(str(path), path.read_text()).data
    except Exception:  # a syntax-error fixture: no data to check  # noqa: BLE001
        return None


DATA = [(p, d) for p in _plans() if (d := _data(p)) is not None]
VALIDATOR = Draft202012Validator(load_schema())
ODD_VALUES: list[object] = [None, True, False, 0, 1, -1, 1.0, 2.5, 10**20, "", "x", "1",
                            "arg1", "10ms", "int64", "usdt", [], [1], ["a"], {}, {"a": 1},
                            {"name": "n"}, [{"x": 1}]]


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _mutate(data: object, rng: random.Random) -> object:
    data = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(data) if p]
        if not paths:
            return data
        path = rng.choice(paths)
        parent = data
        for step in path[:-1]:
            parent = parent[step]  # type: ignore[index]
        last = path[-1]
        move = rng.randrange(4)
        if move == 0:
            parent[last] = copy.deepcopy(rng.choice(ODD_VALUES))  # type: ignore[index]
        elif move == 1:
            del parent[last]  # type: ignore[union-attr,arg-type]
        elif move == 2 and isinstance(parent, dict):
            parent[last + "x"] = parent.pop(last)  # a misspelt key
        elif isinstance(parent, dict):
            parent[rng.choice(["usdt", "span", "print", "count", "by", "type", "extra"])] = (
                copy.deepcopy(rng.choice(ODD_VALUES)))
    return data


def test_the_plan_schema_is_fully_supported() -> None:
    assert supported(load_schema())


@pytest.mark.parametrize(("path", "data"), DATA, ids=[p.name for p, _ in DATA])
def test_agrees_with_jsonschema_on_every_plan(path: Path, data: object) -> None:
    valid = not any(True for _ in VALIDATOR.iter_errors(data))
    assert conforms(data, load_schema()) == valid


def test_never_vouches_for_a_mutated_plan_jsonschema_rejects() -> None:
    rng = random.Random(17)
    schema = load_schema()
    checked = agreed_valid = 0
    for _ in range(6000):
        _, data = rng.choice(DATA)
        mutated = _mutate(data, rng)
        valid = not any(True for _ in VALIDATOR.iter_errors(mutated))
        quick = conforms(mutated, schema)
        assert not (quick and not valid), mutated
        checked += 1
        agreed_valid += quick and valid
    assert checked == 6000
    assert agreed_valid > 300  # it vouches for the valid ones too, not only refuses


def test_unsure_cases_defer_to_jsonschema() -> None:
    schema = load_schema()
    assert not conforms({1: "a"}, schema)  # a key that is not a string
    assert not conforms({"planrunner": 1, "when": object()}, schema)
    assert not conforms({}, {"uniqueItems": True})  # a keyword it does not evaluate
    assert not conforms({}, {"$ref": "other.json#/x"})
    assert conforms({"a": 1}, {"properties": {"a": {"const": 1}}})
    assert not conforms({"a": True}, {"properties": {"a": {"const": 1}}})  # True is not 1
    assert not conforms({"a": 1}, {"properties": {"a": {"enum": [True]}}})
    assert conforms(1.0, {"type": "integer"}) and not conforms(True, {"type": "integer"})
