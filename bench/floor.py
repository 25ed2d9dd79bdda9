#!/usr/bin/python3
"""The uprobe floor for bench/run.py: an empty BPF program on USDT bench:tick of one
process (python3-bpfcc's USDT, which also raises a semaphore in that process). What every
tracer pays per hit at least. Prints READY once attached; ends on SIGINT/SIGTERM (the
handlers only set a flag).

    /usr/bin/python3 bench/floor.py BINARY PID
"""

from __future__ import annotations

import sys

from bcc import BPF, USDT  # the system python3-bpfcc: a bench tool, not planrunner
from harness import serve_until_stopped  # a sibling: bench/ is sys.path[0]


def main() -> None:
    binary, pid = sys.argv[1], int(sys.argv[2])
    usdt = USDT(path=binary, pid=pid)
    usdt.enable_probe(probe="bench:tick", fn_name="on_hit")
    bpf = BPF(text="int on_hit(struct pt_regs *ctx) { return 0; }", usdt_contexts=[usdt])
    serve_until_stopped()
    bpf.cleanup()


if __name__ == "__main__":
    main()
