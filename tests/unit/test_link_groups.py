"""attach.link_groups: the fewest uprobe_multi links for a run's uprobe sites, one per
file path and kind (a link's return flag holds for all its offsets)."""

from __future__ import annotations

from planrunner.render.model import AttachSite, TargetFile
from planrunner.runtime.attach import LinkGroup, link_groups

APP = TargetFile("/usr/bin/app", "app", None)
LIB = TargetFile("/usr/lib/libx.so", "libx.so", None)


def _site(kind: str, binary: TargetFile, offset: int, slot: int,
          ref_ctr: int = 0) -> AttachSite:
    return AttachSite(kind, f"pr_p{slot}_s0", f"p{slot}", 0, binary,  # type: ignore[arg-type]
                      file_offset=offset, ref_ctr_offset=ref_ctr, slot=slot)


def test_sites_group_by_file_and_kind_in_first_seen_order() -> None:
    a = _site("uprobe", APP, 0x10, 0)
    b = _site("uretprobe", APP, 0x10, 1)
    c = _site("uprobe", LIB, 0x20, 2)
    d = _site("uprobe", APP, 0x30, 3, ref_ctr=0x400)
    e = _site("uretprobe", APP, 0x40, 4)
    assert link_groups([a, b, c, d, e]) == [
        LinkGroup(APP.path, False, (a, d)),
        LinkGroup(APP.path, True, (b, e)),
        LinkGroup(LIB.path, False, (c,)),
    ]


def test_semaphores_go_with_their_offsets_unless_the_counters_are_off() -> None:
    group = link_groups([_site("uprobe", APP, 0x10, 0, ref_ctr=0x400),
                         _site("uprobe", APP, 0x20, 1)])[0]
    assert group.ref_ctr_offsets(True) == [0x400, 0]
    assert group.ref_ctr_offsets(False) == [0, 0]  # poke mode raises them by hand


def test_no_sites_no_links() -> None:
    assert link_groups([]) == []
