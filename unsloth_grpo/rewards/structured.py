"""Structured-output rewards: valid JSON, required keys, a JSON schema.

The JSON is read from the whole completion, from a fenced ```json block, from inside
``tag`` when one is given (``tag="answer"``), or from the first ``{``/``[`` to the last
``}``/``]``.

Example::

    >>> fn = json_keys(required=["name", "age"])
    >>> fn(['{"name": "Ada", "age": 36}', '{"name": "Ada"}', 'not json'])
    [1.0, 0.5, 0.0]
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..grading import extract_tag
from ._registry import RewardFunc, register, texts

_FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_INVALID = object()


def parse_json(text: str, tag: str | Sequence[str] | None = None) -> Any:
    """The JSON value in ``text`` (see the module docstring), or ``_INVALID``."""
    if tag is not None:
        inner = extract_tag(text, tuple(tag) if not isinstance(tag, str) else tag)
        if inner is None:
            return _INVALID
        text = inner
    candidates = [text.strip()]
    fences = _FENCE.findall(text)
    if fences:
        candidates.append(fences[-1].strip())
    for open_, close in (("{", "}"), ("[", "]")):
        start, end = text.find(open_), text.rfind(close)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return _INVALID


@register("json_valid", family="structured", low=0.0, high=1.0)
def json_valid(*, reward: float = 1.0, tag: str | Sequence[str] | None = None, require_object: bool = True) -> RewardFunc:
    """`reward` when the completion holds valid JSON (an object, unless require_object=false)."""

    def score(text: str) -> float:
        value = parse_json(text, tag)
        if value is _INVALID or (require_object and not isinstance(value, dict)):
            return 0.0
        return reward

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn


@register("json_keys", family="structured", low=0.0, high=1.0)
def json_keys(
    *,
    required: Sequence[str] | None = None,
    reward: float = 1.0,
    partial: bool = True,
    tag: str | Sequence[str] | None = None,
) -> RewardFunc:
    """`reward` times the share of `required` top-level keys present in the JSON object.

    With ``partial=false`` all keys are needed for any credit. Invalid JSON or a non-object scores 0.
    """
    if not required:
        raise ValueError("json_keys needs required: a non-empty list of key names")
    keys = list(required)

    def score(text: str) -> float:
        value = parse_json(text, tag)
        if not isinstance(value, dict):
            return 0.0
        share = sum(k in value for k in keys) / len(keys)
        if not partial:
            share = float(share == 1.0)
        return reward * share

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn


def _load_schema(schema: Mapping | str) -> dict:
    if isinstance(schema, Mapping):
        return dict(schema)
    path = Path(schema)
    if not path.is_file():
        raise ValueError(f"json_schema: schema {schema!r} is neither a mapping nor an existing JSON file")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"json_schema: {path} is not valid JSON: {exc}") from exc


@register("json_schema", family="structured", low=0.0, high=1.0)
def json_schema(*, schema: Mapping | str | None = None, reward: float = 1.0, tag: str | Sequence[str] | None = None) -> RewardFunc:
    """`reward` when the JSON validates against `schema` (a mapping or a path to a .json file).

    Needs the ``jsonschema`` package (``pip install jsonschema``).
    """
    if schema is None:
        raise ValueError("json_schema needs schema: a JSON-schema mapping or a path to a .json file")
    try:
        import jsonschema
    except ImportError as exc:
        raise ImportError(
            "reward 'json_schema' needs the jsonschema package: pip install jsonschema"
        ) from exc
    loaded = _load_schema(schema)
    validator_cls = jsonschema.validators.validator_for(loaded)
    try:
        validator_cls.check_schema(loaded)
    except jsonschema.exceptions.SchemaError as exc:
        raise ValueError(f"json_schema: the schema itself is invalid: {exc.message}") from exc
    validator = validator_cls(loaded)

    def score(text: str) -> float:
        value = parse_json(text, tag)
        if value is _INVALID:
            return 0.0
        return reward if validator.is_valid(value) else 0.0

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn
