"""The database plans against real servers started by the tests (unix sockets, data in
temporary folders): postgres-slow, postgres-locks, mysql-slow (MariaDB's mariadbd),
and mysql-slow-usdt against a stand-in built with MySQL's probe signatures."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from tests.e2e.conftest import json_records, run_planrunner
from tests.e2e.workloads.helpers import mariadb_server, postgres_server, tracing

MS = 1_000_000
# Latency bounds: nothing is faster than the statement's known sleep, and the server
# runs it inside the client call that sent it, timed here on the same clock
# (CLOCK_MONOTONIC, as bpf_ktime_get_ns): no tolerance a loaded machine could exceed.


def timed(fn, *args):  # type: ignore[no-untyped-def]
    """fn(*args) and the ns it took, on the clock the tracer's timestamps use."""
    t0 = time.monotonic_ns()
    result = fn(*args)
    return result, time.monotonic_ns() - t0


def test_postgres_slow_reports_exactly_the_slow_statement():
    with postgres_server() as pg:
        pg.psql("SELECT 1")  # a first connection warms the catalog caches
        with tracing("postgres-slow", "--set", "threshold=50ms") as tracer:
            done, took = timed(pg.psql, "SELECT pg_backend_pid()", "SELECT 1",
                               "SELECT pg_sleep(0.2)", "SELECT count(*) FROM pg_class")
            out = done.stdout
            recs = tracer.stop()
    # tracing is system-wide: keep the records of this test's backend only
    backend = int(out.split()[0])
    recs = [r for r in recs if r["pid"] == backend]
    assert [r["query"] for r in recs] == ["SELECT pg_sleep(0.2)"]
    (rec,) = recs
    assert rec["probe"] == "query" and rec["comm"] == "postgres"
    assert 200 * MS <= rec["latency_ns"] <= took, (rec, took)


def test_postgres_locks_histogram_and_the_long_wait():
    """Session A holds an ACCESS EXCLUSIVE lock; B's SELECT waits for it; A commits
    0.3 s after B is seen waiting in pg_locks: one AccessShareLock (mode 1) wait."""
    with postgres_server() as pg:
        pg.psql("CREATE TABLE planrunner_locked (x int)")
        rel = int(pg.psql("SELECT 'planrunner_locked'::regclass::oid").stdout)
        dbid = int(pg.psql("SELECT oid FROM pg_database WHERE datname = 'postgres'").stdout)
        with tracing("postgres-locks", "--set", "threshold=100ms",
                     "--set", "interval=60s") as tracer:
            holder = pg.session()
            waiter = None
            try:
                assert holder.stdin is not None
                holder.stdin.write("BEGIN; LOCK TABLE planrunner_locked "
                                   "IN ACCESS EXCLUSIVE MODE;\n")
                holder.stdin.flush()
                _wait_for(lambda: pg.psql(
                    "SELECT count(*) FROM pg_locks WHERE granted AND relation = "
                    f"{rel} AND mode = 'AccessExclusiveLock'").stdout.strip() == "1")
                asked = time.monotonic_ns()  # the waiter's SELECT runs after this
                waiter = pg.session()
                assert waiter.stdin is not None
                waiter.stdin.write("SELECT pg_backend_pid();\n"
                                   "SELECT count(*) FROM planrunner_locked;\n")
                waiter.stdin.flush()
                _wait_for(lambda: pg.psql(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = "
                    f"{rel}").stdout.strip() == "1")
                time.sleep(0.3)
                holder.stdin.write("COMMIT;\n")
                holder.stdin.close()
                out, _ = waiter.communicate("", timeout=30)
                took = time.monotonic_ns() - asked  # and was answered before this
                backend, count = out.split()
                assert count == "0"
                holder.wait(timeout=30)
            finally:
                for proc in (holder, waiter):
                    if proc is not None and proc.poll() is None:
                        proc.kill()
            recs = tracer.stop()
    # tracing is system-wide: keep the waits of this test's backend only
    waits = [r for r in recs if r.get("probe") == "wait" and r["pid"] == int(backend)]
    assert len(waits) == 1, recs
    (wait,) = waits
    assert (wait["locktype"], wait["database"], wait["relation"], wait["mode"]) == (
        0, dbid, rel, 1)  # LOCKTAG_RELATION, AccessShareLock
    assert 300 * MS <= wait["latency_ns"] <= took, (wait, took)
    hists = [r for r in recs if r.get("output") == "wait_latency"]
    assert [h["mode"] for h in hists] == [1]
    (bucket,) = hists[0]["buckets"]
    assert bucket["count"] == 1
    assert bucket["low"] <= wait["latency_ns"] < bucket["high"]
    assert bucket["high"] == 2 * bucket["low"]


def _wait_for(cond, timeout: float = 15) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_mysql_slow_on_mariadb_reports_the_slow_query_with_its_text():
    with mariadb_server() as db:
        with tracing("mysql-slow", "--set", "threshold=100ms") as tracer:
            db.sql("SELECT 1")
            _, took = timed(db.sql, "SELECT SLEEP(0.3)")
            db.sql("SELECT 'fast', 2")
            recs = tracer.stop()
        # threshold 0: every COM_QUERY, and no other command (connect, quit, init db)
        with tracing("mysql-slow", "--set", "threshold=0ns") as tracer:
            _, took_all = timed(db.sql, "SELECT 'one'; SELECT 'two'")
            recs_all = tracer.stop()
        recs = [r for r in recs if r["pid"] == db.pid]  # tracing is system-wide
        recs_all = [r for r in recs_all if r["pid"] == db.pid]
    assert [r["query"] for r in recs] == ["SELECT SLEEP(0.3)"]
    (rec,) = recs
    assert rec["comm"] == "mariadbd"
    assert 300 * MS <= rec["latency_ns"] <= took, (rec, took)
    # the mariadb client splits on ';' and sends one COM_QUERY per statement
    assert [r["query"] for r in recs_all] == ["SELECT 'one'", "SELECT 'two'"]
    assert 0 < sum(r["latency_ns"] for r in recs_all) <= took_all, (recs_all, took_all)


FAKE_MYSQLD = r"""
#include <stdio.h>
#include <sys/sdt.h>
#include <time.h>
#include <unistd.h>
/* MySQL 5.x's probe signatures: query__start(query, connection_id, db, user, host),
   query__done(status). Like a server's, the strings are in memory the program wrote
   (a never-touched .rodata page cannot be read from BPF, only later from user space).
   Prints "took CONN INNER OUTER" per query: its clock (CLOCK_MONOTONIC, as BPF's) read
   on both sides of each probe, so the time between them lies in [INNER, OUTER]. */
static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}
static void query(const char *text, unsigned long conn, int ms, int status) {
    char q[64], db[16], user[16], host[16];
    snprintf(q, sizeof q, "%s", text);
    snprintf(db, sizeof db, "shop");
    snprintf(user, sizeof user, "alice");
    snprintf(host, sizeof host, "localhost");
    long t0 = now_ns();
    DTRACE_PROBE5(mysql, query__start, q, conn, db, user, host);
    long t1 = now_ns();
    usleep(ms * 1000);
    long t2 = now_ns();
    DTRACE_PROBE1(mysql, query__done, status);
    long t3 = now_ns();
    printf("took %lu %ld %ld\n", conn, t2 - t1, t3 - t0);
}
int main(void) {
    query("SELECT 1", 7, 1, 0);
    query("SELECT SLEEP(0.3)", 8, 300, 0);
    query("SELEC oops", 9, 1, 1);
    return 0;
}
"""


def test_mysql_slow_usdt_reads_mysql_probe_arguments(tmp_path):
    """No MySQL with DTrace probes is packaged for Debian: a stand-in program fires
    mysql:query__start/query__done with MySQL's argument order and types."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    src = tmp_path / "mysqld.c"
    src.write_text(FAKE_MYSQLD)
    binary = tmp_path / "mysqld"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(src)], check=True)
    proc = run_planrunner(["run", "mysql-slow-usdt", "--set", f"mysqld={binary}",
                           "--set", "threshold=100ms", "-f", "json", "-c", str(binary)])
    assert proc.returncode == 0, proc.stderr
    recs = _records(proc.stdout)
    bounds = {int(c): (int(i), int(o)) for _, c, i, o in
              (line.split() for line in proc.stdout.splitlines() if line.startswith("took "))}
    assert [(r["connection"], r["db"], r["user"], r["status"], r["query"]) for r in recs] == [
        (8, "shop", "alice", 0, "SELECT SLEEP(0.3)")]
    inner, outer = bounds[8]
    assert 300 * MS <= inner <= recs[0]["latency_ns"] <= outer, (recs, bounds)
    proc = run_planrunner(["run", "mysql-slow-usdt", "--set", f"mysqld={binary}",
                           "--set", "threshold=0ns", "-f", "json", "-c", str(binary)])
    assert [(r["query"], r["status"]) for r in _records(proc.stdout)] == [
        ("SELECT 1", 0), ("SELECT SLEEP(0.3)", 0), ("SELEC oops", 1)]


def _records(stdout: str) -> list[dict]:
    """The JSON records among the stand-in's own lines."""
    return json_records("\n".join(line for line in stdout.splitlines()
                                   if line.startswith("{")))
