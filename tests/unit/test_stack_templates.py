"""runtime/stack_templates.py: what is written to the BPF map for a copy's walks, when
a light copy gets them, and when the maps moved under them."""

from __future__ import annotations

from dataclasses import replace

from planrunner.render.contracts import TEMPLATE_WORDS, UTMPL_KEY, UTMPL_VAL
from planrunner.runtime.stack_templates import REWRITES, Templates
from planrunner.stacks.modules import Mapping, ProcessModules
from planrunner.stacks.state import Unwound
from planrunner.stacks.walk_template import WalkTemplate

MAP = "pr_utmpl"


class Sink:
    def __init__(self) -> None:
        self.map: dict[bytes, bytes] = {}

    def update_map(self, map_name: str, key: bytes, value: bytes) -> None:
        assert map_name == MAP
        self.map[key] = value

    def delete_key(self, map_name: str, key: bytes) -> None:
        self.map.pop(key, None)


def mapping(start: int, path: str) -> Mapping:
    return Mapping(start, start + 0x10000, 0, "r-xp", path, 1, 2, None, 0)


MODULES = ProcessModules((mapping(0x400000, "/bin/app"), mapping(0x7f0000000000, "/lib/x.so")),
                         pid=42)
WALK = Unwound((0x401000, 0x402000, 0x7f0000001000), "end")
SHOWN = ("auto", ("main", "start"))  # what the walks' frames show (a stand-in)


def tmpl(fp: int | None = None, words: tuple[tuple[int, int], ...] = ((8, 0x402000),
                                                                       (40, 0x7f0000001000)),
         pc: int = 0x401000) -> WalkTemplate:
    return WalkTemplate(42, pc, 0x7ffd0000, 16384, fp, words)


def test_the_map_entry_is_the_contract_layout() -> None:
    sink = Sink()
    t = Templates(sink, MAP)
    t.offer(MODULES, {"auto": (WALK, tmpl(fp=0x7ffd0100))}, SHOWN)
    [(key, value)] = sink.map.items()
    assert UTMPL_KEY.unpack(key) == (42, 16384, 0x401000, 0x7ffd0000)
    got = UTMPL_VAL.unpack(value)
    tid, cls, bp, lo, hi, bp_used, n, hidden = got[:8]
    vals, offs = got[8:8 + TEMPLATE_WORDS], got[8 + TEMPLATE_WORDS:]
    assert (lo, hi, hidden) == (0x401000, 0x401001, 0)  # its own pc only
    assert cls == tid  # the first of its class
    assert (bp, bp_used, n) == (0x7ffd0100, 1, 2)
    assert list(zip(offs[:n], vals[:n], strict=True)) == [(8, 0x402000),
                                                         (40, 0x7f0000001000)]
    assert t.walks(tid, MODULES) == {"auto": WALK}
    assert t.walks(tid + 1, MODULES) is None


def test_every_mode_must_give_a_template_and_their_words_are_joined() -> None:
    sink = Sink()
    t = Templates(sink, MAP)
    t.offer(MODULES, {"auto": (WALK, tmpl()), "fp": (WALK, None)}, SHOWN)
    assert not sink.map
    t.offer(MODULES, {"auto": (WALK, tmpl()), "fp": (WALK, tmpl(fp=7, words=((16, 3),)))},
            SHOWN)
    (value,) = sink.map.values()
    got = UTMPL_VAL.unpack(value)
    n = got[6]
    assert (got[2], got[5], n) == (7, 1, 3)
    assert got[8 + TEMPLATE_WORDS:8 + TEMPLATE_WORDS + n] == (8, 16, 40)


def test_a_key_is_rewritten_a_few_times_at_most() -> None:
    sink = Sink()
    t = Templates(sink, MAP)
    for i in range(REWRITES + 3):
        t.offer(MODULES, {"auto": (WALK, tmpl(words=((8, i),)))}, SHOWN)
    assert t.written == REWRITES and len(sink.map) == 1


def test_other_maps_with_the_same_code_keep_the_walks_else_the_key_goes() -> None:
    sink = Sink()
    t = Templates(sink, MAP)
    t.offer(MODULES, {"auto": (WALK, tmpl())}, SHOWN)
    tid = UTMPL_VAL.unpack(next(iter(sink.map.values())))[0]
    # an anonymous mapping added (a heap arena): the walks still hold
    more = ProcessModules((MODULES.mappings[0], mapping(0x500000, ""), MODULES.mappings[1]),
                          pid=42)
    assert t.walks(tid, more) == {"auto": WALK}
    assert sink.map and t.stale == 0
    # the library the walk went through is gone: the walks no longer hold
    moved = replace(MODULES, mappings=(MODULES.mappings[0], mapping(0x7f0000000000, "/lib/y.so")))
    assert t.walks(tid, moved) is None
    assert not sink.map and t.stale == 1
    assert t.walks(tid, more) is None  # forgotten


def test_templates_that_show_the_same_frames_are_one_class_in_each_process() -> None:
    sink = Sink()
    t = Templates(sink, MAP)
    other = ProcessModules(MODULES.mappings, pid=43)
    t.offer(MODULES, {"auto": (WALK, tmpl(pc=0x401000))}, SHOWN)
    t.offer(MODULES, {"auto": (WALK, tmpl(pc=0x401010))}, SHOWN)  # the same frames shown
    t.offer(MODULES, {"auto": (WALK, tmpl(pc=0x401020))}, ("auto", ("other",)))
    t.offer(other, {"auto": (WALK, replace(tmpl(pc=0x401000), pid=43))}, SHOWN)
    ids = {UTMPL_KEY.unpack(k)[::2]: UTMPL_VAL.unpack(v)[:2] for k, v in sink.map.items()}
    assert len(ids) == 4  # each under its own key alone: no span, no page
    first = ids[(42, 0x401000)]
    assert ids[(42, 0x401010)] == (first[0] + 1, first[1])  # its own id, the first's class
    assert ids[(42, 0x401020)][1] == ids[(42, 0x401020)][0]  # a class of its own
    assert ids[(43, 0x401000)][1] == ids[(43, 0x401000)][0]  # another process: its own


def test_a_span_is_written_under_each_of_its_pages_that_no_other_template_holds() -> None:
    """A template whose walk holds for a span of pcs goes under its own key and the key
    of each page the span touches (SPAN_PAGE), with the span's bounds; a later span
    over a page already held leaves it; a template dropped takes its pages along."""
    from planrunner.render.contracts import SPAN_PAGE

    sink = Sink()
    t = Templates(sink, MAP)
    t.offer(MODULES, {"auto": (WALK, tmpl(pc=0x401800))}, SHOWN, (0x401200, 0x403100), True)
    entries = {UTMPL_KEY.unpack(k): UTMPL_VAL.unpack(v) for k, v in sink.map.items()}
    pages = {k[2] & ~SPAN_PAGE: v for k, v in entries.items() if k[2] & SPAN_PAGE}
    assert set(pages) == {0x401, 0x402, 0x403}
    tid = entries[(42, 16384, 0x401800, 0x7ffd0000)][0]
    for v in pages.values():
        assert v[0] == tid and (v[3], v[4]) == (0x401200, 0x403100) and v[7] == 1
    exact = entries[(42, 16384, 0x401800, 0x7ffd0000)]
    assert (exact[3], exact[4]) == (0x401800, 0x401801)
    # another template whose span also covers page 0x403 and 0x404
    t.offer(MODULES, {"auto": (WALK, tmpl(pc=0x403800))}, SHOWN, (0x403000, 0x404010))
    entries = {UTMPL_KEY.unpack(k): UTMPL_VAL.unpack(v) for k, v in sink.map.items()}
    owners = {k[2] & ~SPAN_PAGE: v[0] for k, v in entries.items() if k[2] & SPAN_PAGE}
    assert owners[0x403] == tid and owners[0x404] == tid + 1
    # the first template's library goes: its key and its pages go with it
    moved = replace(MODULES, mappings=(mapping(0x400000, "/bin/other"),
                                       MODULES.mappings[1]))
    assert t.walks(tid, moved) is None
    left = {UTMPL_KEY.unpack(k)[2] for k in sink.map}
    assert left == {0x403800, SPAN_PAGE | 0x404}
