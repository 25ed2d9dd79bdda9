"""Params as data for real (render/params.py, run_cache.py): a run with another value of
an int or duration param used in an expression reuses the run cache's entry and the
compiled program (the log says so), and the value reaches the program (the records
change exactly as the value says). A param the checker needs as a constant (a divisor)
or that `${}` writes into the plan is compiled in: a new value of it compiles again.
Hits are told by the cache log, never by timing."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import json_records, run_planrunner, write_plan


def _plan(tmp_path: Path, build: Path, label: str = "above") -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
name: params-data
params:
  min: {{type: int, default: 0}}
  every: {{type: int, default: 1}}
  pause: {{type: duration, default: 0ns}}
targets: {{s: {{binary: {build / 'simple_pie'}}}}}
probes:
  hit:
    usdt: s:simple:hit
    args: [{{name: i}}, {{name: x}}]
    where: i > min && i % every == 0 && x * 1ns >= pause
outputs:
  - print: hit
    name: {label}
    fields: [i]
""")


def _run(plan: str, build: Path, *sets: str) -> tuple[list[int], str]:
    argv = ["run", plan, "-f", "json"]
    for s in sets:
        argv += ["--set", s]
    proc = run_planrunner([*argv, "-c", f"{build / 'simple_pie'} 8"], timeout=90)
    assert proc.returncode == 0, proc.stderr
    return [r["i"] for r in json_records(proc.stdout)], proc.stderr


def _hits(stderr: str) -> tuple[bool, bool]:
    """(the run cache hit, the program cache hit)"""
    return "run hit" in stderr, "cache: hit" in stderr


def test_another_value_of_a_data_param_reuses_the_compiled_run(tmp_path, fixtures_built,
                                                                cache_dir):
    plan = _plan(tmp_path, fixtures_built)
    got, err = _run(plan, fixtures_built, "min=5")
    assert got == [6, 7, 8] and _hits(err) == (False, False), err
    got, err = _run(plan, fixtures_built, "min=2")
    assert got == [3, 4, 5, 6, 7, 8] and _hits(err) == (True, True), err
    # a duration too: x is 100*i, so x * 1ns >= 650ns keeps i >= 7
    got, err = _run(plan, fixtures_built, "min=2", "pause=650ns")
    assert got == [7, 8] and _hits(err) == (True, True), err
    # back to the defaults: the same entry (given or not, a data value is keyed by class)
    got, err = _run(plan, fixtures_built)
    assert got == list(range(1, 9)) and _hits(err) == (True, True), err
    got, err = _run(plan, fixtures_built, "min=7")
    assert got == [8] and _hits(err) == (True, True), err


def test_a_divisor_param_is_compiled_in(tmp_path, fixtures_built, cache_dir):
    """`i % every`: the checker refuses a zero divisor, so `every` is a constant; each
    value is its own program (and `every=0` is still refused, located)."""
    plan = _plan(tmp_path, fixtures_built)
    got, err = _run(plan, fixtures_built, "every=2")
    assert got == [2, 4, 6, 8] and _hits(err) == (False, False), err
    got, err = _run(plan, fixtures_built, "every=3")
    assert got == [3, 6] and _hits(err) == (False, False), err
    proc = run_planrunner(["run", plan, "--set", "every=0", "-c",
                           f"{fixtures_built / 'simple_pie'} 1"], timeout=90)
    assert proc.returncode != 0 and "modulo by zero" in proc.stderr, proc.stderr


def test_a_param_written_into_the_plan_is_compiled_in(tmp_path, fixtures_built, cache_dir):
    """`${min}` in the output's name: the value is the plan's text, so it is keyed."""
    plan = _plan(tmp_path, fixtures_built, label="above_${min}")
    got, err = _run(plan, fixtures_built, "min=5")
    assert got == [6, 7, 8] and _hits(err)[0] is False, err
    got, err = _run(plan, fixtures_built, "min=6")
    assert got == [7, 8] and _hits(err)[0] is False, err


def test_another_pid_of_the_same_program_reuses_the_compiled_run(tmp_path, fixtures_built,
                                                                  cache_dir):
    """--pid is checked, not keyed: a restarted process (same program, root, cmdline and
    environment) hits, and the records are the new process's; a process of another
    command line compiles again."""
    import subprocess

    from tests.e2e.executor_helpers import stop_process

    paced = str(fixtures_built / "paced")
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: paced-pid
params: {{min: {{type: int, default: 0}}}}
targets: {{p: {{binary: {paced}}}}}
probes: {{tick: {{usdt: p:paced:tick, args: [{{name: i}}], where: i > min}}}}
outputs: [{{print: tick, fields: [i]}}]
""", "paced.yaml")
    runs = []
    for rate in ("50", "50", "51"):
        target = subprocess.Popen([paced, "1000000", "0", rate])
        try:
            proc = run_planrunner(["run", plan, "-f", "json", "--pid", str(target.pid),
                                   "-d", "20", "-n", "3"], timeout=90)
        finally:
            stop_process(target)
        assert proc.returncode == 0, proc.stderr
        got = [(r["pid"], r["i"]) for r in json_records(proc.stdout)]
        first = got[0][1] if got else 0
        assert got == [(target.pid, first + k) for k in range(3)], proc.stderr
        runs.append(proc.stderr)
    assert [_hits(err)[0] for err in runs] == [False, True, False], runs
