"""``manage.py replay_turns``: recorded chat turns driven again by a scripted
agent on the stub OpenAI-compatible server, the recorded tool results served
and the ``count`` tool's counter file proving which tools ran
(docs/evaluating.md#replaying-recorded-turns)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Q

from agentlab.agent.extensions import Extensions
from agentlab.testing.stub_llm import StubLLMServer
from common.db import DatabaseThreads
from common.errors import BadInput, StateConflict
from common.sampling import seeded_sample
from evaluation.models import Replay, ReplayItem, Run
from evaluation.replay.replay_drive import replay_drive
from evaluation.replay.replay_open import ReplayRequest, replay_open
from evaluation.replay.selection import TurnFilters
from evaluation.replay.variant import replay_variant
from tests.evaluation.replay.replay_support import ScriptedAgent, record_chat_turns
from turns.jobs.run import run_turn_job
from turns.llm import get_provider
from turns.models import EventType, Turn, TurnEvent
from turns.services import turn_create, turn_retry_and_enqueue

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counter(tmp_path, monkeypatch) -> Path:
    """The ``count`` tool's counter file: one line per side effect."""
    path = tmp_path / "count.txt"
    monkeypatch.setenv("AGENTLAB_TEST_COUNT_FILE", str(path))
    return path


@pytest.fixture
def agent():
    return ScriptedAgent()


@pytest.fixture
def stub(agent, endpoint):
    with StubLLMServer(agent) as server:
        endpoint(server)
        yield server


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _events(turn_id: int, *types: str) -> list[TurnEvent]:
    return list(TurnEvent.objects.filter(turn_id=turn_id, type__in=types).order_by("seq"))


def _replay(stub: StubLLMServer, *options: str) -> tuple[Replay, list[ReplayItem]]:
    call_command("replay_turns", "--turns", "--base-url", stub.base_url, "--plugin", "count", *options)
    replay = Replay.objects.get()
    return replay, list(replay.items.select_related("turn").order_by("position"))


def test_a_turn_replayed_by_the_same_agent_is_identical_with_no_tool_run(owner, stub, counter, capsys):
    originals = record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?", "And 7*6?"])
    assert _lines(counter) == ["recorded", "recorded"]  # the recording ran count once per turn
    capsys.readouterr()

    replay, items = _replay(stub, "--name", "same")

    assert _lines(counter) == ["recorded", "recorded"]  # no side effect again
    assert [(i.original_id, i.verdict, i.divergence_step) for i in items] == [
        (originals[0], "identical", None),
        (originals[1], "identical", None),
    ]
    for item in items:
        turn = item.turn
        assert (turn.kind, turn.replay_of_id, turn.owner_id) == (
            "replay",
            item.original_id,
            replay.system_user_id,
        )
        assert (turn.status, turn.answer) == ("succeeded", "42")
        assert _events(turn.pk, EventType.TOOL_STARTED) == []  # no tool executed
        results = _events(turn.pk, EventType.TOOL_RESULT)
        served = [e.data for e in results if e.data["result"]["name"] != "final_answer"]
        assert [(d["result"]["name"], d.get("replayed")) for d in served] == [
            ("calculator", True),
            ("count", True),
        ]
        assert served[0]["result"]["output"] == "42"  # the recorded result
        assert _events(turn.pk, EventType.REPLAY_DIVERGENCE) == []
    out = capsys.readouterr().out
    assert f"#1 turn {originals[0]} → {items[0].turn_id}: identical" in out
    assert "identical: 2 (100.0%" in out
    assert replay.summary["identical"] == 2 and replay.summary["divergence_steps"] == {}
    assert replay.status == "success"


def test_a_replayed_follow_up_is_given_the_conversation_its_original_was_given(
    owner, stub, counter, client, staff
):
    first, follow_up = record_chat_turns(
        owner, base_url=stub.base_url, questions=["What is 6*7?", "And double it?"], conversation=True
    )
    (given,) = _events(follow_up, EventType.HISTORY)
    before = stub.request_count

    _, items = _replay(stub, "--name", "follow-up")

    item = next(i for i in items if i.original_id == follow_up)
    assert item.verdict == "identical"
    (history,) = _events(item.turn_id, EventType.HISTORY)  # the replay turn's own record of it
    assert history.data == given.data and history.data["turns"] == [first]
    # every LLM request of the replayed follow-up holds the conversation before its question
    asked = [
        r["messages"]
        for r in stub.requests[before:]
        if {"role": "user", "content": "And double it?"} in r["messages"]
    ]
    assert (
        len(asked) == 3
        and all(  # calculator, count, final_answer
            [(m["role"], m["content"]) for m in messages[1:4]]
            == [("user", "What is 6*7?"), ("assistant", "42"), ("user", "And double it?")]
            for messages in asked
        )
    )
    # the replay turn's admin page shows what it was given, as its original's does
    client.force_login(staff)
    page = client.get(f"/admin/turns/turn/{item.turn_id}/change/").content.decode()
    assert f"Mode answers: earlier turns #{first}" in page and "belongs to no conversation" not in page
    # the first turn of the conversation had nothing before it, and its replay is given nothing
    assert _events(next(i for i in items if i.original_id == first).turn_id, EventType.HISTORY) == []


def test_a_changed_prompt_diverges_at_its_step_and_never_calls_the_recorded_tool(
    owner, stub, counter, capsys
):
    (original,) = record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    before = stub.request_count

    _, (item,) = _replay(stub, "--system-prompt", "SEARCH-FIRST: look things up.")

    assert (item.verdict, item.divergence_step) == ("diverged", 2)
    assert _lines(counter) == ["recorded"]  # count, the recorded step 2, never ran
    turn = item.turn
    assert (turn.status, turn.stop_reason) == ("cancelled", "replay_diverged")
    assert stub.request_count - before == 2  # two LLM calls, then the turn ended at the divergence
    assert _events(turn.pk, EventType.TOOL_STARTED) == []  # search_documents did not run either
    (divergence,) = _events(turn.pk, EventType.REPLAY_DIVERGENCE)
    assert divergence.data["step"] == 2 and divergence.data["position"] == 2
    assert divergence.data["recorded"] == {"name": "count", "arguments": {"label": "recorded"}}
    assert divergence.data["call"]["name"] == "search_documents"
    assert turn.agent_options["system_prompt"] == "SEARCH-FIRST: look things up."
    out = capsys.readouterr().out
    assert f"turn {original} → {turn.pk}: diverged at step 2" in out
    assert "              2 |     1 | 100.0%" in out  # the divergence table's row


def test_after_the_divergence_live_runs_read_only_tools_and_stops_a_side_effect(owner, stub, counter):
    record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])

    _, (item,) = _replay(stub, "--live", "--system-prompt", "SEARCH-THEN-COUNT")

    turn = item.turn
    assert (turn.status, turn.stop_reason) == ("cancelled", "replay_unsafe")
    assert _lines(counter) == ["recorded"]  # count("after-divergence") never ran
    started = [e.data["name"] for e in _events(turn.pk, EventType.TOOL_STARTED)]
    assert started == ["search_documents"]  # the read-only tool ran live; count did not
    calls = [e.data["call"]["name"] for e in _events(turn.pk, EventType.TOOL_CALL)]
    assert calls == ["calculator", "search_documents", "count"]
    assert (item.verdict, item.divergence_step) == ("diverged", 2)
    terminal = _events(turn.pk, EventType.TURN_CANCELLED)[0].data
    assert terminal["stop_reason"] == "replay_unsafe" and terminal["tool"] == "count"


def test_the_same_path_with_another_answer_is_a_new_answer(owner, stub, counter):
    record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])

    _, (item,) = _replay(stub, "--system-prompt", "SAME-PATH")

    assert (item.verdict, item.divergence_step, item.turn.answer) == ("new_answer", None, "forty-two")
    assert _lines(counter) == ["recorded"]


def test_a_replay_killed_mid_turn_resumes_from_its_log(owner, stub, agent, counter, capsys):
    (original,) = record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    request = ReplayRequest(
        variant=replay_variant(path=None, overrides={"base_url": stub.base_url, "plugins": ["count"]}),
        name="killed",
        filters=TurnFilters(),
    )
    opened = replay_open(request)
    assert opened is not None
    provider = get_provider(model="stub-model", base_url=stub.base_url, api_key="test-key")
    agent.hold = threading.Event()  # the step-2 reply waits: the process is "killed" meanwhile

    async def killed() -> None:
        drive = replay_drive(
            opened.replay,
            opened.planned,
            provider=provider,
            extensions=Extensions(plugins=("count",)),
            concurrency=1,
            on_item=lambda item: None,
        )
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(drive, timeout=1.5)

    asyncio.run(killed())
    agent.hold.set()
    turn = Turn.objects.get(replay_of_id=original)
    assert turn.status == "running"  # cut off: its driver is gone
    assert [e.data["result"]["name"] for e in _events(turn.pk, EventType.TOOL_RESULT)] == ["calculator"]
    agent.hold = None

    call_command(
        "replay_turns", "--turns", "--base-url", stub.base_url, "--plugin", "count", "--name", "killed"
    )

    item = ReplayItem.objects.get(turn=turn)
    turn.refresh_from_db()
    assert (turn.status, turn.answer, item.verdict) == ("succeeded", "42", "identical")
    assert _lines(counter) == ["recorded"]
    assert _events(turn.pk, EventType.TOOL_STARTED) == []
    served = [e.data["result"]["name"] for e in _events(turn.pk, EventType.TOOL_RESULT)]
    assert served == ["calculator", "count", "final_answer"]  # calculator served once, not again
    assert len(_events(turn.pk, EventType.TURN_INTERRUPTED, EventType.TURN_RESUMED)) == 2
    assert "resuming 1 turn(s) as replay killed" in capsys.readouterr().out


def test_bad_input_exits_2_and_writes_nothing(owner, stub, counter, tmp_path):
    record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    turns = Turn.objects.count()
    variant = tmp_path / "variant.toml"
    variant.write_text('name = "terse"\nsystem_promt = "Be terse."\n', encoding="utf-8")

    with pytest.raises(CommandError) as unknown_key:
        call_command("replay_turns", "--turns", "--variant", str(variant))
    with pytest.raises(CommandError) as unknown_run:
        call_command("replay_turns", "--run", "no-such-run", "--model", "stub-model")
    with pytest.raises(CommandError) as both:
        call_command("replay_turns", "--turns", "--run", "r", "--model", "stub-model")
    with pytest.raises(CommandError) as no_variant:
        call_command("replay_turns", "--turns")

    assert unknown_key.value.returncode == 2
    assert "unknown key 'system_promt' (did you mean 'system_prompt'?)" in str(unknown_key.value)
    assert str(variant) in str(unknown_key.value)
    assert (unknown_run.value.returncode, str(unknown_run.value)) == (2, "--run 'no-such-run': no such run")
    assert both.value.returncode == 2 and "one of them" in str(both.value)
    assert no_variant.value.returncode == 2 and "no variant" in str(no_variant.value)
    assert Replay.objects.count() == 0 and Turn.objects.count() == turns


def test_a_model_that_cannot_be_used_exits_2_before_anything_is_written(owner, stub, counter, settings):
    record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    turns = Turn.objects.count()
    settings.AGENTLAB_MODEL = None  # an endpoint with no model named

    with pytest.raises(CommandError) as no_model:
        call_command("replay_turns", "--turns", "--base-url", stub.base_url, "--system-prompt", "x")

    assert no_model.value.returncode == 2 and "AGENTLAB_MODEL must name a model" in str(no_model.value)
    assert Replay.objects.count() == 0 and Turn.objects.count() == turns

    settings.AGENTLAB_LLM_BASE_URL = None  # the embedded model: --model names a GGUF file
    with pytest.raises(CommandError) as no_file:
        call_command("replay_turns", "--turns", "--model", "/nonexistent/model.gguf")

    assert no_file.value.returncode == 2 and "GGUF model file not found" in str(no_file.value)
    assert Replay.objects.count() == 0 and Turn.objects.count() == turns


def test_a_filter_that_selects_nothing_exits_0_with_nothing_written(owner, stub, counter, capsys):
    record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    turns = Turn.objects.count()

    call_command("replay_turns", "--turns", "--outcome", "asked", "--model", "stub-model")

    assert "nothing to replay" in capsys.readouterr().out
    assert Replay.objects.count() == 0 and Turn.objects.count() == turns
    assert not Turn.objects.filter(Q(kind="replay") | Q(replay_of__isnull=False)).exists()


def test_a_resume_with_other_options_is_refused(owner, stub, counter):
    record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    _replay(stub, "--name", "r1")

    with pytest.raises(CommandError) as changed:
        call_command("replay_turns", "--turns", "--base-url", stub.base_url, "--name", "r1", "--live")

    assert changed.value.returncode == 2 and "another variant, live" in str(changed.value)
    assert ReplayItem.objects.count() == 1


def test_the_admin_lists_a_replays_turns_beside_their_originals(owner, stub, counter, client, staff):
    (original,) = record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    replay, (item,) = _replay(stub, "--system-prompt", "SEARCH-FIRST", "--name", "admin-page")
    client.force_login(staff)

    listing = client.get("/admin/evaluation/replay/")
    page = client.get(f"/admin/evaluation/replay/{replay.pk}/change/")

    assert listing.status_code == 200 and "admin-page" in listing.content.decode()
    html = page.content.decode()
    assert page.status_code == 200
    assert f'/admin/turns/turn/{original}/change/">#{original}</a> 42' in html  # the original and its answer
    assert f'/admin/turns/turn/{item.turn_id}/change/">#{item.turn_id}</a> replay_diverged' in html
    assert "diverged at step 2" in html and "SEARCH-FIRST" in html
    # each turn's page links the other
    original_page = client.get(f"/admin/turns/turn/{original}/change/").content.decode()
    replay_page = client.get(f"/admin/turns/turn/{item.turn_id}/change/").content.decode()
    assert f'/admin/turns/turn/{item.turn_id}/change/">#{item.turn_id}</a> (<a' in original_page
    assert f'replays turn <a href="/admin/turns/turn/{original}/change/">#{original}</a> in <a' in replay_page


DATASET = [
    {"question_id": f"q{i}", "question": f"What is {i} + {i}?", "answer": "42", "task_type": "math"}
    for i in range(1, 4)
]


def test_a_runs_turns_replayed_are_scored_by_the_same_scorer_and_paired(tmp_path, stub, counter, capsys):
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in DATASET), encoding="utf-8")
    call_command("run_eval", "--no-review", str(path), "--run-id", "base", "--plugin", "count")
    run = Run.objects.get(run_id="base")
    assert run.metrics["accuracy"] == 1.0  # every recorded answer is "42"
    capsys.readouterr()

    call_command(
        "replay_turns",
        "--run",
        "base",
        "--base-url",
        stub.base_url,
        "--plugin",
        "count",
        "--system-prompt",
        "SAME-PATH",
    )

    replay = Replay.objects.get()
    items = list(replay.items.order_by("position"))
    assert replay.source_run_id == run.pk
    assert [(i.verdict, i.scorer, i.original_correct, i.correct) for i in items] == [
        ("new_answer", items[0].scorer, True, False)
    ] * 3
    assert items[0].scorer  # the prediction's own scorer
    paired = replay.summary["paired"]
    assert (paired["n"], paired["original_correct"], paired["new_correct"], paired["broken"]) == (3, 3, 0, 3)
    assert paired["p_value"] == 0.25  # exact McNemar: 2 * (1/2)^3
    out = capsys.readouterr().out
    assert "(correct: yes → no)" in out and "exact McNemar p = 0.25" in out


def test_the_turn_lists_filters_and_a_seeded_sample_choose_the_turns(owner, teammate, stub, counter):
    from django.contrib.auth.models import Group

    from evaluation.replay.selection import chat_turns, turn_filters

    mine = record_chat_turns(owner, base_url=stub.base_url, questions=["a 1", "a 2", "a 3", "a 4"])
    theirs = record_chat_turns(teammate, base_url=stub.base_url, questions=["b 1"])
    Group.objects.create(name="support").user_set.add(owner)
    Turn.objects.filter(pk=mine[0]).update(outcome="asked")

    def chosen(**filters: str | None) -> list[int]:
        given = {"group": None, "since": None, "until": None, "outcome": None, "tool": None, **filters}
        return list(chat_turns(turn_filters(**given)).values_list("pk", flat=True))

    assert chosen() == [*mine, *theirs]
    Turn.objects.filter(pk=theirs[0]).update(agent_options={"variant": "b"})  # a side-by-side page's turn
    assert chosen() == mine  # staff trying variants are not the users' traffic
    Turn.objects.filter(pk=theirs[0]).update(agent_options={})
    assert chosen(group="support") == mine
    assert chosen(group="support", outcome="answered") == mine[1:]
    assert chosen(tool="count") == [*mine, *theirs] and chosen(tool="sql_query") == []
    assert chosen(since="2000-01-01", until="2000-01-02") == []
    with pytest.raises(BadInput, match="--group 'nobody': no such group"):
        chosen(group="nobody")
    with pytest.raises(BadInput, match="--since must be an ISO date"):
        chosen(since="yesterday")

    call_command(
        "replay_turns",
        "--turns",
        "--group",
        "support",
        "--sample",
        "2",
        "--seed",
        "7",
        "--base-url",
        stub.base_url,
        "--plugin",
        "count",
    )
    picked = sorted(ReplayItem.objects.values_list("original_id", flat=True))
    assert len(picked) == 2 and set(picked) <= set(mine)
    assert picked == sorted(seeded_sample(mine, 2, 7))  # the sample run_eval --sample draws


def test_a_replay_turn_is_not_resumed_or_retried_outside_replay_turns(owner, stub, counter):
    record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    _, (item,) = _replay(stub, "--system-prompt", "SEARCH-FIRST")
    turn = item.turn
    assert turn.status == "cancelled"

    with pytest.raises(StateConflict, match=f"turn {turn.pk} is a replay turn: only manage.py replay_turns"):
        turn_retry_and_enqueue(turn_id=turn.pk)

    turn.refresh_from_db()
    assert turn.status == "cancelled" and _lines(counter) == ["recorded"]
    # a job handed a queued replay turn leaves it alone
    queued = turn_create(owner=owner, question="q", kind="replay")
    db = DatabaseThreads(max_workers=1)
    provider = get_provider(model="stub-model", base_url=stub.base_url, api_key="test-key")
    try:
        asyncio.run(run_turn_job(queued.pk, provider=provider, db=db))
    finally:
        db.close()
    queued.refresh_from_db()
    assert (queued.status, queued.last_seq) == ("queued", 1)


def test_a_variant_file_is_read_like_an_experiments_variant(owner, stub, counter, tmp_path):
    record_chat_turns(owner, base_url=stub.base_url, questions=["What is 6*7?"])
    (tmp_path / "prompt.txt").write_text("SEARCH-FIRST: look it up.", encoding="utf-8")
    variant = tmp_path / "careful.toml"
    variant.write_text(
        f'name = "careful"\nbase_url = "{stub.base_url}"\nsystem_prompt_file = "prompt.txt"\n'
        'plugins = ["count"]\nmax_steps = 4\n',
        encoding="utf-8",
    )

    call_command("replay_turns", "--turns", "--variant", str(variant), "--max-steps", "5")

    replay = Replay.objects.get()
    item = replay.items.select_related("turn").get()
    assert (
        replay.variant["system_prompt"] == "SEARCH-FIRST: look it up."
    )  # the file read, relative to the variant
    assert item.turn.max_steps == 5  # the flag over the file
    assert (item.verdict, item.divergence_step) == ("diverged", 2)
