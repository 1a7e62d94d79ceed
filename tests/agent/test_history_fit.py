"""A conversation's earlier turns as messages and their budget
(``agentlab.agent.history``), without a database."""

from __future__ import annotations

from agentlab.agent.history import (
    MESSAGE_OVERHEAD_TOKENS,
    EarlierTurn,
    History,
    conversation_text,
    estimate_tokens,
    fit_history,
    history_budget,
    message_tokens,
    token_counter_of,
    turn_messages,
)
from agentlab.agent.messages import build_messages
from agentlab.agent.tools import default_registry
from agentlab.agent.types import Completion, Step, ToolCall, ToolResult


def ends(name: str) -> bool:
    return name in ("final_answer", "ask_user")


def answered(turn_id: int, question: str, answer: str, *, steps: tuple[Step, ...] = ()) -> EarlierTurn:
    return EarlierTurn(turn_id, turn_id, question, "succeeded", "answered", answer, steps)


def calculator_step() -> Step:
    calc = ToolCall(id="call_1", name="calculator", arguments={"expression": "6*7"})
    done = ToolCall(id="call_2", name="final_answer", arguments={"answer": "42"})
    return Step(
        index=1,
        completion=Completion(text="", tool_calls=(calc, done)),
        results=[
            ToolResult(call_id="call_1", name="calculator", output="42"),
            ToolResult(call_id="call_2", name="final_answer", output="ok"),
        ],
    )


def fit(turns, budget: int, mode="answers"):
    return fit_history(
        turns,
        mode=mode,
        native_tools=True,
        ends_turn=ends,
        budget=budget,
        window=4096,
        reply_tokens=512,
        count=estimate_tokens,
        counted="estimate",
    )


def test_answers_are_a_question_and_its_answer_and_a_clarifying_question_counts_as_a_reply():
    asked = EarlierTurn(2, 2, "book a table", "succeeded", "asked", "For how many people?")
    history = fit([answered(1, "What is 6*7?", "42"), asked], budget=1000)
    assert history.messages == [
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": "42"},
        {"role": "user", "content": "book a table"},
        {"role": "assistant", "content": "For how many people?"},
    ]
    assert history.turns == [1, 2] and history.dropped == []
    assert history.tokens == message_tokens(history.messages, estimate_tokens)
    # 12 characters → 4 tokens, plus the template's framing per message
    assert message_tokens([{"role": "user", "content": "What is 6*7?"}], estimate_tokens) == 4 + 8


def test_failed_cancelled_and_interrupted_turns_are_left_out_with_their_reason():
    turns = [
        answered(1, "q1", "a1"),
        EarlierTurn(2, 2, "q2", "failed", "failed", ""),
        EarlierTurn(3, 3, "q3", "cancelled", "cancelled", ""),
        EarlierTurn(4, 4, "q4", "interrupted", "", ""),
        answered(5, "q5", "a5"),
    ]
    history = fit(turns, budget=1000)
    assert history.turns == [1, 5]
    assert [m["content"] for m in history.messages] == ["q1", "a1", "q5", "a5"]
    assert history.dropped == [
        {"turn": 2, "position": 2, "reason": "failed"},
        {"turn": 3, "position": 3, "reason": "cancelled"},
        {"turn": 4, "position": 4, "reason": "interrupted"},
    ]


def test_the_oldest_turns_go_first_and_what_is_kept_is_the_latest_stretch():
    long = "x" * 300  # 100 tokens; a turn is 100 + 1 + 2 * 8 = 117
    turns = [answered(i, "q", long) for i in range(1, 7)]
    history = fit(turns, budget=3 * 117 + 50)
    assert history.turns == [4, 5, 6]
    assert history.tokens == 3 * 117 <= history.budget
    assert [d["turn"] for d in history.dropped] == [1, 2, 3]
    assert {d["reason"] for d in history.dropped} == {"budget"}
    # a small turn older than one that did not fit is dropped too: no gaps
    turns = [answered(1, "q", "tiny"), answered(2, "q", long * 10), answered(3, "q", "tiny")]
    assert fit(turns, budget=200).turns == [3]


def test_full_gives_the_tool_calls_and_results_but_not_the_turn_ending_call():
    turn = answered(7, "What is 6*7?", "42", steps=(calculator_step(),))
    native = turn_messages(turn, mode="full", native_tools=True, ends_turn=ends)
    assert native == [
        {"role": "user", "content": "What is 6*7?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "t7_call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t7_call_1", "content": "42"},
        {"role": "assistant", "content": "42"},
    ]
    text = turn_messages(turn, mode="full", native_tools=False, ends_turn=ends)
    assert text == [
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": '{"tool": "calculator", "arguments": {"expression": "6*7"}}'},
        {"role": "user", "content": "Observation from calculator: 42"},
        {"role": "assistant", "content": "42"},
    ]
    assert turn_messages(turn, mode="answers", native_tools=True, ends_turn=ends) == [native[0], native[-1]]


def test_the_budget_is_half_of_what_the_window_leaves_and_never_negative():
    assert history_budget(window=8192, reply_tokens=512, request_tokens=680) == 3500
    assert history_budget(window=1024, reply_tokens=512, request_tokens=600) == 0


def test_history_goes_between_the_system_prompt_and_the_question():
    history = [{"role": "user", "content": "What is 6*7?"}, {"role": "assistant", "content": "42"}]
    messages = build_messages("double it", [], default_registry(), native_tools=True, history=history)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in messages[1:]] == ["What is 6*7?", "42", "double it"]
    assert messages[1] is not history[0]  # copied: the recorded history is never changed


def test_a_recorded_history_reads_back_the_same():
    history = fit([answered(1, "q1", "a1"), EarlierTurn(2, 2, "q2", "failed", "failed", "")], budget=500)
    data = history.to_data(attempt=1)
    assert History.from_data(data) == history
    assert data["attempt"] == 1 and data["dropped"] == [{"turn": 2, "position": 2, "reason": "failed"}]


def test_tokens_are_counted_by_the_provider_s_tokenizer_when_it_has_one():
    class WithTokenizer:
        def count_tokens(self, text: str) -> int:
            return len(text.split())

    class Broken:
        class token_counter:
            @staticmethod
            def count(text: str) -> int:
                raise ImportError("no local extra")

    count, how = token_counter_of(WithTokenizer())
    assert (how, count("a b c")) == ("tokenizer", 3)
    assert token_counter_of(Broken())[1] == "estimate"
    assert token_counter_of(object()) == (estimate_tokens, "estimate")
    assert MESSAGE_OVERHEAD_TOKENS == 8


def test_the_estimate_counts_bytes_so_a_chinese_character_is_about_a_token():
    assert estimate_tokens("What is 6*7?") == 4
    assert estimate_tokens("六乘以七是多少") == 7  # seven characters, 21 bytes
    assert estimate_tokens("") == 0


def test_the_reviewer_reads_the_history_as_lines():
    turn = answered(7, "What is 6*7?", "42", steps=(calculator_step(),))
    messages = turn_messages(turn, mode="full", native_tools=True, ends_turn=ends)
    assert conversation_text(messages) == (
        "User: What is 6*7?\n"
        'Assistant calls calculator({"expression": "6*7"})\n'
        "Tool result: 42\n"
        "Assistant: 42"
    )
    assert conversation_text([]) == ""
