"""stacks/formats.py and stacks/flamegraph.py: JSON frames, `trace -U` text, folded
stacks, and the flame graph SVG, on hand-made frames and on the fixture's real stack."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from stacks_fixture import CHAIN, load_dump, missing_toolchain, run_dump, session_build

from planrunner.stacks.flamegraph import parse_folded, render_flamegraph
from planrunner.stacks.formats import fold, folded_line, frame_dict, frames_json, text_lines
from planrunner.stacks.frame import Frame
from planrunner.stacks.symbolize import Symbolizer
from planrunner.stacks.unwind import unwind

BIN = "/path/to/fx_stack"
FRAMES = [Frame(4198710, "inner", 18, BIN), Frame(4198800, "middle", 12, BIN),
          Frame(0x7F0000001234, None, 0x29D8F, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
          Frame(0x1000, None, 0x1000, "")]
SVG = "{http://www.w3.org/2000/svg}"


def test_frame_dict_is_the_json_shape() -> None:
    assert frame_dict(FRAMES[0]) == {"address": 4198710, "symbol": "inner", "offset": 18,
                                     "module": BIN, "line": None, "kind": "native"}
    doc = json.loads(json.dumps({"ustack": frames_json(FRAMES)}))
    assert [f["symbol"] for f in doc["ustack"]] == ["inner", "middle", None, None]


def test_text_lines_like_trace_U() -> None:
    assert text_lines(FRAMES) == [
        "    inner+0x12 [fx_stack]",
        "    middle+0xc [fx_stack]",
        "    0x7f0000001234 [libc.so.6]",
        "    0x1000 [unknown]",
    ]


def test_folded_lines_outermost_first_and_merged() -> None:
    assert folded_line("fx", FRAMES[:3], 5) == "fx;[libc.so.6];middle;inner 5"
    weird = [Frame(1, "a;b\nc", 0, BIN)]
    assert folded_line("my;comm", weird, 1) == "my:comm;a:b c 1"
    lines = fold([("fx", FRAMES[:2], 2), ("fx", FRAMES[:2], 3), ("fx", FRAMES[1:2], 1)])
    assert lines == ["fx;middle 1", "fx;middle;inner 5"]
    kernel = [Frame(0xFFFFFFFF81002150, "vfs_read", 0x50, "[kernel.kallsyms]")]
    assert folded_line("fx", kernel + FRAMES[:1], 1) == "fx;inner;vfs_read_[k] 1"


def test_flamegraph_is_valid_svg_with_hover_and_search() -> None:
    svg = render_flamegraph(["fx;main;outer;inner 3", "fx;main;spin<int> 1", "not a stack"],
                            "cpu <profile> & more")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    titles = [t.text or "" for t in root.iter(f"{SVG}title")]
    assert "all (4 samples, 100.00%)" in titles
    assert "inner (3 samples, 75.00%)" in titles
    assert "spin&lt;int&gt;" in svg and "spin<int> (1 samples, 25.00%)" in titles
    assert any(t.text == "cpu <profile> & more" for t in root.iter(f"{SVG}text"))
    script = next(root.iter(f"{SVG}script")).text or ""
    assert "mouseover" in script and "RegExp" in script and "Matched" in script


def test_flamegraph_of_nothing_is_still_an_svg() -> None:
    root = ET.fromstring(render_flamegraph([], "empty"))
    assert "no samples" in "".join(t.text or "" for t in root.iter(f"{SVG}text"))
    tree, bad = parse_folded(["a;b x", "a;b 0", "", "a;b 2"])
    assert (tree.count, bad) == (2, 2)


@pytest.mark.skipif(missing_toolchain() is not None, reason=missing_toolchain() or "")
def test_the_fixture_stack_end_to_end(tmp_path_factory: pytest.TempPathFactory) -> None:
    """unwind -> symbolize -> text, folded and flame graph on the fixture's real dump."""
    directory = session_build(tmp_path_factory)["nofp_nopie"]
    dump = load_dump(run_dump(directory / "fx_stack", directory / "fmt"))
    frames = Symbolizer().symbolize(unwind(dump.capture, dump.modules).addrs, dump.modules)
    lines = text_lines(frames)
    assert lines[0].startswith("    inner+0x") and lines[0].endswith(" [fx_stack]")
    assert lines[2].startswith("    lib_outer+0x") and lines[2].endswith(" [libfx.so]")
    folded = fold([("fx_stack", frames, 7)])
    assert len(folded) == 1 and folded[0].endswith(";" + ";".join(reversed(CHAIN)) + " 7")
    assert folded[0].startswith("fx_stack;_start;")
    svg = render_flamegraph(folded, "fx_stack")
    root = ET.fromstring(svg)
    titles = " ".join(t.text or "" for t in root.iter(f"{SVG}title"))
    for name in CHAIN:
        assert f"{name} (7 samples, 100.00%)" in titles
    (Path(directory) / "fx_stack.svg").write_text(svg)


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_browser() is None, reason="no chromium (Debian: apt-get install chromium)")
def test_the_flame_graph_opens_in_a_headless_browser_and_its_script_runs(
        tmp_path: Path) -> None:
    """The DOM after load: init() copies each frame's name into data-name, so names
    there prove the page opened and its script ran without error."""
    svg = tmp_path / "fg.svg"
    svg.write_text(render_flamegraph(["fx;main;outer;lib_outer;middle;inner 3",
                                      "fx;main;outer;spin<int> 1"], "fx"))
    proc = subprocess.run([str(_browser()), "--headless", "--no-sandbox", "--disable-gpu",
                           "--dump-dom", svg.as_uri()], capture_output=True, text=True,
                          timeout=120)
    for name in CHAIN:
        assert f'data-name="{name}"' in proc.stdout, proc.stderr[-2000:]
    assert 'data-name="spin&lt;int&gt;"' in proc.stdout
