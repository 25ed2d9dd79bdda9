"""CPython workload of tests/e2e/test_python_frames_e2e.py (run by /usr/bin/python3.11).

`spin SECONDS`: hot() and cold() share the CPU 3:1, measured here with
time.thread_time_ns, until they have had SECONDS of CPU (however busy the machine);
prints `hot_ns N cold_ns M`.
`shapes`: os.getppid() called at the end of a recursion (rec four deep), inside a
generator (gen, iterated by consume) and inside a coroutine (co_inner awaited by
co_outer, run by asyncio), in that order, then lingers.
`chain [linger]`: the main thread and one more each call outer -> middle -> inner,
which waits for the other thread (both are in the chain at once) and calls
os.getppid() (libc's getppid: the test's uprobe); prints `tid NAME TID` per thread and
`line FUNCTION N` for each call site (into $PY_FRAMES_OUT when set); without `linger`
it exits as soon as both have called it.
"""

import os
import sys
import threading
import time

LINES = {}
BARRIER = threading.Barrier(2)


def say(*words):
    """A line for the test: into $PY_FRAMES_OUT when set (stdout also carries the
    tracer's records), else on stdout."""
    line = " ".join(map(str, words)) + "\n"
    path = os.environ.get("PY_FRAMES_OUT")
    if path:
        with open(path, "a") as f:
            f.write(line)
    else:
        sys.stdout.write(line)
        sys.stdout.flush()


def here(name):
    LINES[name] = sys._getframe(1).f_lineno + 1  # the line after the call of here()


def hot(n):
    t = 0
    for i in range(n):
        t += i
    return t


def cold(n):
    t = 0
    for i in range(n):
        t += i
    return t


def spin(seconds):
    a = b = 0
    while a + b < seconds * 1e9:
        s = time.thread_time_ns()
        hot(30000)
        a += time.thread_time_ns() - s
        s = time.thread_time_ns()
        cold(10000)
        b += time.thread_time_ns() - s
    print("hot_ns", a, "cold_ns", b, flush=True)


def inner():
    BARRIER.wait(timeout=30)
    here("inner")
    os.getppid()


def middle():
    here("middle")
    inner()


def outer():
    say("tid", threading.current_thread().name, threading.get_native_id())
    here("outer")
    middle()


def rec(n):
    if n:
        return rec(n - 1)
    return os.getppid()  # the end of the recursion


def gen():
    yield os.getppid()


def consume():
    return list(gen())


async def co_inner():
    return os.getppid()


async def co_outer():
    return await co_inner()


if sys.argv[1] == "spin":
    spin(float(sys.argv[2]))
elif sys.argv[1] == "shapes":
    import asyncio

    rec(3)
    consume()
    asyncio.run(co_outer())
    time.sleep(0.5)
else:
    other = threading.Thread(target=outer, name="other")
    other.start()
    here("module")
    outer()
    other.join()
    for name, line in sorted(LINES.items()):
        say("line", name, line)
    if sys.argv[2:] == ["linger"]:
        time.sleep(0.5)
    else:
        os._exit(0)  # gone at once: no interpreter teardown
