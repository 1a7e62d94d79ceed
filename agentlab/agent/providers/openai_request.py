"""The body of a chat-completions request, in the form every OpenAI-compatible
server accepts (issue 46: what llama-cpp-python's server needs, which the
OpenAI API specifies anyway).

- ``tool_choice`` is stated whenever ``tools`` are: ``"auto"`` (the OpenAI
  API's default when tools are present). llama-cpp-python's server
  (``--chat_format chatml-function-calling``) leaves the tools out of the
  prompt when it is absent: the model never hears of them.
- An assistant message is sent with ``content`` a string, ``""`` when it had
  none (a message that only carried tool calls): the OpenAI API allows
  ``null`` there, but llama-cpp-python's server refuses it with a 500
  ("validation errors for ChatCompletionRequestAssistantMessage").
- A ``response_schema`` becomes ``response_format`` in one of two forms
  (``STRUCTURED_OUTPUT_MODES``): ``json_schema`` — ``{"type": "json_schema",
  "json_schema": {"name", "schema", "strict": true}}``, OpenAI's structured
  outputs, which vLLM, Ollama and LM Studio read too — or ``json_object`` —
  ``{"type": "json_object", "schema": …}``, the form llama-cpp-python's
  server reads (it refuses ``json_schema`` with a 500 validation error).
  Its grammar lets a string hold any character, newlines included, so a
  small model writes a note that never closes and is cut by the token
  limit: in this form every string without a bound gets ``maxLength``
  ``JSON_OBJECT_STRING_CHARS`` (``bounded_strings``).
"""

from __future__ import annotations

from typing import Any

from agentlab.agent.types import ProviderError

#: What a refusal of ``response_format`` says (the field or its type named
#: in a permanent error's message).
_RESPONSE_FORMAT_MARKERS = ("response_format", "json_schema", "response format")


#: How a reply's schema is asked for, in the order a provider falls back
#: through them when a server refuses one (``off``: not at all).
STRUCTURED_OUTPUT_MODES: tuple[str, ...] = ("json_schema", "json_object", "off")


#: The longest string of a reply decoded under llama-cpp-python's
#: ``json_object`` grammar (characters; about 50 tokens: a review's note
#: and instruction fit in its 400-token limit with room to spare).
JSON_OBJECT_STRING_CHARS = 200


def bounded_strings(schema: Any, limit: int = JSON_OBJECT_STRING_CHARS) -> Any:
    """``schema`` with ``maxLength: limit`` on every ``"type": "string"``
    node that has none (a copy; the rest unchanged)."""
    if isinstance(schema, list):
        return [bounded_strings(item, limit) for item in schema]
    if not isinstance(schema, dict):
        return schema
    bounded = {key: bounded_strings(value, limit) for key, value in schema.items()}
    if schema.get("type") == "string" and "maxLength" not in schema:
        bounded["maxLength"] = limit
    return bounded


def response_format(schema: dict[str, Any], mode: str) -> dict[str, Any]:
    """The ``response_format`` that asks for a reply under ``schema`` in
    ``mode`` (``json_schema`` or ``json_object``; module doc)."""
    if mode == "json_object":
        return {"type": "json_object", "schema": bounded_strings(schema)}
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}


def request_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every assistant message's ``content`` a string
    (``None`` or a missing one → ``""``); the list itself when none needed it."""
    if all(m.get("role") != "assistant" or isinstance(m.get("content"), str | list) for m in messages):
        return messages
    return [
        {**m, "content": ""}
        if m.get("role") == "assistant" and not isinstance(m.get("content"), str | list)
        else m
        for m in messages
    ]


def request_body(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    response_schema: dict[str, Any] | None = None,
    tool_choice: str | dict[str, Any] = "auto",
    structured_output: str = "json_schema",
    seed: int | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` (module doc): ``tools``
    with ``tool_choice`` (``"auto"`` unless a step needs another) when there
    are tools, ``max_tokens`` and ``temperature`` when set, and
    ``response_format`` for ``response_schema`` in the form
    ``structured_output`` names (none when it is ``off``); ``seed`` when set
    (``agentlab.agent.seeding``)."""
    body: dict[str, Any] = {"model": model, "messages": request_messages(messages)}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = tool_choice
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    if seed is not None:
        body["seed"] = seed
    if response_schema is not None and structured_output != "off":
        body["response_format"] = response_format(response_schema, structured_output)
    return body


def refuses_response_format(error: ProviderError) -> bool:
    """Whether ``error`` is a server's refusal of ``response_format``: a
    permanent client error (400/404/415/422, or a 500 the server says is an
    invalid request) whose message names the field."""
    if error.transient or error.kind not in ("bad_request", "not_found"):
        return False
    text = str(error).lower()
    return any(marker in text for marker in _RESPONSE_FORMAT_MARKERS)
