"""The streamed form of a stub chat completion (``agentlab.testing.stub_llm``).

OpenAI's streaming format: ``chat.completion.chunk`` objects whose
``choices[0].delta`` carries the role, then pieces of ``content``, then per
tool call a first piece with its ``index``, ``id``, ``type`` and
``function.name`` followed by pieces of ``function.arguments``; a chunk with
an empty delta and the ``finish_reason``; and, when the request set
``stream_options.include_usage``, a last chunk with empty ``choices`` and the
``usage``. No Django here.
"""

from __future__ import annotations

from typing import Any


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(
    body: dict[str, Any], *, chars: int = 4, include_usage: bool = True
) -> list[dict[str, Any]]:
    """A ``chat.completion`` ``body`` as the ``chat.completion.chunk`` objects
    OpenAI streams for it (see the module docstring), ``[DONE]`` not included."""
    choice = body["choices"][0]
    message = choice.get("message") or {}
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body["created"],
        "model": body["model"],
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            **base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in _pieces(message.get("content") or "", chars)]
    for i, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        first = {"index": i, "id": call.get("id"), "type": "function"}
        chunks.append(
            chunk({"tool_calls": [{**first, "function": {"name": function.get("name"), "arguments": ""}}]})
        )
        chunks += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            for piece in _pieces(function.get("arguments") or "", chars)
        ]
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage and body.get("usage") is not None:
        chunks.append({**base, "choices": [], "usage": body["usage"]})
    return chunks
