"""Streaming completions: the fragments a provider hands out while a reply is
generated, and the user-visible answer text read from them as they come.

A provider that streams (``LLMProvider.complete(..., on_delta=…)``) calls
``on_delta(CompletionDelta)`` for each fragment of its reply: text content,
or a piece of one tool call's JSON arguments. The completion it returns at the
end is still the record of the step; the fragments only let a watching user
see the reply grow.

What a user should see is the answer, never raw JSON: ``AnswerText`` turns
the fragments of one completion into its visible text, incrementally —

- plain text content is shown as it comes;
- content that is JSON (the JSON-in-text tool protocol of
  ``agentlab.agent.protocol``, possibly in a code fence) shows only the
  ``answer`` field being written inside it, decoded (escapes undone);
- a native ``final_answer`` call shows the ``answer`` field of its
  arguments, decoded; other tool calls' arguments show nothing.

(LangGraph's ``messages`` stream mode and OpenAI's response deltas show the
same: text as it is generated, tool-call JSON not as text.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

ANSWER_KEY = "answer"
FINAL_ANSWER_TOOL = "final_answer"
#: What separates plain content already shown from an answer that follows it.
_PARAGRAPH = "\n\n"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class CompletionDelta:
    """One fragment of a streaming completion: ``text`` content, or
    ``arguments`` text of tool call number ``call_index`` (0-based, in the
    reply's order) whose name is ``call_name`` (given with its first fragment
    at least; ``None`` when not known yet)."""

    text: str = ""
    call_index: int | None = None
    call_name: str | None = None
    arguments: str = ""


OnDelta = Callable[[CompletionDelta], None]


@dataclass(frozen=True)
class TextDelta:
    """Visible text of a streaming completion, as the agent loop hands it to
    its caller: ``text`` continues the visible text of completion
    ``completion`` (1, 2 … : the tries of one LLM call; a retried call starts
    its text again) of step ``step``."""

    step: int
    completion: int
    text: str


OnText = Callable[[TextDelta], None]


class JsonAnswerScanner:
    """Reads JSON text piece by piece and returns, piece by piece, the value
    of its first ``"answer"`` key (at any depth): a string decoded, any other
    value as its JSON text. Text outside JSON (a code fence, prose) is
    skipped. Never raises: malformed JSON just yields what it can.
    """

    def __init__(self) -> None:
        self._in_string = False
        self._escape = ""  # "" or the escape collected so far ("\\", "\\u00")
        self._key = ""  # the last complete string, and whether ':' followed it
        self._string = ""
        self._after_key = False
        self._state = "seek"  # seek → value → string | raw → done
        self._depth = 0  # nesting inside a raw (non-string) answer value
        self._high = ""  # a high surrogate waiting for its low half

    @property
    def done(self) -> bool:
        """Whether the answer value has been read to its end."""
        return self._state == "done"

    def feed(self, text: str) -> str:
        """The answer text that ``text`` adds ("" when none)."""
        out: list[str] = []
        for ch in text:
            if self._state == "done":
                break
            if self._state == "string":
                self._answer_string(ch, out)
            elif self._state == "raw":
                self._answer_raw(ch, out)
            elif self._state == "value":
                if ch.isspace():
                    continue
                if ch == '"':
                    self._state = "string"
                else:
                    self._state = "raw"
                    self._answer_raw(ch, out)
            else:
                self._seek(ch)
        return "".join(out)

    def _seek(self, ch: str) -> None:
        if self._in_string:
            if self._escape:
                self._escape = ""
                self._string += ch
            elif ch == "\\":
                self._escape = "\\"
            elif ch == '"':
                self._in_string = False
                self._key = self._string
                self._after_key = True
            else:
                self._string += ch
            return
        if ch == '"':
            self._in_string, self._string = True, ""
        elif ch == ":" and self._after_key and self._key == ANSWER_KEY:
            self._state = "value"
        elif not ch.isspace():
            self._after_key = False

    def _answer_string(self, ch: str, out: list[str]) -> None:
        if self._escape:
            self._escape += ch
            if self._escape[1] != "u":
                if self._high:  # a high surrogate not followed by its low half
                    out.append("\ufffd")
                    self._high = ""
                out.append(_ESCAPES.get(ch, ch))
                self._escape = ""
            elif len(self._escape) == 6:
                try:
                    code = int(self._escape[2:], 16)
                except ValueError:
                    code = 0xFFFD
                self._escape = ""
                if 0xD800 <= code < 0xDC00:
                    self._high = chr(code)
                    return
                if 0xDC00 <= code < 0xE000 and self._high:
                    pair = self._high + chr(code)
                    out.append(pair.encode("utf-16", "surrogatepass").decode("utf-16"))
                else:
                    out.append(chr(code) if not 0xD800 <= code < 0xE000 else "\ufffd")
                self._high = ""
            return
        if self._high and ch != "\\":  # a high surrogate without its low half
            out.append("\ufffd")
            self._high = ""
        if ch == "\\":
            self._escape = "\\"
        elif ch == '"':
            self._state = "done"
        else:
            out.append(ch)

    def _answer_raw(self, ch: str, out: list[str]) -> None:
        if self._in_string:
            out.append(ch)
            if self._escape:
                self._escape = ""
            elif ch == "\\":
                self._escape = "\\"
            elif ch == '"':
                self._in_string = False
            return
        if ch in ",}]" and self._depth == 0:
            self._state = "done"
            return
        if ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
        elif ch == '"':
            self._in_string = True
        if ch.isspace() and self._depth == 0:
            return
        out.append(ch)


class AnswerText:
    """The user-visible text of one streaming completion (module docstring).

    ``feed(delta)`` returns what the fragment adds to the visible text ("" for
    nothing). Content is judged on its first non-blank character: ``{`` or a
    code fence make it JSON (only its ``answer`` is shown), anything else is
    plain text shown as it comes. Only the first ``final_answer`` call's
    answer is shown; after plain content it starts a new paragraph.
    """

    def __init__(self) -> None:
        self._content_kind = ""  # "" (undecided), "plain" or "json"
        self._held = ""  # leading blanks of the content, kept until decided
        self._content_json = JsonAnswerScanner()
        self._answer_call: int | None = None
        self._call_names: dict[int, str] = {}
        self._call_json = JsonAnswerScanner()
        self._answer_started = False
        self._shown = 0

    @property
    def shown(self) -> int:
        """Characters of visible text returned so far."""
        return self._shown

    def feed(self, delta: CompletionDelta) -> str:
        out = ""
        if delta.text:
            out += self._content(delta.text)
        if delta.call_index is not None:
            out += self._call(delta)
        self._shown += len(out)
        return out

    def _content(self, text: str) -> str:
        if self._content_kind == "":
            text = self._held + text
            stripped = text.lstrip()
            if not stripped or (len(stripped) < 3 and set(stripped) == {"`"}):
                self._held = text  # blanks, or maybe the start of a code fence
                return ""
            self._held = ""
            if stripped.startswith(("{", "```")):
                self._content_kind = "json"
            else:
                self._content_kind = "plain"
                text = stripped
        if self._content_kind == "plain":
            return text
        return self._content_json.feed(text)

    def _call(self, delta: CompletionDelta) -> str:
        index = delta.call_index
        assert index is not None
        if delta.call_name:
            self._call_names.setdefault(index, delta.call_name)
        if self._answer_call is None:
            if self._call_names.get(index) != FINAL_ANSWER_TOOL:
                return ""
            self._answer_call = index
        if index != self._answer_call or not delta.arguments:
            return ""
        answer = self._call_json.feed(delta.arguments)
        if answer and self._shown and not self._answer_started:
            answer = _PARAGRAPH + answer
        if answer:
            self._answer_started = True
        return answer


def text_stream(on_text: OnText, step: int) -> Callable[[int, CompletionDelta], None]:
    """The ``stream`` callback (``agentlab.agent.retry``) of step ``step``'s
    LLM call: one ``AnswerText`` per try, its visible text handed on to
    ``on_text`` as ``TextDelta``s. An exception from ``on_text`` is logged
    and that try is not streamed further (watching must not break the step)."""
    readers: dict[int, AnswerText] = {}
    broken: set[int] = set()

    def stream(attempt: int, delta: CompletionDelta) -> None:
        if attempt in broken:
            return
        reader = readers.get(attempt)
        if reader is None:
            readers.clear()  # an earlier try's text is over
            reader = readers[attempt] = AnswerText()
        text = reader.feed(delta)
        if not text:
            return
        try:
            on_text(TextDelta(step=step, completion=attempt, text=text))
        except Exception:
            logger.exception("streaming the text of step %s failed; not streaming it further", step)
            broken.add(attempt)

    return stream
