"""`planrunner new`: starter plans written as a user would (cli.main, and the CLI as a
subprocess for `validate`), which validate as written, in YAML and TOML."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from planrunner.cli import main
from planrunner.tracefs import find_root

BUILD = Path(__file__).resolve().parents[1] / "fixtures" / "elf" / "build"
POSTGRES = "/usr/lib/postgresql/15/bin/postgres"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planrunner", "validate", str(path)],
                          capture_output=True, text=True)


def _needs(path: str) -> None:
    if not Path(path).exists():
        pytest.skip(f"{path} is not installed")


def test_fixture_binary_yaml_exactly() -> None:
    demo = BUILD / "demo"
    _needs(str(demo))
    code, out, err = cli("new", str(demo))
    assert (code, err) == (0, "")
    ptr = "a pointer or a 64-bit count; `type: string` if it is a char *"
    starter = "(a starter plan: name the arguments, add filters and aggregations)"
    assert out == f"""\
# A starter plan for {demo}, written by `planrunner new {demo}`.
# Check it: `planrunner validate FILE`; run it: `planrunner run FILE` (--pid PID, -c 'CMD').
# The plan format (probes, args and their types, where, outputs): docs/plan-format.md
# in planrunner's sources; `planrunner schema` prints the JSON Schema.
planrunner: 1
name: "demo-starter"
description: "USDT probes of {demo} {starter}"

targets:
  demo: {{binary: "{demo}"}}

probes:
  request__start:
    usdt: "demo:demo:request__start"
    args:
      - {{type: pointer}}   # arg1: 8 unsigned bytes, 8@%rdi: {ptr}
      - {{type: pointer}}   # arg2: 8 unsigned bytes, 8@(%rax,%r12,8): {ptr}
  request__done:
    usdt: "demo:demo:request__done"
    args:
      - {{type: pointer}}   # arg1: 8 unsigned bytes, 8@%rbp: {ptr}
      - {{type: int32}}     # arg2: 4 signed bytes, -4@(%rax,%r12,4)

outputs:
  - print: request__start
    fields: [arg1, arg2]
  - print: request__done
    fields: [arg1, arg2]
"""


@pytest.mark.parametrize("binary", [
    "python3.11", POSTGRES, str(BUILD / "demo"), str(BUILD / "operands_O2"),
    str(BUILD / "libprobe.so")])
@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_written_plan_validates(binary: str, suffix: str, tmp_path: Path) -> None:
    if binary.startswith("/"):
        _needs(binary)
    elif not Path("/usr/bin/python3.11").exists():
        pytest.skip("no python3.11")
    plan = tmp_path / f"starter{suffix}"
    code, out, err = cli("new", binary, "-o", str(plan))
    assert (code, out) == (0, "")
    assert err.startswith(f"planrunner: wrote {plan} (")
    assert plan.read_text().startswith("# A starter plan for ")
    proc = validate(plan)
    # no error, and no warning about the types it declared (only the runtime reminders:
    # python:function__entry fires only under a profile hook)
    assert proc.returncode == 0, proc.stderr
    assert ": error:" not in proc.stderr and "in the probe's note" not in proc.stderr
    assert proc.stdout.startswith(f"{plan}: ok\n")


def test_postgres_is_capped_with_a_comment(tmp_path: Path) -> None:
    _needs(POSTGRES)
    code, out, _ = cli("new", POSTGRES, "--toml")
    assert code == 0 and out.count("[[outputs]]") == 20
    tail = out.splitlines()[-3:]
    assert tail[0].startswith("# ") and tail[0].endswith(
        "more probes of /usr/lib/postgresql/15/bin/postgres are not in this plan "
        "(the first 20 are).")
    assert tail[2] == (f"# `planrunner new {POSTGRES} PROBE...` writes a plan for the ones "
                       "you name.")


def test_chosen_probes_in_toml_with_options_anywhere(tmp_path: Path) -> None:
    _needs("/usr/bin/python3.11")
    code, out, _ = cli("new", "python3.11", "--toml", "function__entry", "python:gc__*")
    assert code == 0
    assert [ln for ln in out.splitlines() if ln.startswith("[probes.")] == [
        "[probes.function__entry]", "[probes.gc__done]", "[probes.gc__start]"]
    # python's arguments are named and typed from the table of known providers
    assert '  { name = "line", type = "int32" },  # arg3: 4 signed bytes, -4@%eax' in \
        out.splitlines()


def test_unknown_probe_suggests() -> None:
    _needs("/usr/bin/python3.11")
    code, out, err = cli("new", "python3.11", "function__entyr")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: no USDT probe 'function__entyr' in /usr/bin/python3.11",
        "  hint: did you mean 'function__entry'?",
        "  hint: `planrunner list /usr/bin/python3.11` shows its 8 probes"]


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    demo = str(BUILD / "demo")
    _needs(demo)
    plan = tmp_path / "p.yaml"
    plan.write_text("mine\n")
    code, out, err = cli("new", demo, "-o", str(plan))
    assert (code, out, plan.read_text()) == (2, "", "mine\n")
    assert err == (f"error: {plan} exists; not overwritten\n"
                   "  hint: pass --force to replace it, or choose another -o FILE\n")
    code, _, _ = cli("new", demo, "-o", str(plan), "--force")
    assert code == 0 and plan.read_text().startswith("# A starter plan")


@pytest.mark.skipif(find_root() is None, reason="tracefs is not mounted")
@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_tracepoint_starter_validates(suffix: str, tmp_path: Path) -> None:
    plan = tmp_path / f"tp{suffix}"
    code, _, _ = cli("new", "tracepoint:sched:sched_process_exec",
                     "tracepoint:syscalls:sys_enter_openat", "-o", str(plan))
    text = plan.read_text()
    assert code == 0
    assert "fields: [filename, old_pid]" in text or 'fields = ["filename", "old_pid"]' in text
    proc = validate(plan)
    assert proc.returncode == 0, proc.stderr
    assert "  sys_enter_openat: tracepoint syscalls:sys_enter_openat" in proc.stdout


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_uprobe_starter_validates(suffix: str, tmp_path: Path) -> None:
    plan = tmp_path / f"up{suffix}"
    code, _, _ = cli("new", "--uprobe", "c", "malloc", "free", "-o", str(plan))
    assert code == 0
    proc = validate(plan)
    assert proc.returncode == 0, proc.stderr
    assert "  malloc: uprobe in " in proc.stdout and "  free: uprobe in " in proc.stdout


def test_kernel_function_target_is_refused() -> None:
    code, out, err = cli("new", "kprobe:do_sys_openat2")
    assert (code, out) == (2, "")
    assert err.startswith("error: 'kprobe' probes (kernel functions) are not offered")
