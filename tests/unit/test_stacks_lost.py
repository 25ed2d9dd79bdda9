"""Lost and truncated copied stacks (issue 23 item 14; runtime/stacks.py docstring):
a walk that cannot take one step from the probe's frame is lost (kept frame, marked,
counted by module); one that stops further out, or ends cleanly at its first frame
(ustack(1)'s depth), is not. Real captures of fx_stack (tests/fixtures/stacks), with
module lookups that hide the modules beyond a point."""

from __future__ import annotations

import pytest

from planrunner.runtime.stacks import StackResolver
from planrunner.stacks.modules import Mapping
from tests.unit.stacks_fixture import (
    CHAIN,
    Dump,
    load_dump,
    missing_toolchain,
    run_dump,
    session_build,
)


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Dump:
    why = missing_toolchain()
    if why:
        pytest.skip(why)
    build = session_build(tmp_path_factory)["nofp_nopie"]
    return load_dump(run_dump(build / "fx_stack", build / "lost-dump"))


class _Only:
    """The dump's maps, for the first `frames` lookups only (then no module)."""

    def __init__(self, dump: Dump, frames: int) -> None:
        self.dump, self.left = dump, frames

    def find(self, addr: int) -> Mapping | None:
        self.left -= 1
        return self.dump.modules.find(addr) if self.left >= 0 else None


def test_whole_walk_is_not_lost(dump: Dump) -> None:
    frames, lost = StackResolver(None)._unwind(dump.capture, dump.modules, "dwarf", 64)
    assert [f.symbol for f in frames[:5]] == CHAIN and not lost


def test_no_step_from_the_probes_frame_is_lost(dump: Dump) -> None:
    frames, lost = StackResolver(None)._unwind(dump.capture, _Only(dump, 0), "dwarf", 64)
    assert len(frames) == 1 and lost


def test_a_walk_stopped_further_out_is_truncated_not_lost(dump: Dump) -> None:
    frames, lost = StackResolver(None)._unwind(dump.capture, _Only(dump, 2), "dwarf", 64)
    assert len(frames) == 3 and not lost


def test_ustack_1_is_complete_at_its_first_frame(dump: Dump) -> None:
    frames, lost = StackResolver(None)._unwind(dump.capture, dump.modules, "dwarf", 1)
    assert len(frames) == 1 and not lost
