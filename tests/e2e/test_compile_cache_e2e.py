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


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("PLANRUNNER_CACHE_DIR", str(d))
    monkeypatch.setenv("PLANRUNNER_CACHE_LOG", "1")
    return d


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
    assert len(entries) == 3
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
    entry = next(cache_dir.iterdir())
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


def test_counters_config_and_totals_read_without_bcc_agree_with_bcc_tables(
        tmp_path, fixtures_built, cache_dir):
    """A cached program's counters, config and per-CPU totals are read and written by
    raw syscalls (no bcc import before or after "Tracing"): the same values bcc's
    table objects see over the same maps."""
    import ctypes as ct
    import io

    from planrunner.pipeline import compile_plan
    from planrunner.render.model import ConfigSlot, Counter
    from planrunner.runtime.bcc_backend import BccBackend
    from planrunner.runtime.compile_cache import open_cache

    plan, _command = _cases(tmp_path, fixtures_built)[0]
    _p, _r, program = compile_plan(plan, {})
    with BccBackend(cache=open_cache(io.StringIO())) as cold:
        cold.load(program)
        assert not cold.from_cache
    with BccBackend(cache=open_cache(io.StringIO())) as warm:
        warm.load(program)
        assert warm.from_cache
        warm.set_config(ConfigSlot.SELF, 4242)
        counters = warm.bpf[program.counters_map]  # bcc's table over the cached map
        config = warm.bpf[program.config_map]
        assert config[ct.c_int(int(ConfigSlot.SELF))].value == 4242
        per_cpu = [7 * (i + 1) for i in range(len(counters.Leaf()))]
        counters[ct.c_int(int(Counter.SPAN_REPLACED))] = counters.Leaf(*per_cpu)
        assert warm.counter(Counter.SPAN_REPLACED) == sum(per_cpu)
        assert warm.counter(Counter.LOST_RINGBUF) == 0
        lost_map = program.aggregates[0].lost_map
        lost = warm.bpf[lost_map]
        lost[ct.c_int(0)] = lost.Leaf(*per_cpu)
        assert warm.map_total(lost_map) == sum(per_cpu)
