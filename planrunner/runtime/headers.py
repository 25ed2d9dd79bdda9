"""Where bcc will find the running kernel's headers, decided as bcc 0.26 decides it
(src/cc/frontends/clang/loader.cc), so that `planrunner doctor` and `run` (through
runtime/bcc_backend.py's check_machine) give one answer, and it is bcc's:

1. $BCC_KERNEL_SOURCE, when set, is the tree;
2. else /lib/modules/RELEASE/source when both `build` and `source` are directories
   there (Debian's split: generated headers in build, the rest in source), else
   /lib/modules/RELEASE/$BCC_KERNEL_MODULES_SUFFIX (default `build`);
3. the tree counts only with include/linux/kconfig.h in it (a leftover build directory
   without headers does not); else bcc unpacks /sys/kernel/kheaders.tar.xz
   (CONFIG_IKHEADERS, `modprobe kheaders`).

A `source` alone is not used by bcc, and kheaders are. Pure stdlib: no bcc.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

KCONFIG = "include/linux/kconfig.h"


@dataclass(frozen=True, slots=True)
class Headers:
    """The kernel headers bcc will compile against, or why there are none."""

    found: str | None  # the tree (resolved) or the kheaders archive bcc will use
    detail: str  # what was found, or what is missing and what to do


def find_headers(release: str | None = None, root: str = "/",
                 env: Mapping[str, str] | None = None) -> Headers:
    release = release or os.uname().release
    env = os.environ if env is None else env
    moddir = os.path.join(root, "lib/modules", release)
    if env.get("BCC_KERNEL_SOURCE"):
        tree, where = env["BCC_KERNEL_SOURCE"], "$BCC_KERNEL_SOURCE"
    elif os.path.isdir(os.path.join(moddir, "build")) and \
            os.path.isdir(os.path.join(moddir, "source")):
        tree, where = os.path.join(moddir, "source"), os.path.join(moddir, "source")
    else:
        suffix = env.get("BCC_KERNEL_MODULES_SUFFIX") or "build"
        tree = where = os.path.join(moddir, suffix)
    if os.path.isfile(os.path.join(tree, KCONFIG)):
        real = os.path.realpath(tree)
        return Headers(real, real + _release_mismatch(os.path.join(moddir, "build"),
                                                       release))
    kheaders = os.path.join(root, "sys/kernel/kheaders.tar.xz")
    if os.path.exists(kheaders):
        return Headers(kheaders, f"{kheaders} (CONFIG_IKHEADERS)")
    return Headers(None, f"no {KCONFIG} in {where}, the tree bcc compiles against, and no "
                   f"{kheaders}: install the headers (Debian/Ubuntu: apt install "
                   f"linux-headers-{release}), or `modprobe kheaders`")


def _release_mismatch(build: str, release: str) -> str:
    """A note when the headers were made for another kernel (bcc may still cope)."""
    try:
        with open(os.path.join(build, "include/config/kernel.release"), encoding="utf-8") as fh:
            theirs = fh.read().strip()
    except OSError:
        return ""
    return "" if theirs == release else f" (note: headers are for {theirs}, running {release})"
