"""The struct pt_regs that program.bpf.c.j2 writes out for x86-64 (to spare clang the
kernel header) has the layout of the kernel's own: each member's offset and the size,
asserted by clang against <asm/ptrace.h> of the headers bcc compiles with."""

from __future__ import annotations

import os
import platform
import re

import pytest

from planrunner.resources import data_dir

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (bcc compiles for the kernel)"),
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the struct is x86-64's"),
]


def _members() -> list[str]:
    text = (data_dir("templates") / "program.bpf.c.j2").read_text(encoding="utf-8")
    body = re.search(r"struct pt_regs \{(.*?)\};", text, re.S)
    assert body is not None, "program.bpf.c.j2 no longer writes struct pt_regs"
    return re.findall(r"\w+", body.group(1).replace("unsigned long", ""))


def test_the_template_struct_has_the_kernels_layout() -> None:
    from planrunner.runtime.bcc_backend import compile_bcc

    members = _members()
    assert members[:2] == ["r15", "r14"] and "ip" in members and "sp" in members
    asserts = "\n".join(
        f"_Static_assert(__builtin_offsetof(struct pt_regs, {m}) == {8 * i}, \"{m}\");"
        for i, m in enumerate(members))
    source = (f"#include <asm/ptrace.h>\n{asserts}\n"
              f"_Static_assert(sizeof(struct pt_regs) == {8 * len(members)}, \"size\");\n"
              "int f(struct pt_regs *ctx) { return 0; }\n")
    compile_bcc(source, []).cleanup()  # CompileFailed names the member that moved


def test_the_template_perf_event_struct_has_the_kernels_layout() -> None:
    """struct bpf_perf_event_data (a profile probe's context) as the template writes it
    out, against <uapi/linux/bpf_perf_event.h>: regs first, then sample_period, addr."""
    from planrunner.runtime.bcc_backend import compile_bcc

    text = (data_dir("templates") / "program.bpf.c.j2").read_text(encoding="utf-8")
    body = re.search(r"struct bpf_perf_event_data \{(.*?)\};", text, re.S)
    assert body is not None, "program.bpf.c.j2 no longer writes struct bpf_perf_event_data"
    assert re.findall(r"(\w+);", body.group(1)) == ["regs", "sample_period", "addr"]
    regs = 8 * len(_members())
    source = ("#include <asm/ptrace.h>\n#include <uapi/linux/bpf_perf_event.h>\n"
              "_Static_assert(__builtin_offsetof(struct bpf_perf_event_data, regs) == 0, "
              "\"regs\");\n"
              "_Static_assert(__builtin_offsetof(struct bpf_perf_event_data, sample_period)"
              f" == {regs}, \"sample_period\");\n"
              "_Static_assert(__builtin_offsetof(struct bpf_perf_event_data, addr) == "
              f"{regs + 8}, \"addr\");\n"
              f"_Static_assert(sizeof(struct bpf_perf_event_data) == {regs + 16}, \"size\");\n"
              "int f(struct bpf_perf_event_data *ctx) { return 0; }\n")
    compile_bcc(source, []).cleanup()  # CompileFailed names the member that moved
