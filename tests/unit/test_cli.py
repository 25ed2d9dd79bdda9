"""The CLI as a function: exit codes and what goes to which stream."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planrunner.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO_BIN = "tests/fixtures/elf/bin/demo"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_usage_error_is_exit_2() -> None:
    code, _out, _err = run("run")
    assert code == 2


def test_render_prints_c_and_validate_summarises() -> None:
    plan = "tests/golden/span_latency/plan.yaml"
    code, out, err = run("render", plan)
    assert code == 0 and err == ""
    assert "int pr_start_s0(struct pt_regs *ctx)" in out
    code, out, _err = run("validate", plan)
    assert code == 0
    assert "start: usdt in" in out and "request: span start -> done" in out


def test_validate_reports_every_error_with_location(tmp_path: Path) -> None:
    plan = tmp_path / "bad.yaml"
    plan.write_text(f"""planrunner: 1
name: bad
targets:
  d: {{binary: {ROOT / DEMO_BIN}}}
probes:
  a: {{usdt: d:demo:request__strat}}
  b:
    usdt: d:demo:request__done
    where: arg3 > 0
outputs:
  - print: a
    fields: [pid]
  - print: b
    fields: [arg2]
""")
    code, out, err = run("validate", str(plan))
    assert code == 1 and out == ""
    assert f"{plan}:6:13: error: probe 'demo:request__strat' not found" in err
    assert "did you mean 'demo:request__start'?" in err
    assert (f"{plan}:9:12: error: 'arg3' does not exist: probe 'b' (demo:request__done in "
            f"{ROOT / DEMO_BIN}) has 2 arguments") in err


def test_arg_beyond_the_probe_is_an_error(tmp_path: Path) -> None:
    plan = tmp_path / "args.yaml"
    plan.write_text(f"""planrunner: 1
name: args
targets:
  d: {{binary: {ROOT / DEMO_BIN}}}
probes:
  a:
    usdt: d:demo:request__start
    args: [{{name: id}}, {{name: path, type: string}}, {{name: extra}}]
outputs:
  - print: a
    fields: [id]
""")
    code, _out, err = run("validate", str(plan))
    assert code == 1
    assert "declares argument 3, but demo:request__start has 2 arguments" in err


def test_unknown_set_param_is_usage_error() -> None:
    code, _out, err = run("validate", "tests/golden/span_latency/plan.yaml",
                          "--set", "threshhold=1ms")
    assert code == 2
    assert "threshold" in err


def test_list_json_matches_the_notes() -> None:
    code, out, _err = run("list", DEMO_BIN, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    text = json.dumps(doc)
    assert "request__start" in text and "request__done" in text


def test_show_and_plans_find_the_bundled_demo() -> None:
    code, out, _err = run("show", "sdt-demo")
    assert code == 0 and "name: sdt-demo" in out
    code, out, _err = run("plans")
    assert code == 0 and "sdt-demo" in out


def test_help_after_a_plan_lists_its_params(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "mysql-slow", "--help"], io.StringIO(), io.StringIO()) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: planrunner run ")
    assert "\nplan params of mysql-slow:\n  --set threshold=<duration>  report statements at " \
           "least this slow (default 10ms)\n" in out


def test_help_before_or_without_a_plan_is_plain(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["render", "-h"], ["validate", "-h", "mysql-slow"]):
        assert main(argv, io.StringIO(), io.StringIO()) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: planrunner {argv[0]} ") and "plan params" not in out


def test_validate_notes_a_name_shared_by_two_local_functions(tmp_path: Path) -> None:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("needs gcc and make to build the twins fixture")
    elf = ROOT / "tests" / "fixtures" / "elf"
    subprocess.run(["make", "-s", "-C", str(elf), f"OUT={tmp_path}", f"{tmp_path}/twins"],
                   check=True)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"planrunner: 1\nname: t\ntargets: {{t: {{binary: {tmp_path}/twins}}}}\n"
                    "probes: {h: {uprobe: t:helper}}\noutputs: [{count: h}]\n")
    code, out, err = run("validate", str(plan))
    assert code == 0, err
    assert "; 2 locations\n" in out
    assert re.search(r"note: 2 functions are named 'helper' \(at 0x[0-9a-f]+, 0x[0-9a-f]+\): "
                     r"probing each\n", out), out


def test_a_variable_sharing_a_functions_name_is_not_probed(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    (tmp_path / "a.c").write_text(
        "static volatile int twin = 1;\nint get_a(void) { return twin; }\n")
    (tmp_path / "b.c").write_text(
        "int get_a(void);\n"
        "static __attribute__((noipa)) int twin(int x) { return x + 1; }\n"
        "int main(void) { return twin(get_a()); }\n")
    subprocess.run(["gcc", "-O2", "-o", str(tmp_path / "t"), str(tmp_path / "a.c"),
                    str(tmp_path / "b.c")], check=True)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"planrunner: 1\nname: t\ntargets: {{t: {{binary: {tmp_path}/t}}}}\n"
                    "probes: {h: {uprobe: t:twin}}\noutputs: [{count: h}]\n")
    code, out, err = run("validate", str(plan))
    assert code == 0, err
    assert "; 1 location\n" in out and "note:" not in out


def test_render_plan_only_leaves_the_shared_helpers_out() -> None:
    code, full, _ = run("render", "tests/golden/span_latency/plan.yaml")
    assert code == 0
    code, out, _ = run("render", "tests/golden/span_latency/plan.yaml", "--plan-only")
    assert code == 0
    assert "static __always_inline int pr_skip" in full
    assert "static __always_inline int pr_skip" not in out
    assert "/* templates/runtime_helpers.h: shared by every plan, left out by --plan-only */" \
        in out
    # everything the plan itself adds is there, in the same order
    plan_part = full[full.index("struct pr_rec_0"):]
    assert out.endswith(plan_part)
    assert len(out) < len(full) // 2


@pytest.mark.parametrize("argv", [
    ["validate", "-h"], ["run", "mysql-slow", "--help"], ["run", "-h"], ["list", "-h"],
    ["render"], ["validate", "a.yaml", "extra"], ["run", "p.yaml", "-f", "xml"],
    ["run", "p.yaml", "--bogus"], ["list", "--bogus"], ["doctor", "-x"], ["schema", "x"],
    ["plans", "-h"], ["show"], ["validate", "--version"], ["validate", "p.yaml", "-n", "x"],
], ids=" ".join)
def test_the_parser_of_one_subcommand_parses_as_the_whole_one(argv: list[str]) -> None:
    """main() registers only the subcommand a command line starts with (build_parser):
    the result, the help and every usage error are those of the parser of all of them."""
    import contextlib

    from planrunner.cli import build_parser

    def parse(parser) -> tuple[object, str, str]:  # type: ignore[no-untyped-def]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                got: object = vars(parser.parse_args(argv))
            except SystemExit as exc:
                got = ("exit", exc.code)
        return got, out.getvalue(), err.getvalue()

    assert parse(build_parser(argv[0])) == parse(build_parser())


def test_a_process_ends_at_once_after_its_exit_functions() -> None:
    """run_and_exit ends by os._exit, skipping the interpreter's teardown (LLVM's too,
    where bcc compiled in the process; ~30 ms of a stop otherwise): the status, what was
    printed and the atexit functions (the dataclass cache is saved by one) are as after
    a normal exit; an object the teardown would finalize is not. A thread that is no
    daemon still gets the normal exit, which waits for it."""
    import subprocess
    import sys

    def run(thread: bool) -> subprocess.CompletedProcess[str]:
        code = ("import atexit, os, sys, threading, time\n"
                f"if {thread}: threading.Thread(target=lambda: (time.sleep(0.2), "
                "os.write(1, b'thread ended\\n'))).start()\n"
                "atexit.register(lambda: sys.stdout.write('exit functions ran\\n'))\n"
                "class Held:\n"
                "    def __del__(self): os.write(1, b'finalized\\n')\n"
                "held = Held()\n"
                "from planrunner.cli import run_and_exit\n"
                "run_and_exit(sys.argv[1:])\n")
        return subprocess.run([sys.executable, "-c", code, "validate", "/nonexistent.yaml"],
                              capture_output=True, text=True, timeout=60)

    fast, normal = run(thread=False), run(thread=True)
    assert fast.returncode == normal.returncode == 2
    assert "not found" in fast.stderr and fast.stderr == normal.stderr
    assert fast.stdout == "exit functions ran\n"
    assert normal.stdout.startswith("thread ended\nexit functions ran\n")


def test_a_ctrl_c_inside_a_class_creation_ends_with_130_and_no_traceback() -> None:
    """Python wraps an exception raised while a class is made (a dataclass field's
    __set_name__) in RuntimeError("Error calling __set_name__ ..."): a Ctrl-C landing
    there while planrunner imports must still end with 130 and no traceback, as any
    other early Ctrl-C does (test_stopping_startup caught it once in CI)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import planrunner.cli as cli\n"
            "class Named:\n"
            "    def __set_name__(self, owner, name): raise KeyboardInterrupt\n"
            "def main(argv):\n"
            "    class Made:\n"
            "        field = Named()\n"
            "cli.main = main\n"
            "cli.run_and_exit(sys.argv[1:])\n")
    done = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    other = subprocess.run([sys.executable, "-c", code.replace("KeyboardInterrupt",
                                                               "ValueError('x')")],
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "Error calling __set_name__" in other.stderr
