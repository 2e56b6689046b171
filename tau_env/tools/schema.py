"""Type hints to JSON schemas, and the validators that check a model's arguments against them.

A validator ``(name, value) -> value`` returns the value, normalized (``100.0`` for an integer
becomes ``100``), or raises :class:`ArgumentError` with a message for the model.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, Literal

from tau_env.error import ToolDefinitionError, did_you_mean

#: Longest string argument a tool accepts, unless the tool sets ``max_string``.
MAX_STRING = 8192


def suggest(word: str, choices: Iterable[str]) -> str:
    """``did_you_mean`` for model text: nothing for text too long to be a misspelt name (difflib is slow on it)."""
    return did_you_mean(word, choices) if len(word) <= 100 else ""


class ArgumentError(Exception):
    """An argument failed validation; the message is shown to the model."""


Validator = Callable[[str, Any], Any]


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _show(v: Any) -> str:
    try:
        text = json.dumps(v[:100] if isinstance(v, str) else v, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):  # a huge integer, or nesting too deep to print
        text = f"<{_type_name(v)}>"
    return text if len(text) <= 60 else text[:57] + "..."


def compile_type(tp: Any, max_string: int, where: str) -> tuple[dict[str, Any], Validator]:
    """The JSON schema of a parameter's type hint ``tp`` and the validator of its values.

    Raises :class:`~tau_env.error.ToolDefinitionError` (naming ``where``) for a type that tools do
    not support.
    """
    origin = typing.get_origin(tp)
    if tp is str:

        def v_str(name: str, x: Any) -> Any:
            if not isinstance(x, str):
                raise ArgumentError(f"Argument '{name}' must be a string, got {_type_name(x)} {_show(x)}.")
            if len(x) > max_string:
                raise ArgumentError(f"Argument '{name}' is too long ({len(x)} characters; at most {max_string}).")
            return x

        return {"type": "string"}, v_str
    if tp is bool:

        def v_bool(name: str, x: Any) -> Any:
            if not isinstance(x, bool):
                raise ArgumentError(f"Argument '{name}' must be true or false, got {_type_name(x)} {_show(x)}.")
            return x

        return {"type": "boolean"}, v_bool
    if tp is int:

        def v_int(name: str, x: Any) -> Any:
            if isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) < 2**63:
                return int(x)  # 100.0 from a model means 100: normalize so states compare equal
            if not isinstance(x, int) or isinstance(x, bool):
                raise ArgumentError(f"Argument '{name}' must be an integer, got {_type_name(x)} {_show(x)}.")
            if abs(x) >= 2**63:
                raise ArgumentError(f"Argument '{name}' is out of range ({_show(x)}).")
            return x

        return {"type": "integer"}, v_int
    if tp is float:

        def v_float(name: str, x: Any) -> Any:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise ArgumentError(f"Argument '{name}' must be a number, got {_type_name(x)} {_show(x)}.")
            x = float(x)
            if not math.isfinite(x):
                raise ArgumentError(f"Argument '{name}' must be a finite number, got {x}.")
            return x

        return {"type": "number"}, v_float
    if origin is Literal:
        choices = typing.get_args(tp)
        kinds = {type(c) for c in choices}
        schema: dict[str, Any] = {"enum": list(choices)}
        if kinds == {str}:
            schema = {"type": "string", "enum": list(choices)}

        def v_lit(name: str, x: Any) -> Any:
            for c in choices:
                if type(x) is type(c) and x == c:
                    return c
            raise ArgumentError(
                f"Argument '{name}' must be one of {', '.join(_show(c) for c in choices)}; got {_show(x)}."
                + (suggest(x, [c for c in choices if isinstance(c, str)]) if isinstance(x, str) else "")
            )

        return schema, v_lit
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) != 1 or len(typing.get_args(tp)) != 2:
            raise ToolDefinitionError(f"{where}: only 'T | None' unions are supported, got {tp!r}.")
        inner_schema, inner = compile_type(members[0], max_string, where)

        def v_opt(name: str, x: Any) -> Any:
            return None if x is None else inner(name, x)

        return {**inner_schema, "nullable": True}, v_opt
    if origin in (list, tuple) or tp in (list, tuple):
        args = typing.get_args(tp)
        item_schema, item = compile_type(args[0], max_string, where) if args else ({}, lambda n, x: x)

        def v_list(name: str, x: Any) -> Any:
            if not isinstance(x, list):
                raise ArgumentError(f"Argument '{name}' must be an array, got {_type_name(x)} {_show(x)}.")
            if len(x) > 1000:
                raise ArgumentError(f"Argument '{name}' has too many items ({len(x)}; at most 1000).")
            return [item(f"{name}[{i}]", v) for i, v in enumerate(x)]

        schema = {"type": "array"}
        if item_schema:
            schema["items"] = item_schema
        return schema, v_list
    if origin is dict or tp is dict:

        def v_dict(name: str, x: Any) -> Any:
            if not isinstance(x, dict):
                raise ArgumentError(f"Argument '{name}' must be an object, got {_type_name(x)} {_show(x)}.")
            return x

        return {"type": "object"}, v_dict
    raise ToolDefinitionError(
        f"{where}: unsupported parameter type {tp!r}; use str, int, float, bool, "
        "Literal[...], list[T], dict or T | None."
    )
