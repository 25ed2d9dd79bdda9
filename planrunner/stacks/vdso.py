"""The kernel's vDSO as a file, so its frames unwind and symbolize like a library's.

`vdso_file()` -> a readable path holding this process's `[vdso]` image (read once from
/proc/self/mem into a memfd kept open for the life of the process), or None when there
is none. Every 64-bit process on one running kernel maps the same image (it is built
into the kernel), so ours stands for the target's: its `.eh_frame` and `.dynsym`
(`__vdso_clock_gettime`, …) are what a profile sample inside clock_gettime needs.
"""

from __future__ import annotations

import os

from planrunner.elf.procmaps import parse_maps

_STATE: dict[str, str | None] = {}


def vdso_file() -> str | None:
    if "path" not in _STATE:
        _STATE["path"] = _extract()
    return _STATE["path"]


def _extract() -> str | None:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            maps = parse_maps(fh.read())
        vdso = next((m for m in maps if m.path == "[vdso]"), None)
        if vdso is None:
            return None
        with open("/proc/self/mem", "rb", buffering=0) as mem:
            mem.seek(vdso.start)
            image = mem.read(vdso.end - vdso.start)
    except (OSError, ValueError):
        return None
    if not image.startswith(b"\x7fELF"):
        return None
    fd = os.memfd_create("vdso", os.MFD_CLOEXEC)  # kept open: the path stays readable
    view = memoryview(image)
    while view:
        view = view[os.write(fd, view):]
    return f"/proc/{os.getpid()}/fd/{fd}"
