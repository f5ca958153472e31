"""``calculate``: the arithmetic tool of the GSM8K tools recipe.

The model's expression is parsed with :mod:`ast` and the tree is walked here, node by node:
only numbers, ``+ - * / // %``, a bounded ``**`` and parentheses are accepted, so no model
text ever reaches ``eval``. Anything else is refused with a message the model can read.

    >>> calculate("12 * (3 + 4)")
    '84'
    >>> calculate("7 / 2")
    '3.5'
"""

from __future__ import annotations

import ast
import math
import operator
from fractions import Fraction

from unsloth_grpo.tools._registry import register_tool

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_MAX_EXPONENT = 64  # 10**64 is plenty for word problems and keeps a call from eating memory
_MAX_CHARS = 200


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or cannot be computed."""


def evaluate_arithmetic(expression: str) -> Fraction:
    """The exact value of an arithmetic expression, or :class:`CalculatorError` saying why not."""
    text = str(expression).strip().replace(",", "").replace("$", "").replace("^", "**")
    if not text:
        raise CalculatorError("the expression is empty; write e.g. 12*(3+4)")
    if len(text) > _MAX_CHARS:
        raise CalculatorError(f"the expression is longer than {_MAX_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot parse {text!r} as arithmetic") from None

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            if isinstance(node.value, float) and not math.isfinite(node.value):
                raise CalculatorError("numbers must be finite")
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            base, exponent = walk(node.left), walk(node.right)
            if exponent.denominator != 1 or abs(exponent) > _MAX_EXPONENT:
                raise CalculatorError(f"exponents must be whole numbers up to {_MAX_EXPONENT}")
            if base == 0 and exponent < 0:
                raise CalculatorError("division by zero")
            return base ** int(exponent)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise CalculatorError("division by zero")
            return Fraction(_BINARY[type(node.op)](left, right))
        raise CalculatorError(f"only numbers, + - * / // % ** and parentheses are allowed, not {ast.unparse(node)!r}")

    return walk(tree.body)


def format_number(value: Fraction) -> str:
    """``Fraction(7, 2)`` -> ``'3.5'``, ``Fraction(84)`` -> ``'84'``, ``1/3`` -> ``'0.3333333333'``."""
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.10f}".rstrip("0").rstrip(".")
    return text or "0"


@register_tool("calculate")
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, for example 12*(3+4).
    """
    try:
        return format_number(evaluate_arithmetic(expression))
    except CalculatorError as exc:
        raise CalculatorError(f"calculate({expression!r}): {exc}") from None
