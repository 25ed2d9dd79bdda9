#!/usr/bin/python3
"""The uprobe floor for bench/agg_overhead.py: attach an empty BPF program at one address
of a binary, for one process, until SIGINT/SIGTERM. What every tracer pays at least.

    /usr/bin/python3 bench/bare_floor.py BINARY ADDR PID [C_FILE FUNCTION]

ADDR is the probe's address. With C_FILE, attach FUNCTION of that program instead (the
benchmark's what-if rows: planrunner's rendered C, edited).
"""

from __future__ import annotations

import sys

from bcc import BPF  # the system python3-bpfcc; this is a bench tool, not planrunner
from harness import serve_until_stopped  # a sibling: bench/ is sys.path[0]


def main() -> None:
    binary, addr, pid = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3])
    text, fn = "int on_hit(void *ctx) { return 0; }", "on_hit"
    if len(sys.argv) > 5:
        with open(sys.argv[4]) as fh:
            text, fn = fh.read(), sys.argv[5]
    bpf = BPF(text=text, cflags=["-Wno-macro-redefined", "-Wno-unused-function"])
    bpf.attach_uprobe(name=binary, addr=addr, fn_name=fn, pid=pid)
    serve_until_stopped()
    bpf.cleanup()


if __name__ == "__main__":
    main()
