"""The compile worker for real (runtime/compile_worker.py): a first run's program is
compiled by bcc in a process of its own, whose mount namespace shows a one-line
/proc/kallsyms; the machine's file and mounts are untouched, the instructions are the
ones bcc compiles in-process, an error is bcc's own, and the worker never outlives its
owner."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from planrunner.runtime import bcc_backend
from planrunner.runtime.compile_worker import KALLSYMS_LINE, CompileWorker
from tests.e2e.conftest import ROOT, json_records, run_planrunner, write_plan

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces, BPF)")

CFLAGS = list(bcc_backend.BASE_CFLAGS)


def _kallsyms_mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if " /proc/kallsyms " in line]


def test_the_worker_sees_one_line_and_the_machine_keeps_its_kallsyms() -> None:
    before = set(os.listdir(tempfile.gettempdir()))
    child = subprocess.run(
        [sys.executable, "-c",
         "from planrunner.runtime.compile_worker import hide_kallsyms\n"
         "print(hide_kallsyms())\n"
         "print(open('/proc/kallsyms').read(), end='')"],
        capture_output=True, text=True, check=True, cwd=ROOT)
    assert child.stdout == "True\n" + KALLSYMS_LINE.decode()
    with open("/proc/kallsyms") as f:
        assert sum(1 for _ in f) > 1000  # this namespace's file is the kernel's
    assert _kallsyms_mounts() == []
    left = {n for n in set(os.listdir(tempfile.gettempdir())) - before
            if n.startswith("planrunner-kallsyms-")}
    assert not left  # the file mounted was unlinked at once


def _program(tmp_path: Path, build: Path) -> str:
    from planrunner.pipeline import compile_plan

    plan = write_plan(tmp_path, f"""
planrunner: 1
name: worker-kinds
targets: {{s: {{binary: {build / 'strings'}}}}}
probes:
  text: {{usdt: s:str:text, args: [{{name: k}}, {{name: p, type: string}}, {{name: len}}]}}
  pick:
    uprobe: s:str_pick
    args: [{{name: k, type: int32}}, {{name: big, type: int64}}]
  exec: {{tracepoint: sched:sched_process_exec}}
outputs:
  - print: text
    fields: [k, p, len]
  - {{count: pick, by: [k]}}
  - print: exec
    fields: [filename]
""")
    _p, _r, program = compile_plan(plan, {})
    return program.c_source


def test_the_worker_compiles_the_instructions_bcc_compiles_in_process(tmp_path,
                                                                     fixtures_built) -> None:
    """A one-line kallsyms changes nothing bcc emits: the same functions, instructions,
    relocations and maps as a compile in this process (with the real file)."""
    source = _program(tmp_path, fixtures_built)
    worker = CompileWorker()
    remote = worker.compile(source, CFLAGS, {})
    local = bcc_backend.compile_program(source, CFLAGS, {})
    assert remote is not None
    assert remote == local
    assert len(remote.funcs) >= 3 and all(f.insns for f in remote.funcs)


def test_the_worker_defines_the_optional_btf_constants_as_the_run_would(
        tmp_path, fixtures_built) -> None:
    """The comm's offset (render/program.py TASK_COMM_OFFSET), worked out by the worker
    from the kernel's BTF: the same program as a compile here with those -D flags, and
    not the one without them (which calls bpf_get_current_comm)."""
    from planrunner.pipeline import compile_plan

    _program(tmp_path, fixtures_built)
    program = compile_plan(str(tmp_path / "plan.yaml"), {})[2]
    assert program.btf_constants
    defined = bcc_backend.btf_cflags(program.btf_constants)
    if not defined:
        pytest.skip("this kernel's BTF has no task_struct.comm")
    remote = CompileWorker().compile(program.c_source, CFLAGS, {}, program.btf_constants)
    assert remote is not None
    assert remote == bcc_backend.compile_program(program.c_source, CFLAGS + defined, {})
    assert remote != bcc_backend.compile_program(program.c_source, CFLAGS, {})


def test_a_compile_error_is_bccs_own(capfd) -> None:
    worker = CompileWorker()
    with pytest.raises(bcc_backend.CompileFailed) as info:
        worker.compile("int f(void *ctx) { return no_such_name; }", CFLAGS, {})
    assert "Failed to compile BPF module" in info.value.detail
    assert "no_such_name" in capfd.readouterr().err  # clang's diagnostic, on our stderr


def test_close_kills_a_worker_that_was_never_asked() -> None:
    worker = CompileWorker()
    worker.start()
    proc = worker._proc
    assert proc is not None and proc.poll() is None
    worker.close()
    assert proc.returncode == -9  # killed while it waited for a request, and reaped


def _agg_plan(tmp_path: Path, build: Path) -> str:
    """A count and a histogram of the agg fixture's probe."""
    return write_plan(tmp_path, f"""
planrunner: 1
name: worker-agg
targets: {{a: {{binary: {build / 'agg'}}}}}
probes: {{value: {{usdt: a:agg:value}}}}
outputs:
  - {{count: value, name: count}}
  - {{hist: value, name: h, value: arg1}}
""")


def test_a_first_run_is_compiled_by_the_worker_and_traces(tmp_path, fixtures_built,
                                                        monkeypatch) -> None:
    """`run` with an empty cache: the worker compiles, the program is loaded by our own
    calls and stored; the records are those of a --no-cache run (bcc in-process)."""
    monkeypatch.setenv("PLANRUNNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PLANRUNNER_CACHE_LOG", "1")
    plan = _agg_plan(tmp_path, fixtures_built)
    command = f"{fixtures_built / 'agg'} 1 0 values"
    first = run_planrunner(["run", plan, "-f", "json", "-c", command], timeout=90)
    assert first.returncode == 0, first.stderr
    assert "compiled by the compile worker" in first.stderr, first.stderr
    assert "cache: stored" in first.stderr, first.stderr
    plain = run_planrunner(["run", plan, "-f", "json", "--no-cache", "-c", command],
                           timeout=90)
    assert plain.returncode == 0, plain.stderr

    def records(out: str) -> list[dict]:
        return json_records("\n".join(x for x in out.splitlines() if x.startswith("{")))

    def strip(recs: list[dict]) -> list[tuple]:
        return sorted((r["output"], r.get("count"), str(r.get("buckets"))) for r in recs
                      if "output" in r)

    assert strip(records(first.stdout)) == strip(records(plain.stdout))
    assert [r["count"] for r in records(first.stdout) if r.get("output") == "count"] == [1000]


def test_the_worker_leaves_the_tracer_registry_when_it_ends(tmp_path, fixtures_built) -> None:
    """The worker is registered as a planrunner process (other runs skip its Python) and
    its slot is freed once it has ended: its pid, reused, must not be skipped."""
    import io

    from planrunner.pipeline import compile_plan
    from planrunner.runtime.bcc_backend import BccBackend
    from planrunner.runtime.compile_cache import open_cache
    from planrunner.runtime.scope import register_run
    from planrunner.runtime.tracers import TracerRegistry

    plan = _agg_plan(tmp_path, fixtures_built)
    _p, _r, program = compile_plan(plan, {})
    worker = CompileWorker()
    worker.start()
    pid = worker.pid
    registry = TracerRegistry(program.tracers_pin)
    # only the worker: this (pytest's) process registered would stay registered as long
    # as it lives, and every later system-wide run would skip it
    try:
        with BccBackend(cache=open_cache(io.StringIO(), enabled=False),
                        worker=worker) as backend:
            assert register_run(backend, tgid=pid)
            assert pid in set(registry.table().tgid)
            backend.load(program)
            assert not backend.from_cache  # compiled by the worker, not from a cache
            assert pid not in set(registry.table().tgid)
    finally:
        if pid is not None:
            registry.unregister(pid)
        registry.close()


def test_meanwhile_runs_once_while_the_worker_compiles_and_not_for_a_cached_program(
        tmp_path, fixtures_built, monkeypatch) -> None:
    """Backend.load's `meanwhile` (a run reads its stack modules and Python interpreters
    then): called once, after the C went to the worker and before its answer; a program
    from the cache compiles nothing, so it is not called."""
    import io
    import select

    from planrunner.pipeline import compile_plan
    from planrunner.runtime.bcc_backend import BccBackend
    from planrunner.runtime.compile_cache import open_cache

    monkeypatch.setenv("PLANRUNNER_CACHE_DIR", str(tmp_path / "cache"))
    _p, _r, program = compile_plan(_agg_plan(tmp_path, fixtures_built), {})
    worker = CompileWorker()
    worker.start()
    seen: list[tuple[bool, bool]] = []

    def meanwhile() -> None:
        proc = worker._proc
        assert proc is not None and proc.stdout is not None
        answered = bool(select.select([proc.stdout], [], [], 0)[0])
        seen.append((proc.poll() is None, answered))

    with BccBackend(cache=open_cache(io.StringIO()), worker=worker) as cold:
        cold.load(program, meanwhile)
        assert not cold.from_cache
    assert seen == [(True, False)]  # the worker ran and had not answered yet
    with BccBackend(cache=open_cache(io.StringIO())) as warm:
        warm.load(program, meanwhile)
        assert warm.from_cache
    assert len(seen) == 1


def test_the_worker_defines_the_kernel_offsets_the_program_needs(monkeypatch) -> None:
    """The offsets a program cannot do without (RenderedProgram.runtime_constants: a
    profile's user stacks read the task's mm and executable) are defined where it
    compiles, as the optional ones: the worker's image is the one compiled here with
    them, and without them the C does not compile (its `#error` guards)."""
    from planrunner.pipeline import compile_plan

    monkeypatch.chdir(ROOT)
    program = compile_plan("plans/cpu-profile.yaml", {})[2]
    assert program.runtime_constants
    needed = bcc_backend.needed_btf_cflags(program.runtime_constants)
    remote = CompileWorker().compile(program.c_source, CFLAGS, {},
                                     needed=program.runtime_constants)
    assert remote is not None
    assert remote == bcc_backend.compile_program(program.c_source, CFLAGS + needed, {})
    with pytest.raises(bcc_backend.CompileFailed):
        bcc_backend.compile_program(program.c_source, CFLAGS, {})
