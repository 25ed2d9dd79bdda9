"""Micro-benchmark of the consumer path without the kernel: records/s through
Decoder.decode_batch alone and decode + each view, on raw records packed exactly as
the BPF program lays them out (render/layout.py) for the bench plan's output
(counter int64, word string[129], len int32).

    .venv/bin/python bench/consumer_bench.py [--records 200000] [--batch 4096] [--cpu]
        [--cases decode,text,json,csv]

A/B: run it with PYTHONPATH set to each tree in turn (a tree without
commands.run.print_schema gets a schema without its nullable and bool fields).
"""

from __future__ import annotations

import argparse
import struct
import time

from planrunner.output import make_view
from planrunner.records import PrintSchema
from planrunner.render.layout import STR_OK, LayoutField, RecordLayout
from planrunner.render.model import PrintOutput
from planrunner.runtime.decode import Decoder

WORDS = (b"ev-alpha", b"ev-beta", b"ev-gamma", b"ev-delta")


def bench_output(string_size: int = 129) -> PrintOutput:
    fields = (LayoutField("counter", "int", "f0"), LayoutField("word", "str", "f1", string_size),
              LayoutField("len", "int", "f2"))
    return PrintOutput("0", "tick", RecordLayout(0, "pr_rec_0", fields, variable=True), None)


def raw_records(out: PrintOutput, n: int) -> list[bytes]:
    pack = struct.Struct(out.layout.struct_format).pack
    ts0 = time_ns0 = 5_000_000_000_000
    del time_ns0
    recs = []
    for i in range(n):
        w = WORDS[i & 3]
        # memory order (RecordLayout.in_memory): the ints, then the string; cut to the
        # size the program reserves for it when the layout is variable
        raw = pack(ts0 + i * 1000, 0, 4242, 4242, b"workload", i, len(w), 0x5555_0000 + i,
                   STR_OK, w)
        recs.append(raw[:next(s for s in out.layout.sizes
                              if s - out.layout.prefix_size > len(w))])
    return recs


CLOCK = time.perf_counter


def rate(fn, batches: list[list[bytes]], total: int) -> float:
    start = CLOCK()
    for b in batches:
        fn(b)
    return total / (CLOCK() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu", action="store_true",
                    help="records per second of this process's CPU time, not of wall time "
                         "(steadier on a machine other jobs load)")
    ap.add_argument("--cases", default="decode,text,json,csv")
    a = ap.parse_args()
    global CLOCK
    if a.cpu:
        CLOCK = time.process_time
    out = bench_output()
    raws = raw_records(out, a.records)
    batches = [raws[i:i + a.batch] for i in range(0, len(raws), a.batch)]
    try:  # as `run` makes it (with the fields that may hold None or a bool)
        from planrunner.commands.run import print_schema  # noqa: PLC0415
        schema = print_schema(out)
    except ImportError:  # a tree from before print_schema (--baseline runs)
        schema = PrintSchema("0", "tick", ("counter", "word", "len"))
    with open("/dev/null", "w", encoding="utf-8") as sink:
        cases = {"decode": None, "text": make_view("text", sink, [schema]),
                 "json": make_view("json", sink, [schema]),
                 "csv": make_view("csv", sink, [schema])}
        for name, view in cases.items():
            if name not in a.cases.split(","):
                continue
            rates = []
            for _ in range(a.repeat):
                dec = Decoder([out])
                if view is None:
                    rates.append(rate(dec.decode_batch, batches, len(raws)))
                else:
                    def step(b, dec=dec, view=view):
                        view.records(dec.decode_batch(b))
                        view.flush()
                    rates.append(rate(step, batches, len(raws)))
            rates.sort()
            print(f"{name:8} {rates[len(rates) // 2]:>10,.0f} records/s "
                  f"(min {rates[0]:,.0f} max {rates[-1]:,.0f})")


if __name__ == "__main__":
    main()
