"""The stop reads every map by fd with raw bpf() calls, no bcc (issue 23 item 6: a
3000-site stop spent most of its time in bcc's name lookups; runtime/map_batch.py).

Against the kernel: a run of 150 uprobes on the many_funcs fixture, each counted by an
output of its own (150 count maps and their lost-update maps), reports at the stop
exactly the calls the fixture made (mf_I: I+1 per round), through each load path (the
compile worker's program, the cached one, bcc's in-process load with its table objects
alive), while tests/e2e/stop_guard.py refuses any use of bcc's table API from the
moment the stop begins (and reports a late import of bcc); when none fired, stderr says
so in one line, not 150. The batch and key-by-key
reads of runtime/map_batch.py agree on real maps of each kind planrunner reads.
"""

from __future__ import annotations

import ctypes as ct
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from planrunner.runtime import compile_cache as cc
from planrunner.runtime import map_batch as mb
from planrunner.runtime.kernel import bpf
from tests.e2e.conftest import ROOT, json_records, write_plan
from tests.e2e.executor_helpers import wait_for
from tests.e2e.stop_guard import MARK

BINARY = "many_funcs"
PROBES, ROUNDS = 150, 2
GUARDED = [sys.executable, "-m", "tests.e2e.stop_guard"]


def counted_plan(tmp_path: Path, binary: Path, n: int = PROBES) -> str:
    probes = "".join(f"  f{i}: {{uprobe: m:mf_{i:03d}}}\n" for i in range(n))
    outputs = "".join(f"  - {{count: f{i}, name: f{i}}}\n" for i in range(n))
    return write_plan(tmp_path, f"planrunner: 1\nname: counted\ntargets:\n"
                                f"  m: {{binary: {binary}}}\nprobes:\n{probes}"
                                f"outputs:\n{outputs}")


def guarded_run(tmp_path: Path, binary: Path, first: list[str], env: dict[str, str],
                calls: bool = True) -> tuple[dict[str, int], str]:
    """One system-wide guarded run while the fixture makes its calls (or none): each
    output's count at the stop, and the run's stderr."""
    fixture = subprocess.Popen([str(binary), str(PROBES), str(ROUNDS)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: str(binary) in Path(f"/proc/{fixture.pid}/maps").read_text())
        tracer = subprocess.Popen(
            [*GUARDED, *first, "run", counted_plan(tmp_path, binary), "-f", "json"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **env})
        assert tracer.stderr is not None and fixture.stdout is not None
        said = ""
        for line in tracer.stderr:
            said += line
            if line.startswith("Tracing"):
                break
        else:
            out, err = tracer.communicate(timeout=60)
            pytest.fail(f"the run did not start: {said}{err}")
        if calls:
            fixture.send_signal(signal.SIGUSR1)  # the calls, all made before the stop
            assert fixture.stdout.readline().startswith("gated=0 ")
        tracer.send_signal(signal.SIGINT)
        out, err = tracer.communicate(timeout=120)
        assert tracer.returncode == 0, said + err
        fixture.kill()
        fixture.wait()
    finally:
        if fixture.poll() is None:
            fixture.kill()
            fixture.wait()
    counts = {r["output"]: r["count"] for r in json_records(out) if "output" in r}
    return counts, said + err


def expected() -> dict[str, int]:
    return {f"f{i}": (i + 1) * ROUNDS for i in range(PROBES)}


def test_exact_counts_at_the_stop_with_no_bcc_from_the_worker_then_the_cache(
        tmp_path: Path, fixtures_built: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    env = {"PLANRUNNER_CACHE_DIR": str(cache), "PLANRUNNER_CACHE_LOG": "1"}
    for run in ("worker", "cached"):
        counts, err = guarded_run(tmp_path, fixtures_built / BINARY, [], env)
        assert ("cache: hit" in err) == (run == "cached"), err
        assert MARK not in err, err
        assert counts == expected(), run


def test_exact_counts_at_the_stop_with_no_bcc_table_after_bccs_own_load(
        tmp_path: Path, fixtures_built: Path) -> None:
    counts, err = guarded_run(tmp_path, fixtures_built / BINARY, ["--in-process"], {})
    assert MARK not in err, err
    assert counts == expected()


def test_a_run_whose_probes_all_stayed_silent_says_so_in_one_line(
        tmp_path: Path, fixtures_built: Path) -> None:
    counts, err = guarded_run(tmp_path, fixtures_built / BINARY, [], {}, calls=False)
    assert MARK not in err, err
    assert counts == {}  # no output has a row
    said = err.split("Ctrl-C to end.\n", 1)[1]
    assert said == (f"no events:\n{PROBES} probes recorded nothing (f0, f1, f2, f3, f4 and "
                    f"{PROBES - 5} more): no traced process reached these probes while they "
                    "were attached (or `where:` dropped every event)\n"), said


def test_the_guard_refuses_bccs_tables_and_the_backend_reads_without_them(
        tmp_path: Path, fixtures_built: Path) -> None:
    """The guard can fail: armed here, a read through bcc's table API (over a module
    bcc compiled in this process, as the in-process compile does) raises, while the
    backend's own reads (by fd) still answer."""
    from planrunner.pipeline import compile_plan
    from planrunner.render.model import Counter
    from planrunner.runtime.bcc_backend import BccBackend, compile_bcc
    from tests.e2e import stop_guard

    _p, _r, program = compile_plan(counted_plan(tmp_path, fixtures_built / BINARY, 2), {})
    with BccBackend(cache=None) as backend:
        backend.load(program)  # compiled in this process: bcc is imported
        backend.finish_attach()  # looks every map's fd up, as after attaching
        bpf = compile_bcc("BPF_ARRAY(pr_guarded, u64, 1);", [])
        assert bpf[b"pr_guarded"] is not None
        stop_guard.arm()
        try:
            with pytest.raises(AssertionError, match="used after the stop began"):
                bpf[b"pr_guarded"]
            agg = program.aggregates[0]
            assert backend.read_map(agg.map_name, delete=False) == []
            assert backend.counter(Counter.LOST_MAPFULL) == 0
            assert backend.map_total(agg.lost_map) == 0
        finally:
            stop_guard.disarm()
            bpf.cleanup()
    assert "bcc" in sys.modules


# --- runtime/map_batch.py on real maps ---------------------------------------------------

CPUS = mb.possible_cpus()


def _map(map_type: int, key_size: int, value_size: int, entries: int,
         key_desc: str = '"unsigned int"', leaf_desc: str = '"unsigned long long"'
         ) -> mb.MapRef:
    fd = cc.create_map(cc.MapDef("t", map_type, key_size, value_size, entries, 0, "", ""))
    return mb.MapRef("t", fd, map_type, key_size, value_size, entries, key_desc, leaf_desc)


def _fill(ref: mb.MapRef, n: int) -> dict[int, list[int]]:
    """Keys 0..n-1, each CPU's slot of key k holding k * 1000 + cpu."""
    want = {}
    for k in range(n):
        slots = [k * 1000 + c for c in range(CPUS if ref.per_cpu else 1)]
        bpf.map_update_elem(ref.fd, struct.pack("I", k), struct.pack(f"{len(slots)}Q", *slots))
        want[k] = slots
    return want


def _as_dict(ref: mb.MapRef, entries: mb.Entries) -> dict[int, list[int]]:
    out = {}
    for key, value in mb.typed(ref, entries):
        out[int(key)] = [int(v) for v in value] if ref.per_cpu else [int(value)]
    return out


@pytest.mark.parametrize("map_type", [1, 5, 9, 10], ids=["hash", "percpu_hash", "lru_hash",
                                                        "lru_percpu_hash"])
def test_batches_read_every_entry_as_key_by_key_does_then_delete_them(
        map_type: int) -> None:
    ref = _map(map_type, 4, 8, 4096)
    try:
        want = _fill(ref, 1000)  # several chunks of FIRST_CHUNK
        width = mb.value_width(8, ref.per_cpu, CPUS)
        batched = mb._batched(ref, width, delete=False)
        assert batched is not None, "this kernel has batch reads of hash maps (5.6+)"
        assert _as_dict(ref, batched) == want
        assert _as_dict(ref, mb._key_by_key(ref, width, delete=False)) == want
        assert _as_dict(ref, mb.read_entries(ref, delete=True)) == want
        assert mb.read_entries(ref, delete=False).count == 0  # deleted with the read
    finally:
        os.close(ref.fd)


def test_an_array_without_a_delete_batch_is_read_key_by_key_and_zeroed() -> None:
    ref = _map(6, 4, 8, 4, key_desc='"int"')  # per-CPU array: the counters' kind
    try:
        want = _fill(ref, 4)
        width = mb.value_width(8, True, CPUS)
        assert mb._batched(ref, width, delete=True) is None  # the kernel has none
        assert _as_dict(ref, mb.read_entries(ref, delete=True)) == want
        after = mb.read_entries(ref, delete=False)
        assert after.count == 4 and mb.u64_total(after.values) == 0  # zeroed, kept
        assert mb.lookup(ref, struct.pack("i", 9)) is None  # past its entries: absent
    finally:
        os.close(ref.fd)


def test_lookup_and_delete_of_one_key() -> None:
    ref = _map(1, 4, 8, 16)
    try:
        _fill(ref, 3)
        assert mb.lookup(ref, struct.pack("I", 2)) == struct.pack("Q", 2000)
        mb.delete(ref, struct.pack("I", 2))
        assert mb.lookup(ref, struct.pack("I", 2)) is None
        mb.delete(ref, struct.pack("I", 2))  # absent: nothing to do
        assert sorted(_as_dict(ref, mb.read_entries(ref, delete=False))) == [0, 1]
    finally:
        os.close(ref.fd)


def test_a_full_count_map_is_read_whole() -> None:
    """A map at its max_entries (settings.map_size) in one read, keys as the described
    struct."""
    desc = '["pr_agg_0_key", [["k0","unsigned int"] ], "struct_packed"]'
    ref = _map(5, 4, 8, 300, key_desc=desc)
    try:
        want = _fill(ref, 300)
        items = mb.typed(ref, mb.read_entries(ref, delete=False))
        assert {int(k.k0): [int(v) for v in value] for k, value in items} == want
        assert all(isinstance(k, ct.Structure) for k, _v in items)
    finally:
        os.close(ref.fd)
