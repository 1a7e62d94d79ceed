"""Append-to-frame latency of the turn stream, on one daphne process (issue 4).

    DATABASE_URL is not read: the script creates (and drops) its own PostgreSQL
    database on 127.0.0.1:5432 and uses Redis on 127.0.0.1:6379/0.

    .venv/bin/python bench/stream_latency.py [--events 200] [--interval 0.05]

Prints, with p50/p99 in milliseconds of "time the event was handed to
``event_append`` → time a websocket client had the frame":

- raw: PostgreSQL insert+commit, then a Redis PUBLISH, received by 1 and 100
  redis-py subscribers (no Channels, no daphne);
- minimal forwarder: a Channels consumer that only forwards the doorbells
  (``bench/asgi_bench.py``), 1 and 100 subscribers on one turn;
- the real consumer (``ws/turns/<id>/``), 1 and 100 subscribers on one turn;
- 1,000 open sockets each on its own turn, 100 of those turns streaming at once;
- daphne's resident memory per idle socket;
- a streamed answer (``--streamed-tokens`` at ``--tokens-per-s``): a chat turn
  driven by the real driver whose answer streams from a streaming scripted
  provider, watched by 100 minimal forwarders and then by 100 turn stream
  consumers; latency is "the event's ``at`` → the client had the frame", and
  the events the turn wrote (``llm.delta`` and all) are reported.
  ``--streamed-only`` runs just this case.

Appends are made from this process (like a worker), the clients run here too,
and everything shares the machine's CPUs — figures are for comparison on one
machine, not absolutes. A benchmark prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from agentlab.testing.net import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))] * 1000


def line(name: str, values: list[float], extra: str = "") -> None:
    print(
        f"{name:<52} n={len(values):>6}  p50={pct(values, 50):7.1f} ms  "
        f"p99={pct(values, 99):7.1f} ms {extra}",
        flush=True,
    )


def rss_kb(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1])
    return 0


async def raw_baseline(dbname: str, subscribers: int, events: int, interval: float) -> list[float]:
    import psycopg
    import redis.asyncio as aioredis

    channel = f"bench-raw-{uuid.uuid4().hex[:8]}"
    latencies: list[float] = []
    subs = []
    for _ in range(subscribers):
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        pubsub = client.pubsub()
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=1)  # the subscribe confirmation
        subs.append((client, pubsub))

    async def reader(pubsub) -> None:
        got = 0
        while got < events:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
            if message is None:
                continue
            latencies.append(time.time() - json.loads(message["data"])["t0"])
            got += 1

    readers = [asyncio.create_task(reader(p)) for _, p in subs]
    publisher = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    conn = psycopg.connect(host="127.0.0.1", user="postgres", dbname=dbname)
    conn.execute("CREATE TABLE IF NOT EXISTS bench_raw (id bigserial primary key, data jsonb)")
    conn.commit()

    def commit(payload: str) -> None:
        conn.execute("INSERT INTO bench_raw (data) VALUES (%s)", (payload,))
        conn.commit()

    for i in range(events):
        payload = json.dumps({"t0": time.time(), "i": i})
        await asyncio.to_thread(commit, payload)
        await publisher.publish(channel, payload)
        await asyncio.sleep(interval)
    await asyncio.wait_for(asyncio.gather(*readers), 60)
    conn.close()
    await publisher.aclose()
    for client, pubsub in subs:
        await pubsub.aclose()
        await client.aclose()
    return latencies


async def open_sockets(urls: list[str], headers: dict[str, str], origin: str) -> list[Any]:
    from websockets.asyncio.client import connect
    from websockets.typing import Origin

    sockets = []
    for start in range(0, len(urls), 50):
        sockets += await asyncio.gather(
            *(
                connect(u, origin=Origin(origin), additional_headers=headers, max_queue=None, open_timeout=30)
                for u in urls[start : start + 50]
            )
        )
    return sockets


async def stream(sockets: list, turn_ids: list[int], events_per_turn: int, interval: float) -> list[float]:
    """Append ``events_per_turn`` events to each turn (turns in parallel) and
    collect each socket's latency for each of its turn's events."""
    from turns.events import event_append

    latencies: list[float] = []

    async def reader(ws) -> None:
        got = 0
        while got < events_per_turn:
            frame = json.loads(await ws.recv())
            if frame.get("type") == "thinking":
                latencies.append(time.time() - frame["data"]["t0"])
                got += 1

    async def writer(turn_id: int) -> None:
        await asyncio.sleep(random.random() * interval)
        for i in range(events_per_turn):
            await asyncio.to_thread(
                event_append, turn_id=turn_id, type="thinking", data={"t0": time.time(), "i": i}
            )
            await asyncio.sleep(interval)

    readers = [asyncio.create_task(reader(ws)) for ws in sockets]
    await asyncio.gather(*(writer(t) for t in turn_ids))
    await asyncio.wait_for(asyncio.gather(*readers), 120)
    return latencies


async def streamed_answer(
    sockets: list, turn_id: int, tokens: int, per_s: float
) -> tuple[list[float], int, int]:
    """Drive chat turn ``turn_id`` whose answer streams ``tokens`` tokens of 4
    characters at ``per_s`` tokens a second; every socket's latency for each
    ``llm.delta`` frame (its ``at`` → received), then (latencies, delta
    events, all events) of the turn."""
    from datetime import datetime

    from agentlab.agent.providers.scripted import ScriptedProvider, text
    from common.db import DatabaseThreads
    from turns.driver import CHAT, drive_turn
    from turns.models import TurnEvent

    latencies: list[float] = []

    async def reader(ws) -> None:
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("type") == "llm.delta":
                latencies.append(time.time() - datetime.fromisoformat(frame["at"]).timestamp())
            if frame.get("type") in ("turn.answered", "turn.failed", "stream.end"):
                return

    readers = [asyncio.create_task(reader(ws)) for ws in sockets]
    provider = ScriptedProvider([text("tok " * tokens)], stream_chars=4, stream_delay=1 / per_s)
    db = DatabaseThreads(max_workers=4)
    try:
        await drive_turn(turn_id, policy=CHAT, provider=provider, db=db)
        await asyncio.wait_for(asyncio.gather(*readers), 120)
        types = await db.run(
            lambda: list(TurnEvent.objects.filter(turn_id=turn_id).values_list("type", flat=True))
        )
    finally:
        db.close()
    return latencies, types.count("llm.delta"), len(types)


async def run_streamed(args: argparse.Namespace, port: int, session: str) -> None:
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model

    from turns.services import turn_create

    base = f"ws://127.0.0.1:{port}"
    headers = {"Cookie": f"sessionid={session}"}
    origin = f"http://127.0.0.1:{port}"
    user = await sync_to_async(get_user_model().objects.get)(username="bench")
    new_turn = sync_to_async(lambda: turn_create(owner=user, question="bench").pk, thread_sensitive=False)
    print(
        f"streamed answer: {args.streamed_tokens} tokens at {args.tokens_per_s:g} tokens/s, "
        f"{args.subscribers} subscribers on one turn",
        flush=True,
    )
    found: dict[str, list[float]] = {}
    for name, path in (("minimal forwarder", "ws/bench/forward"), ("turn stream consumer", "ws/turns")):
        turn_id = await new_turn()
        suffix = "?after=1" if path == "ws/turns" else ""
        sockets = await open_sockets(
            [f"{base}/{path}/{turn_id}/{suffix}"] * args.subscribers, headers, origin
        )
        await asyncio.sleep(0.5)
        values, deltas, events = await streamed_answer(
            sockets, turn_id, args.streamed_tokens, args.tokens_per_s
        )
        found[name] = values
        line(f"streamed answer, {name}", values, f"({deltas} llm.delta of {events} events in the turn)")
        await asyncio.gather(*(ws.close() for ws in sockets))
    ratio = pct(found["turn stream consumer"], 99) / pct(found["minimal forwarder"], 99)
    print(f"streamed answer: consumer/forwarder p99 ratio {ratio:.2f}", flush=True)


async def run(args: argparse.Namespace, port: int, daphne_pid: int, session: str, dbname: str) -> None:
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model

    from turns.services import turn_create

    base = f"ws://127.0.0.1:{port}"
    headers = {"Cookie": f"sessionid={session}"}
    origin = f"http://127.0.0.1:{port}"
    user = await sync_to_async(get_user_model().objects.get)(username="bench")
    new_turn = sync_to_async(lambda: turn_create(owner=user, question="bench").pk, thread_sensitive=False)

    print(f"events per scenario: {args.events}, one every {args.interval * 1000:.0f} ms", flush=True)
    for subscribers in (1, 100):
        line(
            f"raw PG commit + Redis publish, {subscribers} subscriber(s)",
            await raw_baseline(dbname, subscribers, args.events, args.interval),
        )
    results: dict[tuple[str, int], list[float]] = {}
    for subscribers in (1, 100):
        for name, path in (("minimal forwarder", "ws/bench/forward"), ("turn stream consumer", "ws/turns")):
            turn_id = await new_turn()
            suffix = "?after=1" if path == "ws/turns" else ""
            sockets = await open_sockets([f"{base}/{path}/{turn_id}/{suffix}"] * subscribers, headers, origin)
            await asyncio.sleep(0.5)
            values = await stream(sockets, [turn_id], args.events, args.interval)
            results[(name, subscribers)] = values
            line(f"{name}, {subscribers} subscriber(s) on one turn", values)
            await asyncio.gather(*(ws.close() for ws in sockets))
    for subscribers in (1, 100):
        fwd, real = (
            results[("minimal forwarder", subscribers)],
            results[("turn stream consumer", subscribers)],
        )
        print(
            f"consumer/forwarder p99 ratio at {subscribers} subscriber(s): "
            f"{pct(real, 99) / pct(fwd, 99):.2f}",
            flush=True,
        )

    # 1,000 sockets, each on its own turn; 100 of the turns stream at once.
    turn_ids = [await new_turn() for _ in range(1000)]
    await asyncio.sleep(1)
    before = rss_kb(daphne_pid)
    sockets = await open_sockets([f"{base}/ws/turns/{t}/?after=1" for t in turn_ids], headers, origin)
    await asyncio.sleep(3)
    after = rss_kb(daphne_pid)
    print(
        f"daphne RSS: {before / 1024:.1f} MB before, {after / 1024:.1f} MB with 1000 idle sockets → "
        f"{(after - before) / 1000:.1f} KB per idle socket",
        flush=True,
    )
    streaming = 100
    values = await stream(sockets[:streaming], turn_ids[:streaming], args.events_1000, args.interval_1000)
    line(
        f"1000 sockets, {streaming} turns streaming at once",
        values,
        f"({args.events_1000} events per turn, one every {args.interval_1000 * 1000:.0f} ms per turn)",
    )
    await asyncio.gather(*(ws.close() for ws in sockets))
    await run_streamed(args, port, session)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200, help="events per single-turn scenario")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between appends")
    parser.add_argument(
        "--events-1000", type=int, default=20, help="events per streaming turn with 1000 sockets"
    )
    parser.add_argument("--interval-1000", type=float, default=0.5, help="seconds between appends per turn")
    parser.add_argument("--streamed-tokens", type=int, default=500, help="tokens of the streamed answer")
    parser.add_argument("--tokens-per-s", type=float, default=50.0, help="how fast the answer streams")
    parser.add_argument("--subscribers", type=int, default=100, help="sockets on the streamed turn")
    parser.add_argument("--streamed-only", action="store_true", help="run only the streamed-answer case")
    return parser.parse_args()


def bench_env(dbname: str) -> dict[str, str]:
    """The environment of daphne and of this process: database ``dbname``,
    Redis's channel layer, no Celery (turns are driven here), quiet logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLAB_", "CELERY_"))}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{dbname}",
            "REDIS_URL": "redis://127.0.0.1:6379/0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "HEARTBEAT_S": "15",
            "LOG_LEVEL": "ERROR",
            # the streamed-answer turn is driven here with a scripted provider: no reviewer
            "AGENTLAB_REVIEW": "false",
        }
    )
    return env


def prepare_database(env: dict[str, str], dbname: str) -> str:
    """Migrate ``dbname``, start its turn ids at a random number (so a
    subscriber of an earlier run cannot mistake one for its own), and log a
    user in: returns the session key."""
    import psycopg

    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=dbname, autocommit=True) as conn:
        conn.execute(f"ALTER SEQUENCE turns_turn_id_seq RESTART WITH {random.randint(10**6, 10**9)}")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    user = get_user_model().objects.create_user("bench", password="pw-bench-123")
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    assert store.session_key is not None
    return store.session_key


def start_daphne(env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """daphne serving ``bench.asgi_bench`` on a free port; returns it and the port."""
    port = free_port()
    # -v 0: no access log; a line per websocket event on stdout is work
    # for daphne's loop that neither a forwarder nor the stream is about
    daphne = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-v",
            "0",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "bench.asgi_bench:application",
        ],
        cwd=ROOT,
        env=env,
    )
    wait_for_port(port, timeout=30, process=daphne, what="daphne")
    return daphne, port


def main() -> int:
    args = parse_args()
    import psycopg

    # 1,000 sockets on each side: raise the open-file limit (daphne inherits it).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    dbname = f"agentlab_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    env = bench_env(dbname)
    os.environ.update(env)
    for key in [k for k in os.environ if k.startswith("CELERY_")]:
        del os.environ[key]
    daphne = None
    try:
        session = prepare_database(env, dbname)
        daphne, port = start_daphne(env)
        if args.streamed_only:
            asyncio.run(run_streamed(args, port, session))
        else:
            asyncio.run(run(args, port, daphne.pid, session, dbname))
    finally:
        if daphne is not None:
            daphne.terminate()
            daphne.wait(10)
        from django.db import connections

        connections.close_all()
        with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
