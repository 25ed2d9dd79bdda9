"""Micro-benchmark of the output views: records/s printed from Python.

Builds N synthetic print records (the shape the runtime decoder produces: 7 head keys
plus latency_ns and a query string), feeds them to each view in batches (as the
runtime does, then `flush()`), writing to /dev/null, and prints records/s per view.

    .venv/bin/python bench/views_bench.py [--records 1000000] [--batch 4096] [--views text,json]
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC

from planrunner.output import make_view
from planrunner.records import PrintSchema, iso_utc_ns

QUERIES = ("SELECT 1", "UPDATE accounts SET balance = balance - 1 WHERE id = 42",
           "SELECT pg_sleep(0.2);", "COMMIT")


def synthetic(n: int, special_every: int = 0) -> list[dict]:
    base = 1_796_265_667_000_000_000
    out = []
    for i in range(n):
        ns = base + i * 997  # ~1M events/s: many records share a second
        out.append({
            "time": iso_utc_ns(ns), "ts_ns": 10_000_000 + i * 997, "pid": 4242 + i % 7,
            "tid": 4242 + i % 13, "comm": "postgres", "probe": "query", "output": "0",
            "latency_ns": 100_000 + i % 50_000, "query": QUERIES[i % 4],
        })
        if special_every and i % special_every == 0:  # the slow path: NULL or truncated
            if i % (2 * special_every) == 0:
                out[-1]["query"] = None
            else:
                out[-1]["truncated"] = ["query"]
    return out


def run(view_name: str, records: list[dict], batch: int, schema: PrintSchema) -> float:
    with open("/dev/null", "w", encoding="utf-8") as sink:
        opts = {"tz": UTC} if view_name == "text" else {}
        view = make_view(view_name, sink, [schema], **opts)
        start = time.perf_counter()
        for i in range(0, len(records), batch):
            view.records(records[i : i + batch])
            view.flush()
        view.close()
        return len(records) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--views", default="text,text-format,json,csv")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--special-every", type=int, default=0,
                    help="every Nth record has a NULL or truncated string (0: none)")
    args = ap.parse_args()
    records = synthetic(args.records, args.special_every)
    plain = PrintSchema("0", "query", ("latency_ns", "query"))
    templated = PrintSchema("0", "query", ("latency_ns", "query"),
                            "{pid} {latency_ms:.3f} {query}")
    for name in args.views.split(","):
        schema = templated if name == "text-format" else plain
        view = "text" if name == "text-format" else name
        rates = sorted(run(view, records, args.batch, schema) for _ in range(args.repeat))
        print(f"{name:12} {rates[len(rates) // 2]:>12,.0f} records/s "
              f"(min {rates[0]:,.0f}, max {rates[-1]:,.0f}; {args.records:,} records, "
              f"batch {args.batch}, special every {args.special_every or 'none'})")


if __name__ == "__main__":
    main()
