"""Which probes may run sleepable (issue 16 item 3): those whose bodies read user
strings, decided from what the emitters reported (render/bodies.py `Body.fault`), and
carried to the runtime as `AttachSite.sleepable`. Tracepoint bodies never fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.diagnostics import Span
from planrunner.expr.typed import ArgRef, TRef, TStrRead
from planrunner.expr.types import UINT64
from planrunner.pipeline import compile_plan
from planrunner.render.bodies import Body, str_field_read
from planrunner.resolve.model import ArgSlot

ROOT = Path(__file__).resolve().parents[2]


def test_string_readers_are_sleepable_and_the_rest_are_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    program = compile_plan("tests/golden/sleepable_strings/plan.yaml", {})[2]
    by_probe = {s.probe: s.sleepable for s in program.sites}
    assert by_probe == {"start": True, "raw": True, "plain": False}
    assert program.has_sleepable and program.sleepable_switch == "PR_SLEEPABLE"
    assert "PR_NOFAULT" not in program.c_source.split("BPF_RINGBUF_OUTPUT")[1]


def test_plans_without_user_strings_have_no_sleepable_site(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    program = compile_plan("tests/golden/agg_count/plan.yaml", {})[2]
    assert not program.has_sleepable
    assert "PR_SLEEPABLE" not in program.c_source.split("BPF_RINGBUF_OUTPUT")[1]


@pytest.mark.parametrize(("faults", "arg", "sleepable"), [
    (True, "PR_FAULT", True), (False, "PR_NOFAULT", False)])
def test_only_a_user_space_body_faults(faults: bool, arg: str,
                                                  sleepable: bool) -> None:
    body = Body("pr_scratch_p", {1: ArgSlot(1, None, "int", 64, False, 0)}, faults=faults)
    lines: list[str] = []
    span = Span("plan.yaml", 1, 1)
    str_field_read(TStrRead(TRef("p", ArgRef(1), UINT64, span), 16, None, span), body, lines)
    assert lines[-1].endswith(f", {arg}, &sc->t0_n);")
    assert body.sleepable is sleepable
