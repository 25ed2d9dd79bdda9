"""Stacks end to end (issue 13): ustack/kstack captured by real BPF in real processes,
unwound and symbolized, checked against what the targets log themselves.

- fx_stack (tests/fixtures/stacks) fires four calls deep, main -> outer -> lib_outer
  (libfx.so) -> middle -> inner, in four builds (frame pointers or not, PIE or not): the
  stack is exactly those frames, in order, by frame pointers (fp builds) and by CFI
  (every build); the fixture's own dump says which libfx.so it mapped.
- a process that exits, or execs another program, right after firing still symbolizes
  (its maps are the kernel's mmap/exec records, runtime/task_events.py);
- children forked (no exec) after tracing began by a process already running then,
  each gone microseconds after firing, as a postmaster's backends: their stacks and a
  usym() are named over the parent's maps as of the fork (forker, tests/fixtures/elf);
- profile: {hz: 99} on fx_spin, which spins 3:1 in spin_a/spin_b and logs the CPU time
  it spent in each: the folded counts are in that ratio within TOLERANCE;
- PostgreSQL's query__start and python3.11's function__return, Debian builds without
  frame pointers, unwound by CFI;
- the flame graph opens in headless chromium and shows the fixture's names;
- one stack in three processes (each loaded at its own address: ASLR) is one row of an
  aggregation keyed by it, in text, JSON and CSV (issue 22).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan
from tests.e2e.executor_helpers import start_tracer, stop_tracer
from tests.e2e.workloads.helpers import postgres_server, tracing
from tests.unit.stacks_fixture import CHAIN, VARIANTS, missing_toolchain, session_build

# Samples are a statistic: with ~200 samples at 99 Hz, a 3:1 split has a standard
# deviation of about 0.07 in the share of spin_a (sqrt(p(1-p)/n)); 0.1 is ~3 sigma
# (of the share: 0.75 expected, 0.65..0.85 accepted).
TOLERANCE = 0.10
PYTHON = "/usr/bin/python3.11"


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    why = missing_toolchain()
    if why:
        pytest.skip(why)
    return session_build(tmp_path_factory)


def _stack_plan(tmp_path: Path, binary: Path, unwind: str) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
targets:
  fx: {{binary: {binary}}}
stack: {{unwind: {unwind}}}
probes:
  inner: {{uprobe: fx:inner}}
outputs:
  - print: inner
    fields: [ustack, kstack]
""")


def _run_fixture(tmp_path: Path, plan: str, binary: Path, linger: bool,
                 quick: bool = False) -> dict:
    """quick: the fixture writes no dump, so it is gone microseconds after the probe."""
    prefix = tmp_path / "dump"
    env = ("FX_LINGER_MS=400 " if linger else "") + ("FX_NO_DUMP=1 " if quick else "")
    cmd = f"env {env}{binary} {prefix}" if env else f"{binary} {prefix}"
    res = run_planrunner(["run", plan, "-f", "json", "-c", cmd])
    assert res.returncode == 0, res.stderr
    assert "could not be shown" not in res.stderr, res.stderr
    (rec,) = _json(res.stdout)  # the fixture prints its result on the same stdout
    return rec


def _json(stdout: str) -> list[dict]:
    return json_records("\n".join(line for line in stdout.splitlines()
                                   if line.startswith("{")))


def _libfx(tmp_path: Path) -> str:
    """The libfx.so the fixture mapped, from its own maps dump."""
    maps = (tmp_path / "dump.maps").read_text()
    (path,) = {line.split()[-1] for line in maps.splitlines() if line.endswith("libfx.so")}
    return os.path.realpath(path)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("unwind", ["fp", "dwarf", "auto"])
def test_four_calls_deep_exactly_those_frames(builds: dict[str, Path], tmp_path: Path,
                                              variant: str, unwind: str) -> None:
    if unwind == "fp" and variant.startswith("nofp"):
        pytest.skip("frame pointers cannot walk a build without them (dwarf/auto do)")
    binary = builds[variant] / "fx_stack"
    # linger: the process is still there when its record is read (the exit tests
    # below check the opposite)
    rec = _run_fixture(tmp_path, _stack_plan(tmp_path, binary, unwind), binary,
                       linger=unwind != "fp")
    frames = rec["ustack"]
    assert [f["symbol"] for f in frames[:5]] == CHAIN, frames
    modules = [os.path.realpath(f["module"]) for f in frames[:5]]
    assert modules == [os.path.realpath(binary)] * 2 + [_libfx(tmp_path)] + \
        [os.path.realpath(binary)] * 2
    assert frames[0]["offset"] == 0  # the uprobe sits on inner's first instruction
    assert all(f["offset"] > 0 for f in frames[1:5])  # return addresses, after the call
    assert rec["kstack"] == []  # a uprobe fires in user mode: no kernel stack
    if unwind != "fp":  # the process was seen: addresses are its own
        regs = dict(line.split() for line in (tmp_path / "dump.regs").read_text()
                    .splitlines())
        pc = int(regs["pc"], 16)  # inside inner, as the fixture itself saw it
        assert frames[0]["address"] <= pc < frames[0]["address"] + 64


@pytest.mark.parametrize("unwind", ["fp", "dwarf", "auto"])
def test_a_process_that_exits_right_after_firing_still_symbolizes(
        builds: dict[str, Path], tmp_path: Path, unwind: str) -> None:
    """fx_stack exits microseconds after the probe; planrunner reads the record ~50 ms
    later, when /proc/PID is gone: the maps the kernel reported when the process
    mapped them still name every function (fp addresses, dwarf and auto copies)."""
    variant = "fp_nopie" if unwind == "fp" else "nofp_pie"
    binary = builds[variant] / "fx_stack"
    rec = _run_fixture(tmp_path, _stack_plan(tmp_path, binary, unwind), binary,
                       linger=False, quick=True)
    assert not os.path.exists(f"/proc/{rec['pid']}/maps") or \
        open(f"/proc/{rec['pid']}/comm").read().strip() != "fx_stack"
    assert [f["symbol"] for f in rec["ustack"][:5]] == CHAIN, rec["ustack"]
    assert os.path.realpath(rec["ustack"][2]["module"]) == \
        os.path.realpath(builds[variant] / "libfx.so")


@pytest.mark.parametrize("unwind", ["fp", "dwarf", "auto"])
def test_a_process_that_execs_right_after_firing_still_symbolizes(
        builds: dict[str, Path], tmp_path: Path, unwind: str) -> None:
    """fx_stack fires, then execs fx_stack again under the same pid (and start time),
    which fires at other addresses (PIE) and exits at once: each stack is unwound over
    the image it ran in, though neither is there to read when the records are."""
    build = builds["fp_pie" if unwind == "fp" else "nofp_pie"]
    binary, lib = os.path.realpath(build / "fx_stack"), os.path.realpath(build / "libfx.so")
    plan = _stack_plan(tmp_path, Path(binary), unwind)
    cmd = f"env FX_NO_DUMP=1 FX_EXEC='exec env -u FX_EXEC {binary} x' {binary} x"
    res = run_planrunner(["run", plan, "-f", "json", "-c", cmd])
    assert res.returncode == 0, res.stderr
    assert "could not be shown" not in res.stderr, res.stderr
    first, second = _json(res.stdout)
    assert first["pid"] == second["pid"]
    for rec in (first, second):
        assert [f["symbol"] for f in rec["ustack"][:5]] == CHAIN, rec["ustack"]
        assert [os.path.realpath(f["module"]) for f in rec["ustack"][:5]] == \
            [binary, binary, lib, binary, binary]
    # addresses are each image's own: ASLR placed them apart
    assert first["ustack"][0]["address"] != second["ustack"][0]["address"]


FORKED_CHAIN = ["fire", "step", "work", "main"]


@pytest.mark.parametrize("unwind", ["dwarf", "auto"])
def test_children_forked_after_tracing_began_symbolize(fixtures_built: Path,
                                                       tmp_path: Path, unwind: str) -> None:
    """forker runs before the tracer starts (its maps are read from /proc then), then
    forks three children that fire forker:fire in main -> work -> step -> fire and
    _exit at once; the parent reaps each before the next, so no /proc entry is left to
    read when the records are: the stacks and usym(&step) are named over the maps each
    child inherited at its fork."""
    binary = fixtures_built / "forker"
    plan = write_plan(tmp_path, f"""
planrunner: 1
targets:
  fx: {{binary: {binary}}}
stack: {{unwind: {unwind}}}
probes:
  fire:
    usdt: fx:forker:fire
    args: [{{name: i}}, {{name: fn, type: pointer}}]
outputs:
  - print: fire
    fields: [i, ustack, usym(fn)]
""")
    fixture = subprocess.Popen([str(binary), "3"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        tracer = start_tracer(plan, "-f", "json")  # seeds forker's maps from /proc
        said, _ = fixture.communicate("go\n", timeout=30)  # it forks now
        out, err = stop_tracer(tracer)
    finally:
        for proc in (fixture, tracer):
            if proc is not None and proc.poll() is None:
                proc.kill()  # our own, by its pid
                proc.wait()
    assert fixture.returncode == 0, said
    assert tracer.returncode in (0, 130), err
    assert "could not be shown" not in err, err
    children = [int(line.split()[1]) for line in said.splitlines() if line.startswith("child")]
    step = int(said.split("step ")[1].split()[0], 16)
    rows = json_records(out)
    assert [(r["pid"], r["i"]) for r in rows] == \
        [(pid, i + 1) for i, pid in enumerate(children)], rows
    module = os.path.realpath(binary)
    for row in rows:
        frames = row["ustack"]
        assert [f["symbol"] for f in frames[:4]] == FORKED_CHAIN, frames
        assert [os.path.realpath(f["module"]) for f in frames[:4]] == [module] * 4
        assert frames[-1]["symbol"] == "_start"
        assert {**row["fn"], "module": os.path.realpath(row["fn"]["module"])} == \
            {"address": step, "symbol": "step", "offset": 0, "module": module}


@pytest.mark.parametrize("unwind", ["fp", "auto"])
def test_one_stack_in_three_processes_is_one_row_in_text_json_and_csv(
        builds: dict[str, Path], tmp_path: Path, unwind: str) -> None:
    """Three fx_stack processes, each firing inner once through the same frames at
    addresses of its own (PIE): one row with count 3, not three rows of 1."""
    binary = builds["fp_pie"] / "fx_stack"
    plan = write_plan(tmp_path, f"""
planrunner: 1
targets:
  fx: {{binary: {binary}}}
stack: {{unwind: {unwind}}}
probes:
  inner: {{uprobe: fx:inner}}
outputs:
  - count: inner
    by: [comm, ustack]
""")
    # FX_LINGER_MS: each is still there when the maps are read, whatever the timing
    three = " ".join(f"FX_NO_DUMP=1 FX_LINGER_MS=300 {binary} {tmp_path / str(i)} &"
                     for i in range(3))
    cmd = f"sh -c '{three} wait'"
    outputs = {}
    for fmt in ("text", "json", "csv"):
        res = run_planrunner(["run", plan, "-f", fmt, "--follow-children", "-c", cmd])
        assert res.returncode == 0, res.stderr
        outputs[fmt] = [line for line in res.stdout.splitlines()
                        if line.strip() and line.strip() != "52"]  # the fixture's own
    text = outputs["text"]
    counts = [line.split() for line in text if line.startswith("fx_stack ")]
    assert counts == [["fx_stack", "3"]], text
    assert sum(1 for line in text if line.strip().startswith("inner+0x0 ")) == 1, text
    (row,) = _json("\n".join(outputs["json"]))
    assert row["count"] == 3
    assert [f["symbol"] for f in row["ustack"][:5]] == CHAIN
    header, *rows = outputs["csv"]
    assert header.endswith(",comm,ustack,count"), outputs["csv"]
    (csv_row,) = rows
    assert csv_row.endswith(",3") and "inner+0x0 [fx_stack];middle+" in csv_row


def _folded_counts(stdout: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in stdout.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack.startswith("fx_spin;"):
            for fn in ("spin_a", "spin_b"):
                if f";{fn}" in stack:
                    counts[fn] = counts.get(fn, 0) + int(n)
    return counts


@pytest.mark.parametrize("variant,unwind", [("fp_pie", "fp"), ("nofp_pie", "auto")])
def test_profile_99hz_folded_counts_follow_the_cpu_time_ratio(
        builds: dict[str, Path], tmp_path: Path, variant: str, unwind: str) -> None:
    plan = write_plan(tmp_path, f"""
planrunner: 1
stack: {{unwind: {unwind}}}
probes:
  cpu: {{profile: {{hz: 99}}}}
outputs:
  - count: cpu
    by: [comm, ustack]
""")
    binary = builds[variant] / "fx_spin"
    res = run_planrunner(["run", plan, "-f", "folded", "-c", f"{binary} 2"], timeout=90)
    assert res.returncode == 0, res.stderr
    truth = re.search(r"a_ns (\d+) b_ns (\d+)", res.stdout)
    assert truth, res.stdout
    a_ns, b_ns = int(truth.group(1)), int(truth.group(2))
    counts = _folded_counts(res.stdout)
    total = counts.get("spin_a", 0) + counts.get("spin_b", 0)
    assert total >= 100, res.stdout  # ~2 s at 99 Hz
    share = counts["spin_a"] / total
    assert abs(share - a_ns / (a_ns + b_ns)) <= TOLERANCE, (counts, a_ns, b_ns)
    # every sample of the fixture went through main (the stacks are whole)
    assert all(";main;" in line for line in res.stdout.splitlines()
               if line.startswith("fx_spin;") and ";spin_" in line)


COPIES_NOTE = re.compile(r"planrunner-note copies full=(\d+) light=(\d+) templates=(\d+) "
                         r"stale=(\d+) ")


def test_profile_samples_of_a_known_walk_cross_light_and_stay_whole(
        builds: dict[str, Path]) -> None:
    """After the first sample at a pc and sp, a sample whose stack words the walk used are
    the same sends its template's id instead of a 16 KiB copy (render/stacks.py), and
    once the reader has named that light copy's hash, nothing: most of a spinning
    program's samples send no copy at all, and their stacks are still whole."""
    binary = builds["nofp_pie"] / "fx_spin"
    res = run_planrunner(["run", "cpu-profile", "-f", "folded", "-c", f"{binary} 2"],
                         timeout=90, env={**os.environ, "PLANRUNNER_TIMING": "1"})
    assert res.returncode == 0, res.stderr
    note = COPIES_NOTE.search(res.stderr)
    assert note, res.stderr
    full, light, templates, stale = map(int, note.groups())
    assert light >= 1 and templates >= 1 and stale == 0, note.group(0)
    counts = _folded_counts(res.stdout)
    samples = counts.get("spin_a", 0) + counts.get("spin_b", 0)
    assert samples >= 100, res.stdout
    assert full + light <= samples // 2, (note.group(0), samples)
    assert all(";main;" in line for line in res.stdout.splitlines()
               if line.startswith("fx_spin;") and ";spin_" in line), res.stdout


def test_profile_flame_graph_opens_in_headless_chromium(builds: dict[str, Path],
                                                         tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium (Debian: apt-get install chromium; scripts/setup.sh)")
    svg = tmp_path / "cpu.svg"
    res = run_planrunner(["run", "cpu-profile", "--flamegraph", str(svg), "-c",
                          f"{builds['nofp_nopie'] / 'fx_spin'} 1"], timeout=90)
    assert res.returncode == 0, res.stderr
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", svg.as_uri()], capture_output=True, text=True,
                         timeout=120)
    for name in ("spin_a", "spin_b", "main", "fx_spin"):
        assert f'data-name="{name}"' in dom.stdout, dom.stderr[-2000:]


def test_interval_fires_periodically_on_one_cpu(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, """
planrunner: 1
probes:
  tick: {interval: 200ms}
outputs:
  - count: tick
""")
    res = run_planrunner(["run", plan, "-f", "json", "--duration", "1.1s"])
    assert res.returncode == 0, res.stderr
    (row,) = _json(res.stdout)
    assert 4 <= row["count"] <= 6


def _symbols(stack: list[dict]) -> list[str | None]:
    return [f["symbol"] for f in stack]


def test_postgres_query_start_callers(tmp_path: Path) -> None:
    """Debian's postgres has no frame pointers: CFI walks from query__start through
    PostgresMain to main. exec_simple_query is a static function: only a debug file
    (postgresql-15-dbgsym) names it; without one its frame is an address in postgres."""
    with postgres_server() as pg:
        pg.psql("SELECT 1")
        with tracing("postgres-query-callers") as tracer:
            out = pg.psql("SELECT pg_backend_pid()", "SELECT 42").stdout
            rows = tracer.stop(settle=0.5)
    assert out.split()[-1] == "42"
    stacks = [r["ustack"] for r in rows if "ustack" in r]
    assert stacks, rows
    names = _symbols(max(stacks, key=len))
    assert "PostgresMain" in names and "main" in names, names
    assert names.index("PostgresMain") < names.index("main")
    frames = max(stacks, key=len)
    assert all(f["module"].endswith("/postgres") for f in
               frames[:names.index("main") + 1] if f["symbol"] != "__libc_start_call_main")
    if _has_debug_file("/usr/lib/postgresql/15/bin/postgres"):
        assert "exec_simple_query" in names
        assert names.index("exec_simple_query") < names.index("PostgresMain")


def _has_debug_file(path: str) -> bool:
    from planrunner.elf.reader import open_binary
    from planrunner.stacks.symtab import debug_file

    return debug_file(open_binary(path).build_id) is not None


def test_postgres_exec_simple_query_is_named_with_debug_symbols() -> None:
    if not os.path.exists("/usr/lib/postgresql/15/bin/postgres"):
        pytest.skip("needs PostgreSQL 15")
    if not _has_debug_file("/usr/lib/postgresql/15/bin/postgres"):
        pytest.skip("exec_simple_query is static: naming it needs postgresql-15-dbgsym "
                    "(Debian's debug archive, not reachable here)")
    test_postgres_query_start_callers(Path("/tmp"))


def test_python_function_return_stack_shows_the_eval_loop(tmp_path: Path) -> None:
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")
    plan = write_plan(tmp_path, f"""
planrunner: 1
targets:
  py: {{binary: {PYTHON}}}
stack: {{unwind: dwarf, python: false}}   # the interpreter's own frames, unreplaced
probes:
  ret: {{usdt: py:python:function__return}}
outputs:
  - count: ret
    by: ["ustack(127)"]
""")
    code = "import time; leaf = lambda: 1; [leaf() for _ in range(50)]; time.sleep(0.3)"
    res = run_planrunner(["run", plan, "-f", "json", "-c", f"{PYTHON} -c '{code}'"])
    assert res.returncode == 0, res.stderr
    # every stack unwound over the maps python had then (its exec and every library it
    # mapped are in the kernel's records), even those taken as it exits
    assert "could not be shown" not in res.stderr, res.stderr
    rows = _json(res.stdout)
    named = [_symbols(r["ustack"]) for r in rows]
    assert any("_PyEval_EvalFrameDefault" in n for n in named), named[:3]
    # whole stacks: from the eval loop down to the entry point (python's own `main` is
    # not in its .dynsym: its frame is an address)
    deep = [n for n in named if "_PyEval_EvalFrameDefault" in n and "Py_BytesMain" in n
            and n[-1] == "_start"]
    assert deep, named[:3]


def test_malloc_stacks_sums_the_bytes_by_the_allocating_stack() -> None:
    """python3.11 allocates 20 bytearrays of 100000 bytes: one stack (through
    PyByteArray_Resize) holds those 2,000,000 bytes (plus the few the object header
    asks with them)."""
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")
    code = "import time; x = [bytearray(100000) for _ in range(20)]; time.sleep(0.2)"
    res = run_planrunner(["run", "malloc-stacks", "-f", "json", "-c",
                          f"{PYTHON} -c '{code}'"])
    assert res.returncode == 0, res.stderr
    rows = _json(res.stdout)
    top = rows[0]
    names = _symbols(top["ustack"])
    assert names[0] == "malloc" and "PyByteArray_Resize" in names, names
    assert 2_000_000 <= top["sum"] < 2_000_000 + 20 * 64
    assert names[-1] == "_start"
