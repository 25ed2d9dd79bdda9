"""`planrunner list --tracepoints` / `list 'tracepoint:CAT:EVENT'` end to end (cli.main
and a subprocess), tracefs parsing on fixed text, options in any position, and the
answer to kernel function probes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planrunner.cli import main
from planrunner.tracefs import find_root, has_kprobes, parse_format

ROOT = find_root()
needs_tracefs = pytest.mark.skipif(ROOT is None, reason="tracefs is not mounted")

FORMAT = """name: sched_process_exec
ID: 365
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;
\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;
\tfield:char comm[16];\toffset:16;\tsize:16;\tsigned:0;
\tfield:const char * name;\toffset:32;\tsize:8;\tsigned:0;

print fmt: "filename=%s pid=%d", __get_str(filename), REC->pid
"""


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_parse_format_types_names_and_strings() -> None:
    fmt = parse_format(FORMAT)
    assert (fmt.name, fmt.id) == ("sched_process_exec", 365)
    assert [f.name for f in fmt.fields if f.common] == ["common_type", "common_pid"]
    got = [(f.name, f.ctype, f.offset, f.size, f.signed, f.is_string, f.array_len)
           for f in fmt.own_fields]
    assert got == [("filename", "__data_loc char[]", 8, 4, False, True, 0),
                   ("pid", "pid_t", 12, 4, True, False, 0),
                   ("comm", "char[16]", 16, 16, False, True, 16),
                   ("name", "const char *", 32, 8, False, False, 0)]


def test_find_root_reads_proc_mounts(tmp_path: Path) -> None:
    (tmp_path / "tr" / "events").mkdir(parents=True)
    (tmp_path / "dbg" / "tracing" / "events").mkdir(parents=True)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"proc /proc proc rw 0 0\nnodev {tmp_path}/tr tracefs rw 0 0\n")
    assert find_root(str(mounts), candidates=()) == f"{tmp_path}/tr"
    mounts.write_text(f"debugfs {tmp_path}/dbg debugfs rw 0 0\n")
    assert find_root(str(mounts), candidates=()) == f"{tmp_path}/dbg/tracing"
    mounts.write_text("proc /proc proc rw 0 0\n")
    assert find_root(str(mounts), candidates=()) is None


@needs_tracefs
def test_list_tracepoints_glob() -> None:
    code, out, err = cli("list", "--tracepoints", "sched:sched_process_e*")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["tracepoint:sched:sched_process_exec",
                                "tracepoint:sched:sched_process_exit"]


@needs_tracefs
def test_tracepoint_prefix_on_plain_list_and_verbose_fields() -> None:
    code, out, err = cli("list", "tracepoint:sched:sched_process_exec", "-v")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["tracepoint:sched:sched_process_exec",
                                "    __data_loc char[] filename;", "    pid_t pid;",
                                "    pid_t old_pid;"]
    code, out, _ = cli("list", "-vv", "-t", "syscalls:sys_enter_openat")
    assert code == 0
    assert "    const char * filename;  offset 24, size 8, unsigned" in out.splitlines()


@needs_tracefs
def test_tracepoints_as_json() -> None:
    code, out, _ = cli("list", "-t", "--format", "json", "sched:sched_process_exec")
    doc = json.loads(out)
    assert code == 0 and [t["event"] for t in doc["tracepoints"]] == ["sched_process_exec"]
    fields = doc["tracepoints"][0]["fields"]
    assert fields[0] == {"name": "filename", "type": "__data_loc char[]",
                         "declaration": "__data_loc char[] filename", "offset": 8, "size": 4,
                         "signed": False, "string": True}
    assert [f["name"] for f in fields] == ["filename", "pid", "old_pid"]


@needs_tracefs
def test_no_match_names_a_close_category() -> None:
    code, out, err = cli("list", "tracepoint:sycalls:*")
    assert (code, out) == (0, "")
    assert err == ("planrunner: no tracepoints matching 'sycalls:*'\n"
                   "  hint: no category 'sycalls': did you mean 'syscalls'?\n")


def test_options_in_any_position_subprocess() -> None:
    """`planrunner list python3.11 -vv function__entry` as typed in a shell."""
    python = "/usr/bin/python3.11"
    if not Path(python).exists():
        pytest.skip("no /usr/bin/python3.11")
    proc = subprocess.run([sys.executable, "-m", "planrunner", "list", "python3.11", "-vv",
                           "function__entry"], capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (0, "")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{python} python:function__entry  1 location, 3 args")
    assert lines[1].startswith("  location 1: pc 0x")
    assert lines[2:] == ["    arg 1: 8 unsigned bytes @ %rbp", "    arg 2: 8 unsigned bytes @ %r12",
                         "    arg 3: 4 signed bytes @ %eax"]
    code, out, _ = cli("list", "python3.11", "gc__start", "--format", "json")
    assert code == 0 and [p["name"] for p in json.loads(out)["probes"]] == ["gc__start"]


@pytest.mark.parametrize("kind", ["kprobe", "kretprobe", "fentry"])
def test_kernel_function_probes_are_refused_with_why(kind: str) -> None:
    code, out, err = cli("list", f"{kind}:do_sys_openat2")
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert lines[0] == (f"error: '{kind}' probes (kernel functions) are not offered: "
                        "planrunner traces user space (usdt, uprobe, uretprobe) and "
                        "kernel tracepoints")
    no_kprobes = ("  hint: this kernel has no kprobes either (no kprobe_events in tracefs: "
                  "CONFIG_KPROBE_EVENTS is off)")
    assert (no_kprobes in lines) == (not has_kprobes(ROOT))
    assert "did you mean" not in err


@pytest.mark.parametrize("kind", ["kprobe", "kretprobe", "fentry"])
def test_kernel_function_probe_in_a_plan(kind: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("k.yaml").write_text(f"planrunner: 1\nprobes:\n  open:\n    {kind}: do_sys_openat2\n"
                              "outputs:\n  - print: open\n")
    code, out, err = cli("validate", "k.yaml")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[:3] == [
        f"k.yaml:4:5: error: '{kind}' probes (kernel functions) are not offered: planrunner "
        "traces user space (usdt, uprobe, uretprobe) and kernel tracepoints",
        f"      {kind}: do_sys_openat2", "      " + "^" + "~" * (len(kind) - 1)]
    assert lines[-1] == "  hint: for a function of a program or library use uprobe: TARGET:SYMBOL"
    assert "did you mean" not in err and "exactly one of" not in err


@needs_tracefs
def test_usdt_targets_and_tracepoints_on_one_line() -> None:
    if not Path("/usr/bin/python3.11").exists():
        pytest.skip("no /usr/bin/python3.11")
    code, out, err = cli("list", "python3.11", "gc__start", "tracepoint:sched:sched_process_exe*")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["/usr/bin/python3.11 python:gc__start",
                                "tracepoint:sched:sched_process_exec"]
    code, out, _ = cli("list", "--format", "json", "python3.11", "gc__start",
                       "tracepoint:sched:sched_process_exec")
    doc = json.loads(out)
    assert [p["name"] for p in doc["probes"]] == ["gc__start"]
    assert [t["event"] for t in doc["tracepoints"]] == ["sched_process_exec"]


def test_tracepoints_with_pid_is_a_usage_error() -> None:
    code, _, err = cli("list", "--tracepoints", "--pid", "1")
    assert code == 2 and "--pid applies to USDT probes, not to --tracepoints" in err
