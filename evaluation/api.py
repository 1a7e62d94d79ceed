"""API routes for evaluation runs and predictions (docs/chat-and-api.md#the-http-api), an
experiment's leaderboard (``GET /experiments/{name}``), and examples made from chat turns.

Runs, predictions and leaderboards are read with a session or an API key (``X-API-Key``);
runs are team-wide. ``POST /datasets/{name}/examples`` writes: staff with a
session (and CSRF) only — a non-staff user gets 403, and so does any API key,
even a staff member's: keys stay read-only (``apikeys.auth``).
"""

# No ``from __future__ import annotations``: django-ninja reads the handlers'
# annotations at import time to build their schemas.

from datetime import datetime
from typing import Annotated, Any, Literal

from django.contrib.auth.models import User
from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.errors import HttpError
from ninja.pagination import paginate
from pydantic import AfterValidator

from agentlab.agent.text import clean_text
from apikeys.auth import SessionAuth, api_key_auth, session_auth
from apikeys.throttle import api_key_throttle
from common.api import ERRORS, MAX_ID, AuthedRequest, Pagination
from evaluation import selectors
from evaluation.compare.services import run_compare_ids
from evaluation.compare.shapes import Comparison
from evaluation.datasets.from_turns import MAX_TASK_TYPE, MAX_TURNS, TurnPick, examples_from_turns
from evaluation.datasets.names import MAX_NAME
from evaluation.experiments.ranking import experiment_get, leaderboard, leaderboard_json
from evaluation.experiments.side_by_side import (
    MAX_QUESTION,
    MAX_VARIANTS_TEXT,
    side_by_side_read,
    side_by_side_start,
)
from evaluation.metrics.intervals import CONFIDENCE, wilson_interval
from evaluation.models import Prediction, Run, RunStatus

# API keys are rate-limited per key (AGENTLAB_API_KEY_RATE); sessions are not
router = Router(tags=["evaluation runs"], auth=[api_key_auth, session_auth], throttle=[api_key_throttle])

Text = Annotated[str, AfterValidator(clean_text)]
RunId = Annotated[str, AfterValidator(clean_text), Path(min_length=1, max_length=200)]
DatasetName = Annotated[str, AfterValidator(clean_text), Path(min_length=1, max_length=MAX_NAME)]
ExperimentName = Annotated[str, AfterValidator(clean_text), Path(min_length=1, max_length=100)]


class StaffSessionAuth(SessionAuth):
    """``SessionAuth`` for staff only: a logged-in user who is not active
    staff gets 403 (``only staff may <what>``) — before the body is read, so
    a malformed body from a non-staff user is 403 too. A key alone gets
    ``SessionAuth``'s 403."""

    def __init__(self, what: str = "add examples to a dataset") -> None:
        super().__init__()
        self.what = what

    def authenticate(self, request: HttpRequest, key: str | None) -> User | None:
        user = super().authenticate(request, key)
        if user is not None and not (user.is_active and user.is_staff):
            raise HttpError(403, f"only staff may {self.what}")
        return user


staff_session_auth = StaffSessionAuth()


class AccuracyOut(Schema):
    value: float = Field(description="correct / n, in 0..1")
    correct: int
    n: int = Field(description="scored predictions (unscored ones are not in the denominator)")
    ci_low: float = Field(description="the 95% Wilson score interval's lower end, in 0..1")
    ci_high: float
    confidence: float


class RunOut(Schema):
    run_id: str
    dataset: str
    dataset_version: int = Field(description="the dataset version the run is on")
    status: str
    accuracy: AccuracyOut | None = Field(
        description="the run's accuracy with its n and 95% Wilson interval; null when nothing was scored"
    )
    rescored_from: str | None = Field(description="the run whose predictions this run re-scored")
    experiment: str | None = Field(description="the experiment the run is a variant of (run_experiment)")
    variant: str | None = Field(description="the run's variant in its experiment; null for a plain run")
    config: dict[str, Any]
    metrics: dict[str, Any]
    started_by: str | None
    created_at: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_dataset(obj: Run) -> str:
        return obj.dataset.name

    @staticmethod
    def resolve_accuracy(obj: Run) -> dict[str, Any] | None:
        metrics = obj.metrics or {}
        correct, n = int(metrics.get("correct") or 0), int(metrics.get("scored") or 0)
        interval = wilson_interval(correct, n) if 0 <= correct <= n else None
        if interval is None:
            return None
        return {
            "value": correct / n,
            "correct": correct,
            "n": n,
            "ci_low": interval[0],
            "ci_high": interval[1],
            "confidence": CONFIDENCE,
        }

    @staticmethod
    def resolve_rescored_from(obj: Run) -> str | None:
        return obj.rescored_from.run_id if obj.rescored_from is not None else None

    @staticmethod
    def resolve_experiment(obj: Run) -> str | None:
        return obj.experiment.name if obj.experiment is not None else None

    @staticmethod
    def resolve_variant(obj: Run) -> str | None:
        return obj.variant or None

    @staticmethod
    def resolve_started_by(obj: Run) -> str | None:
        return obj.started_by.get_username() if obj.started_by is not None else None


class PredictionOut(Schema):
    id: int
    example_id: str = Field(description="the example's external id")
    turn_id: int | None
    task_type: str
    question: str
    prediction: str
    gold_answer: str | list[str] = Field(
        description="the gold answer, or a list of aliases (any one is correct)"
    )
    answer_mismatch: str = Field(
        description="how the answer's JSON type did not fit the scorer ('' when it fit); "
        "it was scored as its JSON text"
    )
    usage: dict[str, Any] = Field(
        description="the turn's usage over all attempts: tokens, calls and cost, "
        "by_model and by_role (agent, review)"
    )
    epoch: int = Field(description="which run of the example (1..K with run_eval --epochs K)")
    scorer: str
    score: float | None = Field(description="1, 0, or 0.5 for a judge's partial grade; null: unscored")
    correct: bool | None = Field(description="null: could not be scored (not the same as wrong)")
    score_explanation: str = Field(description="what the scorer compared, or why it could not score")
    judgement: dict[str, Any] = Field(
        description="the LLM judge's grading: model, grade, cached, usage (role judge), error; {} otherwise"
    )
    evidence: str
    reasoning: str
    steps: int
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    stop_reason: str
    error: str
    latency_ms: int | None
    created_at: datetime
    completed_at: datetime | None

    @staticmethod
    def resolve_example_id(obj: Prediction) -> str:
        return obj.example.external_id

    @staticmethod
    def resolve_question(obj: Prediction) -> str:
        return obj.example.question


@router.get("/runs", response={200: list[RunOut], **ERRORS}, summary="Evaluation runs, newest first")
@paginate(Pagination)
def run_list(
    request: AuthedRequest,
    status: RunStatus | None = Query(None),
    dataset: Text | None = Query(None, max_length=200, description="dataset name"),
    experiment: Text | None = Query(None, max_length=100, description="experiment name: its variants' runs"),
) -> Any:
    return selectors.run_list(status=status, dataset=dataset, experiment=experiment)


@router.get("/runs/{run_id}", response={200: RunOut, **ERRORS}, summary="One run, with its metrics")
def run_get(request: AuthedRequest, run_id: RunId) -> Run:
    return selectors.run_get(run_id=run_id)


@router.get(
    "/runs/{run_id}/predictions",
    response={200: list[PredictionOut], **ERRORS},
    summary="A run's predictions, filterable by task type, correctness, stop reason and a failed check",
)
@paginate(Pagination)
def prediction_list(
    request: AuthedRequest,
    run_id: RunId,
    task_type: Text | None = Query(None, max_length=64),
    correct: bool | None = Query(None, description="true/false: scored rows that are right/wrong"),
    scored: bool | None = Query(None, description="false: rows that could not be scored"),
    stop_reason: Text | None = Query(None, max_length=32),
    failed_check: Text | None = Query(
        None,
        max_length=200,
        description="a check name: rows whose turn failed it (metrics.checks names them)",
    ),
) -> Any:
    run = selectors.run_get(run_id=run_id)
    return selectors.prediction_list(
        run=run,
        task_type=task_type,
        correct=correct,
        scored=scored,
        stop_reason=stop_reason,
        failed_check=failed_check,
    )


@router.get(
    "/runs/{base}/compare/{candidate}",
    response={200: Comparison, **ERRORS},
    summary="Compare a candidate run with a baseline on the same dataset, paired by example",
    description="Paired accuracy overall and per task type: the difference with its 95% interval "
    "(Newcombe 1998, method 10), the exact McNemar p-value (per task type also Holm-adjusted); the "
    "examples fixed, broken and errored, with both predictions and turns; deltas of cost, tokens, "
    "steps, latency, stop reasons, review and checks. 400 when the runs are on different datasets.",
)
def run_compare(request: AuthedRequest, base: RunId, candidate: RunId) -> Comparison:
    return run_compare_ids(base_run_id=base, candidate_run_id=candidate)


class LeaderboardVariantOut(Schema):
    name: str
    run_id: str
    status: str
    rank: int | None = Field(description="1 = best; null: not finished, so not ranked")
    accuracy: float | None = Field(description="in 0..1; with epochs the mean accuracy over examples")
    ci_low: float | None = Field(description="95% interval: Wilson, or with epochs the bootstrap's")
    ci_high: float | None
    interval: str = Field(description="wilson or bootstrap")
    n: int = Field(description="scored predictions (with epochs: scored examples)")
    correct: int
    epochs: int
    pass_at_k: dict[str, float | None] | None
    cost: float | None = Field(description="total cost in USD; null: unknown")
    cost_per_correct: float | None = Field(description="USD per correct answer; null: unknown, or none right")
    top_group: bool = Field(description="not significantly worse than the best at alpha (Holm-adjusted)")
    pareto: bool = Field(description="on the Pareto frontier of accuracy vs total cost")
    cost_per_example: float | None = Field(description="mean cost per example in USD; null: unknown")
    cost_per_example_ci: list[float] | None = Field(description="its 95% bootstrap interval over examples")
    frontier_undecided: bool = Field(description="its place on the frontier is not decided by the intervals")
    per_task_type: dict[str, dict[str, Any]]
    tokens: dict[str, int]
    latency_p50_s: float | None
    latency_p95_s: float | None
    errors: int
    stop_reasons: dict[str, int]
    trajectory: dict[str, Any] | None = Field(
        None,
        description="trajectory pass rate: accuracy (0..1), ci_low, ci_high (95% Wilson), n (scored), "
        "correct; null when the run has no trajectory verdict",
    )


class LeaderboardPairOut(Schema):
    a: str = Field(description="the variant ranked higher")
    b: str
    difference: float | None = Field(
        description="accuracy (ranked by trajectory: trajectory pass rate) of a minus b on the examples "
        "both scored"
    )
    p_value: float | None = Field(description="exact McNemar, or the paired bootstrap with epochs")
    p_holm: float | None = Field(description="Holm-adjusted across all the pairs")
    n: int = Field(description="paired examples")
    test: str
    detectable_difference: float | None = Field(
        description="± the smallest difference this pair could detect with 80% power (exact McNemar at "
        "alpha over the pairs, Holm's first step); null when too few examples for any"
    )
    decided_early_at: int | None = Field(
        None,
        description="run_experiment --stop-when-decided: the examples at which the pair's confidence "
        "sequence decided it before the data ran out; null otherwise",
    )


class LeaderboardOut(Schema):
    experiment: str
    rank_by: str = Field(description="answer or trajectory: what the variants and pairs are ranked by")
    dataset: str
    dataset_version: int
    alpha: float
    variants: list[LeaderboardVariantOut] = Field(description="best first, then the unfinished ones")
    pairs: list[LeaderboardPairOut]
    top_group: list[str]
    frontier: list[str] = Field(description="the Pareto frontier, by ascending cost")
    cost_unknown: list[str] = Field(description="finished variants of unknown cost: not on the frontier")
    frontier_undecided: list[str] = Field(description="variants whose place on the frontier is not decided")
    stopped_early: dict[str, Any] | None = Field(
        None,
        description="run_experiment --stop-when-decided's record: stopped_early (bool), examples "
        "(reached), of (planned), margin, batch_size, alpha, construction, pairs (a, b, verdict, low, "
        "high, examples, decided_at); null when the experiment was not driven in rounds",
    )


@router.get(
    "/experiments/{path:name}",
    response={200: LeaderboardOut, **ERRORS},
    summary="An experiment's leaderboard: variants ranked, every pair compared, top group, frontier",
    description="The experiment by name (or slug). Pairs: exact McNemar (paired bootstrap with epochs), "
    "p Holm-adjusted across all pairs; the top group at alpha (default: the experiment's). 404 for an "
    "unknown experiment (the message names the known ones).",
)
def experiment_leaderboard(
    request: AuthedRequest,
    name: ExperimentName,
    alpha: float | None = Query(None, gt=0, lt=1, description="significance level of the top group"),
    rank_by: Literal["answer", "trajectory"] | None = Query(
        None, description="rank by the answer's verdict or by trajectory pass (default: the experiment's)"
    ),
) -> dict[str, Any]:
    return leaderboard_json(leaderboard(experiment_get(name), alpha=alpha, rank_by=rank_by))


class TurnExampleIn(Schema):
    turn_id: int = Field(..., ge=1, le=MAX_ID)
    answer: Text | None = Field(
        None, description="the gold answer; omitted or null: the turn's own answer (an empty one is refused)"
    )
    task_type: Text = Field(..., min_length=1, max_length=MAX_TASK_TYPE)
    scorer: Text = Field("", max_length=32, description="a known scorer, or '' (by task type)")


class ExamplesFromTurnsIn(Schema):
    examples: list[TurnExampleIn] = Field(..., min_length=1, max_length=MAX_TURNS)
    create: bool = Field(
        False, description="make the dataset (its version 1) when there is none by that name"
    )


class ExamplesFromTurnsOut(Schema):
    dataset: str
    version: int = Field(description="the dataset's latest version after the request")
    added: list[str] = Field(description="question_ids of the examples added (turn-<turn id>), in order")
    duplicates: list[int] = Field(description="turns not added: their question is already in the dataset")


@router.post(
    "/datasets/{name}/examples",
    auth=staff_session_auth,
    response={200: ExamplesFromTurnsOut, 201: ExamplesFromTurnsOut, **ERRORS},
    summary="Add chat turns to a dataset as examples, in one new version (staff only)",
    description="Each turn becomes example turn-<id>: its question, the gold answer given (else the "
    "turn's answer), metadata.source_turn and metadata.conversation (the turns before it). 201 when "
    "examples were added, 200 when every turn was a duplicate. 404 for an unknown dataset (unless "
    "create) or turn; 400 for an empty gold answer; nothing is written on any error.",
)
def dataset_examples_from_turns(
    request: AuthedRequest, name: DatasetName, payload: ExamplesFromTurnsIn
) -> Status:
    added = examples_from_turns(
        dataset_name=name,
        picks=[
            TurnPick(turn_id=e.turn_id, gold=e.answer, task_type=e.task_type, scorer=e.scorer)
            for e in payload.examples
        ],
        create=payload.create,
        user=request.auth,
    )
    body = {
        "dataset": added.dataset.name,
        "version": added.version,
        "added": added.added,
        "duplicates": added.duplicates,
    }
    return Status(201 if added.added else 200, body)


class SideBySideIn(Schema):
    question: str = Field(..., max_length=MAX_QUESTION)
    variants: str = Field(
        ...,
        max_length=MAX_VARIANTS_TEXT,
        description="2 to 4 [[variant]] tables (TOML), as in an experiment file: name and any of model, "
        "base_url, system_prompt, temperature, max_steps, max_output_tokens",
    )


class SideBySideOut(Schema):
    turn_ids: list[int] = Field(description="one chat turn per variant, in the variants' order")
    variants: list[str] = Field(description="the variants' names, in the same order")
    page: str = Field(description="the side-by-side page that shows them")


@router.post(
    "/side-by-side",
    auth=StaffSessionAuth("ask side by side"),
    response={201: SideBySideOut, **ERRORS},
    summary="Ask one question of 2 to 4 variants, each a chat turn (staff only)",
    description="The variants are read as an experiment file's (docs/chat-and-api.md#side-by-side). "
    "Each turn streams like any other (GET /api/turns/{id}/events, the websocket, SSE). 400 for bad "
    "input (one variant or more than four, an unknown key, a value out of range); nothing is written.",
)
def side_by_side_ask(request: AuthedRequest, payload: SideBySideIn) -> Status:
    checked = side_by_side_read(payload.question, payload.variants)
    turns = side_by_side_start(owner=request.auth, request=checked)
    query = "&".join(f"turn={turn.pk}" for turn in turns)
    body = {
        "turn_ids": [turn.pk for turn in turns],
        "variants": [variant.name for variant in checked.variants],
        "page": f"{reverse('side_by_side')}?{query}",
    }
    return Status(201, body)
