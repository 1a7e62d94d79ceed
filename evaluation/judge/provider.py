"""The LLM judge's provider: which model grades (``--judge-model``, else the
run's own), built and checked before a run starts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from django.conf import settings

from agentlab.agent.types import LLMProvider
from turns.llm import get_provider


def judge_provider(*, judge_model: str | None, run_model: str | None = None) -> LLMProvider:
    """The grading model's provider (``--judge-model``), built like the
    agent's (``turns.llm.get_provider``).

    ``judge_model`` ``None`` means the run's own model (``run_model``; ``None``:
    the configured one). With an endpoint (``AGENTLAB_LLM_BASE_URL``) it is a
    model name there. With the embedded model it is a GGUF path, or
    ``local`` or the configured model's own name (a run's ``config["model"]``,
    e.g. ``SmolLM2-135M-Instruct-Q8_0``) for the configured model. Raises
    ``LocalModelUnavailable`` for a GGUF file that is not there."""
    name = judge_model or run_model
    if settings.AGENTLAB_LLM_BASE_URL:
        return get_provider(model=name)
    if not name or name == "local" or Path(name).is_file():
        return get_provider(model=None if not name or name == "local" else name)
    default = get_provider()
    return default if default.model == name else get_provider(model=name)


def judge_check(*, judge_model: str | None, run_model: str | None = None) -> None:
    """Check up front that ``--judge-model`` names a usable grader (builds
    its provider, then closes it): raises ``LocalModelUnavailable`` for a
    GGUF file that is not there, ``ValueError`` for an endpoint without a
    model. ``None`` checks nothing (the run's own model is used)."""
    if judge_model is None:
        return
    grader = judge_provider(judge_model=judge_model, run_model=run_model)
    asyncio.run(grader.aclose())
