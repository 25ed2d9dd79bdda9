"""Workload of tests/e2e/test_spans_match.py: recursion timed by its own clock under a
profile hook, for python-latency and python-flow.

    python3.11 py_hooked.py HOOK SCENARIO
      HOOK      lambda:   sys.setprofile(lambda *a: None), a hook written in Python: its
                          own returns fire python:function__return without an entry
                cprofile: cProfile.Profile().enable(), a hook written in C
      SCENARIO  fib:   fib(20), 21,891 calls
                raise: dive(8) 100 times: dive(0) raises, and the exception unwinds the
                       9 frames of dive (900 calls), caught in run_raise
                flow:  outer() -> inner() x2, and outer() again unwound by an exception

fib and raise print "calls N", "inner NS" and "outer NS": the calls of the timed
function, and the sum over its calls of the ns from its first line to its last (each
span is at least that) and of the ns around its calls at their callers (the spans of
the calls are at most that). perf_counter_ns is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
"""

import cProfile
import sys
import time

clock = time.perf_counter_ns
CALLS = 0
INNER = 0
OUTER = 0


class Bottom(Exception):
    pass


def fib(n):
    global CALLS, INNER, OUTER
    t0 = clock()
    if n < 2:
        r = n
    else:
        a0 = clock()
        a = fib(n - 1)
        b = fib(n - 2)
        OUTER += clock() - a0
        r = a + b
    CALLS += 1
    INNER += clock() - t0
    return r


def dive(n):
    global CALLS, INNER, OUTER
    t0 = clock()
    try:
        if n == 0:
            raise Bottom
        a0 = clock()
        try:
            dive(n - 1)
        finally:
            OUTER += clock() - a0
    finally:
        CALLS += 1
        INNER += clock() - t0


def run_fib():
    global OUTER
    t0 = clock()
    fib(20)
    OUTER += clock() - t0


def run_raise():
    global OUTER
    for _ in range(100):
        t0 = clock()
        try:
            dive(8)
        except Bottom:
            pass
        OUTER += clock() - t0


def inner():
    return 1


def outer(fail):
    inner()
    inner()
    if fail:
        raise Bottom


def run_flow():
    outer(False)
    try:
        outer(True)
    except Bottom:
        pass


def main():
    hook, scenario = sys.argv[1], sys.argv[2]
    run = {"fib": run_fib, "raise": run_raise, "flow": run_flow}[scenario]
    if hook == "lambda":
        sys.setprofile(lambda *a: None)
        run()
        sys.setprofile(None)
    else:
        profile = cProfile.Profile()
        profile.enable()
        run()
        profile.disable()
    if scenario != "flow":
        print("calls", CALLS)
        print("inner", INNER)
        print("outer", OUTER)


if __name__ == "__main__":
    main()
