"""``calculator``: safe arithmetic, evaluated by our own small AST evaluator.

One safety mechanism: the expression is parsed (``ast.parse``, which builds a
tree and runs nothing) and ``_evaluate`` walks that tree, knowing only
numbers, the operators of ``_BINARY`` / ``_UNARY``, the names of ``_NAMES``
and calls of the functions of ``_FUNCTIONS``; any other node is refused where
it is met. Nothing is ever handed to ``eval`` or ``compile``. The size limits
sit in the operators themselves (``_safe_pow``, ``_checked``), so a huge
intermediate result is refused before the next operation uses it.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from .registry import Tool, ToolContext

_MAX_EXPRESSION_CHARS = 500
_MAX_EXPONENT = 1000
_MAX_RESULT_BITS = 4096


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be computed."""


def _check_size(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > _MAX_RESULT_BITS:
        raise CalculatorError(f"result too large (more than {_MAX_RESULT_BITS} bits)")
    return value


def _safe_pow(base: Any, exponent: Any) -> Any:
    if abs(exponent) > _MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} too large (the limit is {_MAX_EXPONENT})")
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and abs(base) > 1
        and abs(base).bit_length() * exponent > _MAX_RESULT_BITS
    ):
        raise CalculatorError(f"result of {base} ** {exponent} too large")
    try:
        return _check_size(operator.pow(base, exponent))
    except OverflowError as exc:
        raise CalculatorError(f"result of {base} ** {exponent} too large") from exc


def _checked(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        return _check_size(op(a, b))

    return apply


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: _checked(operator.add),
    ast.Sub: _checked(operator.sub),
    ast.Mult: _checked(operator.mul),
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _safe_pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _round(value: float, ndigits: int | None = None) -> float:
    return round(value) if ndigits is None else round(value, int(ndigits))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "round": _round,
    "abs": abs,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "exp": math.exp,
}
_NAMES = {"pi": math.pi, "e": math.e}


def _refused(node: ast.AST) -> CalculatorError:
    return CalculatorError(f"{type(node).__name__} is not allowed; use numbers, + - * / // % ** and ()")


def _evaluate(node: ast.AST) -> Any:
    """The value of ``node``, a node of the allowed grammar; raises
    ``CalculatorError`` for any other node, the first one met (left to right,
    outside in). A bare function name is a value (then "not a number")."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        return node.value
    if isinstance(node, ast.Name):
        if node.id in _NAMES:
            return _NAMES[node.id]
        if node.id in _FUNCTIONS:
            return _FUNCTIONS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}")
    if isinstance(node, ast.BinOp):
        binary = _BINARY.get(type(node.op))
        if binary is None:
            raise _refused(node.op)
        return binary(_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp):
        unary = _UNARY.get(type(node.op))
        if unary is None:
            raise _refused(node.op)
        return unary(_evaluate(node.operand))
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS or node.keywords:
            raise CalculatorError(f"only these functions are allowed: {', '.join(_FUNCTIONS)}")
        return _FUNCTIONS[node.func.id](*[_evaluate(arg) for arg in node.args])
    raise _refused(node)


def _prepare(expression: str) -> str:
    text = expression.strip()
    # What models write for arithmetic, mapped to Python: 2^3, 3 × 4, 8 ÷ 2, $16.
    text = text.replace("^", "**").replace("×", "*").replace("÷", "/").replace("−", "-")
    text = text.replace("$", "")
    return text


def _format_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"the result is not a number: {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError("the result is not a finite number")
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)


def evaluate_expression(expression: str) -> str:
    """Evaluate safe arithmetic and return the result as text.

    Allowed: numbers, ``+ - * / // % **`` (``^`` is read as ``**``),
    parentheses, ``pi``, ``e`` and ``sqrt round abs min max floor ceil log
    exp``. Everything else (names, attribute access, strings, subscripts,
    comparisons, several statements) is refused. Exponents are capped at
    1000 and integer results at 4096 bits. An integral float result prints as
    an integer (``36/2`` → ``"18"``); others with up to 12 significant digits.
    Raises ``CalculatorError`` (a ``ValueError``) for refused or failing input.
    """
    text = _prepare(expression)
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > _MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {exc.msg}") from exc
    try:
        value = _evaluate(tree.body)
    except CalculatorError:
        raise
    except ZeroDivisionError as exc:
        raise CalculatorError("division by zero") from exc
    except (OverflowError, MemoryError) as exc:
        raise CalculatorError("result too large") from exc
    except Exception as exc:
        raise CalculatorError(str(exc) or type(exc).__name__) from exc
    return _format_number(value)


class CalculatorArgs(BaseModel):
    expression: str = Field(description="An arithmetic expression, e.g. '(16 - 3 - 4) * 2'.")


def _calculator(args: CalculatorArgs, context: ToolContext) -> str:
    return evaluate_expression(args.expression)


def calculator_tool() -> Tool:
    """``calculator``: ``{"expression": str}`` → the result as text (``evaluate_expression``)."""
    return Tool(
        name="calculator",
        description="Evaluate an arithmetic expression exactly. Supports + - * / // % ** and parentheses, "
        "and sqrt, round, abs, min, max, floor, ceil, log, exp.",
        parameters=CalculatorArgs,
        fn=_calculator,
        read_only=True,  # a replay may run it live (agentlab.agent.replay)
    )
