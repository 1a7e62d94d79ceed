"""Reading a streamed chat completion (``stream=True``) chunk by chunk.

OpenAI's streaming format (``chat.completion.chunk``; also vLLM's, Ollama's
and llama.cpp server's): each chunk's ``choices[0].delta`` carries a piece of
``content`` and/or pieces of ``tool_calls`` — the first piece of a call has
its ``index``, ``id`` and ``function.name``, later ones only ``index`` and a
fragment of ``function.arguments`` —, the last content chunk has
``finish_reason``, and with ``stream_options={"include_usage": true}`` a final
chunk with **empty** ``choices`` carries ``usage``. A server that sends no
usage leaves it unknown (``None``), never 0.

``StreamAccumulator`` folds the chunks into the parts of one completion and
hands each fragment to ``on_delta`` (``agentlab.agent.streaming``) as it
comes. It is plain data handling, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentlab.agent.streaming import CompletionDelta, OnDelta


@dataclass
class StreamedCall:
    """One tool call as its pieces arrived: ``id`` and ``name`` from its first
    piece, ``arguments`` the concatenated fragments."""

    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass
class StreamAccumulator:
    """The parts of one streamed completion (module docstring).

    ``add(chunk)`` takes a ``ChatCompletionChunk`` (or any object of that
    shape). After the stream: ``text`` (``None`` when no content came),
    ``calls`` in index order, ``finish_reason`` (``None``: the stream ended
    before the reply did — it was cut), ``usage`` (the usage object, or
    ``None``) and ``model``.
    """

    on_delta: OnDelta | None = None
    parts: list[str] = field(default_factory=list)
    by_index: dict[int, StreamedCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Any = None
    model: str | None = None
    chunks: int = 0

    def add(self, chunk: Any) -> None:
        self.chunks += 1
        self.model = getattr(chunk, "model", None) or self.model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) not in (0, None):
                continue  # n > 1 is never asked for; keep the first choice
            delta = getattr(choice, "delta", None)
            if delta is not None:
                self._delta(delta)
            if getattr(choice, "finish_reason", None):
                self.finish_reason = choice.finish_reason

    def _delta(self, delta: Any) -> None:
        content = getattr(delta, "content", None)
        if content:
            self.parts.append(content)
            self._emit(CompletionDelta(text=content))
        for position, piece in enumerate(getattr(delta, "tool_calls", None) or ()):
            index = getattr(piece, "index", None)
            if not isinstance(index, int):
                index = position
            call = self.by_index.setdefault(index, StreamedCall())
            call.id = call.id or getattr(piece, "id", None)
            function = getattr(piece, "function", None)
            name = getattr(function, "name", None) or ""
            fragment = getattr(function, "arguments", None) or ""
            if name and not call.name:
                call.name = name
            call.arguments += fragment
            if name or fragment:
                self._emit(CompletionDelta(call_index=index, call_name=call.name or None, arguments=fragment))

    def _emit(self, delta: CompletionDelta) -> None:
        if self.on_delta is not None:
            self.on_delta(delta)

    @property
    def text(self) -> str | None:
        return "".join(self.parts) if self.parts else None

    @property
    def calls(self) -> list[StreamedCall]:
        return [self.by_index[i] for i in sorted(self.by_index)]
