"""runtime-stat's Python workload: N calls of f, 5 collections, then it stays alive for
SLEEP seconds (so an interval ends while it runs). Usage: stat_workload.py N SLEEP"""

import gc
import sys
import time


def f(i: int) -> int:
    return i + 1


def main() -> None:
    n, sleep = int(sys.argv[1]), float(sys.argv[2])
    for i in range(n):
        f(i)
    for _ in range(5):
        gc.collect()
    time.sleep(sleep)


main()
