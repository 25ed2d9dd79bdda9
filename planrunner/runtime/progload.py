"""BPF_PROG_LOAD by raw syscall, for programs bcc compiles but cannot load as needed.

Why: bcc 0.26's `load_func` reaches libbcc's `bcc_func_load`, whose C entry point
passes no program flags, so it cannot load a program BPF_F_SLEEPABLE. bcc has already
compiled the program and put its maps' fds into the instructions
(`bpf_function_start`/`bpf_function_size`), so those bytes load as they are; this
module only adds the flags. The same ctypes path as the uprobe_multi links
(runtime/uprobe_links.py); no bcc.
"""

from __future__ import annotations

import ctypes as ct
import os

from planrunner.runtime.uprobe_links import bpf_syscall

BPF_PROG_LOAD = 5
BPF_PROG_TYPE_KPROBE = 2
BPF_F_SLEEPABLE = 1 << 4
LOG_SIZE = 1 << 22  # the verifier's log on a failed load, for the error message


class ProgLoad(ct.Structure):
    """union bpf_attr for BPF_PROG_LOAD, up to expected_attach_type."""

    _fields_ = [("prog_type", ct.c_uint32), ("insn_cnt", ct.c_uint32),
                ("insns", ct.c_uint64), ("license", ct.c_uint64),
                ("log_level", ct.c_uint32), ("log_size", ct.c_uint32),
                ("log_buf", ct.c_uint64), ("kern_version", ct.c_uint32),
                ("prog_flags", ct.c_uint32), ("prog_name", ct.c_char * 16),
                ("prog_ifindex", ct.c_uint32), ("expected_attach_type", ct.c_uint32)]


def load_program(insns: int, size: int, license_: bytes, prog_type: int, flags: int,
                 attach_type: int, name: str, log: bool = True,
                 kern_version: int = 0) -> tuple[int, int, str]:
    """Load `size` bytes of instructions at address `insns`: (fd, 0, "") or
    (-1, errno, the tail of the verifier's log when `log`). Never raises."""
    lic = ct.create_string_buffer(license_)
    attr = ProgLoad(prog_type=prog_type, insn_cnt=size // 8, insns=insns,
                    license=ct.addressof(lic), kern_version=kern_version, prog_flags=flags,
                    prog_name=name.encode()[:15], expected_attach_type=attach_type)
    fd, err = bpf_syscall(BPF_PROG_LOAD, attr)
    if fd >= 0 or not log:
        return fd, err, ""
    buf = ct.create_string_buffer(LOG_SIZE)  # again, only now with the verifier's log
    attr.log_level, attr.log_size, attr.log_buf = 1, LOG_SIZE, ct.addressof(buf)
    again, _err = bpf_syscall(BPF_PROG_LOAD, attr)
    if again >= 0:  # cannot happen for the same bytes; never leak it
        os.close(again)
    return -1, err, buf.value.decode("utf-8", "replace")[-2000:]
