"""planrunner/inputs.py, and the run cache's property: for every kind of input, changed
between two runs, the warm run's program (the C and every attach site, with the
binaries' identities) equals what a run without the cache compiles. No kernel: the
runs are `run`'s own key, lookup, compile and store, in-process."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from planrunner import inputs
from planrunner import run_cache as rc
from planrunner.commands.common import plan_path
from planrunner.elf import reader, symbols
from planrunner.pipeline import compile_plan
from planrunner.plan_file import read_plan_bytes
from planrunner.render.model import RenderedProgram
from planrunner.runtime.compile_cache import ProgramCache
from planrunner.targets import resolve_target

BUILD = Path(__file__).resolve().parents[1] / "fixtures" / "elf" / "build"


# --- the recorder ---------------------------------------------------------------------------

def test_outside_recording_nothing_is_recorded_and_the_operations_are_plain(
        tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x")
    assert inputs.read_bytes(str(f)) == b"x" and inputs.isfile(str(f))
    with inputs.recording() as log:
        pass
    inputs.read_bytes(str(f))
    assert log.inputs() == ()


def test_each_probe_records_what_it_found_and_a_change_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a").write_bytes(b"1")
    os.symlink("a", d / "link")
    monkeypatch.setenv("PR_TEST_VAR", "one")
    with inputs.recording() as log:
        assert inputs.isfile(str(d / "a")) and not inputs.isfile(str(d / "missing"))
        assert inputs.isdir(str(d)) and inputs.access(str(d / "a"), os.R_OK)
        assert inputs.listdir(str(d)) != []
        assert inputs.realpath(str(d / "link")) == str(d / "a")
        assert inputs.readlink(str(d / "link")) == "a" and inputs.readlink(str(d / "a")) is None
        assert inputs.getenv("PR_TEST_VAR") == "one" and inputs.getenv("PR_TEST_UNSET") is None
    recorded = log.inputs()
    assert {k for k, _p, _f in recorded} == {"stat", "dir", "realpath", "link", "env"}
    assert ("stat", str(d / "missing"), inputs.ABSENT) in recorded
    assert inputs.changed(recorded) is None
    changes: list[tuple[Callable[[], object], str]] = [
        (lambda: (d / "missing").write_bytes(b""), f"{d / 'missing'} changed"),
        (lambda: monkeypatch.setenv("PR_TEST_UNSET", ""), "$PR_TEST_UNSET changed"),
        (lambda: monkeypatch.setenv("PR_TEST_VAR", "two"), "$PR_TEST_VAR changed"),
    ]
    for change, why in changes:
        change()
        assert inputs.changed(recorded) == why
        (d / "missing").unlink(missing_ok=True)
        monkeypatch.setenv("PR_TEST_VAR", "one")
        monkeypatch.delenv("PR_TEST_UNSET", raising=False)
    assert inputs.changed(recorded) is None
    os.unlink(d / "link")
    (d / "b").write_bytes(b"2")
    os.symlink("b", d / "link")  # retargeted
    assert inputs.changed(recorded) is not None


def test_a_file_is_fingerprinted_when_read_with_its_ctime(tmp_path: Path) -> None:
    """Rewritten in place at the same size with its mtime put back: only ctime tells."""
    f = tmp_path / "bin"
    f.write_bytes(b"one")
    with inputs.recording() as log:
        inputs.read_bytes(str(f))
    st = f.stat()
    with open(f, "r+b") as fh:
        fh.write(b"two")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_mtime_ns == st.st_mtime_ns and f.stat().st_ino == st.st_ino
    assert inputs.changed(log.inputs()) == f"{f} changed"


def test_the_first_observation_stands_and_a_second_that_differs_marks_the_log(
        tmp_path: Path) -> None:
    f = tmp_path / "bin"
    f.write_bytes(b"one")
    with inputs.recording() as log:
        inputs.isfile(str(f))
        first = log.inputs()
        f.write_bytes(b"three")
        inputs.read_bytes(str(f))
    assert log.inputs() == first and log.moved is not None and str(f) in log.moved


def test_the_cpu_is_named_by_its_model_and_flags_not_its_clock(tmp_path: Path) -> None:
    block = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
             "model name\t: AMD EPYC\nstepping\t: 1\ncpu MHz\t\t: {mhz}\n"
             "flags\t\t: fpu sse2 {extra}\nbogomips\t: {mhz}\n\nprocessor\t: 1\n"
             "cpu MHz\t\t: 1.0\n")
    fake = tmp_path / "cpuinfo"

    def seen(mhz: str, extra: str) -> str:
        fake.write_text(block.format(mhz=mhz, extra=extra))
        return inputs._cpu_now(str(fake))

    assert seen("2994.1", "avx2") == seen("3100.7", "avx2")  # the clock moves
    assert seen("2994.1", "avx2") != seen("2994.1", "avx512f")  # the features do not
    assert inputs._cpu_now("/proc/cpuinfo") not in (inputs.ABSENT, seen("1", "x"))


def test_an_unknown_kind_is_a_change() -> None:
    assert inputs.changed([("future-kind", "x", "y")]) is not None


# --- the property: a warm run equals a run without the cache ----------------------------------

class Runs:
    """`run`'s cache steps for one plan, and a compile that never sees the cache."""

    def __init__(self, tmp_path: Path) -> None:
        self.cache = ProgramCache(tmp_path / "cache", io.StringIO())
        self.hits = 0

    def _fresh_process(self) -> None:
        reader.clear_cache()  # each run is a process of its own: nothing kept in memory
        symbols._SYMS.clear()
        symbols._DEMANGLED.clear()

    def warm(self, plan: str, sets: list[str]) -> RenderedProgram:
        self._fresh_process()
        path = plan_path(plan)
        source = read_plan_bytes(path)
        key = rc.run_key(path, source, sets, [], None, False)
        hit = rc.lookup(self.cache, key)
        if hit is not None:
            self.hits += 1
            return hit.program
        with inputs.recording() as log:
            _plan, resolved, program = compile_plan(path, _sets(sets), source=source)
        rc.store(self.cache, key, log, rc.CompiledRun(program, "", (), False, "p", ""))
        return program

    def fresh(self, plan: str, sets: list[str]) -> RenderedProgram:
        self._fresh_process()
        return compile_plan(plan_path(plan), _sets(sets))[2]


def _sets(sets: list[str]) -> dict[str, str]:
    return dict(s.split("=", 1) for s in sets)


def _plan(directory: Path, targets: str, name: str = "p.yaml") -> str:
    """A plan with the targets given (YAML flow mapping entries), one probe each."""
    names = [t.split(":", 1)[0].strip() for t in targets.split(";")]
    tlines = "".join(f"  {t.strip()}\n" for t in targets.split(";"))
    plines = "".join(f"  h{n}: {{usdt: {n}:simple:hit, args: [{{name: i}}]}}\n" for n in names)
    olines = "".join(f"  - {{print: h{n}, fields: [i]}}\n" for n in names)
    path = directory / name
    path.write_text(f"planrunner: 1\nname: p\nparams: {{n: {{type: int, default: 1}}}}\n"
                    f"targets:\n{tlines}probes:\n{plines}outputs:\n{olines}")
    return str(path)


def _copy(src: str, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".new")
    shutil.copy(BUILD / src, tmp)
    os.replace(tmp, dst)  # another inode, as an install does


def _rewrite_in_place_same_size_and_mtime(f: Path) -> None:
    st = f.stat()
    data = bytearray(f.read_bytes())
    with open(f, "r+b") as fh:  # one byte of padding at the end: same size, same inode
        fh.seek(len(data) - 1)
        fh.write(bytes([data[-1] ^ 0]))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    if not (BUILD / "simple_pie").exists() or not (BUILD / "simple_nopie").exists():
        pytest.skip("fixtures not built (make -C tests/fixtures/elf)")
    x = tmp_path / "x"
    for d in ("x", "x/opt", "x/bin", "x/patha", "x/pathb", "x/lib1", "x/lib2"):
        (tmp_path / d).mkdir()
    shutil.copy(BUILD / "simple_pie", x / "simple")
    shutil.copy(BUILD / "simple_pie", x / "bin" / "ver1")
    shutil.copy(BUILD / "simple_nopie", x / "bin" / "ver2")
    os.symlink("ver1", x / "bin" / "app")
    shutil.copy(BUILD / "simple_pie", x / "pathb" / "prsimple")
    monkeypatch.setenv("PATH", f"{x / 'patha'}:{x / 'pathb'}:{os.environ.get('PATH', '')}")
    monkeypatch.chdir(tmp_path)
    return {"x": x}


def _retarget(link: Path, to: str) -> None:
    tmp = link.with_name(link.name + ".new")
    os.symlink(to, tmp)
    os.replace(tmp, link)


CASES: dict[str, tuple[str, Callable[[Path, pytest.MonkeyPatch], None], bool]] = {
    # name: (targets, the change, whether it changes the program)
    "target replaced": ("a: {binary: x/simple}",
                        lambda x, _m: _copy("simple_nopie", x / "simple"), True),
    "target rewritten in place, same size and mtime": (
        "a: {binary: x/simple}",
        lambda x, _m: _rewrite_in_place_same_size_and_mtime(x / "simple"), False),
    "optional target appears": (
        "a: {binary: x/simple}; b: {binary: x/opt/simple, optional: true}",
        lambda x, _m: _copy("simple_nopie", x / "opt" / "simple"), True),
    "symlink retargeted": ("a: {binary: x/bin/app}",
                           lambda x, _m: _retarget(x / "bin" / "app", "ver2"), True),
    "PATH entry added before the found one": (
        "a: {binary: prsimple}",
        lambda x, _m: _copy("simple_nopie", x / "patha" / "prsimple"), True),
    "found program removed from PATH, a later one stands": (
        "a: {binary: prsimple}",
        lambda x, _m: (_copy("simple_nopie", x / "patha" / "prsimple"),
                       os.unlink(x / "pathb" / "prsimple")) and None, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_warm_run_compiles_what_a_run_without_the_cache_does(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    targets, change, moves = CASES[case]
    x = _setup(tmp_path, monkeypatch)["x"]
    if case == "found program removed from PATH, a later one stands":
        _copy("simple_pie", x / "patha" / "prsimple")  # first found in patha, then...
        change = lambda x, _m: (_copy("simple_nopie", x / "pathb" / "prsimple"),  # noqa: E731
                                os.unlink(x / "patha" / "prsimple")) and None
    plan = _plan(tmp_path, targets)
    runs = Runs(tmp_path)
    before = runs.warm(plan, [])
    assert runs.warm(plan, []) == before and runs.hits == 1  # unchanged: served
    change(x, monkeypatch)
    fresh = runs.fresh(plan, [])
    assert runs.warm(plan, []) == fresh
    assert runs.hits == 1, "a changed input was served from the cache"
    if moves:
        assert fresh != before  # the change matters: the case can fail
    assert runs.warm(plan, []) == fresh and runs.hits == 2  # stored again


def test_an_optional_target_that_disappears_is_left_out_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = _setup(tmp_path, monkeypatch)["x"]
    shutil.copy(BUILD / "simple_pie", x / "opt" / "simple")
    plan = _plan(tmp_path, "a: {binary: x/simple}; b: {binary: x/opt/simple, optional: true}")
    runs = Runs(tmp_path)
    before = runs.warm(plan, [])
    os.unlink(x / "opt" / "simple")
    fresh = runs.fresh(plan, [])
    assert fresh != before and runs.warm(plan, []) == fresh and runs.hits == 0


def test_plan_bytes_sets_and_the_environment_read_are_inputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = _setup(tmp_path, monkeypatch)["x"]
    plan = _plan(tmp_path, "a: {binary: x/simple}")
    runs = Runs(tmp_path)
    runs.warm(plan, [])
    # --set: another key
    assert runs.warm(plan, ["n=2"]) == runs.fresh(plan, ["n=2"]) and runs.hits == 0
    # the plan's bytes: now another target
    Path(plan).write_text(Path(plan).read_text().replace("x/simple", "x/bin/ver2"))
    assert runs.warm(plan, []) == runs.fresh(plan, []) and runs.hits == 0
    # a variable resolve reads (LD_LIBRARY_PATH, for a library by name)
    for d in ("lib1", "lib2"):
        shutil.copy(BUILD / ("simple_pie" if d == "lib1" else "simple_nopie"),
                    x / d / "libprsimple.so.1")
    lib_plan = _plan(tmp_path, "a: {binary: libprsimple.so.1}", "lib.yaml")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(x / "lib1"))
    before = runs.warm(lib_plan, [])
    monkeypatch.setenv("LD_LIBRARY_PATH", str(x / "lib2"))
    fresh = runs.fresh(lib_plan, [])
    assert fresh != before and runs.warm(lib_plan, []) == fresh and runs.hits == 0


def test_a_library_plan_found_by_planrunner_path(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _setup(tmp_path, monkeypatch)
    first, second = tmp_path / "lib_a", tmp_path / "lib_b"
    first.mkdir()
    second.mkdir()
    _plan(second, "a: {binary: x/simple}", "prplan.yaml")
    monkeypatch.setenv("PLANRUNNER_PATH", f"{first}:{second}")
    runs = Runs(tmp_path)
    before = runs.warm("prplan", [])
    _plan(first, "a: {binary: x/bin/ver2}", "prplan.yaml")  # earlier on the path
    fresh = runs.fresh("prplan", [])
    assert fresh != before and runs.warm("prplan", []) == fresh and runs.hits == 0


def test_a_binary_replaced_during_the_compile_is_never_stored_as_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolve read the old file; it is replaced (by rename, or in place at the same size
    with its mtime put back) before the compile ends: the entry must not pair the old
    file's sites with the new file's fingerprint."""
    import planrunner.pipeline as pipeline

    x = _setup(tmp_path, monkeypatch)["x"]
    plan = _plan(tmp_path, "a: {binary: x/simple}")
    real_render = pipeline.render
    for replace in (lambda: _copy("simple_nopie", x / "simple"),
                    lambda: _rewrite_in_place_same_size_and_mtime(x / "simple")):
        runs = Runs(tmp_path)

        def render_then_replace(resolved, plan_only=False, replace=replace):  # type: ignore[no-untyped-def]
            replace()
            return real_render(resolved, plan_only)

        monkeypatch.setattr(pipeline, "render", render_then_replace)
        runs.warm(plan, [])
        monkeypatch.setattr(pipeline, "render", real_render)
        fresh = runs.fresh(plan, [])
        assert runs.warm(plan, []) == fresh and runs.hits == 0
        shutil.rmtree(tmp_path / "cache")


def test_resolution_declares_what_it_looked_at(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    x = _setup(tmp_path, monkeypatch)["x"]
    with inputs.recording() as log:
        assert resolve_target("prsimple") == str(x / "pathb" / "prsimple")
        assert resolve_target(str(x / "bin" / "app")) == str(x / "bin" / "ver1")
    seen = {(k, p) for k, p, _f in log.inputs()}
    assert ("stat", str(x / "patha" / "prsimple")) in seen  # the absence before it
    assert ("env", "PATH") in seen
    assert ("realpath", str(x / "bin" / "app")) in seen


# --- nothing read goes undeclared ---------------------------------------------------------------

_SEEN: list[tuple[str, str]] = []
_WATCHING: list[bool] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    """A test's check only: what the interpreter saw the compile open or list."""
    if not _WATCHING or event not in ("open", "os.listdir", "os.scandir") or not args:
        return
    if not isinstance(args[0], (str, bytes)):
        return
    import sys

    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller.startswith("importlib") or caller == "zipimport":
        return
    mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
    if event == "open" and any(c in mode for c in "wax+"):
        return
    _SEEN.append((event, os.path.abspath(os.fsdecode(args[0]))))


def test_every_file_the_compile_opens_or_lists_is_declared(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths, names on PATH, libraries, uprobes with symbols, a tracepoint: what the
    interpreter sees opened is in the declared list (but the plan, in the key, and the
    code: planrunner's templates and schema, in the key's code identity)."""
    import sys

    x = _setup(tmp_path, monkeypatch)["x"]
    if not os.path.isdir("/sys/kernel/tracing/events/sched") and \
            not os.path.isdir("/sys/kernel/debug/tracing/events/sched"):
        pytest.skip("no tracefs here: the tracepoint cannot resolve")
    plan = tmp_path / "all.yaml"
    plan.write_text(f"""planrunner: 1
name: all
targets:
  a: {{binary: {x / 'bin' / 'app'}}}
  b: {{binary: prsimple}}
  c: {{binary: {x / 'opt' / 'none'}, optional: true}}
probes:
  h: {{usdt: a:simple:hit, args: [{{name: i}}]}}
  u: {{uprobe: b:main}}
  t: {{tracepoint: sched:sched_process_exec}}
outputs:
  - {{print: h, fields: [i]}}
  - {{count: u}}
  - {{print: t, fields: [filename]}}
""")
    if not _WATCHING:
        sys.addaudithook(_audit)  # cannot be removed: idle outside _WATCHING
    reader.clear_cache()
    symbols._SYMS.clear()
    _SEEN.clear()
    source = plan.read_bytes()  # as `run` reads it, for the key
    _WATCHING.append(True)
    try:
        with inputs.recording() as log:
            compile_plan(str(plan), {}, source=source)
    finally:
        _WATCHING.clear()
    declared = {p for _k, p, _f in log.inputs()}
    root = Path(rc.__file__).resolve().parents[1]
    undeclared = {p for _e, p in _SEEN
                  if p not in declared and not p.startswith(str(root))}
    assert undeclared == set()
    opened = {p for _e, p in _SEEN}
    assert {str(x / "bin" / "ver1"), str(x / "pathb" / "prsimple")} <= opened  # it sees them
    assert ("stat", str(x / "opt" / "none")) in {(k, p) for k, p, _f in log.inputs()}
