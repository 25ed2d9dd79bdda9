"""The compiled-program cache for real (runtime/compile_cache.py): a second run of the
same plan loads the cached program (the log says so: PLANRUNNER_CACHE_LOG) and reports
the same records and aggregations as the first, through every kind of map and attach
the plan uses: a print through the ring buffer, per-CPU hashes (count, hist), the
config array (the -c child's pid filter), the counters, usdt with a semaphore (the
kernel's reference counter on a uprobe_multi link), uprobe, uretprobe and a
tracepoint. A corrupt entry is reported, rebuilt and still traced; --no-cache neither
reads nor writes. Hits are told by the log, never by timing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan


# (plan, command): one process each, since -c traces the command's process only
def _cases(tmp_path: Path, build: Path) -> list[tuple[str, str]]:
    agg = write_plan(tmp_path, f"""
planrunner: 1
name: cache-agg
targets: {{a: {{binary: {build / 'agg'}}}}}
probes: {{value: {{usdt: a:agg:value}}}}
outputs:
  - {{count: value, name: count}}
  - {{hist: value, name: h, value: arg1}}
""", "agg.yaml")
    kinds = write_plan(tmp_path, f"""
planrunner: 1
name: cache-kinds
targets: {{s: {{binary: {build / 'strings'}}}}}
probes:
  text: {{usdt: s:str:text, args: [{{name: k}}, {{name: p}}, {{name: len}}]}}
  pick:
    uprobe: s:str_pick
    args: [{{name: k, type: int32}}, {{name: big, type: int64}}]
  ret:
    uretprobe: s:str_pick
    retval: {{type: pointer}}
  exec: {{tracepoint: sched:sched_process_exec}}
outputs:
  - print: text
    fields: [k, len]
  - print: pick
    fields: [k, big]
  - print: ret
    fields: [{{isnull: "retval == 0"}}]
  - print: exec
    fields: [filename]
""", "kinds.yaml")
    sem = write_plan(tmp_path, f"""
planrunner: 1
name: cache-sem
targets: {{m: {{binary: {build / 'semaphore'}}}}}
probes: {{hit: {{usdt: m:sem:hit, args: [{{name: i}}, {{name: x}}]}}}}
outputs:
  - print: hit
    fields: [i]
""", "sem.yaml")
    return [(agg, f"{build / 'agg'} 1 0 values"), (kinds, f"{build / 'strings'} 2"),
            (sem, f"{build / 'semaphore'} 5 1 report")]


def _run(plan: str, command: str, *extra: str) -> tuple[list[tuple[object, ...]], str]:
    proc = run_planrunner(["run", plan, "-f", "json", *extra, "-c", command], timeout=90)
    assert proc.returncode == 0, proc.stderr
    lines = "\n".join(x for x in proc.stdout.split("\n") if x.startswith("{"))
    out: list[tuple[object, ...]] = []
    for r in json_records(lines):
        if "buckets" in r:
            out.append((r["output"], tuple((b["low"], b["high"], b["count"])
                                           for b in r["buckets"])))
        elif "count" in r and "output" in r:
            out.append((r["output"], r["count"]))
        elif r.get("probe") == "exec":
            out.append(("exec", r["filename"]))
        elif "probe" in r:
            out.append((r["probe"], *(v for k, v in sorted(r.items())
                                      if k in ("k", "len", "big", "isnull", "i"))))
    return out, proc.stderr


def test_warm_run_hits_the_cache_and_reports_the_same(tmp_path, fixtures_built, cache_dir):
    colds = []
    for plan, command in _cases(tmp_path, fixtures_built):
        cold, err = _run(plan, command)
        assert "cache: stored" in err and "cache: hit" not in err, err
        warm, err = _run(plan, command)
        assert "cache: hit" in err and "cache: stored" not in err, err
        assert warm == cold
        colds += cold
    entries = list(cache_dir.iterdir())
    assert len([e for e in entries if e.suffix == ".bpf"]) == 3
    assert len([e for e in entries if e.suffix == ".run"]) == 3
    assert all((e.stat().st_mode & 0o777) == 0o600 for e in entries)
    assert (cache_dir.stat().st_mode & 0o777) == 0o700
    kinds = {rec[0] for rec in colds}
    assert {"count", "h", "text", "pick", "ret", "hit", "exec"} <= kinds, kinds
    assert ("count", 1000) in colds
    assert sum(1 for rec in colds if rec[0] == "hit") == 5  # semaphore raised by the kernel


def test_corrupt_entry_is_reported_rebuilt_and_the_run_still_traces(tmp_path, fixtures_built,
                                                                    cache_dir):
    plan, command = _cases(tmp_path, fixtures_built)[1]
    cold, _ = _run(plan, command)
    entry = next(cache_dir.glob("*.bpf"))  # the run entry is whole: the program is loaded
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x40
    entry.write_bytes(bytes(data))
    again, err = _run(plan, command)
    assert "warning: compiled-program cache entry" in err and "corrupt" in err, err
    assert "cache: stored" in err, err
    assert again == cold
    _warm, err = _run(plan, command)
    assert "cache: hit" in err, err


def test_no_cache_neither_reads_nor_writes(tmp_path, fixtures_built, cache_dir):
    plan, command = _cases(tmp_path, fixtures_built)[0]
    out, err = _run(plan, command, "--no-cache")
    assert "cache:" not in err, err
    assert not os.listdir(cache_dir)
    _run(plan, command)
    again, err = _run(plan, command, "--no-cache")
    assert "cache:" not in err, err
    assert again == out


def test_counters_config_and_totals_read_by_fd_agree_with_what_was_written(
        tmp_path, fixtures_built, cache_dir):
    """A program's counters, config and per-CPU totals are read and written by raw
    syscalls, cold and warm alike (one load path): per-CPU values written into the maps
    by fd with BPF_MAP_UPDATE_ELEM, as the kernel lays them out (8 bytes a possible CPU),
    read back summed; config read back as the program reads it."""
    import io
    import struct

    from planrunner.pipeline import compile_plan
    from planrunner.render.model import ConfigSlot, Counter
    from planrunner.runtime.bcc_backend import BccBackend
    from planrunner.runtime.compile_cache import open_cache
    from planrunner.runtime.kernel import bpf
    from planrunner.runtime.ringbuf import possible_cpus

    plan, _command = _cases(tmp_path, fixtures_built)[0]
    _p, _r, program = compile_plan(plan, {})
    with BccBackend(cache=open_cache(io.StringIO())) as cold:
        cold.load(program)
        assert not cold.from_cache
    with BccBackend(cache=open_cache(io.StringIO())) as warm:
        warm.load(program)
        assert warm.from_cache
        loaded = warm.loaded
        warm.set_config(ConfigSlot.SELF, 4242)
        assert warm.map_value(program.config_map,
                              struct.pack("i", int(ConfigSlot.SELF))) == struct.pack("I", 4242)
        per_cpu = [7 * (i + 1) for i in range(possible_cpus())]
        values = struct.pack(f"{len(per_cpu)}Q", *per_cpu)
        bpf.map_update_elem(loaded.map_fd(program.counters_map),
                            struct.pack("i", int(Counter.SPAN_REPLACED)), values)
        assert warm.counter(Counter.SPAN_REPLACED) == sum(per_cpu)
        assert warm.counter(Counter.LOST_RINGBUF) == 0
        lost_map = program.aggregates[0].lost_map
        bpf.map_update_elem(loaded.map_fd(lost_map), struct.pack("i", 0), values)
        assert warm.map_total(lost_map) == sum(per_cpu)


# --- what main added since the cache was written: sleepable programs, the pinned tracer
# registry, stacks, perf events, scope maps ---------------------------------------------

def _records(proc_stdout: str) -> list[dict]:
    return json_records("\n".join(x for x in proc_stdout.split("\n") if x.startswith("{")))


def _cold_then_warm(args: list[str], timeout: float = 90) -> tuple[list[dict], list[dict],
                                                                    str]:
    cold = run_planrunner(args, timeout=timeout)
    assert cold.returncode == 0, cold.stderr
    assert "cache: stored" in cold.stderr, cold.stderr
    warm = run_planrunner(args, timeout=timeout)
    assert warm.returncode == 0, warm.stderr
    assert "cache: hit" in warm.stderr and "cache: stored" not in warm.stderr, warm.stderr
    return _records(cold.stdout), _records(warm.stdout), warm.stderr


def test_sleepable_string_program_warm_reads_the_same_cold_pages(tmp_path, fixtures_built,
                                                                 cache_dir):
    """A sleepable program (task-storage scratch, BPF_F_SLEEPABLE) loaded from the cache
    still reads strings from pages the process never touched: in the kernel, exactly."""
    from tests.e2e.test_sleepable_strings import EXPECTED, LIMIT, PLAN, _sleepable

    if not _sleepable():
        pytest.skip("this kernel has no sleepable uprobes")
    plan = write_plan(tmp_path, PLAN.format(
        lib=fixtures_built / "libstrs.so", limit=LIMIT,
        probe="usdt: lib:strs:take\n    args: [{name: k}, {name: s, type: string}]",
        fields="[k, s]"))
    cmd = f"{fixtures_built / 'dlopen_strs'} 0 {tmp_path / 'pages'}"
    cold, warm, _ = _cold_then_warm(["run", plan, "-f", "json", "-c", cmd])
    assert [r["s"] for r in warm] == [r["s"] for r in cold] == EXPECTED
    assert not any("reread" in r for r in warm)  # the kernel read them: sleepable


def test_stack_program_warm_reports_the_same_frames(tmp_path, tmp_path_factory, cache_dir):
    """The stack-id maps (BPF_MAP_TYPE_STACK_TRACE, build-id frames) of a cached program,
    read through bcc's tables built over them after "Tracing"."""
    from tests.unit.stacks_fixture import CHAIN, missing_toolchain, session_build

    why = missing_toolchain()
    if why:
        pytest.skip(why)
    binary = session_build(tmp_path_factory)["fp_nopie"] / "fx_stack"
    plan = write_plan(tmp_path, f"""
planrunner: 1
targets: {{fx: {{binary: {binary}}}}}
stack: {{unwind: fp}}
probes: {{inner: {{uprobe: fx:inner}}}}
outputs:
  - print: inner
    fields: [ustack, kstack]
""")
    cold, warm, _ = _cold_then_warm(["run", plan, "-f", "json", "-c",
                                     f"{binary} {tmp_path / 'dump'}"])

    def frames(recs: list[dict]) -> list[tuple[str, str]]:
        (rec,) = [r for r in recs if "ustack" in r]
        return [(f["symbol"], os.path.basename(f["module"])) for f in rec["ustack"][:5]]

    assert frames(warm) == frames(cold)
    assert [s for s, _m in frames(warm)] == CHAIN


def test_profile_and_tracepoint_programs_warm(tmp_path, fixtures_built, cache_dir):
    """A perf-event program (profile) and a tracepoint beside it, from the cache."""
    plan = write_plan(tmp_path, """
planrunner: 1
name: cache-perf
probes:
  cpu: {profile: {hz: 99}}
  exec: {tracepoint: sched:sched_process_exec}
outputs:
  - {count: cpu, name: samples}
  - print: exec
    fields: [filename]
""")
    cmd = "sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec true'"
    cold, warm, _ = _cold_then_warm(["run", plan, "-f", "json", "-c", cmd])
    execs = [[r["filename"] for r in recs if r.get("probe") == "exec"] for recs in (cold, warm)]
    assert execs[0] == execs[1] and execs[1][-1] == "/usr/bin/true", execs
    for recs in (cold, warm):
        (samples,) = [r["count"] for r in recs if r.get("output") == "samples"]
        assert samples > 0  # the shell spun on a CPU: sampled there


def test_comm_scope_is_filled_in_a_cached_program(tmp_path, fixtures_built, cache_dir):
    """--comm fills the scope map of a cached program by raw updates: the same filter."""
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: cache-comm
targets: {{a: {{binary: {fixtures_built / 'agg'}}}}}
probes: {{value: {{usdt: a:agg:value}}}}
outputs:
  - {{count: value, name: count}}
""")
    args = ["run", plan, "-f", "json", "--comm", "agg", "-c",
            f"{fixtures_built / 'agg'} 1 0 values"]
    cold, warm, _ = _cold_then_warm(args)
    assert [r["count"] for r in cold if "count" in r] == [1000]
    assert [r["count"] for r in warm if "count" in r] == [1000]
    args[args.index("agg")] = "nosuchcomm"  # another scope, the same cached program
    other = run_planrunner(args, timeout=90)
    assert "cache: hit" in other.stderr, other.stderr
    assert [r["count"] for r in _records(other.stdout) if "count" in r] in ([], [0])


def test_a_cached_program_shares_the_pinned_tracer_registry(tmp_path, fixtures_built,
                                                            cache_dir):
    """The registry map of a cached load is the one pinned for every run (its map id),
    never a private copy: a private one would let this run trace other runs."""
    import io

    from planrunner.pipeline import compile_plan
    from planrunner.runtime import compile_cache as cc
    from planrunner.runtime.bcc_backend import BccBackend

    plan, _command = _cases(tmp_path, fixtures_built)[0]
    _p, _r, program = compile_plan(plan, {})
    with BccBackend(cache=open_cache_quiet()) as cold:
        cold.load(program)
        assert cold.loaded is not None  # compiled now, loaded as a cached one is
        assert cc.same_map(cold.loaded.map_fd(program.tracers_map), program.tracers_pin)
    with BccBackend(cache=cc.open_cache(io.StringIO())) as warm:
        warm.load(program)
        assert warm.from_cache and warm.loaded is not None
        assert warm.loaded.map_def(program.tracers_map).pin == program.tracers_pin
        assert cc.same_map(warm.loaded.map_fd(program.tracers_map), program.tracers_pin)


def open_cache_quiet():  # noqa: ANN201 - a helper of the test above
    import io

    from planrunner.runtime.compile_cache import open_cache

    return open_cache(io.StringIO())


# --- the run cache (planrunner/run_cache.py): load/resolve/render skipped ------------------

def test_a_warm_run_skips_the_compile_and_reports_the_same(tmp_path, fixtures_built,
                                                           cache_dir):
    """The second run takes both levels (run, then program) and prints the same records;
    what resolve warned is replayed verbatim."""
    for plan, command in _cases(tmp_path, fixtures_built):
        cold, err = _run(plan, command)
        assert "cache: run miss" in err and "run hit" not in err, err
        warm, werr = _run(plan, command)
        assert "cache: run hit" in werr and "cache: hit" in werr, werr
        assert warm == cold

        def warnings(text: str) -> list[str]:
            return [x for x in text.splitlines() if "warning" in x and "cache" not in x]

        assert warnings(werr) == warnings(err)
    assert len(list(cache_dir.glob("*.run"))) == 3
    assert all((e.stat().st_mode & 0o777) == 0o600 for e in cache_dir.iterdir())


def test_a_changed_target_binary_is_never_served_from_the_run_cache(tmp_path, fixtures_built,
                                                                    cache_dir):
    """The plan's target is rebuilt between runs (PIE, then non-PIE: the probe moves):
    the entry is stale, the run resolves again and traces the new binary's probe."""
    import shutil

    from tests.e2e.executor_helpers import simple_plan

    (tmp_path / "t").mkdir()
    target = tmp_path / "t" / "simple"
    shutil.copy(fixtures_built / "simple_pie", target)
    plan = simple_plan(tmp_path, target)
    first, err = _run(plan, f"{target} 3")
    assert "run miss" in err, err
    again, err = _run(plan, f"{target} 3")
    assert "run hit" in err and again == first, err
    shutil.copy(fixtures_built / "simple_nopie", tmp_path / "t" / "new")
    os.replace(tmp_path / "t" / "new", target)  # as an install does: another file
    rebuilt, err = _run(plan, f"{target} 3")
    assert "run hit" not in err and "run stale" in err, err
    assert rebuilt == first and len(rebuilt) == 3  # the new binary's probes, all traced
    _again, err = _run(plan, f"{target} 3")
    assert "run hit" in err, err


def test_no_cache_skips_the_run_cache_too(tmp_path, fixtures_built, cache_dir):
    plan, command = _cases(tmp_path, fixtures_built)[0]
    _run(plan, command)
    _out, err = _run(plan, command, "--no-cache")
    assert "cache:" not in err, err


# What a warm run imports before "Tracing": a wrapper around the entry point lists the
# modules when that line is written (the run then goes on as usual).
_AT_TRACING = r"""
import dataclasses, inspect, sys
_write = sys.stderr.write
def write(text):
    if text.startswith("Tracing"):
        mods = sorted(sys.modules)
        nodoc = [f"{n}.{o.__qualname__}" for n, m in list(sys.modules.items())
                 if n.startswith("planrunner") for o in list(vars(m).values())
                 if isinstance(o, type) and dataclasses.is_dataclass(o) and o.__module__ == n
                 and o.__doc__ == o.__name__ + str(inspect.signature(o)).replace(" -> None", "")]
        _write("MODULES " + " ".join(mods) + "\nNODOC " + " ".join(nodoc) + "\n")
    return _write(text)
sys.stderr.write = write
from planrunner.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_warm_run_attaches_before_loading_views_decoding_and_stacks(tmp_path, fixtures_built,
                                                                      cache_dir):
    """Before "Tracing", a warm run imports what loading and attaching need, not the view,
    records.py, the decoder, the aggregation reader or the stack modules (they load once
    the probes record: the first records are in the ring by then), nor yaml/jinja2/bcc
    or pathlib (with urllib.parse and ipaddress, ~3 ms);
    and every dataclass created by then has a docstring (for one without, the decorator
    calls inspect.signature). The records are the same as a cold run's."""
    import subprocess
    import sys

    from tests.e2e.conftest import ROOT
    from tests.e2e.executor_helpers import simple_plan

    plan = simple_plan(tmp_path, fixtures_built / "simple_pie")
    argv = [sys.executable, "-c", _AT_TRACING, "run", plan, "-f", "json", "-c",
            f"{fixtures_built / 'simple_pie'} 3"]
    runs = [subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=ROOT)
            for _ in range(2)]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
    assert "run hit" in runs[1].stderr and "cache: hit" in runs[1].stderr, runs[1].stderr
    assert [[r["i"] for r in json_records(p.stdout)] for p in runs] == [[1, 2, 3]] * 2
    lines = dict(x.split(" ", 1) for x in runs[1].stderr.splitlines()
                 if x.startswith(("MODULES ", "NODOC ")))
    mods = set(lines["MODULES"].split())
    late = {"planrunner.records", "planrunner.output.text", "planrunner.runtime.decode",
            "planrunner.runtime.aggregates", "planrunner.runtime.stacks",
            "planrunner.runtime.task_events", "planrunner.stacks.timeline",
            "planrunner.elf.reader", "yaml", "jinja2", "bcc", "planrunner.plan.model",
            "hashlib", "planrunner.diagnostics", "pathlib"}
    assert sorted(mods & late) == []
    assert {"planrunner.runtime.session", "planrunner.render.model"} <= mods
    assert lines.get("NODOC", "").split() == []


# --- the run cache's inputs (planrunner/inputs.py): what resolve looked at, found or not --

def _sites(stderr: str) -> int:
    line = next(x for x in stderr.splitlines() if x.startswith("Tracing"))
    return int(line.split()[1])


def _fixture_copy(src: Path, dst: Path, size: int = 0) -> None:
    """`src` at `dst` (a new inode), padded with zeros to `size` (harmless after an ELF
    file's last header)."""
    data = src.read_bytes()
    tmp = dst.with_name(dst.name + ".new")
    tmp.write_bytes(data + b"\0" * max(0, size - len(data)))
    tmp.chmod(0o755)
    os.replace(tmp, dst)


def test_an_optional_target_that_appears_is_traced_by_the_warm_run(tmp_path, fixtures_built,
                                                                   cache_dir):
    """Its absence was an input: a copy put there makes the next run resolve again and
    trace both sites, as --no-cache does (the old cache replayed the warning, 1 site)."""
    x = tmp_path / "x"
    (x / "opt").mkdir(parents=True)
    _fixture_copy(fixtures_built / "simple_pie", x / "simple")
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: optional
targets:
  a: {{binary: {x / 'simple'}}}
  b: {{binary: {x / 'opt' / 'simple'}, optional: true}}
probes:
  h0: {{usdt: a:simple:hit, args: [{{name: i}}]}}
  h1: {{usdt: b:simple:hit, args: [{{name: i}}]}}
outputs:
  - {{print: h0, fields: [i]}}
  - {{print: h1, fields: [i]}}
""")
    command = f"{x / 'simple'} 2"
    _out, err = _run(plan, command)
    assert "optional target 'b' left out" in err and _sites(err) == 1, err
    _out, err = _run(plan, command)
    assert "run hit" in err and _sites(err) == 1, err
    _fixture_copy(fixtures_built / "simple_pie", x / "opt" / "simple")
    _out, warm = _run(plan, command)
    _out, nocache = _run(plan, command, "--no-cache")
    assert _sites(nocache) == 2
    assert "run hit" not in warm and "left out" not in warm and _sites(warm) == 2, warm


def test_a_retargeted_symlink_is_resolved_again(tmp_path, fixtures_built, cache_dir):
    """bin/app -> ver1 switched to ver2 (the alternatives/deploy pattern): the warm run
    traces ver2, the file the command runs (the old cache attached to ver1: 0 events)."""
    from tests.e2e.executor_helpers import simple_plan

    bin_dir, versions = tmp_path / "bin", tmp_path / "versions"
    bin_dir.mkdir()
    versions.mkdir()  # not the link's directory: nothing beside the files read changes
    _fixture_copy(fixtures_built / "simple_pie", versions / "ver1")
    _fixture_copy(fixtures_built / "simple_nopie", versions / "ver2")
    os.symlink("../versions/ver1", bin_dir / "app")
    plan = simple_plan(tmp_path, bin_dir / "app")
    first, err = _run(plan, f"{bin_dir / 'app'} 3")
    assert len(first) == 3, err
    os.symlink("../versions/ver2", bin_dir / "app.new")
    os.replace(bin_dir / "app.new", bin_dir / "app")
    warm, err = _run(plan, f"{bin_dir / 'app'} 3")
    assert "run hit" not in err and warm == first, err


# Replaces the target while the first run renders (after resolve read it): how a deploy
# during a compile looks. HOW: "rename" or "inplace" (same size, mtime put back). Told in
# the script's text, not the environment: the environment is in the run cache's key.
_REPLACE_DURING_COMPILE = r"""
import os, sys
import planrunner.pipeline as pipeline
_render = pipeline.render
def render(resolved, plan_only=False):
    target, new = TARGET, NEW
    if HOW == "rename":
        os.replace(new, target)
    else:
        st = os.stat(target)
        with open(new, "rb") as src, open(target, "r+b") as dst:
            dst.write(src.read())
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.unlink(new)
    return _render(resolved, plan_only)
pipeline.render = render
from planrunner.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("how", ["rename", "inplace"])
def test_a_binary_replaced_during_the_compile_is_a_miss_after(tmp_path, fixtures_built,
                                                              cache_dir, how):
    """The inputs are fingerprinted when read, with ctime: the next run compiles again
    and traces the new file (the old cache failed every later run after a rename, and
    attached at the old file's offset after an in-place rewrite)."""
    import subprocess
    import sys

    from tests.e2e.conftest import ROOT
    from tests.e2e.executor_helpers import simple_plan

    pie, nopie = fixtures_built / "simple_pie", fixtures_built / "simple_nopie"
    size = max(pie.stat().st_size, nopie.stat().st_size)
    (tmp_path / "t").mkdir()
    target, new = tmp_path / "t" / "simple", tmp_path / "t" / "new"
    _fixture_copy(pie, target, size)
    _fixture_copy(nopie, new, size)
    assert target.stat().st_size == new.stat().st_size
    plan = simple_plan(tmp_path, target)
    script = f"TARGET, NEW, HOW = {str(target)!r}, {str(new)!r}, {how!r}\n" + \
        _REPLACE_DURING_COMPILE
    first = subprocess.run([sys.executable, "-c", script, "run", plan, "-f", "json",
                            "-c", f"{target} 3"], capture_output=True, text=True,
                           timeout=90, cwd=ROOT)  # may fail: the file changed under it
    assert "run miss" in first.stderr and not new.exists(), first.stderr
    for _ in range(2):
        out, err = _run(plan, f"{target} 3")
        assert [r[1] for r in out] == [1, 2, 3], err
