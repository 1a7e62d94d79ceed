"""Tools whose parameters are a JSON schema rather than a pydantic model.

Plugin tools and MCP tools arrive as *(name, description, JSON schema, a
callable)*. ``schema_tool`` turns one into an ordinary ``Tool``: its
``parameters`` is a pydantic model built around the schema (its
``model_json_schema()`` is the schema itself, so the model is offered exactly
what the author wrote, and validation is ``jsonschema``'s Draft 2020-12
validator, the dialect MCP names for ``inputSchema``), and its callable
receives the arguments as a plain ``dict``. Everything the registry does for a
built-in tool — availability, approval, turning a failure into data for the
model — then applies unchanged.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from .registry import Tool, ToolContext

#: What OpenAI-compatible endpoints accept as a function name.
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

SchemaToolFn = Callable[[dict[str, Any], ToolContext], "Any | Awaitable[Any]"]


class SchemaArguments(BaseModel):
    """Base of the argument models ``schema_parameters`` builds: every key the
    model sent is kept (``extra="allow"``) once the schema accepted them."""

    model_config = ConfigDict(extra="allow")
    schema_: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    validator_: ClassVar[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _check_schema(cls, data: Any) -> Any:
        errors = sorted(cls.validator_.iter_errors(data), key=lambda e: list(e.absolute_path))
        if errors:
            parts = []
            for error in errors[:5]:
                where = ".".join(str(p) for p in error.absolute_path)
                parts.append(f"{where}: {error.message}" if where else error.message)
            raise PydanticCustomError("json_schema", "{message}", {"message": "; ".join(parts)})
        return data

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.schema_)

    def arguments(self) -> dict[str, Any]:
        """The validated arguments as the model sent them."""
        return dict(self.__pydantic_extra__ or {})


def schema_parameters(schema: Mapping[str, Any], *, name: str) -> type[SchemaArguments]:
    """A pydantic model standing for the JSON schema ``schema`` (an object schema).

    Raises ``ValueError`` naming ``name`` when ``schema`` is not a valid JSON
    schema or does not describe an object.
    """
    import jsonschema  # deferred: only a tool built from a JSON schema needs it (its import is ~0.1 s)

    schema = dict(schema)
    if schema.get("type", "object") != "object":
        raise ValueError(
            f"tool {name!r}: parameters must be an object schema, got type {schema.get('type')!r}"
        )
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"tool {name!r}: parameters are not a valid JSON schema: {exc.message}") from None
    checked = schema

    class Arguments(SchemaArguments):
        schema_ = checked
        validator_ = jsonschema.Draft202012Validator(checked)

    Arguments.__name__ = Arguments.__qualname__ = f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}_arguments"
    model = Arguments
    return model


def schema_tool(
    name: str,
    description: str,
    parameters: Mapping[str, Any] | type[BaseModel],
    fn: SchemaToolFn | Callable[..., Any],
    *,
    needs_approval: bool = False,
    available: Callable[[ToolContext], bool] | None = None,
    read_only: bool = False,
) -> Tool:
    """A ``Tool`` from a name, a description, parameters and a callable.

    ``parameters``: a JSON schema (``{"type": "object", "properties": …}``);
    ``fn(arguments: dict, context: ToolContext)`` (sync or async) then gets the
    validated arguments as a ``dict``. A pydantic model is accepted too, as for
    built-in tools (``fn`` then gets the model instance). ``name`` must match
    ``TOOL_NAME_RE`` (what OpenAI-compatible endpoints accept). ``read_only``:
    the tool has no side effect (``Tool.read_only``: a replay may run it live).
    Raises ``ValueError`` for a bad name, description or schema.
    """
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
        raise ValueError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
    if not isinstance(description, str):
        raise ValueError(f"tool {name!r}: description must be text")
    if not callable(fn):
        raise ValueError(f"tool {name!r}: fn must be callable")
    if isinstance(parameters, type) and issubclass(parameters, BaseModel):
        return Tool(
            name=name,
            description=description,
            parameters=parameters,
            fn=fn,
            needs_approval=needs_approval,
            available=available,
            read_only=read_only,
        )
    if not isinstance(parameters, Mapping):
        raise ValueError(f"tool {name!r}: parameters must be a JSON schema object or a pydantic model")
    model = schema_parameters(parameters, name=name)
    return Tool(
        name=name,
        description=description,
        parameters=model,
        fn=_with_plain_arguments(fn),
        needs_approval=needs_approval,
        available=available,
        read_only=read_only,
    )


def _with_plain_arguments(fn: Callable[..., Any]) -> Callable[[Any, ToolContext], Any]:
    """``fn`` called with the arguments as a dict; sync stays sync (the
    registry runs it in a worker thread), async stays async."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def call_async(args: SchemaArguments, context: ToolContext) -> Any:
            return await fn(args.arguments(), context)

        return call_async

    @functools.wraps(fn)
    def call(args: SchemaArguments, context: ToolContext) -> Any:
        return fn(args.arguments(), context)

    return call
