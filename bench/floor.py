#!/usr/bin/python3
"""The uprobe floor for bench/run.py: an empty BPF program on USDT bench:tick of one
process (python3-bpfcc's USDT, which also raises a semaphore in that process). What every
tracer pays per hit at least. Prints READY once attached; ends on SIGINT/SIGTERM (the
handlers only set a flag).

    /usr/bin/python3 bench/floor.py BINARY PID
"""

from __future__ import annotations

import signal
import sys

from bcc import BPF, USDT  # the system python3-bpfcc: a bench tool, not planrunner


def main() -> None:
    binary, pid = sys.argv[1], int(sys.argv[2])
    usdt = USDT(path=binary, pid=pid)
    usdt.enable_probe(probe="bench:tick", fn_name="on_hit")
    bpf = BPF(text="int on_hit(struct pt_regs *ctx) { return 0; }", usdt_contexts=[usdt])
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    print("READY", flush=True)
    while not stop:
        signal.pause()
    bpf.cleanup()


if __name__ == "__main__":
    main()
