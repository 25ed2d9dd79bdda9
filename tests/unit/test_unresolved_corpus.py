"""Plans that are well-formed but wrong against the real binaries (the committed fixture
ELFs): each NAME.yaml has NAME.expected.txt with every rendered diagnostic.
The repository's absolute path is written `<root>` so the files hold on any clone.
`pytest --update-goldens` rewrites them."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.diagnostics import render
from planrunner.errors import PlanError
from planrunner.pipeline import compile_plan

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "plans" / "unresolved"
PLANS = sorted(CORPUS.glob("*.yaml"))


@pytest.mark.parametrize("plan", PLANS, ids=[p.stem for p in PLANS])
def test_resolution_errors(plan: Path, update_goldens: bool,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    rel = str(plan.relative_to(ROOT))
    with pytest.raises(PlanError) as info:
        compile_plan(rel, {})
    text = plan.read_text()
    got = "\n".join(render(d, text) for d in info.value.diagnostics) + "\n"
    got = got.replace(str(ROOT), "<root>")
    expected = plan.with_suffix(".expected.txt")
    if update_goldens:
        if not expected.exists() or expected.read_text() != got:
            expected.write_text(got)
            print(f"updated {expected.relative_to(ROOT)}")
        return
    assert got == expected.read_text()
