"""Where the scope check (pr_skip) of a uprobe thunk is made. A thunk in the dispatcher's
prog array (AttachSite.slot >= 0) leaves it to the dispatcher when the loader attaches
uprobes through it (PR_DISPATCHED, compile_flags), unless it is loaded sleepable, which
keeps a link of its own (PR_SLEEPABLE); every other thunk (a probe set's one program,
a tracepoint, a perf event) checks for itself, and the dispatcher always does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from planrunner.render.model import DISPATCHED_SWITCH, SLEEPABLE_SWITCH
from planrunner.runtime.bcc_backend import compile_flags

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "tests" / "golden").glob("*/plan.yaml"))
CHECK = "    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))"


def _function(c: str, name: str) -> str:
    start = c.index(f"\nint {name}(")
    return c[start:c.index("\n}\n", start)]


def _guard(thunk: str) -> str | None:
    """The `#if` line the thunk's uprobe scope check is under (None: unconditional)."""
    lines = thunk.splitlines()
    at = lines.index(CHECK)
    return lines[at - 1] if lines[at - 1].startswith("#if") else None


@pytest.mark.parametrize("plan", PLANS, ids=[p.parent.name for p in PLANS])
def test_a_thunk_leaves_the_check_to_the_dispatcher_only_where_it_is_called_by_it(
        plan: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the plans name the committed binaries relative to the repo
    program = compile_plan(str(plan.relative_to(ROOT)), {})[2]
    c = program.c_source
    checked = 0
    for site in program.sites:
        thunk = _function(c, site.fn_name)
        if CHECK not in thunk:
            continue  # a tracepoint's or perf event's: its own scope slot
        checked += 1
        if site.slot < 0:
            assert _guard(thunk) is None, site
        elif site.sleepable:
            assert _guard(thunk) == (f"#if !defined({DISPATCHED_SWITCH}) || "
                                     f"defined({SLEEPABLE_SWITCH})"), site
        else:
            assert _guard(thunk) == f"#if !defined({DISPATCHED_SWITCH})", site
    for probes in program.sets:  # attached on their own, never through the dispatcher
        assert _guard(_function(c, probes.fn_name)) is None, probes
    if program.uprobe_dispatcher:
        dispatcher = _function(c, program.uprobe_dispatcher)
        assert dispatcher.index("pr_skip(") < dispatcher.index(".call(ctx"), dispatcher
    assert checked or program.sets or not program.uprobe_dispatcher, plan


def test_the_loader_defines_the_switch_only_for_a_program_with_a_dispatcher(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    with_sites = compile_plan("tests/golden/usdt_print/plan.yaml", {})[2]
    assert with_sites.uprobe_dispatcher
    flag = f"-D{DISPATCHED_SWITCH}"
    assert flag in compile_flags(with_sites, "/sys/fs/bpf/x", False, True)
    assert flag not in compile_flags(with_sites, "/sys/fs/bpf/x", False, False)
    profile = compile_plan("tests/golden/profile/plan.yaml", {})[2]
    assert not profile.uprobe_dispatcher
    assert flag not in compile_flags(profile, "/sys/fs/bpf/x", False, True)
    assert re.search(r"#if !defined\(PR_DISPATCHED\)", with_sites.c_source)
