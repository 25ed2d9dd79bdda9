"""c-leaks and offcpu end to end (issue 27), against what the fixtures log themselves
(tests/fixtures/elf/leaker.c, blocker.c), each built with frame pointers and without
(unwound by CFI):

- leaker keeps N blocks of S bytes from keep() (malloc) and from keep_aligned()
  (posix_memalign), and frees all it allocates in churn() (malloc, calloc,
  aligned_alloc, posix_memalign, a realloc that moves a block; and a free(NULL)):
  c-leaks reports exactly N * S bytes in N blocks under each keep and nothing under
  churn();
- blocker sleeps 3 x 100 ms under wait_a() and 1 x 100 ms under wait_b(), measuring
  each itself: offcpu's sums under those stacks are within 15% of its own figures, and
  the kernel frames show nanosleep.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e.conftest import ROOT, run_planrunner

VARIANTS = ("fp", "nofp")
TOLERANCE = 0.15


def _folded(stdout: str) -> dict[str, int]:
    out = {}
    for line in stdout.splitlines():
        stack, _, n = line.rpartition(" ")
        if ";" in stack and n.isdigit():
            out[stack] = out.get(stack, 0) + int(n)
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_offcpu_time_by_stack_matches_what_the_thread_measured(fixtures_built, variant: str
                                                               ) -> None:
    binary = fixtures_built / f"blocker_{variant}"
    res = run_planrunner(["run", "offcpu", "-f", "folded", "-c", str(binary)], timeout=120)
    assert res.returncode == 0, res.stderr
    truth = re.search(r"a_ns (\d+) b_ns (\d+)", res.stdout)
    assert truth, res.stdout
    a_ns, b_ns = int(truth.group(1)), int(truth.group(2))
    stacks = _folded(res.stdout)
    under_a = sum(n for s, n in stacks.items() if ";wait_a;nap;" in s)
    under_b = sum(n for s, n in stacks.items() if ";wait_b;nap;" in s)
    assert abs(under_a - a_ns) <= TOLERANCE * a_ns, (under_a, a_ns, res.stdout)
    assert abs(under_b - b_ns) <= TOLERANCE * b_ns, (under_b, b_ns, res.stdout)
    # why it waited: nanosleep's kernel frames, on top of the user frames
    for stack in (s for s in stacks if ";wait_" in s):
        assert ";main;wait_" in stack and "do_nanosleep_[k]" in stack, stack
        assert re.search(r"nanosleep[^;]*_\[k\]", stack), stack


def _json_rows(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _names(row: dict) -> list[str]:
    return [f.get("symbol") or "" for f in row.get("ustack", [])]


@pytest.mark.parametrize("variant", VARIANTS)
def test_c_leaks_reports_exactly_what_is_kept_by_its_stack(fixtures_built, variant: str
                                                           ) -> None:
    n, size = 300, 48
    binary = fixtures_built / f"leaker_{variant}"
    res = run_planrunner(["run", "c-leaks", "-f", "json", "--set", "every=400ms",
                          "-c", f"{binary} {n} {size} 1300"], timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"kept {n} {size}" in res.stdout
    rows = _json_rows(res.stdout)
    kept = [r for r in rows if "keep" in _names(r)]
    assert kept, res.stdout
    # each snapshot of the open allocations after keep() ran (every 400 ms, and at
    # exit: never reset) says N * S bytes in N blocks, under keep's stack
    at_exit = {}
    for r in kept:
        assert r["output"] in ("malloc_bytes", "malloc_blocks"), r
        assert _names(r)[:2] == ["keep", "main"], _names(r)
        at_exit[r["output"]] = r
    assert at_exit["malloc_bytes"]["sum"] == n * size, at_exit
    assert at_exit["malloc_blocks"]["count"] == n, at_exit
    later = [r["sum"] for r in kept if r["output"] == "malloc_bytes"]
    assert len(later) >= 2 and set(later) == {n * size}, later
    # posix_memalign's blocks (the address it left at *memptr), under keep_aligned
    aligned = {r["output"]: r for r in rows if "keep_aligned" in _names(r)}
    assert set(aligned) == {"posix_memalign_bytes", "posix_memalign_blocks"}, aligned
    assert aligned["posix_memalign_bytes"]["sum"] == n * size, aligned
    assert aligned["posix_memalign_blocks"]["count"] == n, aligned
    # churn() freed all it got (one block moved by realloc, freed at its new address; a
    # calloc, an aligned_alloc and a posix_memalign block)
    assert not [r for r in rows if "churn" in _names(r)], res.stdout


def test_open_allocations_that_ended_leave_no_key_behind(fixtures_built, tmp_path) -> None:
    """Each copied stack is a key of its own: keys whose blocks were all freed are
    deleted, so 2000 malloc + free pairs (each stack a copy of its own) do not fill a
    map of 1024 keys, and the blocks
    kept afterwards are all counted (none dropped)."""
    plan = tmp_path / "c-leaks-small.yaml"
    text = (ROOT / "plans" / "c-leaks.yaml").read_text()
    assert "map_size: 65536" in text
    plan.write_text(text.replace("map_size: 65536", "map_size: 1024"))
    n, size = 100, 48
    res = run_planrunner(["run", str(plan), "-f", "json", "-c",
                          f"{fixtures_built / 'leaker_nofp'} {n} {size} 200 2000"],
                         timeout=120)
    assert res.returncode == 0, res.stderr
    rows = {r["output"]: r for r in _json_rows(res.stdout) if "keep" in _names(r)}
    assert rows["malloc_bytes"]["sum"] == n * size, res.stdout
    assert rows["malloc_blocks"]["count"] == n, res.stdout
    assert "dropped" not in res.stdout + res.stderr
    assert not [r for r in _json_rows(res.stdout) if "warm_up" in _names(r)]
