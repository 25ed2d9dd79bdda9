"""Every plan in tests/fixtures/plans/invalid/ fails with exactly the diagnostics text
in its sibling NAME.expected.txt (rendered with source line and caret, byte for byte).

A first-line comment `# set: NAME=VALUE` gives `--set` overrides. Plans are loaded
with the fixture folder as the working directory, so spans read `NAME.yaml:L:C`.
`pytest --update-goldens` rewrites the expected files and prints which changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.diagnostics import render
from planrunner.errors import PlanError
from planrunner.plan import load_plan, parse_overrides

INVALID = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "invalid"
CASES = sorted(p for p in INVALID.iterdir() if p.suffix in (".yaml", ".yml", ".toml"))


def _expected_path(case: Path) -> Path:
    return case.with_name(case.stem + ".expected.txt")


def _overrides(text: str) -> dict[str, str]:
    items = [line[len("# set:"):].strip() for line in text.splitlines()
             if line.startswith("# set:")]
    return parse_overrides(items)


def rendered(case: Path) -> str:
    text = case.read_text(encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan(case.name, _overrides(text))
    body = "\n".join(render(d, text) for d in info.value.diagnostics)
    return f"{body}\n"


def test_corpus_is_large_and_mixed() -> None:
    assert len(CASES) >= 40
    assert sum(c.suffix == ".toml" for c in CASES) >= 10
    stems = [c.stem for c in CASES]
    assert len(stems) == len(set(stems)), "each invalid plan needs its own stem"
    orphans = {p.name for p in INVALID.glob("*.expected.txt")} - {
        _expected_path(c).name for c in CASES}
    assert not orphans, f"expected files without a plan: {sorted(orphans)}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_invalid_plan(case: Path, update_goldens: bool, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(INVALID)
    actual = rendered(case)
    expected_path = _expected_path(case)
    if update_goldens:
        old = expected_path.read_text(encoding="utf-8") if expected_path.exists() else None
        if old != actual:
            expected_path.write_text(actual, encoding="utf-8")
            with capsys.disabled():
                print(f"\nupdated {expected_path.relative_to(INVALID.parents[3])}")
        return
    assert expected_path.exists(), f"missing {expected_path.name}: run pytest --update-goldens"
    assert actual == expected_path.read_text(encoding="utf-8")
