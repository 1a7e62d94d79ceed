"""``run_eval``'s request: the command's option values, checked, as an
``EvalRequest`` (``eval_request``); nothing here writes or drives."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agentlab.agent.mcp.config import MCPServerConfig, parse_server_option
from agentlab.agent.plugins import PluginError, load_plugin
from agentlab.agent.pricing import Price
from agentlab.agent.providers.caching import CachePolicy, parse_expiry
from common.errors import BadInput
from evaluation.run.check_gate import parse_fail_on_check
from evaluation.run.simulator import DEFAULT_USER_TEMPERATURE


@dataclass(frozen=True)
class EvalRequest:
    """What ``run_eval`` was asked to do, checked (``eval_request``).

    ``dataset``: a registered name, ``demo`` or a ``.jsonl`` path;
    ``run_id``: ``None`` for a new one; ``limit``: only the first N examples
    (``None``: all); ``concurrency``: examples driven at once; ``max_steps``:
    agent steps per example; ``model``: a model name or GGUF path (``None``:
    the configured one); ``fail_under``: the accuracy (0..1) below which the
    run fails its quality gate (``None``: no gate); ``review``,
    ``retry_errors``: as the command's options; ``celery``: send the turns
    to Celery workers on ``queue`` and follow them (at most
    ``max_in_flight`` at once when set). ``plugins``:
    the ``--plugin`` names (entry-point plugins the run switches on);
    ``mcp_servers``: the ``--mcp`` servers;
    ``max_output_tokens``: the output-token limit of one LLM call; ``price``:
    the per-run price override (``None``: the price table, else unknown).
    ``epochs``: how many times each example is run (independent turns;
    ``None``: the resumed run's, else 1); ``judge_model``: the grading model
    of examples scored by the LLM judge (``None``: the run's model).
    ``base_url``: an OpenAI-compatible endpoint for this run (``None``:
    ``AGENTLAB_LLM_BASE_URL``), with ``api_key`` (never stored) read from the
    environment variable ``api_key_env``; ``agent_options``: the agent
    loop's ``system_prompt`` and ``temperature`` when set (an experiment's
    variant; ``Turn.agent_options``). ``split`` and ``tags``: only the
    examples of that split carrying every one of those tags
    (docs/evaluating.md#splits-and-tags; ``None`` / ``()``: the resumed
    run's, else all).
    """

    dataset: str
    run_id: str | None
    limit: int | None
    concurrency: int
    max_steps: int
    model: str | None
    fail_under: float | None
    #: ``--fail-on-check NAME[:MIN]`` gates, parsed (``evaluation.run.check_gate``)
    fail_on_checks: tuple[tuple[str, float], ...] = ()
    review: bool = True
    retry_errors: bool = False
    celery: bool = False
    queue: str = ""
    max_in_flight: int | None = None
    plugins: tuple[str, ...] = ()
    mcp_servers: tuple[MCPServerConfig, ...] = ()
    max_output_tokens: int = 512
    price: Price | None = None
    epochs: int | None = None
    judge_model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    split: str | None = None
    tags: tuple[str, ...] = ()
    #: ``--sample N --seed S``: a seeded random subset of N examples
    #: (``plan.sample_examples``), recorded in the run's config
    sample: int | None = None
    seed: int | None = None
    #: ``--cache [--cache-expiry 7d] [--cache-sampled]``: the LLM-call cache
    #: policy (``agentlab.agent.providers.caching``); ``None``: no cache
    cache: CachePolicy | None = None
    #: the simulated user of simulated-user examples (``--user-model``,
    #: ``--user-temperature``, ``--user-seed``): ``{"model": name or None (the
    #: run's model), "temperature": float, "seed": int}``
    user_simulator: dict[str, Any] = field(
        default_factory=lambda: {"model": None, "temperature": DEFAULT_USER_TEMPERATURE, "seed": 0}
    )

    @property
    def gated(self) -> bool:
        """Whether a quality gate is set (``fail_under`` or ``fail_on_checks``)."""
        return self.fail_under is not None or bool(self.fail_on_checks)


def cache_policy(*, cache: bool, expiry: str | None, sampled: bool) -> CachePolicy | None:
    """``--cache``, ``--cache-expiry`` and ``--cache-sampled`` as a
    ``CachePolicy`` (``None`` without ``--cache``). ``ValueError`` naming
    the option: an expiry that does not parse (``parse_expiry``), or
    ``--cache-expiry`` / ``--cache-sampled`` without ``--cache``."""
    if not cache:
        if expiry is not None or sampled:
            option = "--cache-expiry" if expiry is not None else "--cache-sampled"
            raise ValueError(f"{option} needs --cache (without it nothing is cached)")
        return None
    return CachePolicy(expiry=parse_expiry(expiry) if expiry is not None else None, sampled=sampled)


def _subset_options(split: str | None, tags: Sequence[str]) -> tuple[str | None, tuple[str, ...]]:
    """``--split`` and the ``--tag`` names (sorted, once each), each non-blank;
    ``ValueError`` otherwise. Whether the dataset has them is checked once it
    is resolved (``evaluation.run.opening.eval_check``)."""
    if split is not None and not split.strip():
        raise ValueError("--split must name a split (a blank one selects nothing)")
    if any(not tag.strip() for tag in tags):
        raise ValueError("--tag must name a tag (a blank one selects nothing)")
    return (split.strip() if split else None), tuple(sorted({tag.strip() for tag in tags}))


#: Most epochs ``--epochs`` may ask for.
MAX_EPOCHS = 100
#: Most agent steps per example, and output tokens per LLM call, a run may ask
#: for (columns of 32 bits; far above any model's budget).
MAX_STEPS = 1000
MAX_OUTPUT_TOKENS = 1_000_000
#: The largest ``--limit`` (a PostgreSQL ``integer``).
MAX_COUNT = 2**31 - 1

#: Most examples ``--concurrency`` may drive at once: a slow endpoint (a
#: reasoning model at tens of seconds a call) wants hundreds of calls in
#: flight; each holds a socket (the drive raises the open-files limit for them).
MAX_CONCURRENCY = 1024


def _extensions_check(*, plugins: Sequence[str], mcp: Sequence[str]) -> tuple[MCPServerConfig, ...]:
    """Every ``--plugin`` loads; the ``--mcp`` servers, parsed, each named once."""
    for name in plugins:
        try:
            load_plugin(name)
        except PluginError as exc:
            raise BadInput(f"--plugin {name}: {exc}") from None
    servers = tuple(parse_server_option(text) for text in mcp)
    names = [server.name for server in servers]
    if len(set(names)) != len(names):
        raise ValueError(f"--mcp names a server twice: {', '.join(names)}")
    return servers


def _price_check(price_in: float | None, price_out: float | None) -> Price | None:
    """``--price-in``/``--price-out`` (US dollars per million tokens): both or
    neither, finite and not negative."""
    if (price_in is None) != (price_out is None):
        raise ValueError("--price-in and --price-out go together: give both (US dollars per million tokens)")
    if price_in is None or price_out is None:
        return None
    if not (math.isfinite(price_in) and math.isfinite(price_out)) or price_in < 0 or price_out < 0:
        raise ValueError(f"--price-in and --price-out must be numbers ≥ 0, got {price_in} and {price_out}")
    return Price(input_per_mtok=price_in, output_per_mtok=price_out)


def eval_request(
    *,
    dataset: str,
    run_id: str | None = None,
    limit: int | None = None,
    concurrency: int = 4,
    max_steps: int | None = None,
    model: str | None = None,
    fail_under: float | None = None,
    fail_on_check: Sequence[str] = (),
    review: bool = True,
    retry_errors: bool = False,
    celery: bool = False,
    queue: str | None = None,
    max_in_flight: int | None = None,
    plugins: Sequence[str] = (),
    mcp: Sequence[str] = (),
    max_output_tokens: int | None = None,
    price_in: float | None = None,
    price_out: float | None = None,
    epochs: int | None = None,
    judge_model: str | None = None,
    endpoint: Endpoint | None = None,
    system_prompt: str | None = None,
    temperature: float | None = None,
    split: str | None = None,
    tags: Sequence[str] = (),
    sample: int | None = None,
    seed: int | None = None,
    cache: CachePolicy | None = None,
    user_model: str | None = None,
    user_temperature: float | None = None,
    user_seed: int | None = None,
) -> EvalRequest:
    """An ``EvalRequest`` from the command's option values; ``max_steps``
    ``None`` takes ``AGENTLAB_MAX_STEPS``, ``max_output_tokens`` ``None``
    ``AGENTLAB_MAX_OUTPUT_TOKENS``; ``price_in``/``price_out`` are US dollars
    per million tokens, both or neither.

    Raises ``ValueError`` (``BadInput`` for the run id) naming the option:
    ``--limit`` below 1, ``--concurrency`` outside 1..``MAX_CONCURRENCY``, ``--max-steps`` (or
    ``AGENTLAB_MAX_STEPS``) below 1, ``--max-output-tokens`` below 1,
    ``--celery`` without ``CELERY_BROKER_URL`` or with ``--mcp``, ``--queue``
    or ``--max-in-flight`` without ``--celery``, ``--max-in-flight`` below 1,
    a blank ``--queue`` or one with spaces or commas, ``--fail-under`` outside
    0..1, only one of ``--price-in``/``--price-out`` or a negative one, a bad
    run id, a ``--plugin`` that is not installed, an ``--mcp`` that is not
    ``NAME=URL``, ``NAME=COMMAND`` or ``NAME={JSON}`` (or names a server twice),
    ``--epochs`` outside 1..``MAX_EPOCHS``, an ``endpoint`` whose base URL is
    not http(s), a ``temperature`` outside 0..2, a blank ``system_prompt``,
    a blank ``--split`` or ``--tag``,
    ``--sample`` below 1 or with ``--limit``, ``--seed`` without ``--sample``,
    ``--user-temperature`` outside 0..2.
    """
    if limit is not None and not 1 <= limit <= MAX_COUNT:
        raise ValueError(f"--limit must be between 1 and {MAX_COUNT}, got {limit}")
    _sample_check(sample=sample, seed=seed, limit=limit)
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"--concurrency must be between 1 and {MAX_CONCURRENCY}, got {concurrency}")
    # name where the value came from: the user may never have passed the flag
    max_steps_from = "--max-steps" if max_steps is not None else "AGENTLAB_MAX_STEPS"
    max_steps = max_steps if max_steps is not None else settings.AGENTLAB_MAX_STEPS
    if not 1 <= max_steps <= MAX_STEPS:
        raise ValueError(f"{max_steps_from} must be between 1 and {MAX_STEPS}, got {max_steps}")
    queue = _celery_check(celery=celery, queue=queue, max_in_flight=max_in_flight, mcp=mcp)
    if epochs is not None and not 1 <= epochs <= MAX_EPOCHS:
        raise ValueError(f"--epochs must be between 1 and {MAX_EPOCHS}, got {epochs}")
    if fail_under is not None and not 0 <= fail_under <= 1:
        raise ValueError(f"--fail-under must be between 0 and 1, got {fail_under}")
    servers = _extensions_check(plugins=plugins, mcp=mcp)
    max_output_tokens = (
        max_output_tokens if max_output_tokens is not None else int(settings.AGENTLAB_MAX_OUTPUT_TOKENS)
    )
    if not 1 <= max_output_tokens <= MAX_OUTPUT_TOKENS:
        raise ValueError(
            f"--max-output-tokens must be between 1 and {MAX_OUTPUT_TOKENS}, got {max_output_tokens}"
        )
    price = _price_check(price_in, price_out)
    endpoint = _endpoint_check(endpoint)
    options = _agent_options(system_prompt=system_prompt, temperature=temperature)
    split, tags = _subset_options(split, tags)
    return EvalRequest(
        dataset=dataset,
        run_id=run_id_check(run_id) if run_id is not None else None,
        limit=limit,
        concurrency=concurrency,
        max_steps=max_steps,
        model=model,
        fail_under=fail_under,
        fail_on_checks=parse_fail_on_check(fail_on_check),
        review=review,
        retry_errors=retry_errors,
        celery=celery,
        queue=queue,
        max_in_flight=max_in_flight,
        plugins=tuple(dict.fromkeys(p.strip() for p in plugins if p.strip())),
        mcp_servers=servers,
        max_output_tokens=max_output_tokens,
        price=price,
        epochs=epochs,
        judge_model=(judge_model or "").strip() or None,
        base_url=endpoint.base_url if endpoint else None,
        api_key=endpoint.api_key if endpoint else None,
        api_key_env=endpoint.api_key_env if endpoint else None,
        split=split,
        tags=tags,
        agent_options=options,
        sample=sample,
        seed=(seed if seed is not None else 0) if sample is not None else None,
        cache=cache,
        user_simulator=user_simulator_options(model=user_model, temperature=user_temperature, seed=user_seed),
    )


def user_simulator_options(
    *, model: str | None, temperature: float | None, seed: int | None
) -> dict[str, Any]:
    """``--user-model``, ``--user-temperature`` (0..2, default
    ``DEFAULT_USER_TEMPERATURE``) and ``--user-seed`` (default 0) as
    ``EvalRequest.user_simulator``; ``ValueError`` naming the option."""
    temperature = DEFAULT_USER_TEMPERATURE if temperature is None else temperature
    if not 0 <= temperature <= 2:
        raise ValueError(f"--user-temperature must be between 0 and 2, got {temperature}")
    return {"model": (model or "").strip() or None, "temperature": float(temperature), "seed": int(seed or 0)}


def _sample_check(*, sample: int | None, seed: int | None, limit: int | None) -> None:
    """``--sample N`` (1..``MAX_COUNT``, not with ``--limit``) and ``--seed``
    (only with ``--sample``)."""
    if sample is not None and not 1 <= sample <= MAX_COUNT:
        raise ValueError(f"--sample must be between 1 and {MAX_COUNT}, got {sample}")
    if sample is not None and limit is not None:
        raise ValueError("give --limit (the first N examples) or --sample (N at random), not both")
    if seed is not None and sample is None:
        raise ValueError("--seed goes with --sample: it seeds the random subset")


@dataclass(frozen=True)
class Endpoint:
    """A run's own OpenAI-compatible endpoint: ``base_url``, and the key read
    from the environment variable ``api_key_env`` (``None``: this process's
    ``AGENTLAB_LLM_API_KEY``)."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None


def _endpoint_check(endpoint: Endpoint | None) -> Endpoint | None:
    """``endpoint`` with its base URL stripped; raises ``ValueError`` for one
    that is not an http(s) URL."""
    if endpoint is None:
        return None
    base_url = endpoint.base_url.strip()
    if not re.match(r"^https?://[^\s/]+", base_url):
        raise ValueError(f"base_url must be an http:// or https:// URL, got {endpoint.base_url!r}")
    return Endpoint(base_url=base_url, api_key=endpoint.api_key, api_key_env=endpoint.api_key_env)


def _agent_options(*, system_prompt: str | None, temperature: float | None) -> dict[str, Any]:
    """The agent loop's options that are set (``Turn.agent_options``)."""
    options: dict[str, Any] = {}
    if system_prompt is not None:
        if not system_prompt.strip():
            raise ValueError("system_prompt must not be blank")
        options["system_prompt"] = system_prompt
    if temperature is not None:
        if not (math.isfinite(temperature) and 0 <= temperature <= 2):
            raise ValueError(f"temperature must be between 0 and 2, got {temperature}")
        options["temperature"] = float(temperature)
    return options


def _celery_check(*, celery: bool, queue: str | None, max_in_flight: int | None, mcp: Sequence[str]) -> str:
    """The queue of a ``--celery`` run (``--queue``, else ``AGENTLAB_EVAL_QUEUE``,
    else Celery's default queue), ``""`` without ``--celery``; raises
    ``ValueError`` as ``eval_request`` says."""
    if not celery:
        for flag, value in (("--queue", queue), ("--max-in-flight", max_in_flight)):
            if value is not None:
                raise ValueError(f"{flag} goes with --celery")
        return ""
    if not settings.CELERY_BROKER_URL:
        raise ValueError("--celery needs a broker: set CELERY_BROKER_URL (and start Celery workers)")
    if mcp:
        raise ValueError(
            "--mcp cannot be used with --celery: the workers start their MCP servers from their own "
            "AGENTLAB_MCP_SERVERS"
        )
    if max_in_flight is not None and max_in_flight < 1:
        raise ValueError(f"--max-in-flight must be at least 1, got {max_in_flight}")
    if queue is not None and not queue.strip():
        raise ValueError("--queue must name a queue")
    if queue is not None and any(c.isspace() or c == "," for c in queue.strip()):
        # a worker's -Q takes a comma-separated list: such a name could not be read back
        raise ValueError(f"--queue must be one queue name, without spaces or commas, got {queue.strip()!r}")
    from celery import current_app

    return (queue or "").strip() or settings.AGENTLAB_EVAL_QUEUE or str(current_app.conf.task_default_queue)


#: Characters a run id may not hold (it appears in URLs: ``/api/runs/{run_id}``).
_RUN_ID_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f/\\?#%]")


RUN_ID_MAX = 200


def run_id_check(run_id: str | None) -> str:
    """A valid run id, stripped: non-empty, at most ``RUN_ID_MAX`` characters,
    no control characters and none of ``/ \\ ? # %`` (a run id appears in URLs:
    ``/api/runs/{run_id}``). Raises ``BadInput`` saying what is wrong."""
    run_id = (run_id or "").strip()
    if not run_id:
        raise BadInput("run id must not be empty or blank")
    if len(run_id) > RUN_ID_MAX:
        raise BadInput(f"run id is {len(run_id)} characters long; at most {RUN_ID_MAX} are allowed")
    bad = _RUN_ID_FORBIDDEN.search(run_id)
    if bad:
        raise BadInput(
            f"run id {run_id!r} contains {bad.group()!r}; control characters and / \\ ? # % are not allowed"
        )
    return run_id


@dataclass(frozen=True)
class BaselineRequest:
    """What ``run_eval`` was asked to compare with: ``baseline`` a run id,
    ``"previous"`` or ``None`` (no comparison); ``fail_on_regression``: exit 1
    on a significant regression; ``alpha``: the significance level."""

    baseline: str | None
    fail_on_regression: bool = False
    alpha: float = 0.05


def baseline_request(*, baseline: str | None, fail_on_regression: bool, alpha: float) -> BaselineRequest:
    """A checked ``BaselineRequest``. Raises ``ValueError`` naming the option:
    ``--fail-on-regression`` without ``--baseline``, ``--alpha`` outside (0, 1),
    an empty ``--baseline``."""
    if baseline is not None and not baseline.strip():
        raise ValueError("--baseline needs a run id or 'previous'")
    if fail_on_regression and baseline is None:
        raise ValueError("--fail-on-regression needs --baseline RUN_ID or --baseline previous")
    if not 0 < alpha < 1:
        raise ValueError(f"--alpha must be between 0 and 1 (exclusive), got {alpha}")
    return BaselineRequest(
        baseline=baseline.strip() if baseline else None, fail_on_regression=fail_on_regression, alpha=alpha
    )
