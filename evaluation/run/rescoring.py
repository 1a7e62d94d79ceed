"""``manage.py rescore``: score a finished run's stored predictions again with
another scorer, into a new run, without running the agent (inspect_ai's
``inspect score``).

The new run records where it came from (``Run.rescored_from``; its config
names the source, the scorer and the judge model), so the original stays as
it was and the two can be compared. Its predictions point at the same turns.
``rescore_start`` writes the new run, ``rescore_copy`` its predictions, and
:func:`rescore` drives the whole: the LLM judge may be called
(``evaluation.judge.judge_pass``) before the run is finished with its metrics.
``manage.py rescore`` parses its options, calls ``rescore`` and prints the
metrics table.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentlab.agent.plugins import PluginError
from agentlab.agent.types import LLMProvider
from common.errors import BadInput, StateConflict
from common.version import code_version
from evaluation.judge.grader import JUDGE
from evaluation.judge.judge_pass import JudgeTally, judge_pass
from evaluation.judge.provider import judge_check, judge_provider
from evaluation.judge.trajectory_judge import TRAJECTORY_JUDGE
from evaluation.models import Prediction, Run, RunStatus
from evaluation.run.lifecycle import run_finish, run_start
from evaluation.run.path_judging import path_judge_pass
from evaluation.run.record import AWAITING_JUDGE, score_without_judge, scorer_plugins, scorers_of_plugins
from evaluation.run.request import RUN_ID_MAX
from evaluation.scoring.dispatch import answer_mismatch, check_scorer
from evaluation.selectors import run_get
from turns.attempts import first_attempt_if_review_retried, turn_attempts
from turns.meta import meta_answer_type
from turns.models import TurnOutcome

#: Copied from the source prediction as they are: what the agent did.
_COPIED = (
    "example",
    "turn",
    "conversation",
    "conversation_result",
    "epoch",
    "task_type",
    "prediction",
    "gold_answer",
    "evidence",
    "reasoning",
    "steps",
    "input_tokens",
    "output_tokens",
    "cost",
    "stop_reason",
    "error",
    "latency_ms",
    "review_retried",
    "review_verdict",
    "usage",
)


#: ``rescore --scorer trajectory``: score the agent's paths from the event log
#: (``evaluation.run.trajectory_pass``, run by ``run_finish``), the answers' verdicts copied.
TRAJECTORY = "trajectory"

#: What ``rescore --scorer`` takes beside the answer scorers: the paths' scorers
#: (``trajectory_judge`` also asks the LLM judge about each path, ``evaluation.run.path_judging``).
PATH_SCORERS = frozenset({TRAJECTORY, TRAJECTORY_JUDGE})

#: The answer's verdict, copied as it is by ``--scorer trajectory``.
_ANSWER_VERDICT = (
    "scorer",
    "score",
    "correct",
    "score_explanation",
    "first_correct",
    "judgement",
    "answer_mismatch",
    "completed_at",
)


def rescore_start(
    *, source: Run, scorer: str, run_id: str | None = None, judge_model: str | None = None
) -> tuple[Run, bool]:
    """Start the re-scored run of ``source`` under ``scorer`` (or take it up
    again: the same ``run_id`` resumes what a cut-off rescore left).

    Returns ``(run, resumed)``. Raises ``BadInput`` for an unknown scorer,
    ``StateConflict`` when ``source`` is not finished (status ``started``),
    or when ``run_id`` names a run that is not a re-scoring of ``source``
    under ``scorer``, or when a plugin whose scorers it may name does not
    load (``PluginError``). A plugin's scorer is recorded in the config
    (``scorer_plugin``: the plugin, its distribution and version)."""
    try:
        found = scorers_of_plugins(scorer_plugins(dataset_plugins=source.dataset.plugins or ()))
    except PluginError as exc:
        raise BadInput(f"--scorer {scorer}: {exc}") from None
    try:
        if scorer not in PATH_SCORERS:
            check_scorer(scorer, found)
    except ValueError as exc:
        raise BadInput(f"{exc}, or {TRAJECTORY!r} or {TRAJECTORY_JUDGE!r} (the agent's paths)") from None
    if source.status == RunStatus.STARTED:
        raise StateConflict(
            f"run {source.run_id!r} is not finished (status started); re-score a finished run, "
            f"or resume it first: run_eval {source.dataset.name} --run-id {source.run_id}"
        )
    if run_id is None:
        suffix = f"-{scorer}-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        run_id = source.run_id[: RUN_ID_MAX - len(suffix)] + suffix
    existing = Run.objects.filter(run_id=run_id).first()
    if existing is not None and (
        existing.rescored_from_id != source.pk or existing.config.get("scorer") != scorer
    ):
        raise StateConflict(
            f"run {run_id!r} exists and is not a re-scoring of {source.run_id!r} with {scorer!r}; "
            "choose another --run-id"
        )
    config: dict[str, Any] = {
        **{k: v for k, v in source.config.items() if k not in ("resumes", "throughput")},
        "scorer": scorer,
        "judge_model": judge_model,
        "rescored_from": source.run_id,
        "scorer_plugin": found[scorer].describe() if scorer in found else None,
        "code_version": code_version(),
    }
    # the source's dataset version, not the dataset's latest: the same predictions
    run, resumed = run_start(
        run_id=run_id, dataset=source.dataset, config=config, dataset_version=source.dataset_version
    )
    if not resumed:
        Run.objects.filter(pk=run.pk).update(rescored_from=source)
        run.rescored_from = source
    return run, resumed


def rescore_copy(*, source: Run, target: Run, scorer: str) -> int:
    """Copy ``source``'s predictions into ``target``, scored by ``scorer``,
    in one transaction; returns how many were copied.

    What the agent did is copied as it is (answer, steps, usage, stop reason,
    error, epoch, the turn). ``trajectory`` copies the answer's verdict too
    and leaves the paths to ``run_finish``'s trajectory pass. A pure scorer scores at once; for ``judge`` the
    answers are left awaiting the judge (``AWAITING_JUDGE``), which
    ``evaluation.judge.judge_pass.judge_run`` then grades. A row the source never
    completed (its turn never finished) stays as it was: wrong, with its
    error. The first attempt of a reviewed-and-retried turn is scored again
    by a pure scorer, and left unscored by the judge (not paid twice). A
    conversation example keeps its verdict (its turns name their own scorers)."""
    rows: list[Prediction] = []
    for p in source.predictions.select_related("example__dataset", "turn").order_by("pk"):
        new = Prediction(run=target, **{name: getattr(p, name) for name in _COPIED})
        # the answer's verdict as it was: the paths are scored at the finish; a
        # conversation is scored per turn by its own scorers (docs/evaluating.md#conversation-examples)
        if scorer in PATH_SCORERS or p.conversation_result:
            for name in _ANSWER_VERDICT:
                setattr(new, name, getattr(p, name))
            rows.append(new)
            continue
        if p.completed_at is None and not p.scorer:
            new.scorer, new.score, new.correct, new.first_correct = p.scorer, p.score, p.correct, None
            new.score_explanation = p.score_explanation
            rows.append(new)
            continue
        meta = p.turn.meta if p.turn is not None else {}
        # a prediction whose turn was deleted keeps its stored answer
        answered = p.turn.outcome == TurnOutcome.ANSWERED if p.turn is not None else bool(p.prediction)
        answer = p.prediction if answered else None
        result = score_without_judge(
            example=p.example, answer=answer, scorer=scorer, steps=p.steps, usage=p.usage
        )
        new.scorer = scorer
        new.score = result.value if result is not None else None
        new.correct = result.correct if result is not None else None
        new.score_explanation = result.explanation if result is not None else AWAITING_JUDGE
        new.completed_at = timezone.now() if result is not None else None
        new.answer_mismatch = answer_mismatch(
            answer_type=meta_answer_type(meta) if answered else None, scorer=scorer
        )
        first = (
            first_attempt_if_review_retried(turn_attempts(p.turn)) if p.review_retried and p.turn else None
        )
        if first is None:
            new.first_correct = new.correct
        elif scorer == JUDGE:
            new.first_correct = None
        else:
            first_answer = first.answer if first.outcome == TurnOutcome.ANSWERED else None
            first_score = score_without_judge(example=p.example, answer=first_answer, scorer=scorer)
            new.first_correct = first_score.correct if first_score is not None else None
        rows.append(new)
    with transaction.atomic():
        Prediction.objects.bulk_create(rows, batch_size=500)
    return len(rows)


@dataclass(frozen=True)
class RescoreResult:
    """The re-scored run (finished, metrics stored), how many predictions it
    took from the source, and what the judge did (``None``: not asked)."""

    run: Run
    copied: int
    judge: JudgeTally | None


def rescore(
    *,
    source_run_id: str,
    scorer: str,
    judge_model: str | None = None,
    run_id: str | None = None,
    concurrency: int = 4,
    provider: LLMProvider | None = None,
) -> RescoreResult:
    """Score run ``source_run_id``'s predictions with ``scorer`` into a new
    run (``run_id``, else ``<source>-<scorer>-<time>-<hex>``) that records
    ``rescored_from``, and finish it with its metrics.

    ``scorer`` ``trajectory`` scores the paths from the log; ``trajectory_judge``
    also has the LLM judge grade each path (``evaluation.run.path_judging``).
    ``judge_model``: the grading model for ``judge`` and ``trajectory_judge`` (``None``:
    the source run's model; see ``evaluation.judge.judge_pass.judge_provider``);
    ``provider`` replaces it (tests). Judge grades are cached, so a second
    re-score of the same answers makes no call. Giving the ``run_id`` of a
    re-score that was cut off takes it up again (only the answers still
    awaiting the judge are graded).

    Raises ``NotFound`` (no such run), ``BadInput`` (unknown scorer, bad run
    id), ``StateConflict`` (source not finished, run id taken),
    ``ValueError`` (``concurrency < 1``), ``LocalModelUnavailable``.
    """
    if concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
    source = run_get(run_id=source_run_id)
    run_model = str(source.config.get("model") or "") or None
    if scorer in (JUDGE, TRAJECTORY_JUDGE) and provider is None:  # before anything is written
        judge_check(judge_model=judge_model or run_model)
    run, resumed = rescore_start(source=source, scorer=scorer, run_id=run_id, judge_model=judge_model)
    copied = 0 if resumed else rescore_copy(source=source, target=run, scorer=scorer)
    # a re-scoring is as finished as its source: a cancelled run's predictions
    # re-scored are still a cancelled run's (the gate refuses it as a baseline)
    status = RunStatus.SUCCESS if source.status == RunStatus.SUCCESS else RunStatus(source.status)
    tally = None
    try:
        if scorer == TRAJECTORY_JUDGE:
            grader = provider or judge_provider(judge_model=judge_model, run_model=run_model)
            paths = path_judge_pass(run=run, provider=grader, concurrency=concurrency)
            tally = JudgeTally(
                graded=paths.graded, cached=paths.cached, calls=paths.calls, unscored=paths.unscored
            )
        if scorer == JUDGE:
            tally = judge_pass(
                run=run,
                judge_model=judge_model,
                run_model=run_model,
                concurrency=concurrency,
                provider=provider,
            )
    except KeyboardInterrupt:
        status = RunStatus.CANCELLED
        raise
    except BaseException:
        status = RunStatus.ERROR
        raise
    finally:
        run = run_finish(run=run, status=status)
    return RescoreResult(run=run, copied=copied, judge=tally)
