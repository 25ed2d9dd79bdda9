"""runtime/silence.py: what an empty or partial run says at exit, from what the session
knew (what showed something, what the process mapped, what the command ran, the
preflight gates), without the kernel. (The same against real processes:
tests/e2e/test_silence_e2e.py.)"""

from __future__ import annotations

import io
import os
from pathlib import Path

from planrunner.records import AggRow, AggSnapshot
from planrunner.render.layout import KeyLayout
from planrunner.render.model import AggregateOutput, AttachSite, RenderedProgram, TargetFile
from planrunner.runtime.child import Child
from planrunner.runtime.late_libraries import file_key
from planrunner.runtime.silence import Heard, explain
from planrunner.runtime.upkeep import Upkeep


class NullView:
    """Takes everything, keeps nothing."""

    def record(self, rec: object) -> None: ...
    def records(self, batch: object) -> None: ...
    def aggregate(self, snap: object) -> None: ...
    def table(self, snap: object) -> None: ...
    def lost(self, count: int, reason: str) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


PY = TargetFile("/bin/sh", "/bin/sh", None)  # any file that exists: its (dev, inode)
GATE = "CPython fires python:function__entry only while a profile or trace hook is set"


def _agg(name: str, probe: str) -> AggregateOutput:
    return AggregateOutput(name=name, probe=probe, kind="count", map_name=f"pr_{name}",
                           key=KeyLayout(), value_label="count", unit=None, every_ns=None,
                           top=None, lhist=None, map_size=10, lost_map=f"pr_{name}_lost")


def _program(gated: tuple[tuple[str, str], ...] = ()) -> RenderedProgram:
    sites = (AttachSite("uprobe", "pr_fn_0", "entry", 0, PY, file_offset=0x10),
             AttachSite("uprobe", "pr_fn_1", "ret", 0, PY, file_offset=0x20))
    return RenderedProgram("", sites, (), (_agg("calls", "entry"), _agg("rets", "ret")),
                           "p", gated=gated)


def _heard(*outputs: str) -> Heard:
    heard = Heard(NullView())
    for name in ("calls", "rets"):
        rows = (AggRow((), count=1),) if name in outputs else ()
        heard.aggregate(AggSnapshot(name, "count", "count", None, (), None, 0.0, rows))
    return heard


def _upkeep(pid: int, mapped: bool, looked: bool = True) -> Upkeep:
    upkeep = Upkeep(_program().sites, pid, "refctr", io.StringIO(), True)
    upkeep.looked = looked
    key = file_key(PY.path)
    assert key is not None
    upkeep.mapped_ever = {key} if mapped else set()
    return upkeep


def _child(path: str, exes: list[str]) -> Child:
    child = Child(4242, -1, None, path)
    child.exes = exes
    return child


def test_every_probe_heard_says_nothing() -> None:
    assert explain(_program(), _heard("calls", "rets"), None, 7, _upkeep(7, True)) == []


def test_a_partial_run_names_the_probe_and_why() -> None:
    """The probe mapped by --pid but silent is said so; the other showed rows."""
    lines = explain(_program(), _heard("rets"), None, 7, _upkeep(7, True))
    assert lines == ["probe entry recorded nothing: process 7 mapped /bin/sh but never "
                     "reached probe entry while traced (or `where:` dropped every event)\n"]


def test_a_gated_probe_says_what_starts_it() -> None:
    lines = explain(_program((("entry", GATE),)), _heard("rets"), None, 7,
                    _upkeep(7, True))
    assert lines == [f"probe entry recorded nothing: process 7 mapped /bin/sh, but {GATE}\n"]
    # system-wide: no process watched, the gate alone
    lines = explain(_program((("entry", GATE),)), _heard("rets"), None, None, None)
    assert lines == [f"probe entry recorded nothing: {GATE}\n"]


def test_a_command_that_ran_a_shim_names_it_and_what_it_execd(tmp_path: Path) -> None:
    shim = tmp_path / "python3.11"
    shim.write_text("#!/bin/sh\nexec /usr/bin/sleep 1\n")
    target = tmp_path / "python-with-notes"
    target.write_bytes(b"")
    child = _child(str(shim), [os.path.realpath("/bin/sh"), "/usr/bin/sleep"])
    prog = RenderedProgram("", (AttachSite("uprobe", "pr_fn_0", "call", 0,
                                           TargetFile(str(target), "/usr/bin/python3.11",
                                                      None),
                                           file_offset=0x10),),
                           (), (_agg("calls", "call"),), "p")
    lines = explain(prog, Heard(NullView()), child, None, _upkeep(4242, False))
    assert lines == [
        "no events: the command (process 4242) never mapped /usr/bin/python3.11, the "
        "binary of probe call\n",
        f"  the command ran {shim} (a script for /bin/sh), which exec'd /usr/bin/sleep\n"]


def test_a_command_gone_before_its_maps_were_read_says_so() -> None:
    lines = explain(_program(), _heard("rets"), _child("/usr/bin/env", []), None,
                    _upkeep(4242, False, looked=False))
    assert lines == ["probe entry recorded nothing: the command (process 4242) ended before "
                     "planrunner could read its maps (after its exec)\n",
                     "  the command ran /usr/bin/env\n"]


def test_a_command_that_ran_the_binary_itself_mapped_it_though_gone_before_a_look() -> None:
    """A short command on a loaded machine can end before its maps are read: having
    exec'd the probe's binary (a symlink to it, here) it mapped it all the same."""
    link = os.path.realpath("/bin/sh")
    for looked in (False, True):
        lines = explain(_program((("entry", GATE),)), _heard("rets"), _child(link, []),
                        None, _upkeep(4242, False, looked=looked))
        assert lines == [f"probe entry recorded nothing: the command (process 4242) mapped "
                         f"/bin/sh, but {GATE}\n"], looked


def test_an_empty_system_wide_run_says_no_process_reached_each_probe() -> None:
    lines = explain(_program(), _heard(), None, None, None)
    assert lines == [
        "no events:\n",
        "probe entry recorded nothing: no traced process reached probe entry while it was "
        "attached (or `where:` dropped every event)\n",
        "probe ret recorded nothing: no traced process reached probe ret while it was "
        "attached (or `where:` dropped every event)\n"]


def test_an_env_script_names_its_interpreter_found_on_path(tmp_path: Path) -> None:
    """pyenv's shims start `#!/usr/bin/env bash`: the interpreter is bash, not env."""
    from planrunner.runtime.silence import _interpreter

    shim = tmp_path / "python3.11"
    shim.write_text("#!/usr/bin/env bash\nexec python3.11 \"$@\"\n")
    found = _interpreter(str(shim))
    assert found is not None and os.path.basename(found) == "bash"


def test_an_empty_span_output_is_explained_through_its_begin_and_end() -> None:
    """python-latency without a profile hook: the span `call` has no sites of its own;
    its output stays empty because its begin is gated, and that must be said (it was
    silent: only probes with sites of their own were explained)."""
    sites = _program().sites
    span = RenderedProgram("", sites, (), (_agg("latency", "call"),), "p",
                           gated=(("entry", GATE),), span_sides=(("call", "entry", "ret"),))
    heard = Heard(NullView())
    heard.aggregate(AggSnapshot("latency", "count", "count", None, (), None, 0.0, ()))
    lines = explain(span, heard, None, 7, _upkeep(7, True))
    assert lines == [f"no events: process 7 mapped /bin/sh, but {GATE}\n"]
    # no gate: the span is named, with both of its sides
    plain = RenderedProgram("", sites, (), (_agg("latency", "call"),), "p",
                            span_sides=(("call", "entry", "ret"),))
    assert explain(plain, heard, None, None, None) == [
        "no events: no traced process reached probe call while it was attached "
        "(or `where:` dropped every event)\n"]
    rows = Heard(NullView())
    rows.aggregate(AggSnapshot("latency", "count", "count", None, (), None, 0.0,
                               (AggRow((), count=1),)))
    assert explain(span, rows, None, 7, _upkeep(7, True)) == []


def test_a_command_that_ran_another_program_says_its_children_are_not_followed(
        tmp_path: Path) -> None:
    """-c 'sh -c "…; app"' without --follow-children: the shell never maps the target,
    its child does but is not traced; the reason names the option (only when it was not
    given)."""
    target = tmp_path / "app"
    target.write_bytes(b"")
    sh = os.path.realpath("/bin/sh")
    prog = RenderedProgram("", (AttachSite("uprobe", "pr_fn_0", "call", 0,
                                           TargetFile(str(target), str(target), None),
                                           file_offset=0x10),),
                           (), (_agg("calls", "call"),), "p")
    lines = explain(prog, Heard(NullView()), _child(sh, [sh]), None, _upkeep(4242, False),
                    children_traced=False)
    assert lines == [
        f"no events: the command (process 4242) never mapped {target}, the binary of "
        "probe call\n",
        f"  the command ran {sh}\n",
        "  the processes it started were not traced: add --follow-children to trace "
        "them\n"]
    lines = explain(prog, Heard(NullView()), _child(sh, [sh]), None, _upkeep(4242, False),
                    children_traced=True)
    assert len(lines) == 2


# --- many silent probes: one line per reason ----------------------------------------


def _many(n: int, other: int = 0) -> RenderedProgram:
    """`n` probes on PY and `other` on another file, each counted."""
    sh = TargetFile("/bin/sh", "/bin/sh", None)
    env = TargetFile("/usr/bin/env", "/usr/bin/env", None)
    sites = tuple(AttachSite("uprobe", f"pr_fn_{i}", f"p{i}", 0, sh, file_offset=0x10 + i)
                  for i in range(n))
    sites += tuple(AttachSite("uprobe", f"pr_fn_o{i}", f"o{i}", 0, env, file_offset=0x10 + i)
                   for i in range(other))
    aggs = tuple(_agg(f"c_{s.probe}", s.probe) for s in sites)
    return RenderedProgram("", sites, (), aggs, "p")


def test_more_than_ten_probes_silent_for_one_reason_are_one_line() -> None:
    lines = explain(_many(3000), Heard(NullView()), None, None, None)
    assert lines == [
        "no events:\n",
        "3000 probes recorded nothing (p0, p1, p2, p3, p4 and 2995 more): no traced "
        "process reached these probes while they were attached (or `where:` dropped "
        "every event)\n"]


def test_ten_probes_silent_for_one_reason_are_each_named() -> None:
    lines = explain(_many(10), Heard(NullView()), None, None, None)
    assert lines[0] == "no events:\n" and len(lines) == 11
    assert lines[10] == ("probe p9 recorded nothing: no traced process reached probe p9 "
                         "while it was attached (or `where:` dropped every event)\n")


def test_probes_are_grouped_by_their_reasons_in_plan_order() -> None:
    """With a process watched, the probes of the file it mapped and those of the file it
    never mapped have different reasons: two groups, or a group and single lines."""
    program = _many(12, other=3)
    upkeep = Upkeep(program.sites, 7, "refctr", io.StringIO(), True)
    upkeep.looked = True
    key = file_key("/bin/sh")
    assert key is not None
    upkeep.mapped_ever = {key}
    heard = Heard(NullView())
    heard.aggregate(AggSnapshot("c_o2", "count", "count", None, (), None, 0.0,
                                (AggRow((), count=1),)))
    lines = explain(program, heard, None, 7, upkeep)
    assert lines == [
        "12 probes recorded nothing (p0, p1, p2, p3, p4 and 7 more): process 7 mapped "
        "/bin/sh but never reached these probes while traced (or `where:` dropped every "
        "event)\n",
        "probe o0 recorded nothing: process 7 never mapped /usr/bin/env, the binary of "
        "probe o0\n",
        "probe o1 recorded nothing: process 7 never mapped /usr/bin/env, the binary of "
        "probe o1\n"]
