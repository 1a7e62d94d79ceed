"""``run_eval --celery`` end to end: real Celery workers (threads pool) on Redis,
a freshly migrated PostgreSQL database of our own, a stub LLM over HTTP, and
``manage.py run_eval`` / ``cancel_run`` as subprocesses with their stderr in a
log file (no terminal: the plain progress line).

The workers read a queue named after the database, so other engineers' (and
other tests') workers on the same Redis neither take our tasks nor give us
theirs.
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from agentlab.testing.net import port_open
from agentlab.testing.stub_llm import StubLLMServer, last_user_text
from tests.evaluation.run.test_run_eval import oracle, rows
from tests.redis_support import BROKER_URL, REDIS
from tests.shared_data import dataset_path

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
PG = ("127.0.0.1", 5432)
GSM8K = dataset_path("gsm8k-test-200.jsonl")


def psql(dbname: str, sql: str, *params: object) -> list[tuple]:
    import psycopg

    with psycopg.connect(host=PG[0], port=PG[1], user="postgres", dbname=dbname, autocommit=True) as conn:
        cur = conn.execute(sql, params or None)
        return cur.fetchall() if cur.description else []


@pytest.fixture(scope="module")
def database():
    """A migrated database of this module's own, named after the test database
    (``DATABASE_URL``'s name, e.g. ``agentlab_i17``) so it is told apart."""
    if not port_open(*PG):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    if not port_open(*REDIS):
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    base = os.environ.get("DATABASE_URL", "").rsplit("/", 1)[-1] or "agentlab"
    dbname = f"{base}_celery_{uuid.uuid4().hex[:6]}"
    psql("postgres", f'CREATE DATABASE "{dbname}"')
    env = _env(dbname)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=180
    )
    yield dbname
    psql("postgres", f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def _env(dbname: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTLAB_", "DJANGO_", "CELERY_"))},
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{dbname}",
        "CELERY_BROKER_URL": BROKER_URL,
        # our own queue: named after our database
        "CELERY_TASK_DEFAULT_QUEUE": f"eval-{dbname}",
        "HEARTBEAT_S": "0.5",
        "TURN_STALE_S": "2",
        "AGENTLAB_REVIEW": "0",
        "AGENTLAB_PROGRESS_EVERY_S": "0.5",
        # two examples per message: a worker slot drives both at once
        "AGENTLAB_EVAL_BATCH": "2",
        "AGENTLAB_LLM_API_KEY": "k",
        "AGENTLAB_MODEL": "stub-model",
        "PYTHONUNBUFFERED": "1",
    }


def _sigint_default() -> None:
    """In the child before exec: SIGINT back to its default, so Python turns it
    into KeyboardInterrupt (it leaves an inherited "ignore" alone)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Cluster:
    """Workers and commands of one test, all against ``stub`` and ``database``;
    everything still running is stopped at the end."""

    def __init__(self, database: str, stub: StubLLMServer, tmp: Path) -> None:
        self.dbname, self.tmp = database, tmp
        self.env = {**_env(database), "AGENTLAB_LLM_BASE_URL": stub.base_url}
        self.queue = self.env["CELERY_TASK_DEFAULT_QUEUE"]
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], log: str) -> subprocess.Popen:
        with open(self.tmp / log, "w") as out:
            proc = subprocess.Popen(
                args,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Ctrl-C must reach the command even when this test runs as a
                # shell's background job, whose children inherit SIGINT ignored
                preexec_fn=_sigint_default,
            )
        self.procs.append(proc)
        return proc

    def worker(self, name: str, concurrency: int = 4) -> subprocess.Popen:
        return self.start(
            [
                *(sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "threads"),
                *("--concurrency", str(concurrency), "--loglevel", "INFO", "-Q", self.queue),
                *("--hostname", f"{name}@{self.dbname}", "--without-gossip", "--without-mingle"),
            ],
            log=f"{name}.log",
        )

    def run_eval(self, *args: str, log: str) -> subprocess.Popen:
        return self.start([sys.executable, "manage.py", "run_eval", "--no-review", *args], log=log)

    def log(self, name: str) -> str:
        return (self.tmp / name).read_text()

    def completed(self, run_id: str) -> int:
        ((n,),) = psql(
            self.dbname,
            "SELECT count(*) FROM evaluation_prediction p JOIN evaluation_run r ON r.id = p.run_id "
            "WHERE r.run_id = %s AND p.completed_at IS NOT NULL",
            run_id,
        )
        return n

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class CountingOracle:
    """``oracle`` that also counts how often each question was asked."""

    def __init__(self, rows_: list[dict], *, right: set[int], latency: float) -> None:
        self.handler = oracle(rows_, right=right, latency=latency)
        self.asked: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, body):
        with self.lock:
            self.asked[last_user_text(body)] += 1
        return self.handler(body)


@pytest.fixture
def cluster_for(database, tmp_path):
    made: list[Cluster] = []

    def make(stub: StubLLMServer) -> Cluster:
        made.append(Cluster(database, stub, tmp_path))
        return made[-1]

    yield make
    for cluster in made:
        cluster.stop()


def run_row(dbname: str, run_id: str) -> tuple[str, dict, dict]:
    ((status, metrics, config),) = psql(
        dbname, "SELECT status, metrics, config FROM evaluation_run WHERE run_id = %s", run_id
    )
    return status, metrics, config


def predictions(dbname: str, run_id: str) -> list[tuple[int, int, bool, object, int]]:
    """``(example id, epoch, correct, completed_at, turn id)`` per prediction of the run."""
    return psql(
        dbname,
        "SELECT p.example_id, p.epoch, p.correct, p.completed_at, p.turn_id FROM evaluation_prediction p "
        "JOIN evaluation_run r ON r.id = p.run_id WHERE r.run_id = %s ORDER BY p.example_id, p.epoch",
        run_id,
    )


def assert_logs_contiguous(dbname: str, turn_ids: list[int]) -> None:
    for turn_id in turn_ids:
        seqs = [
            s
            for (s,) in psql(
                dbname, "SELECT seq FROM turns_turnevent WHERE turn_id = %s ORDER BY seq", turn_id
            )
        ]
        ((last_seq,),) = psql(dbname, "SELECT last_seq FROM turns_turn WHERE id = %s", turn_id)
        assert seqs == list(range(1, last_seq + 1)), f"turn {turn_id}: {seqs}"


def test_two_workers_share_a_run_and_a_killed_worker_costs_nothing_twice(cluster_for):
    """Two worker processes drive one run; one is SIGKILLed mid-run. The run
    completes exactly: one prediction per example, the right scores,
    contiguous event logs, one recorded LLM reply per turn (only a request in
    flight at the kill is asked again), exit 0, and plain progress lines in
    the log file."""
    gsm = rows(GSM8K, 24)
    right = set(range(0, 24, 3))
    script = CountingOracle(gsm, right=right, latency=0.4)
    with StubLLMServer(script) as stub:
        cluster = cluster_for(stub)
        one, _two = cluster.worker("one", concurrency=2), cluster.worker("two", concurrency=2)
        # both up before the run starts: the start-up note is about workers that are not there
        cluster.wait_for(
            lambda: "ready." in cluster.log("one.log") and "ready." in cluster.log("two.log"),
            90,
            "workers ready",
        )
        proc = cluster.run_eval(str(GSM8K), "--celery", "--run-id", "shared", "--limit", "24", log="run.log")
        # both workers drive some of the examples
        cluster.wait_for(
            lambda: "succeeded" in cluster.log("one.log") and "succeeded" in cluster.log("two.log"),
            90,
            "both workers to finish an example",
        )
        assert cluster.completed("shared") < 20  # mid-run
        one.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=120) == 0, cluster.log("run.log")
        assert "no Celery worker reads queue" not in cluster.log("run.log")  # two do

    status, metrics, _ = run_row(cluster.dbname, "shared")
    assert (status, metrics["total"], metrics["correct"], metrics["errors"]) == ("success", 24, 8, 0)
    rows_ = predictions(cluster.dbname, "shared")
    assert len(rows_) == 24 and len({r[0] for r in rows_}) == 24  # one per example
    assert all(r[3] is not None for r in rows_)
    turn_ids = [r[4] for r in rows_]
    assert_logs_contiguous(cluster.dbname, turn_ids)
    usage = dict(
        psql(
            cluster.dbname,
            "SELECT turn_id, count(*) FROM turns_turnevent WHERE type = 'llm.usage' AND turn_id = ANY(%s) "
            "GROUP BY turn_id",
            turn_ids,
        )
    )
    assert all(usage.get(t) == 1 for t in turn_ids), usage  # each recorded reply once
    interrupted = {
        t
        for (t,) in psql(
            cluster.dbname,
            "SELECT DISTINCT turn_id FROM turns_turnevent "
            "WHERE type = 'turn.interrupted' AND turn_id = ANY(%s)",
            turn_ids,
        )
    }
    # only the turns the kill cut off were asked twice (their request was in flight)
    assert sum(script.asked.values()) == 24 + len([q for q, n in script.asked.items() if n == 2])
    assert max(script.asked.values()) <= 2 and len(script.asked) == 24
    assert len([q for q, n in script.asked.items() if n == 2]) <= len(interrupted)
    log = cluster.log("run.log")
    assert "run shared: 24/24 examples done (100 %)" in log
    assert "\r" not in log  # no bar redrawn in a log file


def test_ctrl_c_stops_following_the_turns_go_on_and_the_same_run_id_follows_again(cluster_for):
    """Ctrl-C: exit 130 with the resume command (``--celery`` and ``--queue``
    repeated); the run stays ``started`` and the workers go on; the printed
    command follows the run again (its live turns untouched) to the end."""
    gsm = rows(GSM8K, 16)
    script = CountingOracle(gsm, right=set(range(16)), latency=1.0)
    with StubLLMServer(script) as stub:
        cluster = cluster_for(stub)
        # one example per message: the run outlasts the first answers by
        # seconds, so Ctrl-C lands mid-run
        cluster.env["AGENTLAB_EVAL_BATCH"] = "1"
        cluster.worker("solo", concurrency=2)
        args = (str(GSM8K), "--celery", "--run-id", "followed", "--limit", "16", "--queue", cluster.queue)
        proc = cluster.run_eval(*args, log="first.log")
        cluster.wait_for(lambda: cluster.completed("followed") >= 2, 60, "two predictions")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        log = cluster.log("first.log")
        said = re.search(
            r"stopped following run followed: (\d+ turn\(s\) are running on the workers; )?(\d+) wait", log
        )
        assert said, log  # what runs on the worker's two slots, and what waits in the queue it reads
        assert "no worker reads it" not in log
        resume = log.strip().splitlines()[-1].strip()
        words = shlex.split(resume)
        assert words[1:6] == ["manage.py", "run_eval", str(GSM8K), "--run-id", "followed"]
        assert "--celery" in words and words[words.index("--queue") + 1] == cluster.queue
        status, _, _ = run_row(cluster.dbname, "followed")
        assert status == "started"  # not finished: its turns go on
        at_interrupt = cluster.completed("followed")
        assert at_interrupt < 16
        cluster.wait_for(lambda: cluster.completed("followed") > at_interrupt, 30, "turns after Ctrl-C")
        again = cluster.start([*words[0:1], *words[1:]], log="again.log")
        assert again.wait(timeout=90) == 0, cluster.log("again.log")
        assert sum(script.asked.values()) == 16  # nothing asked twice
    status, metrics, _ = run_row(cluster.dbname, "followed")
    assert (status, metrics["total"], metrics["correct"]) == ("success", 16, 16)
    assert all(r[3] is not None for r in predictions(cluster.dbname, "followed"))


def test_cancel_run_cancels_the_remaining_turns(cluster_for):
    gsm = rows(GSM8K, 20)
    script = CountingOracle(gsm, right=set(range(20)), latency=2.0)
    with StubLLMServer(script) as stub:
        cluster = cluster_for(stub)
        cluster.worker("solo", concurrency=1)
        proc = cluster.run_eval(str(GSM8K), "--celery", "--run-id", "stopped", "--limit", "20", log="run.log")
        cluster.wait_for(lambda: cluster.completed("stopped") >= 1, 60, "a first prediction")
        cancel = subprocess.run(
            [sys.executable, "manage.py", "cancel_run", "stopped"],
            cwd=ROOT,
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cancel.returncode == 0, cancel.stderr
        assert "turn(s) cancelled" in cancel.stdout
        assert proc.wait(timeout=60) == 1, cancel.stdout + cluster.log("run.log")
        assert "was cancelled (manage.py cancel_run)" in cluster.log("run.log")
        asked = sum(script.asked.values())
    status, metrics, _ = run_row(cluster.dbname, "stopped")
    assert status == "cancelled" and metrics["total"] == 20
    assert asked < 20  # the rest never reached the model
    stops = dict(
        psql(
            cluster.dbname,
            "SELECT t.stop_reason, count(*) FROM turns_turn t "
            "JOIN evaluation_prediction p ON p.turn_id = t.id JOIN evaluation_run r ON r.id = p.run_id "
            "WHERE r.run_id = 'stopped' GROUP BY t.stop_reason",
        )
    )
    assert stops.get("cancelled", 0) >= 20 - asked and sum(stops.values()) == 20
    assert all(r[3] is not None for r in predictions(cluster.dbname, "stopped"))
    unknown = subprocess.run(
        [sys.executable, "manage.py", "cancel_run", "no-such-run"],
        cwd=ROOT,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode == 2 and "no run 'no-such-run'" in unknown.stderr


def test_epochs_on_celery(cluster_for):
    gsm = rows(GSM8K, 4)
    script = CountingOracle(gsm, right={0, 1}, latency=0.1)
    with StubLLMServer(script) as stub:
        cluster = cluster_for(stub)
        cluster.worker("solo", concurrency=4)
        proc = cluster.run_eval(
            str(GSM8K), "--celery", "--run-id", "epochs", "--limit", "4", "--epochs", "3", log="run.log"
        )
        assert proc.wait(timeout=90) == 0, cluster.log("run.log")
        assert script.asked == collections.Counter({r["question"]: 3 for r in gsm})
    status, metrics, config = run_row(cluster.dbname, "epochs")
    assert (status, config["epochs"], metrics["total"], metrics["correct"]) == ("success", 3, 12, 6)
    rows_ = predictions(cluster.dbname, "epochs")
    assert sorted((r[0], r[1]) for r in rows_) == sorted({(r[0], k) for r in rows_ for k in (1, 2, 3)})


def test_ctrl_c_with_no_worker_on_the_queue_says_nothing_untrue(cluster_for):
    """Before: with ``--queue nobody`` the command printed ``0/2 examples
    done`` with no hint and, on Ctrl-C, that the turns "keep running on the
    workers" — none had started and none would."""
    gsm = rows(GSM8K, 2)
    with StubLLMServer(CountingOracle(gsm, right={0, 1}, latency=0.0)) as stub:
        cluster = cluster_for(stub)  # no worker at all
        proc = cluster.run_eval(
            str(GSM8K),
            "--celery",
            "--run-id",
            "nobody",
            "--limit",
            "2",
            "--queue",
            "nobody",
            log="nobody.log",
        )
        cluster.wait_for(
            lambda: "no Celery worker reads queue 'nobody'" in cluster.log("nobody.log"), 60, "the note"
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        log = cluster.log("nobody.log")
        assert (
            "stopped following run nobody: 2 wait in queue 'nobody' — no worker reads it, so none will start"
            in log
        )
        assert "running on the workers" not in log


def test_the_run_s_endpoint_travels_to_the_workers(cluster_for):
    """Before: with the worker's AGENTLAB_LLM_BASE_URL on one server and the
    command's on another, no request reached the command's server while the
    run's config named the command's model."""
    gsm = rows(GSM8K, 3)
    with (
        StubLLMServer(CountingOracle(gsm, right=set(), latency=0.0)) as workers_own,
        StubLLMServer(CountingOracle(gsm, right={0, 1, 2}, latency=0.0)) as commands,
    ):
        cluster = cluster_for(workers_own)
        cluster.worker("w1", concurrency=2)
        cluster.env = {**cluster.env, "AGENTLAB_LLM_BASE_URL": commands.base_url}  # run_eval's endpoint
        proc = cluster.run_eval(
            str(GSM8K),
            "--celery",
            "--run-id",
            "endpoint",
            "--limit",
            "3",
            "--queue",
            cluster.queue,
            log="endpoint.log",
        )
        assert proc.wait(timeout=120) == 0, cluster.log("endpoint.log")
        assert (commands.request_count, workers_own.request_count) == (3, 0)
    status, metrics, config = run_row(cluster.dbname, "endpoint")
    assert (status, metrics["correct"]) == ("success", 3)
    assert config["base_url"] == commands.base_url


def test_celery_workers_share_the_llm_cache(cluster_for):
    """An in-process ``run_eval --cache`` fills the cache; the same run on a
    Celery worker is then served from it (0 requests), and the worker's own
    misses are stored for the next process too (docs/evaluating.md#caching-llm-calls)."""
    gsm = rows(GSM8K, 6)
    script = CountingOracle(gsm, right={0, 1, 2}, latency=0.0)
    with StubLLMServer(script) as stub:
        cluster = cluster_for(stub)
        cold = cluster.run_eval(str(GSM8K), "--cache", "--run-id", "cold", "--limit", "4", log="cold.log")
        assert cold.wait(timeout=90) == 0, cluster.log("cold.log")
        assert stub.request_count == 4
        cluster.worker("solo", concurrency=2)
        warm = cluster.run_eval(
            str(GSM8K), "--celery", "--cache", "--run-id", "warm", "--limit", "6", log="warm.log"
        )
        assert warm.wait(timeout=90) == 0, cluster.log("warm.log")
        assert stub.request_count == 6  # only the two examples the first run did not have
        again = cluster.run_eval(str(GSM8K), "--cache", "--run-id", "again", "--limit", "6", log="again.log")
        assert again.wait(timeout=90) == 0, cluster.log("again.log")
        assert stub.request_count == 6  # the worker's misses were stored for this process
    ((entries,),) = psql(cluster.dbname, "SELECT count(*) FROM turns_llmcacheentry")
    assert entries == 6
    _, warm_metrics, warm_config = run_row(cluster.dbname, "warm")
    assert warm_config["cache"] == {"expiry_s": None, "sampled": False}
    assert (warm_metrics["usage"]["calls"], warm_metrics["usage"]["cache_hits"]) == (2, 4)
    assert (warm_metrics["correct"], run_row(cluster.dbname, "again")[1]["correct"]) == (3, 3)
