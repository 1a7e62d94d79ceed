"""Private servers for the fault tests: a PostgreSQL cluster and a Redis of
their own, on free ports, that a test may restart or kill without touching
the machine's shared ones; and the AgentLab processes run against them.

``PrivatePostgres`` runs ``initdb`` and ``pg_ctl`` as the ``postgres`` user
through ``runuser`` (initdb refuses root), in a folder under the system's
temporary folder; its server log is ``log`` (the deadlock test reads it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentlab.testing.net import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]

#: Flags the test workers get beyond the production unit's command line
#: (deploy/systemd/agentlab-worker.service): none, so the fault tests restart
#: brokers under the worker production runs — gossip and mingle included,
#: whose channels are among those closed on a broker loss.
WORKER_FLAGS: tuple[str, ...] = ()


def postgres_bin(name: str) -> str | None:
    """The path of PostgreSQL's ``name`` program (``initdb``, ``pg_ctl``), or ``None``."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def missing_tools() -> str | None:
    """Why the fault tests cannot run here, or ``None``."""
    if os.geteuid() != 0:
        return "the fault tests start PostgreSQL as the postgres user with runuser: they need root"
    for tool in ("runuser", "redis-server"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    for name in ("initdb", "pg_ctl"):
        if postgres_bin(name) is None:
            return f"PostgreSQL's {name} is not installed"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no postgres user"
    return None


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on a free port of 127.0.0.1 (trust auth,
    user ``postgres``, no fsync), with deadlocks and lock waits logged."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="agentlab-pg-"))
        user = pwd.getpwnam("postgres")
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.port = free_port()

    def _as_postgres(self, *args: str, timeout: float = 120) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True, timeout=timeout
        )

    def init(self) -> PrivatePostgres:
        self._as_postgres(
            str(postgres_bin("initdb")), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 300\n"
                "log_lock_waits = on\ndeadlock_timeout = '200ms'\nlog_line_prefix = '%m [%p] '\n"
            )
        return self

    def _pg_ctl(self, *args: str) -> None:
        self._as_postgres(str(postgres_bin("pg_ctl")), "-D", str(self.data), "-l", str(self.log), "-w", *args)

    def start(self) -> PrivatePostgres:
        self._pg_ctl("start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "stop")

    def restart(self, down_s: float = 0.0) -> None:
        """Stop (fast: connections are cut) and start again after ``down_s`` seconds."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def sql(self, dbname: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
        """Run one statement (autocommit) and return its rows."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True
        ) as conn:
            cur = conn.execute(statement, params or None)
            return cur.fetchall() if cur.description else []

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRedis:
    """A throw-away ``redis-server`` on a free port of 127.0.0.1 that saves
    its data when stopped (as a production Redis with snapshots does), so a
    restart keeps the broker's queues; ``persist=False``: one that keeps
    nothing (``--save ''``), stopped by :meth:`shutdown_nosave` as the
    incident of issue 47 did."""

    def __init__(self, *, persist: bool = True) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="agentlab-redis-"))
        self.port = free_port()
        self.persist = persist
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> PrivateRedis:
        save = "3600 1" if self.persist else ""
        with (self.dir / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                 "--save", save, "--appendonly", "no", "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for_port(self.port, timeout=20, process=self.process, what="redis-server")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # saves its data, then exits
            self.process.wait(timeout=20)

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def shutdown_nosave(self) -> None:
        """``redis-cli shutdown nosave``: stop at once, keeping nothing."""
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"], timeout=20, check=False)
        if self.process is not None:
            self.process.wait(timeout=20)

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def destroy(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Stack:
    """AgentLab's processes for one test, against one database of the private
    cluster: ``env`` for its subprocesses, ``worker()`` starts a Celery worker
    (threads pool) on the test's own queue, ``django(code, *args)`` runs a
    snippet after ``django.setup()`` and returns its stdout."""

    def __init__(
        self, *, pg: PrivatePostgres, redis: PrivateRedis, dbname: str, tmp: Path, **env: str
    ) -> None:
        self.pg, self.redis, self.dbname, self.tmp = pg, redis, dbname, tmp
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTLAB_", "DJANGO_", "CELERY_"))},
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": pg.url(dbname),
            "REDIS_URL": redis.url(0),
            "CELERY_BROKER_URL": redis.url(1),
            "CELERY_TASK_DEFAULT_QUEUE": f"faults-{dbname}",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "AGENTLAB_REVIEW": "0",
            "AGENTLAB_MODEL": "stub-model",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def sql(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        return self.pg.sql(self.dbname, statement, *params)

    def start(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        with (self.tmp / log).open("w") as out:
            process = subprocess.Popen(
                list(args), cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        self.processes.append(process)
        return process

    def worker(self, name: str, *, concurrency: int) -> subprocess.Popen[bytes]:
        return self.start(
            sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
            "--concurrency", str(concurrency), "--loglevel", "INFO", "--hostname", f"{name}@faults",
            *WORKER_FLAGS,
            log=f"{name}.log",
        )  # fmt: skip

    def django(self, code: str, *args: str, timeout: float = 120) -> str:
        out = subprocess.run(
            [sys.executable, "-c", "import django\ndjango.setup()\n" + code, *args],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    def log(self, name: str) -> str:
        path = self.tmp / name
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_until(predicate: Callable[[], bool], *, timeout: float, what: str, every: float = 0.2) -> None:
    """Poll ``predicate`` until it holds; fail the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
