"""API routes that start and cancel evaluation runs (issue 46; docs/chat-and-api.md#starting-a-run).

``POST /runs`` starts ``run_eval`` on a registered dataset and answers 202 at
once (``evaluation.run.api_start``); ``POST /runs/{run_id}/cancel`` cancels a
run as ``manage.py cancel_run`` does. Allowed: staff with a session (and
CSRF), or an API key with the ``run`` scope; a read-only key gets 403, no
credentials 401. The operations are added to ``evaluation.api.router``
(registered from here, ``config.api``).
"""

# No ``from __future__ import annotations``: django-ninja reads the handlers'
# annotations at import time to build their schemas.

from typing import Annotated, Any
from urllib.parse import quote

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja import Field, Path, Schema, Status
from ninja.errors import HttpError
from pydantic import AfterValidator, ConfigDict

from agentlab.agent.text import clean_text
from apikeys.auth import ApiKeyAuth, SessionAuth
from apikeys.models import ApiKey, ApiKeyScope
from common.api import ERRORS, AuthedRequest, ErrorOut
from evaluation.api import router
from evaluation.run.api_start import run_start_over_api
from evaluation.run.cancel import run_cancel

RunId = Annotated[str, AfterValidator(clean_text), Path(min_length=1, max_length=200)]
Text = Annotated[str, AfterValidator(clean_text)]


class RunScopeKeyAuth(ApiKeyAuth):
    """``X-API-Key`` with the ``run`` scope; a live key with another scope is 403."""

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        found: ApiKey | None = super().authenticate(request, key)
        if found is not None and found.scope != ApiKeyScope.RUN:
            raise HttpError(
                403, "this API key is read-only: only a key with the 'run' scope starts or cancels runs"
            )
        return found


class StaffRunSessionAuth(SessionAuth):
    """The session of active staff; another logged-in user is 403."""

    def authenticate(self, request: HttpRequest, key: str | None) -> User | None:
        user = super().authenticate(request, key)
        if user is not None and not (user.is_active and user.is_staff):
            raise HttpError(403, "only staff (or an API key with the 'run' scope) may start or cancel runs")
        return user


#: who may start and cancel runs; the operations join ``evaluation.api``'s router
#: (``GET /runs`` and ``POST /runs`` are one path: ninja serves a path from one router)
RUN_AUTH = [RunScopeKeyAuth(), StaffRunSessionAuth()]


class RunStartIn(Schema):
    """``run_eval``'s options (docs/evaluating.md), by their long names with
    ``_``; an option not listed is 422 naming it."""

    model_config = ConfigDict(extra="forbid")

    dataset: Text = Field(
        min_length=1, max_length=300, description="a registered dataset: NAME or NAME@VERSION"
    )
    run_id: Text | None = Field(None, description="the new run's id (default: NAME-date-time-xxxx)")
    limit: int | None = None
    sample: int | None = None
    seed: int | None = None
    split: Text | None = None
    tags: list[Text] = Field(default_factory=list, max_length=100)
    concurrency: int = 4
    epochs: int | None = None
    max_steps: int | None = None
    max_output_tokens: int | None = None
    model: Text | None = None
    judge_model: Text | None = None
    #: the simulated user of simulated-user examples (docs/evaluating.md#simulated-users)
    user_model: Text | None = None
    user_temperature: float | None = None
    user_seed: int | None = None
    base_url: Text | None = Field(None, description="an OpenAI-compatible endpoint; it is sent no API key")
    system_prompt: Text | None = None
    temperature: float | None = None
    review: bool = True
    retry_errors: bool = False
    fail_under: float | None = None
    price_in: float | None = None
    price_out: float | None = None
    plugins: list[Text] = Field(default_factory=list, max_length=50)


class RunStartedOut(Schema):
    run_id: str
    url: str = Field(description="the run's API URL (GET it for its status and metrics)")


class RunCancelledOut(Schema):
    run_id: str
    status: str
    cancelled: int = Field(description="turns cancelled or asked to stop")
    followed: bool = Field(description="a run_eval drives the run and finishes it as cancelled")


@router.post(
    "/runs",
    auth=RUN_AUTH,
    response={202: RunStartedOut, 409: ErrorOut, **ERRORS},
    summary="Start a run (run_eval)",
)
def run_start(request: AuthedRequest, body: RunStartIn) -> Status[RunStartedOut]:
    """Start ``run_eval`` on a registered dataset; 202 with the run id at once.
    404 for a dataset that is not registered, 409 for a run id taken, 422
    for an unknown or bad option."""
    options = body.model_dump(exclude_none=True)
    try:
        run_id = run_start_over_api(options)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None
    url = request.build_absolute_uri(f"/api/runs/{quote(run_id, safe='')}")
    return Status(202, RunStartedOut(run_id=run_id, url=url))


@router.post(
    "/runs/{run_id}/cancel",
    auth=RUN_AUTH,
    response={200: RunCancelledOut, 409: ErrorOut, **ERRORS},
    summary="Cancel a run",
)
def run_cancel_route(request: AuthedRequest, run_id: RunId) -> RunCancelledOut:
    """Cancel a run's remaining turns (``manage.py cancel_run``): 404 for an
    unknown run, 409 for a finished run with nothing left to cancel."""
    user = request.auth if isinstance(request.auth, User) else None
    result = run_cancel(run_id=run_id, acting_user=user)
    return RunCancelledOut(
        run_id=result.run.run_id,
        status=result.run.status,
        cancelled=result.cancelled,
        followed=result.followed,
    )
