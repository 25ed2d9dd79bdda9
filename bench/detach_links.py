"""Detaching N sites (issue 23 item 6): N one-site uprobe_multi links, each with a
do-nothing program of its own (a run has one program per site), on distinct exported
functions of PostgreSQL's server binary (no postgres running: no breakpoint is
written), closed by uprobe_links.close_all with W closers at once; then one link
holding all N offsets, for comparison.

    sudo .venv/bin/python bench/detach_links.py N W[,W...]    # e.g. 3000 64,256,1024
"""

from __future__ import annotations

import ctypes as ct
import os
import resource
import sys
import time

from elftools.elf.elffile import ELFFile

from planrunner.runtime.kernel.bpf import BPF_TRACE_UPROBE_MULTI, prog_load, uprobe_multi_link
from planrunner.runtime.uprobe_links import close_all

POSTGRES = "/usr/lib/postgresql/15/bin/postgres"
NOP = (ct.c_uint64 * 2)(0x00000000000000b7, 0x0000000000000095)  # r0 = 0; exit


def function_offsets(binary: str, n: int) -> list[int]:
    """File offsets of `n` exported functions at distinct addresses."""
    offsets: list[int] = []
    seen: set[int] = set()
    with open(binary, "rb") as fh:
        elf = ELFFile(fh)
        text = elf.get_section_by_name(".text")
        for sym in elf.get_section_by_name(".dynsym").iter_symbols():
            if sym["st_info"]["type"] == "STT_FUNC" and sym["st_shndx"] != "SHN_UNDEF" \
                    and sym["st_value"] not in seen:
                seen.add(sym["st_value"])
                offsets.append(sym["st_value"] - text["sh_addr"] + text["sh_offset"])
    return offsets[:n]


def nop_program(name: str) -> int:
    try:
        return prog_load(ct.addressof(NOP), ct.sizeof(NOP), b"GPL", 2, 0,
                         BPF_TRACE_UPROBE_MULTI, name)
    except OSError as exc:
        sys.exit(f"cannot load a program: {exc.strerror} {getattr(exc, 'log', '')}")


def one_link_per_site(offsets: list[int], workers: int) -> float:
    progs, links = [], []
    for i, off in enumerate(offsets):
        progs.append(nop_program(f"p{i}"))
        try:
            links.append(uprobe_multi_link(progs[-1], POSTGRES, (off,), (0,), None, False,
                                           None))
        except OSError as exc:
            sys.exit(f"cannot attach at 0x{off:x}: {exc.strerror}")
    start = time.monotonic()
    close_all(links, workers=workers)
    took = time.monotonic() - start
    for fd in progs:
        os.close(fd)
    return took


def one_link_for_all(offsets: list[int]) -> float:
    prog = nop_program("all")
    try:
        link = uprobe_multi_link(prog, POSTGRES, offsets, [0] * len(offsets), None, False,
                                 None)
    except OSError as exc:
        sys.exit(f"cannot attach: {exc.strerror}")
    start = time.monotonic()
    os.close(link)
    took = time.monotonic() - start
    os.close(prog)
    return took


def main() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    n = int(sys.argv[1])
    offsets = function_offsets(POSTGRES, n)
    for workers in (int(w) for w in sys.argv[2].split(",")):
        took = one_link_per_site(offsets, workers)
        print(f"{len(offsets)} links, {workers} closers: {took:.2f} s", flush=True)
    print(f"1 link of {len(offsets)} sites: {one_link_for_all(offsets):.2f} s")


if __name__ == "__main__":
    main()
