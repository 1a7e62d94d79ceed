"""Side by side (issue 45; docs/chat-and-api.md#side-by-side): one question
sent to two to four variants of the agent at once, each answer a real chat
turn with its own event log, tool calls and usage.

The variants are written as an experiment file's ``[[variant]]`` tables and
read by the same code (``experiment_file.variants_check``: names, unknown
keys with the closest known one, types, a variant that overrides nothing),
then each one's values are checked by ``run_eval``'s own checks
(``eval_request``: a base URL that is not http(s), a temperature outside
0..2, a blank system prompt, a step or token limit out of range). A page
takes only the keys a chat turn carries (``PAGE_KEYS``); the others of an
experiment's variant are refused by name, ``system_prompt_file`` and
``api_key_env`` because a web form must not read the server's files or send
its environment's secrets to an address the form names.

A variant's turn carries its choice in ``Turn.agent_options``: ``variant``
(its name), ``model`` and ``base_url`` (the endpoint ``turns.jobs.run``
builds the turn's provider for), ``system_prompt`` and ``temperature`` (the
agent loop's, as an experiment's turns carry them). A variant at a base URL
other than ``AGENTLAB_LLM_BASE_URL`` is sent no API key.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from agentlab.agent.text import clean_text
from common.errors import BadInput, NotFound
from evaluation.experiments.experiment_file import VARIANT_KEYS, VariantSpec, variants_check
from evaluation.run.request import Endpoint, eval_request
from turns.models import Turn, TurnKind
from turns.services import NewTurn, turn_create_many
from turns.services.enqueue import turn_enqueue

#: The variant keys a side-by-side turn takes (the rest of ``VARIANT_KEYS`` are an experiment's).
PAGE_KEYS = ("model", "base_url", "system_prompt", "temperature", "max_steps", "max_output_tokens")
#: ``Turn.agent_options`` keys of a side-by-side turn (besides ``variant``, its name).
TURN_KEYS = ("model", "base_url", "system_prompt", "temperature")
#: Why a key of an experiment's variant is not taken here.
_NOT_HERE = {
    "system_prompt_file": "paste the prompt as system_prompt (a page does not read the server's files)",
    "api_key_env": "a page does not send the server's environment to an endpoint it names; "
    "the configured AGENTLAB_LLM_BASE_URL gets its key, another base URL none",
}
MIN_VARIANTS = 2
MAX_VARIANTS = 4
#: Most characters of the question (the chat API's limit) and of the variants' text.
MAX_QUESTION = 20_000
MAX_VARIANTS_TEXT = 100_000


@dataclass(frozen=True)
class SideBySide:
    """A checked side-by-side request: the question (cleaned, stripped) and
    two to four variants in the order written."""

    question: str
    variants: tuple[VariantSpec, ...]


def side_by_side_read(question: str, text: str) -> SideBySide:
    """Read and check a question and its variants (``[[variant]]`` TOML).

    Raises ``BadInput`` starting with ``question:`` or ``variants:`` (and
    the variant's name): an empty or too long question; text that is not
    TOML or holds a key outside ``[[variant]]``; fewer than ``MIN_VARIANTS``
    or more than ``MAX_VARIANTS`` variants; any refusal of
    ``variants_check``; a key outside ``PAGE_KEYS``; a value ``eval_request``
    refuses; a ``model`` with no endpoint (the embedded model is one file);
    a ``base_url`` with no ``model`` when ``AGENTLAB_MODEL`` is unset.
    Nothing is written."""
    question = clean_text(question or "").strip()
    if not question:
        raise BadInput("question: type a question first")
    if len(question) > MAX_QUESTION:
        raise BadInput(f"question: {len(question)} characters; at most {MAX_QUESTION}")
    if len(text or "") > MAX_VARIANTS_TEXT:
        raise BadInput(f"variants: {len(text)} characters; at most {MAX_VARIANTS_TEXT}")
    try:
        document = tomllib.loads(text or "")
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"variants: not TOML: {exc}") from None
    extra = sorted(key for key in document if key != "variant")
    if extra:
        raise BadInput(
            f"variants: unknown key {extra[0]!r} outside the [[variant]] tables "
            f"(a variant's keys: name, {', '.join(PAGE_KEYS)})"
        )
    tables = document.get("variant")
    if not isinstance(tables, list):
        tables = []
    count = len(tables)
    if not MIN_VARIANTS <= count <= MAX_VARIANTS:
        raise BadInput(
            f"variants: {count} variant{'' if count == 1 else 's'}; side by side compares "
            f"{MIN_VARIANTS} to {MAX_VARIANTS} [[variant]] tables"
        )
    for number, table in enumerate(tables, start=1):
        _page_keys_check(table, number)
    variants = variants_check(tables, where="variants", base=Path("."), environ={})
    for variant in variants:
        _values_check(variant)
    return SideBySide(question=question, variants=variants)


def _page_keys_check(table: Any, number: int) -> None:
    """An experiment's variant key that a page does not take: ``BadInput``
    saying why (unknown keys are ``variants_check``'s to name)."""
    if not isinstance(table, dict):
        return
    name = table.get("name") if isinstance(table.get("name"), str) else f"{number}"
    for key in table:
        if key in VARIANT_KEYS and key not in PAGE_KEYS:
            why = _NOT_HERE.get(key, "it is an experiment's option, not a chat turn's")
            raise BadInput(
                f"variants: variant {name!r}: {key} is not taken side by side: {why} "
                f"(a variant's keys here: name, {', '.join(PAGE_KEYS)})"
            )


def _values_check(variant: VariantSpec) -> None:
    """``variant``'s values as ``run_eval`` checks them, and its endpoint."""
    options, where = variant.options, f"variants: variant {variant.name!r}"
    base_url = options.get("base_url")
    if "model" in options and not (base_url or settings.AGENTLAB_LLM_BASE_URL):
        raise BadInput(
            f"{where}: model needs an endpoint (base_url, or AGENTLAB_LLM_BASE_URL): "
            "the embedded model is the one file AGENTLAB_GGUF_PATH names"
        )
    if base_url and "model" not in options and not settings.AGENTLAB_MODEL:
        raise BadInput(f"{where}: base_url needs a model (AGENTLAB_MODEL is not set)")
    try:
        eval_request(
            dataset="side-by-side",
            model=options.get("model"),
            max_steps=options.get("max_steps"),
            max_output_tokens=options.get("max_output_tokens"),
            endpoint=Endpoint(base_url=base_url) if base_url else None,
            system_prompt=options.get("system_prompt"),
            temperature=options.get("temperature"),
        )
    except (ValueError, BadInput) as exc:
        words = re.sub(r"--([a-z-]+)", lambda m: m.group(1).replace("-", "_"), str(exc))
        raise BadInput(f"{where}: {words}") from None


def turn_options(variant: VariantSpec) -> dict[str, Any]:
    """What ``variant``'s turn carries in ``Turn.agent_options``: its name
    as ``variant`` and those of ``TURN_KEYS`` it sets."""
    options = {key: variant.options[key] for key in TURN_KEYS if key in variant.options}
    if "temperature" in options:
        options["temperature"] = float(options["temperature"])
    return {"variant": variant.name, **options}


def side_by_side_start(*, owner: User, request: SideBySide) -> list[Turn]:
    """One queued chat turn per variant of ``request``, owned by ``owner``,
    in one transaction, each handed to a job once it commits
    (``turn_enqueue``); in the variants' order. No conversation: a
    side-by-side turn stands alone (the page and the turn admin show it)."""
    default_steps = int(settings.AGENTLAB_MAX_STEPS)
    with transaction.atomic():
        turns = turn_create_many(
            owner=owner,
            kind=TurnKind.CHAT,
            turns=[
                NewTurn(
                    question=request.question,
                    context={},
                    max_steps=int(v.options.get("max_steps", default_steps)),
                    max_output_tokens=v.options.get("max_output_tokens"),
                    agent_options=turn_options(v),
                )
                for v in request.variants
            ],
        )
        for turn in turns:
            turn_enqueue(turn.pk)
    return turns


def side_by_side_turns(ids: Sequence[int]) -> list[Turn]:
    """The side-by-side turns ``ids``, in that order. Raises ``BadInput``
    for fewer than ``MIN_VARIANTS`` or more than ``MAX_VARIANTS`` ids or an
    id given twice, ``NotFound`` for an id that is no side-by-side turn (a
    chat turn with no conversation whose options name a variant)."""
    if not MIN_VARIANTS <= len(ids) <= MAX_VARIANTS or len(set(ids)) != len(ids):
        raise BadInput(f"turn: give {MIN_VARIANTS} to {MAX_VARIANTS} different turn ids")
    rows = Turn.objects.filter(
        pk__in=list(ids), kind=TurnKind.CHAT, conversation__isnull=True, agent_options__has_key="variant"
    )
    by_pk = {turn.pk: turn for turn in rows}
    missing = [str(pk) for pk in ids if pk not in by_pk]
    if missing:
        raise NotFound(f"no side-by-side turn {', '.join(missing)}")
    return [by_pk[pk] for pk in ids]


def variants_text(turns: Sequence[Turn]) -> str:
    """The ``[[variant]]`` TOML that asks ``turns`` again (their names and
    ``TURN_KEYS``, and a step or token limit other than the default)."""
    blocks = []
    for turn in turns:
        options = dict(turn.agent_options or {})
        lines = ["[[variant]]", f"name = {_toml_value(str(options.get('variant', turn.pk)))}"]
        lines += [f"{key} = {_toml_value(options[key])}" for key in TURN_KEYS if key in options]
        if turn.max_steps != int(settings.AGENTLAB_MAX_STEPS):
            lines.append(f"max_steps = {turn.max_steps}")
        if turn.max_output_tokens is not None:
            lines.append(f"max_output_tokens = {turn.max_output_tokens}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _toml_value(value: Any) -> str:
    """A string, number or boolean as TOML writes it (a JSON string is a TOML basic string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)
