"""Any OpenAI-compatible chat-completions endpoint through the official SDK.

OpenAI, vLLM, Ollama, llama.cpp's server … all speak
``POST {base_url}/chat/completions``. The SDK's own retries are switched off
(``max_retries=0``): transient errors are raised as
``ProviderError(transient=True)`` and retried once, in
``agentlab.agent.retry``.

Errors become ``ProviderError``s as ``agentlab.agent.providers.openai_errors``
says (which are retried, which are permanent).

Every request is sent the way the OpenAI API specifies it, the form every
compatible server accepts (``agentlab.agent.providers.openai_request``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import aiohttp
import httpx2  # the SDK's HTTP client library (its errors and URLs)
import openai

from agentlab.agent.pricing import Price, completion_cost
from agentlab.agent.providers.openai_errors import provider_error
from agentlab.agent.providers.openai_request import (
    STRUCTURED_OUTPUT_MODES,
    refuses_response_format,
    request_body,
)
from agentlab.agent.providers.openai_stream import StreamAccumulator
from agentlab.agent.providers.token_count import TokenCounter
from agentlab.agent.seeding import sampling_seed
from agentlab.agent.streaming import OnDelta
from agentlab.agent.types import Completion, ProviderError, ToolCall, Usage

#: What a stream cut mid-way raises while its chunks are read (the server or
#: the network went away): transient, like a dropped connection.
_CUT_ERRORS = (httpx2.HTTPError, aiohttp.ClientError, OSError, asyncio.TimeoutError)


def parse_arguments(raw: str | None) -> tuple[dict[str, Any], str | None]:
    """Parse a tool call's ``arguments`` string: ``(object, None)``, or
    ``({}, error)`` when it is not a JSON object (e.g. cut off by
    ``max_tokens``). An empty string means no arguments."""
    if raw is None or not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        shown = raw if len(raw) <= 200 else raw[:200] + "…"
        return {}, (
            f"the arguments are not valid JSON ({exc}); they may have been "
            f"cut off. Send a complete JSON object. Received: {shown}"
        )
    if not isinstance(value, dict):
        return {}, f"the arguments must be a JSON object, got {type(value).__name__}: {raw[:200]}"
    return value, None


def _reply_json(body: bytes) -> dict[str, Any]:
    """The JSON object of a chat-completions reply body; raises
    ``ProviderError`` (``invalid_response``) when it is not one."""
    try:
        reply = json.loads(body)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        shown = body[:200].decode("utf-8", "replace")
        raise ProviderError(
            f"the response is not a JSON object: {shown}", transient=False, kind="invalid_response"
        )
    return reply


def _usage_field(usage: Any, name: str) -> Any:
    """Field ``name`` of a usage JSON object or SDK usage object (``None``: absent)."""
    if usage is None:
        return None
    return usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)


class _EmptyStream(ProviderError):
    """A streamed request with tools whose stream ended before its first
    chunk (see ``OpenAICompatibleProvider``'s ``stream_tools``)."""


#: The connection pool of a provider's own client: no limit of its own
#: (``max_connections=0`` is aiohttp's "no limit"; ``None`` would be
#: aiohttp's default of 100), idle connections kept 5 s. The SDK's default
#: is 1,000 connections: a provider used by more calls at once (``run_eval
#: --concurrency 1024``, a worker's batches) would queue the rest for a
#: connection, a wait that counts against the request's timeout, under a
#: bound nobody set. Its callers bound how many calls they make at once
#: (``--concurrency``, a worker's threads × ``AGENTLAB_EVAL_BATCH``).
UNBOUNDED_POOL = httpx2.Limits(max_connections=0, keepalive_expiry=5.0)


class _AsyncOpenAI(openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` that merges a request path with the base URL once
    per path: the SDK parses both into ``httpx.URL`` objects on every request
    (``BaseClient._prepare_url``), a tenth of the CPU of a short evaluated
    example. The URL type is immutable, so the merged one is reused; a new
    ``base_url`` starts the cache again."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._merged: tuple[httpx2.URL, dict[str, httpx2.URL]] = (self._base_url, {})

    def _prepare_url(self, url: str) -> httpx2.URL:
        base, merged = self._merged
        if base is not self._base_url:
            base, merged = self._merged = (self._base_url, {})
        found = merged.get(url)
        if found is None:
            found = merged[url] = super()._prepare_url(url)
        return found


class OpenAICompatibleProvider:
    """``LLMProvider`` for an OpenAI-compatible endpoint (native tool calls).

    ``base_url`` e.g. ``http://localhost:8000/v1`` (``None``: the SDK default,
    api.openai.com). ``timeout`` is seconds per request. Pass ``client`` to
    reuse an ``openai.AsyncOpenAI`` (its retry setting is then yours to set to
    0). Requests go through the SDK's aiohttp transport
    (``openai.DefaultAioHttpClient``), which is bound to the event loop of its
    first request: use one provider per loop. Call ``aclose()`` when done.

    ``structured_output``: how a call's ``response_schema`` (the reviewer's
    and the judge's verdicts) is sent — ``json_schema``, ``json_object``
    (``agentlab.agent.providers.openai_request``) or ``off``. A server that
    refuses the form (a permanent error naming ``response_format`` or
    ``json_schema``) has the call sent again in the next form, then without
    one, and this provider keeps to the form that was accepted.
    ``stream_tools``: stream requests that offer tools; llama-cpp-python's
    server cannot stream a reply whose tool choice is automatic (it ends the
    stream empty), so a streamed request with tools that gets an empty
    stream is sent again unstreamed and this provider stops streaming
    them. ``token_counter``: counts a streamed reply's tokens when the server
    sends no usage (``agentlab.agent.providers.token_count``); without one
    they stay unknown.

    A completion's ``cost`` is the one the endpoint reported (``usage.cost``,
    as gateways such as OpenRouter send), else ``price`` (a per-run override),
    else the ``genai-prices`` table matched by ``base_url`` and the model
    (``agentlab.agent.pricing``): ``None`` when none of them knows. A reply
    cut by ``max_tokens`` keeps ``finish_reason == "length"``.
    """

    name = "openai"
    native_tools = True
    #: ``complete`` takes ``on_delta`` and then streams (``agentlab.agent.streaming``)
    streaming = True
    #: ``constrained_decoding`` (an instance attribute, set in ``__init__``):
    #: whether a ``response_schema`` is sent as ``response_format``
    #: ``json_schema`` (``structured_output``); the reviewer and the judge
    #: then ask for their verdict under their schema. The loop's steps use
    #: native tool calls, never a schema.
    #: answers are reviewed unless AGENTLAB_REVIEW or --no-review says otherwise
    review_by_default = True

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        model: str,
        timeout: float = 60.0,
        client: openai.AsyncOpenAI | None = None,
        price: Price | None = None,
        structured_output: str = "json_schema",
        stream_tools: bool = True,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if not model:
            raise ValueError("OpenAICompatibleProvider needs a model name")
        self.model = model
        self.base_url = base_url
        self.price = price
        if structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ValueError(
                f"structured_output must be one of {STRUCTURED_OUTPUT_MODES}, got {structured_output!r}"
            )
        self.structured_output = structured_output
        self.constrained_decoding = structured_output != "off"
        self.stream_tools = stream_tools
        self.token_counter = token_counter
        self._owns_client = client is None
        self._client = client or _AsyncOpenAI(
            base_url=base_url,
            # Local servers (vLLM, Ollama, llama.cpp) accept any key; the SDK
            # refuses to start without one.
            api_key=api_key or "not-needed",
            max_retries=0,
            timeout=timeout,
            # The SDK's aiohttp transport (the `aiohttp` extra): at 32
            # requests in flight it costs ~2.1 ms of CPU per request against
            # ~3.7 ms for the default httpx pool, whose every request scans
            # all pooled connections (bench/eval_throughput.py, 2026-11-30).
            http_client=openai.DefaultAioHttpClient(limits=UNBOUNDED_POOL),
        )

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        response_schema: dict[str, Any] | None = None,
        on_delta: OnDelta | None = None,
    ) -> Completion:
        """One chat completion (the body: ``request_body``). ``response_schema``
        is sent as ``response_format`` while ``constrained_decoding`` is on
        (see the class doc). With ``on_delta`` the reply is streamed
        (``stream=True``, usage asked for with ``stream_options``) and each
        fragment handed to ``on_delta`` as it arrives
        (``agentlab.agent.streaming``); the completion returned is the same
        as without. A stream cut before its finish reason raises a transient
        ``ProviderError`` (kind ``stream_cut``), as a dropped connection does."""
        native = bool(tools)
        if native and not self.stream_tools:
            on_delta = None
        while True:
            mode = self.structured_output if response_schema is not None else "off"
            kwargs = request_body(
                self.model,
                messages,
                tools,
                max_tokens=max_tokens,
                temperature=temperature,
                response_schema=response_schema,
                structured_output=mode,
                seed=sampling_seed(),
            )
            try:
                completion = await self._send(kwargs, on_delta, native=native)
            except ProviderError as exc:
                if mode == "off" or not refuses_response_format(exc):
                    raise
                # the server refuses this form: ask in the next one (at last without)
                self.structured_output = STRUCTURED_OUTPUT_MODES[STRUCTURED_OUTPUT_MODES.index(mode) + 1]
                self.constrained_decoding = self.structured_output != "off"
                continue
            return replace(completion, decoding="schema") if mode != "off" else completion

    async def _send(self, kwargs: dict[str, Any], on_delta: OnDelta | None, *, native: bool) -> Completion:
        """POST one request body (streamed with ``on_delta``)."""
        if on_delta is not None:
            try:
                return await self._stream(kwargs, on_delta, native=native)
            except _EmptyStream:
                # llama-cpp-python's server: "Automatic streaming tool choice
                # is not supported" ends the stream before its first chunk
                self.stream_tools = False
        try:
            # POST /chat/completions through the client's own request path:
            # the same headers, timeout and error classes as
            # ``chat.completions.create``, minus that method's type-driven
            # transform of the body (an identity for the plain JSON dicts
            # built here: tests/agent/test_openai_provider.py checks that)
            # and minus the ``ChatCompletion`` model built from the reply:
            # together they cost as much CPU as the rest of the call, and
            # the few fields read here come straight from the JSON.
            body = await self._client.post("/chat/completions", body=kwargs, cast_to=bytes)
        except openai.OpenAIError as exc:
            raise provider_error(exc) from exc
        return self._to_completion(_reply_json(body), native=native)

    async def _stream(self, kwargs: dict[str, Any], on_delta: OnDelta, *, native: bool) -> Completion:
        """The streamed form of ``complete`` (see there)."""
        acc = StreamAccumulator(on_delta=on_delta)
        body = {**kwargs, "stream": True, "stream_options": {"include_usage": True}}
        try:
            stream = await self._client.chat.completions.create(**body)
        except openai.OpenAIError as exc:  # no answer, or an error status: nothing streamed
            raise provider_error(exc) from exc
        # answered (a 200): a body that breaks before its first chunk, for a
        # request with tools, is llama-cpp-python's refusal to stream it
        refused = _EmptyStream if native else ProviderError
        try:
            async with stream:
                async for chunk in stream:
                    acc.add(chunk)
        except openai.OpenAIError as exc:
            error = provider_error(exc)
            if error.transient:  # the connection went away mid-stream
                error = (refused if acc.chunks == 0 else ProviderError)(
                    f"the stream was cut after {acc.chunks} chunk(s): {error}",
                    transient=True,
                    kind="stream_cut",
                )
            raise error from exc
        except _CUT_ERRORS as exc:
            raise (refused if acc.chunks == 0 else ProviderError)(
                f"the stream was cut after {acc.chunks} chunk(s): {type(exc).__name__}: {exc}",
                transient=True,
                kind="stream_cut",
            ) from exc
        if acc.finish_reason is None and acc.chunks == 0 and native:
            raise _EmptyStream(
                "the stream of a request with tools ended before its first chunk",
                transient=True,
                kind="stream_cut",
            )
        if acc.finish_reason is None:
            raise ProviderError(
                f"the stream ended after {acc.chunks} chunk(s) without a finish reason",
                transient=True,
                kind="stream_cut",
            )
        calls = [(call.id, call.name, call.arguments) for call in acc.calls]
        usage = acc.usage
        if usage is None and self.token_counter is not None:
            # the server sent no usage with the stream (llama.cpp's): count it
            usage = self.token_counter.usage(kwargs, text=acc.text, calls=calls)
        return self._completion(
            text=acc.text,
            calls=calls,
            usage=usage,
            model=acc.model,
            finish_reason=acc.finish_reason,
            native=native,
        )

    def _to_completion(self, reply: dict[str, Any], *, native: bool = True) -> Completion:
        """A ``Completion`` from a chat-completions reply's JSON object.
        Raises ``ProviderError`` (``invalid_response``) when it has no choice
        or its first choice is not an object with a message."""
        choices = reply.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(message, dict):
            raise ProviderError(
                f"the response has no choices with a message: {json.dumps(reply)[:200]}",
                transient=False,
                kind="invalid_response",
            )
        calls = []
        for tc in message.get("tool_calls") or ():
            call = tc if isinstance(tc, dict) else {}  # not an object: a call without a name
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            calls.append((call.get("id"), function.get("name") or "", function.get("arguments")))
        usage = reply.get("usage")
        return self._completion(
            text=message.get("content"),
            calls=calls,
            usage=usage if isinstance(usage, dict) else None,
            model=reply.get("model"),
            finish_reason=choice.get("finish_reason"),
            native=native,
        )

    def _completion(
        self,
        *,
        text: str | None,
        calls: Sequence[tuple[str | None, str, str | None]],
        usage: Any,
        model: str | None,
        finish_reason: str | None,
        native: bool,
    ) -> Completion:
        """A ``Completion`` from a reply's parts: ``calls`` as ``(id, name,
        raw arguments)``, ``usage`` the endpoint's usage, a JSON object or
        the SDK's (a stream's last chunk), ``None`` when unknown."""
        tool_calls = []
        for i, (call_id, name, raw) in enumerate(calls):
            arguments, error = parse_arguments(raw)
            tool_calls.append(
                ToolCall(
                    id=call_id or f"call_{uuid.uuid4().hex[:12]}_{i}",
                    name=name,
                    arguments=arguments,
                    raw_arguments=raw,
                    error=error if name else (error or "the tool call has no function name"),
                )
            )
        cached = _usage_field(_usage_field(usage, "prompt_tokens_details"), "cached_tokens")
        counted = Usage(
            input_tokens=_usage_field(usage, "prompt_tokens"),
            output_tokens=_usage_field(usage, "completion_tokens"),
            cached_input_tokens=cached if isinstance(cached, int) and not isinstance(cached, bool) else None,
        )
        model = model or self.model
        reported = _usage_field(usage, "cost")
        return Completion(
            text=text,
            tool_calls=tuple(tool_calls),
            usage=counted,
            model=model,
            finish_reason=finish_reason,
            cost=completion_cost(
                reported=float(reported) if isinstance(reported, int | float) else None,
                price=self.price,
                base_url=self.base_url,
                model=model,
                usage=counted,
            ),
            decoding="native" if native else "free",
        )

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()
