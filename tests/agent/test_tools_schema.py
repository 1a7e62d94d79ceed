"""Tools from a JSON schema (agentlab/agent/tools/schema.py). No Django."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from agentlab.agent.protocol import describe_tools
from agentlab.agent.tools import ToolContext, ToolRegistry, schema_tool
from agentlab.agent.types import ToolCall

SCHEMA = {
    "type": "object",
    "properties": {"json": {"type": "string"}, "copy": {"type": "integer", "minimum": 1}},
    "required": ["json"],
    "additionalProperties": False,
}


async def test_arguments_reach_the_function_as_a_dict_even_with_names_pydantic_uses():
    seen: list[dict] = []

    def record(arguments, context):
        seen.append(arguments)
        return "ok"

    registry = ToolRegistry([schema_tool("record", "Record.", SCHEMA, record)])
    result = await registry.execute(
        ToolCall(id="c", name="record", arguments={"json": "x", "copy": 2}), ToolContext()
    )

    assert (result.output, result.is_error) == ("ok", False)
    assert seen == [{"json": "x", "copy": 2}]


async def test_arguments_the_schema_refuses_come_back_to_the_model_naming_each_problem():
    registry = ToolRegistry([schema_tool("record", "Record.", SCHEMA, lambda a, c: "ok")])

    result = await registry.execute(
        ToolCall(id="c", name="record", arguments={"copy": 0, "extra": True}), ToolContext()
    )

    assert result.is_error
    assert result.output == (
        "Invalid arguments for record: arguments: 'json' is a required property; "
        "Additional properties are not allowed ('extra' was unexpected); "
        "copy: 0 is less than the minimum of 1"
    )


def test_the_model_is_offered_the_schema_as_written():
    tool = schema_tool("record", "Record.", SCHEMA, lambda a, c: "ok")

    assert tool.spec()["function"]["parameters"] == SCHEMA
    assert '"required":["json"]' in describe_tools(ToolRegistry([tool]))


def test_bad_names_and_schemas_are_refused_naming_the_tool():
    with pytest.raises(ValueError, match="must be 1-64 letters"):
        schema_tool("two words", "x", SCHEMA, lambda a, c: "ok")
    with pytest.raises(ValueError, match="tool 'arr': parameters must be an object schema"):
        schema_tool("arr", "x", {"type": "array"}, lambda a, c: "ok")
    with pytest.raises(ValueError, match="tool 'bad': parameters are not a valid JSON schema"):
        schema_tool(
            "bad", "x", {"type": "object", "properties": {"a": {"type": "colour"}}}, lambda a, c: "ok"
        )


async def test_a_pydantic_model_is_accepted_as_for_built_in_tools():
    class Args(BaseModel):
        n: int

    registry = ToolRegistry([schema_tool("double", "Double.", Args, lambda args, c: args.n * 2)])

    result = await registry.execute(ToolCall(id="c", name="double", arguments={"n": 4}), ToolContext())

    assert result.output == "8"
