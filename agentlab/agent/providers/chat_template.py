"""Stop markers read from a model's own chat template (no llama.cpp needed).

A chat model ends its turn with a marker of its template — ChatML's
``<|im_end|>``, Llama 3's ``<|eot_id|>``, Gemma's ``<end_of_turn>``,
Mistral's ``</s>`` — and, when that marker is missed, goes on to write the
next turn itself, which opens with another marker (``<|im_start|>``,
``<|start_header_id|>``, ``<start_of_turn>``, ``[INST]``). A fixed ChatML
list stops only ChatML models; ``stop_markers`` reads the markers from the
template itself: it renders a user → assistant → user conversation with
sentinel contents and takes the special-token-like markers between the
assistant's content and the next user's role name. The end-of-sequence and
end-of-turn tokens of the vocabulary are added. (The way llama.cpp's server
and Hugging Face's ``generation_config`` stop on every end-of-generation
token, not on one.)

``jinja2`` (a dependency of llama-cpp-python) is imported when a template is
rendered; without it only the vocabulary's tokens are returned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_USER_1 = "agentlab-sentinel-user-one"
_ASSISTANT = "agentlab-sentinel-assistant"
_USER_2 = "agentlab-sentinel-user-two"

#: What a template's control markers look like: ``<|im_end|>``,
#: ``<|start_header_id|>``, ``<end_of_turn>``, ``</s>``, ``[INST]`` and
#: DeepSeek's full-width ``<｜end▁of▁sentence｜>``.
MARKER_RE = re.compile(r"<\|[^<>|\s]+\|>|<｜[^<>｜]+｜>|</?[A-Za-z_][A-Za-z0-9_.-]*>|\[/?INST\]")


def render_template(template: str, messages: list[dict[str, str]], **variables: Any) -> str:
    """Render a Hugging Face chat template the way llama-cpp-python's
    ``Jinja2ChatFormatter`` does (sandboxed, ``trim_blocks``,
    ``lstrip_blocks``, ``raise_exception``). Raises whatever the template
    raises (``ValueError`` from ``raise_exception``, ``jinja2`` errors)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    environment = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    compiled = environment.from_string(template)
    return compiled.render(messages=messages, raise_exception=raise_exception, **variables)


def _segment(template: str, *, bos_token: str, eos_token: str) -> str | None:
    """What the template writes between an assistant's content and the next
    user's content (or the end, when it refuses three messages)."""
    variables = {"bos_token": bos_token, "eos_token": eos_token, "add_generation_prompt": False}
    conversation = [
        {"role": "user", "content": _USER_1},
        {"role": "assistant", "content": _ASSISTANT},
        {"role": "user", "content": _USER_2},
    ]
    for messages in (conversation, conversation[:2]):
        try:
            rendered = render_template(template, messages, **variables)
        except Exception:  # a template that refuses this conversation: try the shorter one
            continue
        start = rendered.find(_ASSISTANT)
        if start < 0:
            continue
        start += len(_ASSISTANT)
        end = rendered.find(_USER_2, start)
        segment = rendered[start:] if end < 0 else rendered[start:end]
        # the markers that end a turn and open the next, not the role header's tail
        role = segment.find("user")
        return segment if role < 0 else segment[:role]
    return None


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item.strip():
            seen.setdefault(item, None)
    return tuple(seen)


def stop_markers(
    *, template: str | None, bos_token: str = "", eos_token: str = "", eot_token: str = ""
) -> tuple[str, ...]:
    """The strings that end a reply of a model with this chat ``template``.

    The markers the template writes after an assistant turn and before the
    next user's role name, in order, then ``eos_token`` and ``eot_token``
    (the vocabulary's end-of-sequence and end-of-turn tokens' texts), without
    duplicates or empty strings. For example ChatML (SmolLM2) gives
    ``("<|im_end|>", "<|im_start|>", "<|endoftext|>")`` with eot
    ``<|endoftext|>``; Llama 3 ``("<|eot_id|>", "<|start_header_id|>", …)``;
    Gemma ``("<end_of_turn>", "<start_of_turn>", …)``. A template that cannot
    be rendered contributes nothing.
    """
    found: list[str] = []
    if template:
        segment = _segment(template, bos_token=bos_token, eos_token=eos_token)
        if segment:
            found.extend(MARKER_RE.findall(segment))
    return _unique([*found, eos_token, eot_token])


def cut_at_markers(text: str, markers: Iterable[str]) -> tuple[str, bool]:
    """``text`` up to the first of ``markers`` and whether anything was cut:
    what a model writes after its end-of-turn marker (a user turn it makes up,
    an invented observation) is not part of its reply."""
    cut = len(text)
    for marker in markers:
        if marker:
            index = text.find(marker)
            if 0 <= index < cut:
                cut = index
    return text[:cut], cut < len(text)
