"""Plugins the tests load by dotted path (``tests.agent.plugins.sample_plugins:Name``)."""

from __future__ import annotations

import asyncio
import time

from agentlab.agent.plugins import hookimpl, plugin_tool


class Prompt:
    """Answers the system prompt hook with its own text."""

    text = "You are the first plugin's agent."

    @hookimpl
    def agentlab_system_prompt(self, example, default):
        return self.text


class OtherPrompt(Prompt):
    text = "You are the second plugin's agent."


class Raising:
    """Every hook raises."""

    @hookimpl
    def agentlab_tools(self, context):
        raise RuntimeError("no tools today")

    @hookimpl
    def agentlab_system_prompt(self, example, default):
        raise RuntimeError("no prompt today")

    @hookimpl
    def agentlab_step_checked(self, step, context):
        raise ValueError("cannot check this step")

    @hookimpl
    def agentlab_turn_finished(self, turn, context):
        raise KeyError("answer")


class Slow:
    """A step check that takes a second (sync, so it runs in a worker thread)."""

    @hookimpl
    def agentlab_step_checked(self, step):
        time.sleep(1.0)
        return {"name": "slow", "passed": True}


class AsyncChecks:
    """Async hooks: a step check and a turn check that take only some arguments."""

    @hookimpl
    async def agentlab_step_checked(self, step):
        await asyncio.sleep(0)
        return [{"name": "has_text", "passed": bool(step.completion.text), "detail": {"step": step.index}}]

    @hookimpl
    async def agentlab_turn_finished(self, turn):
        return {"name": "answered", "passed": turn.stop_reason == "final"}


class BadReturns:
    """Returns values that are not checks, a prompt or tools."""

    @hookimpl
    def agentlab_tools(self, context):
        return [42, {"name": "no fn", "description": "x"}]

    @hookimpl
    def agentlab_system_prompt(self, example, default):
        return 7

    @hookimpl
    def agentlab_step_checked(self, step, context):
        return [
            {"name": "ok", "passed": "yes"},
            {"passed": True},
            "plain text",
            {"name": "fine", "passed": False},
        ]


class ToolMaker:
    """A tool as a dict and one built with plugin_tool; one name that is taken."""

    @hookimpl
    def agentlab_tools(self, context):
        async def shout(arguments, tool_context):
            return arguments["text"].upper()

        return [
            {
                "name": "shout",
                "description": "Upper-case a text.",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
                "fn": shout,
                "needs_approval": True,
            },
            plugin_tool("calculator", "A second calculator.", {"type": "object"}, lambda a, c: "0"),
        ]


class Misspelt:
    """A hook that does not exist."""

    @hookimpl
    def agentlab_step_check(self, step, context):
        return None


def _first_word(text) -> str:
    words = str(text or "").lower().replace(",", " ").split()
    return words[0] if words else ""


class Scorers:
    """Scorers (``agentlab_scorers``): ``first_word`` (the answer's first word
    is the gold's; no answer is wrong, a blank gold could not be scored),
    ``step_budget`` (full marks for an answer within one step, half for more),
    ``raises`` (always raises) and ``garbled`` (returns no verdict)."""

    __version__ = "2.1.0"

    @hookimpl
    def agentlab_scorers(self):
        def first_word(example, prediction):
            gold = _first_word(example["answer"])
            if not gold:
                return {"score": None, "explanation": "no gold word"}
            got = _first_word(prediction["answer"])
            return {"score": float(got == gold), "explanation": f"{got!r} against {gold!r}"}

        def step_budget(example, prediction):
            steps, tokens = prediction["steps"], prediction["usage"].get("input_tokens")
            return {"score": 1.0 if steps <= 1 else 0.5, "explanation": f"{steps} steps, {tokens} tokens in"}

        def raises(example, prediction):
            raise ZeroDivisionError("scorer bug")

        def garbled(example, prediction):
            return 42

        return {"first_word": first_word, "step_budget": step_budget, "raises": raises, "garbled": garbled}


class BrokenScorers:
    """``agentlab_scorers`` raises: its scorers do not load."""

    @hookimpl
    def agentlab_scorers(self):
        raise RuntimeError("scorer registry is down")


class ShortAnswer:
    """A turn check ``short_answer``: the answer is one word."""

    @hookimpl
    def agentlab_turn_finished(self, turn):
        return {"name": "short_answer", "passed": len(turn.answer.split()) == 1}
