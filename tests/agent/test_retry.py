from __future__ import annotations

import time

import pytest

from agentlab.agent.providers.scripted import ScriptedProvider, text
from agentlab.agent.retry import complete_with_retries
from agentlab.agent.text import SafeJson, json_body_safe, json_safe
from agentlab.agent.types import ProviderError


def _transient(n: int) -> ProviderError:
    return ProviderError(f"HTTP 503: busy {n}", transient=True, kind="server_error", status=503)


async def test_transient_errors_are_retried_until_success() -> None:
    provider = ScriptedProvider([_transient(1), _transient(2), text("ok")])
    completion = await complete_with_retries(
        provider, [{"role": "user", "content": "hi"}], None, base_delay=0.001
    )
    assert completion.text == "ok"
    assert len(provider.calls) == 3


async def test_the_last_transient_error_is_raised_after_all_attempts() -> None:
    provider = ScriptedProvider([_transient(1), _transient(2), _transient(3), text("never")])
    with pytest.raises(ProviderError, match="busy 3"):
        await complete_with_retries(provider, [], None, attempts=3, base_delay=0.001)
    assert len(provider.calls) == 3


async def test_permanent_errors_are_raised_at_once() -> None:
    provider = ScriptedProvider(
        [ProviderError("HTTP 401: bad key", transient=False, kind="auth"), text("never")]
    )
    with pytest.raises(ProviderError, match="bad key"):
        await complete_with_retries(provider, [], None, base_delay=0.001)
    assert len(provider.calls) == 1


async def test_other_exceptions_are_not_retried() -> None:
    def boom(messages: list[dict]) -> None:
        raise KeyError("bug")

    provider = ScriptedProvider([boom, text("never")])  # type: ignore[list-item]
    with pytest.raises(KeyError):
        await complete_with_retries(provider, [], None, base_delay=0.001)
    assert len(provider.calls) == 1


async def test_backoff_doubles_from_base_delay() -> None:
    provider = ScriptedProvider([_transient(1), _transient(2), _transient(3), text("ok")])
    started = time.monotonic()
    await complete_with_retries(provider, [], None, attempts=4, base_delay=0.05, max_delay=1.0)
    elapsed = time.monotonic() - started
    # 0.05 + 0.10 + 0.20 at least, plus at most 3 × 0.025 of jitter.
    assert 0.35 <= elapsed < 1.5


async def test_max_tokens_temperature_and_response_schema_are_passed_through() -> None:
    provider = ScriptedProvider([text("ok"), text("{}")])
    await complete_with_retries(provider, [], None, max_tokens=12, temperature=0.3)
    schema = {"type": "object", "properties": {"verdict": {"enum": ["accept"]}}, "required": ["verdict"]}
    await complete_with_retries(provider, [], None, max_tokens=5, response_schema=schema)
    assert provider.kwargs_seen == [
        {"max_tokens": 12, "temperature": 0.3, "response_schema": None},
        {"max_tokens": 5, "temperature": None, "response_schema": schema},
    ]


class _Doc:
    def to_dict(self) -> dict[str, object]:
        return {"text": "a\x00b"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # plain and clean: the same JSON, as a copy
        (
            [{"role": "user", "content": "héllo", "n": 1.5, "ok": True, "x": None}],
            [{"role": "user", "content": "héllo", "n": 1.5, "ok": True, "x": None}],
        ),
        # NUL and a lone surrogate deep inside
        ([{"content": [{"text": "a\x00b\ud800c"}]}], [{"content": [{"text": "a\ufffdb\ufffdc"}]}]),
        ({"k\x00": "v"}, {"k\ufffd": "v"}),
        # the six characters backslash-u0000 are text, not NUL
        ({"s": "\\u0000"}, {"s": "\\u0000"}),
        # what JSON cannot encode as it is goes through json_safe's rules
        ({"nan": float("nan"), "set": {1}}, {"nan": None, "set": [1]}),
        ({"doc": _Doc()}, {"doc": {"text": "a\ufffdb"}}),
        # tuples and int keys as JSON carries them
        ({"t": (1, 2), 3: "three"}, {"t": [1, 2], "3": "three"}),
    ],
)
def test_json_body_safe_follows_json_safe(value: object, expected: object) -> None:
    result = json_body_safe(value)
    assert result == expected
    assert result is not value
    assert json_body_safe(value) == json_safe(value)


def test_a_value_marked_safe_is_not_walked_again() -> None:
    inner = SafeJson({"messages": [{"role": "user", "content": "hi"}]})
    outer = json_safe({"request": inner, "text": "a\x00b"})
    assert outer["request"] is inner  # kept as it is, not copied
    assert outer == {"request": {"messages": [{"role": "user", "content": "hi"}]}, "text": "a\ufffdb"}
