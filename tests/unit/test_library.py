"""Library plans by name: --plans folders, $PLANRUNNER_PATH, the bundled plans/, in that
order, through the real CLI entry point; and every bundled plan is well formed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from planrunner.cli import main
from planrunner.errors import UsageError
from planrunner.library import find_plan, library_plans
from planrunner.plan import load_plan
from planrunner.resources import data_dir

BUNDLED = data_dir("plans")

USER_PLAN = """\
planrunner: 1
name: {name}
description: {description}
params:
  who: {{type: string, default: me, help: a knob}}
targets:
  t: {{binary: /bin/bash}}
probes:
  p: {{uprobe: "t:readline"}}
outputs:
  - print: p
    fields: [pid]
"""


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def user_dir(tmp_path: Path, folder: str, name: str, description: str) -> Path:
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    (d / f"{name}.yaml").write_text(USER_PLAN.format(name=name, description=description))
    return d


@pytest.fixture(autouse=True)
def no_env_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANRUNNER_PATH", raising=False)


def test_a_path_is_taken_as_given(tmp_path: Path) -> None:
    d = user_dir(tmp_path, "mine", "x", "mine")
    assert find_plan(str(d / "x.yaml")) == str(d / "x.yaml")


def test_bundled_plan_by_name() -> None:
    assert find_plan("sdt-demo") == str(BUNDLED / "sdt-demo.yaml")


def test_order_plans_dir_then_env_then_bundled(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    env = user_dir(tmp_path, "env", "sdt-demo", "from env")
    mine = user_dir(tmp_path, "mine", "sdt-demo", "from --plans")
    monkeypatch.setenv("PLANRUNNER_PATH", f"{tmp_path / 'absent'}:{env}")
    assert find_plan("sdt-demo") == str(env / "sdt-demo.yaml")
    assert find_plan("sdt-demo", [str(mine)]) == str(mine / "sdt-demo.yaml")
    monkeypatch.delenv("PLANRUNNER_PATH")
    assert find_plan("sdt-demo") == str(BUNDLED / "sdt-demo.yaml")


def test_missing_plans_dir_and_unknown_name_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such directory"):
        find_plan("sdt-demo", [str(tmp_path / "nope")])
    with pytest.raises(UsageError, match="not found"):
        find_plan("no-such-plan-anywhere")
    with pytest.raises(UsageError, match="not found"):
        find_plan("plans/no-such-plan")  # a path is never searched for


@pytest.mark.parametrize("where", ["before", "after"])
def test_plans_option_on_validate_and_render(tmp_path: Path, where: str) -> None:
    d = user_dir(tmp_path, "mine", "my-own", "my own plan")
    opt = ["--plans", str(d)]
    argv = [*opt, "my-own"] if where == "before" else ["my-own", *opt]
    code, out, err = cli("validate", "--schema-only", *argv)
    assert code == 0, err
    assert out == f"{d / 'my-own.yaml'}: ok (schema and plan structure; binaries not checked)\n"
    code, out, err = cli("render", *argv)
    assert code == 0, err
    assert out.startswith("/* planrunner plan: my-own -- generated, do not edit */")
    code, _out, err = cli("validate", "--schema-only", "my-own")
    assert code == 2 and "plan 'my-own' not found" in err


def test_plans_and_show_with_a_user_dir(tmp_path: Path) -> None:
    d = user_dir(tmp_path, "mine", "my-own", "my own plan")
    code, out, err = cli("plans", "--plans", str(d))
    assert code == 0, err
    lines = out.splitlines()
    mine = lines.index(next(line for line in lines if line.startswith("my-own ")))
    assert lines[mine].split(None, 1) == ["my-own", "my own plan"]
    assert lines[mine + 1].split() == ["--set", "who=<string>", "a", "knob", "(default", "'me')"]
    code, out, err = cli("show", "my-own", "--plans", str(d))
    assert code == 0, err
    assert out == (d / "my-own.yaml").read_text()


BUNDLED_PLANS = sorted(p.stem for p in library_plans())


def test_the_library_holds_the_promised_plans() -> None:
    assert set(BUNDLED_PLANS) >= {
        "sdt-demo", "mysql-slow", "mysql-slow-usdt", "postgres-slow", "postgres-locks",
        "python-calls", "python-flow", "python-gc", "java-gc", "java-threads",
        "java-classes", "bash-readline"}


@pytest.mark.parametrize("name", BUNDLED_PLANS)
def test_every_bundled_plan_is_documented(name: str) -> None:
    path = BUNDLED / f"{name}.yaml"
    plan = load_plan(path, require_params=False)
    assert plan.name == name
    assert plan.description.strip()
    for param in plan.params:
        assert param.help.strip(), f"{name}: param {param.name} has no help"
    text = path.read_text()
    head = text[: text.index("planrunner: 1")]
    assert "Example output" in head and f"planrunner run {name}" in head
