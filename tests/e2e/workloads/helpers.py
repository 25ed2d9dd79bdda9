"""Helpers of the plan-library tests: throwaway PostgreSQL and MariaDB servers on unix
sockets with data in temporary folders (stopped by PID whatever happens), and a
system-wide tracer started before the workload and stopped with SIGINT."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.conftest import json_records
from tests.e2e.executor_helpers import start_tracer, stop_process

PG_BIN = Path("/usr/lib/postgresql/15/bin")
MARIADBD = Path("/usr/sbin/mariadbd")


class Tracer:
    """`planrunner run ARGS -f json` started in the background; `stop()` -> records."""

    def __init__(self, *args: str) -> None:
        self.proc = start_tracer(*args, "-f", "json")

    def stop(self, settle: float = 0.3) -> list[dict]:
        time.sleep(settle)  # the consumer drains the ring buffer on a short timer
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode in (0, 130), err
        return json_records(out)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@contextmanager
def tracing(*args: str) -> Iterator[Tracer]:
    tracer = Tracer(*args)
    try:
        yield tracer
    finally:
        tracer.kill()


def _wait_until(ready, proc: subprocess.Popen, what: str, log: Path,  # type: ignore[no-untyped-def]
                timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"{what} did not start:\n{text[-2000:]}")
        time.sleep(0.1)


class Postgres:
    def __init__(self, socket_dir: str) -> None:
        self.socket_dir = socket_dir

    def psql(self, *sql: str) -> subprocess.CompletedProcess:
        """Run the statements in one session (one backend process), in order."""
        cmds = [arg for stmt in sql for arg in ("-c", stmt)]
        return subprocess.run([str(PG_BIN / "psql"), "-h", self.socket_dir, "-U", "postgres",
                               "-d", "postgres", "-X", "-At", "-v", "ON_ERROR_STOP=1", *cmds],
                              capture_output=True, text=True, timeout=30, check=True)

    def session(self) -> subprocess.Popen:
        """A psql reading SQL from its stdin (one connection, statements in order)."""
        return subprocess.Popen([str(PG_BIN / "psql"), "-h", self.socket_dir, "-U",
                                 "postgres", "-d", "postgres", "-X", "-At", "-q"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    """PostgreSQL 15 as user postgres (it refuses root), on a unix socket only."""
    if not (PG_BIN / "postgres").exists():
        pytest.skip(f"needs PostgreSQL 15 ({PG_BIN}/postgres; apt-get install postgresql-15)")
    try:
        import pwd

        pw = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("needs the system user 'postgres' (created by the postgresql package)")
    # Not pytest's tmp_path: /tmp/pytest-of-root is 0700, and postgres must enter it.
    top = tempfile.mkdtemp(prefix="pr-pg-")
    os.chown(top, pw.pw_uid, pw.pw_gid)
    data, log = f"{top}/data", Path(top) / "log"
    server = None
    try:
        as_postgres = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        subprocess.run([str(PG_BIN / "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
                        "--no-sync"], check=True, capture_output=True, timeout=120,
                       cwd=top, **as_postgres)
        with open(log, "w") as fh:
            os.chown(log, pw.pw_uid, pw.pw_gid)
            server = subprocess.Popen(  # the postmaster itself: stopped by its PID
                [str(PG_BIN / "postgres"), "-D", data, "-k", top, "-c", "listen_addresses=",
                 "-c", "fsync=off"], stdout=fh, stderr=subprocess.STDOUT, cwd=top,
                **as_postgres)
        pg = Postgres(top)
        _wait_until(lambda: subprocess.run([str(PG_BIN / "pg_isready"), "-q", "-h", top],
                                           check=False).returncode == 0,
                    server, "postgres", log)
        yield pg
    finally:
        if server is not None:
            stop_process(server, signal.SIGINT)  # a fast shutdown
        shutil.rmtree(top, ignore_errors=True)


class MariaDB:
    def __init__(self, socket: str, pid: int) -> None:
        self.socket = socket
        self.pid = pid  # mariadbd: one process, a thread per connection

    def sql(self, sql: str) -> subprocess.CompletedProcess:
        return subprocess.run(["mariadb", "--no-defaults", "-S", self.socket, "-u", "root",
                               "-N", "-B", "-e", sql], capture_output=True, text=True,
                              timeout=30, check=True)


@contextmanager
def mariadb_server() -> Iterator[MariaDB]:
    if not MARIADBD.exists() or shutil.which("mariadb-install-db") is None:
        pytest.skip("needs MariaDB (apt-get install mariadb-server)")
    top = Path(tempfile.mkdtemp(prefix="pr-my-"))
    data, sock, log = top / "data", top / "sock", top / "err.log"
    server = None
    try:
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}",
                        "--user=root", "--auth-root-authentication-method=normal",
                        "--skip-test-db"], check=True, capture_output=True, timeout=180)
        server = subprocess.Popen(
            [str(MARIADBD), "--no-defaults", f"--datadir={data}", f"--socket={sock}",
             "--skip-networking", "--user=root", f"--pid-file={top}/pid",
             f"--log-error={log}", "--innodb-buffer-pool-size=32M"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        db = MariaDB(str(sock), server.pid)

        def ready() -> bool:
            return sock.exists() and subprocess.run(
                ["mariadb", "--no-defaults", "-S", str(sock), "-u", "root", "-e", "SELECT 1"],
                capture_output=True, check=False).returncode == 0

        _wait_until(ready, server, "mariadbd", log)
        yield db
    finally:
        if server is not None:
            stop_process(server, signal.SIGTERM)
        shutil.rmtree(top, ignore_errors=True)
