"""Golden C: each tests/golden/<case>/plan.yaml renders, against the committed fixture
binaries in tests/fixtures/elf/bin/, to exactly tests/golden/<case>/expected.bpf.c.
`pytest --update-goldens` rewrites them and lists what changed. One feature per case;
the same programs are compiled and attached by the end-to-end tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from tests.golden_headers import to_golden

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted(p.parent for p in (ROOT / "tests" / "golden").glob("*/plan.yaml"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_c(case: Path, update_goldens: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # plans name the committed binaries relative to the repo
    _plan, _resolved, program = compile_plan(str(case.relative_to(ROOT) / "plan.yaml"), {})
    got = to_golden(program.c_source)
    expected = case / "expected.bpf.c"
    if update_goldens:
        if not expected.exists() or expected.read_text() != got:
            expected.write_text(got)
            print(f"updated {expected.relative_to(ROOT)}")
        return
    assert expected.exists(), f"no golden yet: run pytest --update-goldens ({case.name})"
    assert got == expected.read_text()


def test_rendering_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    plan = "tests/golden/span_latency/plan.yaml"
    assert compile_plan(plan, {})[2].c_source == compile_plan(plan, {})[2].c_source


def test_injection_is_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan text reaches the C only as numbers (a literal's bytes, render/expr_c.py) and
    inside comments it cannot close: outside the comments none of it is left, and no
    C string literal holds any of it."""
    monkeypatch.chdir(ROOT)
    c = compile_plan("tests/golden/injection/plan.yaml", {})[2].c_source
    comments = re.findall(r"/\*.*?\*/", c, re.S)
    outside = re.sub(r"/\*.*?\*/", "", c, flags=re.S)
    assert "system" not in outside
    assert "#include <x>" not in outside
    assert "evil" not in c  # output names never reach C
    assert not [lit for lit in re.findall(r'"(?:\\.|[^"\\])*"', outside)
                if "rm" in lit or "include" in lit]
    shown = [text for text in comments if text.startswith('/* "')]
    assert len(shown) == 2  # each literal, next to its bytes
    for text in shown:
        assert "??" not in text and text.count("*/") == 1


def test_default_ring_holds_16384_records_of_the_largest_print() -> None:
    from planrunner.render.program import RING_RECORDS, default_ring_pages

    assert default_ring_pages(48, 4096) == 256  # small records: the old 1 MiB
    assert default_ring_pages(352, 4096) == 2048  # the issue-17 burst record: 8 MiB
    for size in (48, 100, 216, 352, 1000, 2040):
        pages = default_ring_pages(size, 4096)
        assert pages & (pages - 1) == 0
        assert pages * 4096 // (size + 8) >= RING_RECORDS
    assert default_ring_pages(100_000, 4096) == 8192  # capped at 32 MiB
    assert default_ring_pages(352, 65536) == 128  # the same bytes on 64 KiB pages
