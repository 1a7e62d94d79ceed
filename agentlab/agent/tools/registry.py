"""The tool registry: named tools, their JSON schemas, and safe execution.

A tool is a name, a description, a pydantic model for its arguments (which
gives the JSON schema sent to the model) and a function
``fn(args, context) -> value`` (sync or async). ``ToolRegistry.execute`` never
raises for anything the model or the tool did wrong: an unknown tool, bad
arguments or an exception in the tool all come back as a
``ToolResult(is_error=True)`` whose text tells the model what to fix — a tool's
failure is data for the model (CONTRIBUTING.md#classified-failures; inspect_ai ``ToolError``).

A tool may be offered only in some turns: ``Tool.available(context)`` decides.
The loop sends the model only the tools of ``ToolRegistry.offered(context)``
(specs and, without native tools, the system prompt), and ``execute`` answers a
call of an unavailable tool as it answers an unknown one. A turn in which every
tool is available sees the registry itself.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from agentlab.agent.types import ToolCall, ToolResult


@dataclass
class ToolContext:
    """What tools may read about the current turn.

    ``documents``: the example's context documents, each ``{"title": str,
    "text": str}`` (searched by ``search_documents``). ``metadata``: free-form
    values from the driver — the turn's context object; for an SQL example
    ``metadata["database_path"]`` is the absolute path of its SQLite file
    (``evaluation.datasets.jsonl`` resolves ``context.database_file``), which both
    offers and feeds ``sql_query``.

    Idempotency (docs/extending.md): ``idempotency_key`` is set for the one call
    a tool is running — ``<idempotency_scope>/<tool call id>``, the scope
    being the turn and its attempt (``turn-7/attempt-1``), so the key is the
    same when a resumed turn runs a call again. A tool with side effects
    (sending, booking, writing elsewhere) must pass it on, or remember it
    and do nothing the second time: after a crash, a call that may have run
    is run again with the same key, and then ``may_have_run`` is ``True``
    (``started_calls``: the call ids the turn's log shows started without a
    result). ``None`` outside a turn (no scope).
    """

    documents: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    idempotency_scope: str = ""
    started_calls: frozenset[str] = frozenset()
    idempotency_key: str | None = None
    may_have_run: bool = False

    def for_call(self, call: ToolCall) -> ToolContext:
        """This context as the tool running ``call`` sees it: its
        ``idempotency_key`` and whether it ``may_have_run`` already."""
        if not self.idempotency_scope:
            return self
        return replace(
            self,
            idempotency_key=f"{self.idempotency_scope}/{call.id}",
            may_have_run=call.id in self.started_calls,
        )


ToolFn = Callable[[Any, ToolContext], "Any | Awaitable[Any]"]


@dataclass
class Tool:
    """One named tool.

    ``parameters`` is a pydantic model; the model's arguments are validated
    against it and ``fn`` receives the validated instance. ``fn`` may be sync
    (run in a worker thread so it cannot block the event loop) or async. A
    return value that is not ``str`` is sent to the model as JSON.
    ``needs_approval`` makes the loop ask the approval gate before running it.
    ``ends_turn``: ``"final"`` (the call's arguments are the answer) or
    ``"ask"`` (the call's ``question`` goes to the user); the turn ends after
    the tool ran without error. ``available``: a predicate over the turn's
    ``ToolContext``; when it says no, the tool is not offered to the model in
    that turn and a call of it is an unknown tool (``None``: always offered).
    It is called once per LLM call and per tool call, so keep it cheap.
    ``read_only``: the tool has no side effect (it reads, computes, looks
    up) — the one kind a replay runs live after its divergence
    (``agentlab.agent.replay``; docs/extending.md). ``False`` unless said.
    """

    name: str
    description: str
    parameters: type[BaseModel]
    fn: ToolFn
    needs_approval: bool = False
    ends_turn: Literal["final", "ask"] | None = None
    available: Callable[[ToolContext], bool] | None = None
    read_only: bool = False

    def is_available(self, context: ToolContext) -> bool:
        """Whether this tool is offered in a turn with ``context``."""
        return self.available is None or bool(self.available(context))

    def spec(self) -> dict[str, Any]:
        """The OpenAI function-tool spec: ``{"type": "function", "function":
        {"name", "description", "parameters": <JSON schema>}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json_schema(self.parameters),
            },
        }


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The pydantic JSON schema of ``model`` without the noise of ``title``
    keys (they only repeat the field names and cost the model tokens)."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v)
                for k, v in node.items()
                # "title" as a key of a schema node is noise; a *property* named
                # title (inside "properties") must stay.
                if not (k == "title" and isinstance(v, str))
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    schema: dict[str, Any] = strip(model.model_json_schema())
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def _to_output(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class ToolRegistry:
    """Named tools, their specs for the model, and safe execution."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._specs: list[dict[str, Any]] | None = None
        for tool in tools or ():
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add ``tool``; a second tool with the same name is a ``ValueError``."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._specs = None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """OpenAI function-tool specs of every tool, in registration order.

        Built once per registry (pydantic's JSON-schema generation is slow
        enough to show in ``run_eval`` profiles) and rebuilt after
        ``register``. Callers must not mutate the returned list."""
        if self._specs is None:
            self._specs = [tool.spec() for tool in self._tools.values()]
        return self._specs

    def offered(self, context: ToolContext) -> ToolRegistry:
        """The tools offered in a turn with ``context``: those whose
        ``Tool.is_available(context)`` holds, in registration order.

        Returns ``self`` when every tool is available, so such a turn gets
        this registry's own specs and system prompt. Otherwise a new registry
        of the available tools whose specs are taken from this registry's
        (built once), not rebuilt."""
        return self.arranged([tool.name for tool in self._tools.values() if tool.is_available(context)])

    def arranged(self, names: Sequence[str]) -> ToolRegistry:
        """The tools named in ``names``, in that order (each must be in this
        registry), with their specs taken from this registry's, not rebuilt;
        ``self`` when that is every tool in registration order. Raises
        ``KeyError`` for a name this registry does not have."""
        if list(names) == list(self._tools):
            return self
        subset = ToolRegistry([self._tools[name] for name in names])
        specs = dict(zip(self._tools, self.specs(), strict=True))
        subset._specs = [specs[name] for name in names]
        return subset

    def with_tools(self, extra: Iterable[Tool]) -> ToolRegistry:
        """A new registry: this one's tools, then ``extra`` (a plugin's or an
        MCP server's), reusing this registry's specs rather than building
        them again for every turn. A name already taken is a ``ValueError``."""
        combined = ToolRegistry([*self._tools.values(), *extra])
        combined._specs = [*self.specs(), *(tool.spec() for tool in list(combined)[len(self) :])]
        return combined

    async def execute(self, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run ``call`` and return its observation; never raises except
        ``asyncio.CancelledError``.

        Error results (``is_error=True``): a call without a tool name (the
        JSON-in-text parser could not read the request), an unknown tool or
        one not available in ``context`` (the same message, listing the tools
        available in ``context``), arguments that were not a JSON object
        (``call.error``), arguments that fail validation, and an exception
        raised by the tool.
        """

        def error(message: str) -> ToolResult:
            return ToolResult(call_id=call.id, name=call.name, output=message, is_error=True)

        if not call.name:
            return error(f"Malformed tool call: {call.error or 'no tool name given'}")
        tool = self._tools.get(call.name)
        if tool is None or not tool.is_available(context):
            names = [t.name for t in self._tools.values() if t.is_available(context)]
            return error(f"Unknown tool {call.name!r}. Available tools: {', '.join(names)}.")
        if call.error:
            return error(f"Invalid arguments for {tool.name}: {call.error}")
        try:
            args = tool.parameters.model_validate(call.arguments)
        except ValidationError as exc:
            return error(f"Invalid arguments for {tool.name}: {_validation_message(exc)}")
        try:
            if inspect.iscoroutinefunction(tool.fn):
                value = await tool.fn(args, context)
            else:
                value = await asyncio.to_thread(tool.fn, args, context)
                if inspect.isawaitable(value):
                    value = await value
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool's failure is data for the model
            detail = str(exc) or type(exc).__name__
            return error(f"Tool {tool.name} failed: {type(exc).__name__}: {detail}")
        return ToolResult(call_id=call.id, name=tool.name, output=_to_output(value))
