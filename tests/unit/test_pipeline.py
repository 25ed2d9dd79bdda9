"""pipeline.load_resolved on plans with schema errors: the partial plan (what the schema
accepted, built) is resolved for resolve's own mistakes, which join the schema's; a
programming error while resolving it is raised, not swallowed as a broken part."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner import pipeline
from planrunner.errors import PlanError, PlanSchemaError
from planrunner.plan import parse_overrides

INVALID = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "invalid"
CASES = sorted(p for p in INVALID.iterdir() if p.suffix in (".yaml", ".yml", ".toml"))


def _overrides(case: Path) -> dict[str, str]:
    return parse_overrides([line[len("# set:"):].strip()
                            for line in case.read_text(encoding="utf-8").splitlines()
                            if line.startswith("# set:")])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_invalid_plan_fails_with_a_plan_error_only(case: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Each partial plan of the corpus is well-formed enough to resolve: nothing but a
    PlanError comes out (a KeyError or TypeError would now reach the user)."""
    monkeypatch.chdir(INVALID)
    with pytest.raises(PlanError):
        pipeline.load_resolved(case.name, _overrides(case))


def test_a_programming_error_in_resolve_is_raised(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text("planrunner: 1\ntargets:\n  app: {binary: /bin/true}\nprobes:\n"
                    "  a: {usdt: app:x:a, args: [{type: int33}]}\n"
                    "outputs:\n  - print: a\n", encoding="utf-8")
    with pytest.raises(PlanSchemaError):  # the schema's mistake, with resolve's
        pipeline.load_resolved(str(plan), {})

    def buggy(*_args: object) -> None:
        raise KeyError("a bug in resolve")

    monkeypatch.setattr("planrunner.resolve.resolve_plan", buggy)
    with pytest.raises(KeyError, match="a bug in resolve"):
        pipeline.load_resolved(str(plan), {})
