"""settings.max_sites and its estimate are the measured ones (issue 23 item 11).

Before: a plan with `max_sites: 10000` was accepted, and the error for too many sites
estimated ~30 ms per site ("about 5 min" for 10000), while a 10000-site run had not
attached after 20 minutes with its compile worker at 3.3 GB: the compile grows with the
square of the sites. Now the estimate comes from bench/site_limit.py's figures (kept in
BENCHMARKS.md, checked against site_cost.MEASURED here) and max_sites stops at MAX_SITES.
"""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

from planrunner.cli import main
from planrunner.resolve.site_cost import MAX_SITES, MEASURED, about, cost, memory, refusal

ROOT = Path(__file__).resolve().parents[2]


def benchmark_rows() -> list[tuple[int, float, float]]:
    """(sites, CPU s, peak RSS MB) of the table in BENCHMARKS.md's "Probe sites" section."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    section = text[text.index("## Probe sites"):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else None]
    rows = []
    for line in section.splitlines():
        m = re.match(r"^\| (\d+) \| [\d.]+ \| ([\d.]+) \| \d+ \| (\d+) \|", line)
        if m:
            rows.append((int(m.group(1)), float(m.group(2)), float(m.group(3))))
    return rows


def test_measured_figures_are_those_of_the_benchmark() -> None:
    assert [n for n, _, _ in MEASURED] == sorted(n for n, _, _ in MEASURED)
    assert list(MEASURED) == benchmark_rows()


def test_the_estimate_is_the_measured_figure_at_each_point() -> None:
    for sites, seconds, mb in MEASURED:
        assert cost(sites) == (seconds, mb)
    (n0, t0, m0), (n1, t1, m1) = MEASURED[:2]
    assert cost((n0 + n1) // 2) == (t0 + (t1 - t0) * ((n0 + n1) // 2 - n0) / (n1 - n0),
                                    m0 + (m1 - m0) * ((n0 + n1) // 2 - n0) / (n1 - n0))


def test_below_the_first_point_time_is_in_proportion() -> None:
    sites, seconds, mb = MEASURED[0]
    assert cost(sites // 3) == (seconds * (sites // 3) / sites, mb)


def test_past_the_last_point_time_grows_with_the_square() -> None:
    last, seconds, mb = MEASURED[-1]
    assert cost(2 * last) == (4 * seconds, 2 * mb)
    # what was seen: 10000 sites had not attached after 20 minutes
    assert cost(10_000)[0] > 20 * 60


def test_refusal_tells_the_measured_cost() -> None:
    seconds, mb = cost(10_000)
    message, hint = refusal(10_000, 1000)
    assert message == (
        "this plan has 10000 probe sites, more than settings.max_sites (1000): each is a "
        "BPF function in one program, whose compile grows with the square of the sites "
        f"when a probe reads strings; measured, 10000 would take up to about "
        f"{about(seconds)} of CPU and {memory(mb)} to start")
    assert hint == (f"trace fewer functions: settings.max_sites goes up to {MAX_SITES} at "
                    f"most, which starts in {about(cost(MAX_SITES)[0])} of CPU")
    assert refusal(MAX_SITES, 1000)[1] == (
        f"trace fewer functions, or raise settings.max_sites knowingly (at most {MAX_SITES})")


def test_units() -> None:
    assert [about(s) for s in (40, 300, 3 * 3600)] == ["40 s", "5 min", "3.0 h"]
    assert [memory(m) for m in (589, 3379)] == ["589 MB", "3.3 GB"]


def test_schema_maximum_is_max_sites() -> None:
    schema = json.loads((ROOT / "schema/plan.schema.json").read_text())
    assert schema["$defs"]["settings"]["properties"]["max_sites"]["maximum"] == MAX_SITES


def test_max_sites_past_the_ceiling_is_refused_at_its_value(tmp_path: Path) -> None:
    plan = tmp_path / "big.yaml"
    plan.write_text("planrunner: 1\nname: big\nprobes:\n  t: {tracepoint: sched:sched_switch}"
                    "\noutputs:\n  - count: t\nsettings:\n  max_sites: 10000\n")
    err = StringIO()
    assert main(["validate", "--schema-only", str(plan)], StringIO(), err) == 1
    assert err.getvalue().startswith(
        f"{plan}:8:14: error: 'max_sites' in 'settings' must be at most {MAX_SITES}, got 10000\n"
    ), err.getvalue()
    # the hint gives the measured figures
    assert f"{MEASURED[-1][0]} in {about(MEASURED[-1][1])}" in err.getvalue(), err.getvalue()
