"""Workload of the python-* plan tests, with known calls and collections.

    python3.11 py_workload.py calls   # alpha x500, beta x300 (via map), gamma x200 (sorted key)
    python3.11 py_workload.py flow    # top -> middle x2 -> leaf x2 each, under a profile hook
    python3.11 py_workload.py gc      # collections of known garbage, one slow finalizer;
                                      # prints "gc GEN NS" (ns around each gc.collect)
    python3.11 py_workload.py latency # under a profile hook: fib(15) (1973 calls), then
                                      # nap(4): 5 nested calls each sleeping NAP_S then
                                      # recursing; prints "nap DEPTH INNER OUTER" per call:
                                      # ns inside it, and from before its call to after
    python3.11 py_workload.py threads # 3 threads named planrunner-py-1..3, started and joined;
                                      # prints "thread NAME TID NS" (ns around its start())
"""

import gc
import sys
import threading
import time

NAP_S = 0.01
NAPS = []
OUTER = {}  # depth -> ns from before the call to after its return


def alpha():
    return 1


def beta(x):
    return x * 2


def gamma(x):
    return -x


def leaf(x):
    return x + 1


def middle(x):
    return leaf(x) + leaf(x)


def top():
    return middle(1) + middle(2)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def nap(n):
    t0 = time.monotonic_ns()
    time.sleep(NAP_S)
    if n > 0:  # the inner call timed from here too: from before it to after its return
        t1 = time.monotonic_ns()
        nap(n - 1)
        OUTER[4 - (n - 1)] = time.monotonic_ns() - t1
    NAPS.append((4 - n, time.monotonic_ns() - t0))


def worker(n):
    return n * 2


class Node:
    __slots__ = ("other", "__weakref__")


class Slow:
    """Its finalizer runs inside the collection, making it last at least SLOW_S."""

    SLOW_S = 0.15

    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(self.SLOW_S)


def cycles(n):
    for _ in range(n):
        a, b = Node(), Node()
        a.other, b.other = b, a


def run_calls():
    for _ in range(500):
        alpha()
    list(map(beta, range(300)))
    sorted(range(200), key=gamma)


def run_flow():
    # CPython 3.11 fires function__entry only while a profile hook is set; slice is a
    # C callable taking (frame, event, arg), so the hook adds no Python frames.
    sys.setprofile(slice)
    top()
    sys.setprofile(None)


def timed_collect(generation):
    """gc.collect(generation), printing "gc GENERATION NS": the time around the call."""
    t0 = time.monotonic_ns()
    gc.collect(generation)
    print("gc", generation, time.monotonic_ns() - t0)


def run_gc():
    gc.disable()  # no automatic collections: only the ones below
    gc.collect()  # flush whatever start-up left behind
    cycles(10)
    timed_collect(0)  # 20 objects
    cycles(5)
    timed_collect(1)  # 10 objects
    cycles(3)
    Slow()
    timed_collect(2)  # 6 objects + the Slow instance and its __dict__, >= SLOW_S


def run_latency():
    sys.setprofile(slice)  # CPython 3.11 fires function__entry only under a hook
    fib(15)
    t0 = time.monotonic_ns()
    nap(4)
    OUTER[0] = time.monotonic_ns() - t0
    sys.setprofile(None)
    for depth, ns in NAPS:
        print("nap", depth, ns, OUTER[depth])


def run_threads():
    threads = [threading.Thread(target=worker, args=(i,), name=f"planrunner-py-{i}")
               for i in (1, 2, 3)]
    around = []  # ns around each start(): its pthread_create and clone lie inside
    for t in threads:
        t0 = time.monotonic_ns()
        t.start()
        around.append(time.monotonic_ns() - t0)
    for t in threads:
        t.join()
    for t, ns in zip(threads, around, strict=True):
        print("thread", t.name, t.native_id, ns)


if __name__ == "__main__":
    {"calls": run_calls, "flow": run_flow, "gc": run_gc, "latency": run_latency,
     "threads": run_threads}[sys.argv[1]]()
