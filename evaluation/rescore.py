"""``rescore``'s body: score a finished run's stored predictions again with
another scorer, into a new run, without running the agent (DESIGN.md §10;
inspect_ai's ``inspect score``).

It sits beside ``evaluation.services`` rather than in it because the LLM
judge may be called (``evaluation.judging``); the writes are
``evaluation.services.rescore``'s. ``manage.py rescore`` parses its options,
calls ``rescore`` and prints the metrics table.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentlab.agent.types import LLMProvider

from .judging import JudgeTally, judge_check, judge_pass
from .models import Run, RunStatus
from .scoring.judge import JUDGE
from .selectors import run_get
from .services.rescore import rescore_copy, rescore_start
from .services.runs import run_finish


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

    ``judge_model``: the grading model for ``scorer == "judge"`` (``None``:
    the source run's model; see ``evaluation.judging.judge_provider``);
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
    if scorer == JUDGE and provider is None:  # before anything is written
        judge_check(judge_model=judge_model or run_model)
    run, resumed = rescore_start(source=source, scorer=scorer, run_id=run_id, judge_model=judge_model)
    copied = 0 if resumed else rescore_copy(source=source, target=run, scorer=scorer)
    status = RunStatus.SUCCESS
    tally = None
    try:
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
