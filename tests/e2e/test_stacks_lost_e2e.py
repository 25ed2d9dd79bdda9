"""Stacks that cannot be unwound are said so (issue 23 item 14): fx_stack (no frame
pointers, tests/fixtures/stacks) copied with its `.eh_frame` zeroed, so that the CFI
walk cannot take one step from `inner`, where the probe fires. A print record shows
the probe's frame then `[stack lost]` (text), an aggregation keyed by the stack shows
the same, and the count at exit names the module; the intact build of the same
program, run the same way, unwinds five frames deep and reports nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from tests.e2e.conftest import run_planrunner, write_plan
from tests.unit.stacks_fixture import CHAIN, missing_toolchain, session_build


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    why = missing_toolchain()
    if why:
        pytest.skip(why)
    return session_build(tmp_path_factory)


def _corrupt_copy(build: Path, into: Path) -> Path:
    """fx_stack and its libfx.so copied into `into`, fx_stack's .eh_frame zeroed (every
    CIE and FDE: a zero length is the section's terminator). The program still runs:
    nothing in it unwinds."""
    into.mkdir()
    shutil.copy2(build / "libfx.so", into / "libfx.so")
    binary = into / "fx_stack"
    shutil.copy2(build / "fx_stack", binary)
    with open(binary, "rb") as fh:
        eh = ELFFile(fh).get_section_by_name(".eh_frame")
        offset, size = eh["sh_offset"], eh["sh_size"]
    assert size > 64
    with open(binary, "r+b") as fh:
        fh.seek(offset)
        fh.write(bytes(size))
    return binary


def _run(tmp_path: Path, binary: Path) -> tuple[str, str]:
    plan = write_plan(tmp_path, f"""
planrunner: 1
targets:
  fx: {{binary: {binary}}}
stack: {{unwind: dwarf}}
probes:
  inner: {{uprobe: fx:inner}}
outputs:
  - print: inner
    fields: [pid, ustack]
  - count: inner
    by: [ustack]
""", name=f"plan-{binary.parent.name}.yaml")
    # FX_LINGER_MS: the process is still there when its record is read
    res = run_planrunner(["run", plan, "-c",
                          f"env FX_LINGER_MS=400 {binary} {tmp_path / 'dump'}"])
    assert res.returncode == 0, res.stderr
    return res.stdout, res.stderr


def test_a_stack_without_cfi_is_lost_and_counted(builds: dict[str, Path],
                                                 tmp_path: Path) -> None:
    binary = _corrupt_copy(builds["nofp_nopie"], tmp_path / "corrupt")
    out, err = _run(tmp_path, binary)
    lines = out.splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() == "[stack lost]"]
    assert len(marks) == 2, out  # the print record, and the aggregation's row
    for i in marks:  # each after the one frame it has: the probe's, in inner
        assert lines[i - 1].strip().startswith("inner+0x0 ["), out
        assert "middle" not in lines[i - 2], out
    assert (f"2 stacks could not be unwound past the probe's frame (2 in {binary})"
            in err), err


def test_the_intact_build_unwinds_and_reports_nothing(builds: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """The control: the same run over the build the copy was made from."""
    out, err = _run(tmp_path, builds["nofp_nopie"] / "fx_stack")
    assert "[stack lost]" not in out, out
    assert "could not be unwound" not in err, err
    frames = [line.strip().split("+")[0] for line in out.splitlines()
              if line.startswith("    ")]
    assert frames[:5] == CHAIN, out
