"""The _Static_asserts of render/contracts.py's block are live: a C whose shared struct
disagrees with the Python's layout does not compile (every golden, with the block as
generated, compiles: tests/e2e/test_golden_compile.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planrunner.render.contracts import c_block
from tests.golden_headers import from_golden

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "agg_count" / "expected.bpf.c"


def _compiles(text: str) -> bool:
    from bcc import BPF

    try:
        bpf = BPF(text=text.encode(), cflags=["-Wno-unused-function"])
    except Exception:  # bcc raises a bare Exception when clang refuses the C
        return False
    bpf.cleanup()
    return True


def test_the_block_as_generated_compiles() -> None:
    assert _compiles(from_golden(GOLDEN.read_text()))


@pytest.mark.parametrize(("member", "instead", "assert_named"), [
    ("    __u32 spare;\n", "", "pr_hdr.comm"),  # the C header lost a word
    ("    __u64 level;\n", "    __u64 level;\n    __u64 more;\n", "pr_cgroup"),
], ids=["pr_hdr-offset", "pr_cgroup-size"])
def test_a_struct_that_disagrees_does_not_compile(member: str, instead: str,
                                                  assert_named: str,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    block = c_block()
    assert block.count(member) == 1
    text = from_golden(GOLDEN.read_text()).replace(block, block.replace(member, instead))
    assert not _compiles(text)
    assert f'"{assert_named}' in capfd.readouterr().err
