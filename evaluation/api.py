"""API routes for evaluation runs and predictions (DESIGN.md §7): read only.

Readable with a session or an API key (``X-API-Key``); runs are team-wide.
"""

# No ``from __future__ import annotations``: django-ninja reads the handlers'
# annotations at import time to build their schemas.

from datetime import datetime
from typing import Annotated, Any

from ninja import Field, Path, Query, Router, Schema
from ninja.pagination import paginate
from pydantic import AfterValidator

from agentlab.agent.text import clean_text
from apikeys.auth import api_key_auth, session_auth
from apikeys.throttle import api_key_throttle
from common.api import ERRORS, AuthedRequest, Pagination

from . import selectors
from .models import Prediction, Run, RunStatus

# API keys are rate-limited per key (AGENTLAB_API_KEY_RATE); sessions are not
router = Router(tags=["evaluation runs"], auth=[api_key_auth, session_auth], throttle=[api_key_throttle])

Text = Annotated[str, AfterValidator(clean_text)]
RunId = Annotated[str, AfterValidator(clean_text), Path(min_length=1, max_length=200)]


class RunOut(Schema):
    run_id: str
    dataset: str
    status: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    started_by: str | None
    created_at: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_dataset(obj: Run) -> str:
        return obj.dataset.name

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
    scorer: str
    score: float | None
    correct: bool | None = Field(description="null: could not be scored (not the same as wrong)")
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
) -> Any:
    return selectors.run_list(status=status, dataset=dataset)


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
