"""Tools the agent can call: a registry and the built-in tools.

A tool is a name, a description, a pydantic model for its arguments and a
function; a tool's failure is data for the model, never an exception (see
``registry``).

Built in (``default_registry``): ``calculator``, ``search_documents``,
``ask_user``, ``final_answer`` — offered in every turn — and ``sql_query``
(one read-only query on the turn's SQLite database), offered only when the
turn's context has a ``database_path``.

Modules: ``registry`` (``Tool``, ``ToolContext``, ``ToolRegistry``,
``json_schema``, execution and output shaping), ``calculator``,
``documents`` (``search_documents``, BM25), ``sql`` (the read-only SQLite
sandbox behind ``sql_query``), ``schema`` (a tool from a JSON schema, as
plugins and MCP servers give them), ``builtins`` (``ask_user``, ``final_answer``
and ``default_registry``). Import the public names from here.
"""

from __future__ import annotations

from .builtins import (
    AskUserArgs,
    FinalAnswerArgs,
    ask_user_tool,
    default_registry,
    final_answer_tool,
)
from .calculator import CalculatorArgs, CalculatorError, calculator_tool, evaluate_expression
from .documents import NO_DOCUMENTS, SearchDocumentsArgs, rank_documents, search_documents_tool, tokenize
from .registry import Tool, ToolContext, ToolFn, ToolRegistry, json_schema
from .schema import TOOL_NAME_RE, schema_parameters, schema_tool
from .sql import (
    NO_DATABASE,
    SCHEMA_QUERY,
    SQL_MAX_CELL_CHARS,
    SQL_MAX_QUERY_BYTES,
    SQL_MAX_RESULT_CHARS,
    SQL_MAX_ROWS,
    SQL_MAX_VALUE_BYTES,
    SQL_TIME_LIMIT_S,
    SQLQueryArgs,
    SQLQueryError,
    run_sql_query,
    sql_query_tool,
)

__all__ = [
    "NO_DATABASE",
    "NO_DOCUMENTS",
    "SCHEMA_QUERY",
    "SQL_MAX_CELL_CHARS",
    "SQL_MAX_QUERY_BYTES",
    "SQL_MAX_RESULT_CHARS",
    "SQL_MAX_ROWS",
    "SQL_MAX_VALUE_BYTES",
    "SQL_TIME_LIMIT_S",
    "TOOL_NAME_RE",
    "AskUserArgs",
    "CalculatorArgs",
    "CalculatorError",
    "FinalAnswerArgs",
    "SQLQueryArgs",
    "SQLQueryError",
    "SearchDocumentsArgs",
    "Tool",
    "ToolContext",
    "ToolFn",
    "ToolRegistry",
    "ask_user_tool",
    "calculator_tool",
    "default_registry",
    "evaluate_expression",
    "final_answer_tool",
    "json_schema",
    "rank_documents",
    "run_sql_query",
    "schema_parameters",
    "schema_tool",
    "search_documents_tool",
    "sql_query_tool",
    "tokenize",
]
