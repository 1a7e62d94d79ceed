"""Counting a streamed completion's tokens where the server sends no usage.

OpenAI sends a stream's usage in a last chunk when asked
(``stream_options.include_usage``); llama-cpp-python's server (0.3.x) sends
none, and a turn's tokens were unknown. When the endpoint serves a model
whose tokenizer this machine has — a GGUF file, such as the embedded
SmolLM2 that llama.cpp's server is started on — ``TokenCounter`` counts them
with that tokenizer (llama.cpp's own, the GGUF loaded with
``vocab_only=True``: no weights).

What is counted: the reply's tokens (its text, and each tool call's name and
arguments as they were streamed), and the prompt's tokens as the model's own
chat template (``tokenizer.chat_template`` of the GGUF) renders the messages,
with the offered tools' JSON specs after them. A server whose prompt frames
tools or tool calls in its own words (``--chat_format
chatml-function-calling``) sends a prompt a little longer or shorter than
that; tests/agent/test_llama_cpp_server.py measures the difference against
the server's own non-streamed count.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentlab.agent.providers.chat_template import render_template

#: llama-cpp-python's default template when a GGUF has none (ChatML).
_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)


def tokenizer_path(model: str, setting: str | None) -> Path | None:
    """The GGUF file whose tokenizer counts an endpoint's tokens, or ``None``.

    ``setting`` is ``AGENTLAB_LLM_TOKENIZER``: ``off`` → none; a path →
    that file (``ValueError`` when it is not a file); unset or empty → the
    model name itself when it is a GGUF file on this machine (llama.cpp's
    server names a model by the path it was started on), else the embedded
    model's file when ``model`` is its name (``SmolLM2-135M-Instruct-Q8_0``),
    else none."""
    if setting and setting.strip().lower() == "off":
        return None
    if setting:
        path = Path(setting).expanduser()
        if not path.is_file():
            raise ValueError(f"AGENTLAB_LLM_TOKENIZER must be a GGUF file or 'off', got {setting!r}")
        return path
    named = Path(model).expanduser()
    if named.suffix == ".gguf" and named.is_file():
        return named
    try:
        from agentlab.agent.providers.local import default_gguf_path

        embedded = default_gguf_path()
    except Exception:  # no local extra: no embedded model to compare with
        return None
    return embedded if model in (embedded.stem, embedded.name) else None


class TokenCounter:
    """Counts tokens with a GGUF model's tokenizer (module doc). The
    vocabulary is loaded on first use (llama-cpp-python, ``vocab_only``);
    ``usage`` raises whatever loading raises (``ImportError`` without the
    ``local`` extra), which callers treat as "unknown"."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._llama: Any = None
        self._template = _CHATML

    def _loaded(self) -> Any:
        with self._lock:
            if self._llama is None:
                from llama_cpp import Llama

                llama = Llama(model_path=str(self.path), vocab_only=True, verbose=False)
                metadata = getattr(llama, "metadata", None) or {}
                self._template = metadata.get("tokenizer.chat_template") or _CHATML
                self._llama = llama
            return self._llama

    def count(self, text: str) -> int:
        """The number of tokens of ``text`` (no BOS; special tokens read as such)."""
        if not text:
            return 0
        return len(self._loaded().tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def prompt_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> int:
        """The tokens of the prompt the model's chat template makes of
        ``messages`` (a tool call as its JSON, a tool result as its text),
        with the generation prompt, plus those of ``tools``' JSON specs."""
        self._loaded()
        plain = []
        for message in messages:
            content = message.get("content")
            text = content if isinstance(content, str) else "" if content is None else json.dumps(content)
            if message.get("tool_calls"):
                text += json.dumps(message["tool_calls"], ensure_ascii=False)
            role = message.get("role") if message.get("role") in ("system", "user", "assistant") else "user"
            plain.append({"role": str(role), "content": text})
        prompt = render_template(
            self._template, plain, add_generation_prompt=True, bos_token="", eos_token=""
        )
        spec = json.dumps(list(tools), ensure_ascii=False) if tools else ""
        return self.count(prompt) + self.count(spec)

    def usage(
        self,
        body: dict[str, Any],
        *,
        text: str | None,
        calls: Sequence[tuple[str | None, str, str | None]],
    ) -> dict[str, int] | None:
        """The usage of a streamed reply to request ``body`` (its
        ``messages`` and ``tools``) in the OpenAI shape (``prompt_tokens``,
        ``completion_tokens``): ``text`` and ``calls`` as ``(id, name, raw
        arguments)``. ``None`` (unknown) when the tokenizer cannot be
        loaded or the template cannot render the messages."""
        try:
            output = self.count(text or "") + sum(self.count(name + (raw or "")) for _, name, raw in calls)
            prompt = self.prompt_tokens(body.get("messages") or (), body.get("tools"))
        except Exception:  # a missing extra, an unreadable file, a template error
            return None
        return {"prompt_tokens": prompt, "completion_tokens": output}
