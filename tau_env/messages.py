r"""OpenAI-style chat messages: the one format both seats act in.

An action is an assistant message, exactly what an OpenAI-compatible server returns::

    {"role": "assistant", "content": "Hello", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_customer", "arguments": "{\\"customer_id\\": \\"C-1\\"}"}}]}

``assistant_message`` and ``tool_call`` build such messages for hand-written policies;
``normalize_action`` validates what a caller passes to ``env.step``.

Model text is kept as valid Unicode: a lone surrogate (what ``json.loads`` makes of a server's
``"\ud83d"``) in content, tool names or ids is replaced by its escape text ``\ud83d``, so the
trajectory can always be written as UTF-8. In tool *arguments* it is the model's error instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from tau_env.error import InvalidActionError

#: A user message containing this ends the conversation (the user is satisfied or gives up).
STOP = "###STOP###"
#: A user message containing this ends the conversation after a transfer to a human.
TRANSFER = "###TRANSFER###"
#: A user message containing this ends the conversation: the scenario cannot go on.
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
END_MARKERS = (STOP, TRANSFER, OUT_OF_SCOPE)

Message = dict[str, Any]

#: Longest tool-call id kept as sent; longer ones are replaced (see :func:`parse_tool_calls`).
MAX_ID_LENGTH = 256
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def escape_surrogates(text: str) -> str:
    r"""``text`` with each lone surrogate replaced by its escape text (``\ud83d``): valid Unicode."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def clip(text: str, limit: int = 80) -> str:
    """``text`` for an error message: as is up to ``limit`` characters, else a prefix, "..." and the length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def tool_call(name: str, arguments: dict[str, Any] | str | None = None, id: str | None = None) -> Message:
    """Build one OpenAI tool call; ``arguments`` may be a dict (serialized here) or a JSON string."""
    if arguments is None:
        arguments = {}
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    call: Message = {"type": "function", "function": {"name": name, "arguments": args}}
    if id is not None:
        call = {"id": id, **call}
    return call


def assistant_message(content: str | None = None, tool_calls: list[Message] | None = None) -> Message:
    """Build an assistant message (the action format of both seats)."""
    msg: Message = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = list(tool_calls)
    return msg


def call(name: str, /, **arguments: Any) -> Message:
    """Shorthand: an assistant message holding one tool call, ``call("get_customer", customer_id="C-1")``."""
    return assistant_message(None, [tool_call(name, arguments)])


def say(text: str) -> Message:
    """Shorthand: an assistant message holding only text."""
    return assistant_message(text)


def is_end_message(content: str | None) -> str | None:
    """Return the end marker a user message carries, or None."""
    if not content:
        return None
    for marker in END_MARKERS:
        if marker in content:
            return marker
    return None


@dataclass(frozen=True)
class ParsedCall:
    """One tool call of an action after parsing: ``error`` is set when the model malformed it."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str
    error: str | None = None


def _content_text(content: Any) -> str | None:
    if content is None:
        return None
    if isinstance(content, str):
        return escape_surrogates(content)
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": "..."}]
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise InvalidActionError(
                    f"Expected each content part to be {{'type': 'text', 'text': str}}, got {_shown(part)}."
                )
        return escape_surrogates("".join(parts))
    raise InvalidActionError(
        f"Expected message 'content' to be a string, a list of text parts or None, got {type(content).__name__}."
    )


def normalize_action(action: Any) -> Message:
    """Check that ``action`` is an assistant message and return it in canonical form.

    Accepts a message dict, a plain string (a text-only message) or an object with
    ``model_dump()`` (the OpenAI SDK's ``ChatCompletionMessage``). Raises
    :class:`~tau_env.error.InvalidActionError` for anything that is not a message at all.
    The content of tool calls is not judged here: a malformed call is the model's error and
    becomes a tool-error observation.
    """
    if isinstance(action, str):
        return {"role": "assistant", "content": escape_surrogates(action)}
    if not isinstance(action, dict) and hasattr(action, "model_dump"):
        action = action.model_dump(exclude_none=True)
    if not isinstance(action, dict):
        raise InvalidActionError(
            f"Expected an assistant message dict such as {{'role': 'assistant', 'content': 'Hi'}}, "
            f"got {type(action).__name__}: {_shown(action)}. Build one with tau_env.assistant_message()."
        )
    role = action.get("role", "assistant")
    if role != "assistant":
        raise InvalidActionError(
            f"Expected role 'assistant' (both seats act as the assistant of their own chat), got {_shown(role)}."
        )
    content = _content_text(action.get("content"))
    tool_calls = action.get("tool_calls")
    out: Message = {"role": "assistant", "content": content}
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise InvalidActionError(f"Expected 'tool_calls' to be a list, got {type(tool_calls).__name__}.")
    if tool_calls:
        calls = []
        for i, tc in enumerate(tool_calls):
            if not isinstance(tc, dict) and hasattr(tc, "model_dump"):
                tc = tc.model_dump(exclude_none=True)
            if not isinstance(tc, dict):
                raise InvalidActionError(
                    f"Expected tool_calls[{i}] to be a dict with 'function': {{'name', 'arguments'}}, got {_shown(tc)}."
                )
            calls.append(tc)
        out["tool_calls"] = calls
    reasoning = action.get("reasoning_content")
    if isinstance(reasoning, str):
        out["reasoning_content"] = escape_surrogates(reasoning)
    return out


def parse_tool_calls(message: Message, id_prefix: str, used_ids: Collection[str] = ()) -> list[ParsedCall]:
    """Parse the tool calls of a normalized message; malformed calls carry an ``error``.

    The message's tool calls are rewritten in canonical form (id, type, function name, arguments
    string), which the trajectory keeps as a faithful, JSON-writable record of what the model sent.

    Ids: each call gets an id that no other call of the episode has, so each tool result answers
    exactly one call. A sent id is kept if it is a non-empty string of at most ``MAX_ID_LENGTH``
    characters (lone surrogates escaped) that is not in ``used_ids`` (the episode's earlier calls)
    nor taken by an earlier call of this message; otherwise the call gets ``<id_prefix>_<i>``
    (``i`` its position in the message), with ``_2``, ``_3``, ... appended while that is taken.

    Arguments: a JSON object string, or a dict (encoded here as JSON text, and the tool gets what
    that text decodes to, exactly as if the model had sent the text). Text that is not a JSON
    object, a dict that JSON cannot encode (bytes, sets, tuple keys, objects, huge integers, very
    deep nesting), and strings with lone surrogates anywhere inside are the model's error.
    """
    parsed: list[ParsedCall] = []
    canonical = []
    taken: set[str] = set()
    for i, tc in enumerate(message.get("tool_calls") or []):
        call_id = _call_id(tc.get("id"), id_prefix, i, used_ids, taken)
        taken.add(call_id)
        fn = tc.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        raw = fn.get("arguments") if isinstance(fn, dict) else None
        error = None
        if not isinstance(name, str) or not name:
            error = "Malformed tool call: expected 'function': {'name': str, 'arguments': JSON string}."
            name = escape_surrogates(name) if isinstance(name, str) else ""
        else:
            name = escape_surrogates(name)
        raw_text, args, arg_error = _parse_arguments(raw, name)
        error = error or arg_error
        parsed.append(ParsedCall(call_id, name, args if error is None else None, raw_text, error))
        canonical.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw_text}})
    if canonical:
        message["tool_calls"] = canonical
    return parsed


def _call_id(sent: Any, prefix: str, i: int, used: Collection[str], taken: set[str]) -> str:
    if isinstance(sent, str) and sent and len(sent) <= MAX_ID_LENGTH:
        sent = escape_surrogates(sent)
        if sent not in used and sent not in taken:
            return sent
    call_id = fallback = f"{prefix}_{i}"
    n = 1
    while call_id in used or call_id in taken:
        n += 1
        call_id = f"{fallback}_{n}"
    return call_id


def _parse_arguments(raw: Any, name: str) -> tuple[str, dict[str, Any] | None, str | None]:
    """``(text to record, arguments, error)`` of one call's ``arguments``."""
    if raw is None or raw == "":
        return "{}", {}, None
    if isinstance(raw, dict):
        try:
            text = json.dumps(raw, ensure_ascii=False)
        except Exception as e:  # bytes, sets, tuple keys, objects, huge ints, cycles, deep nesting
            why = "they nest too deeply" if isinstance(e, RecursionError) else clip(str(e), 120)
            return (
                _sketch(raw),
                None,
                f"Arguments of '{clip(name)}' cannot be encoded as JSON ({why}). Send a JSON object.",
            )
    elif isinstance(raw, str):
        text = raw
    else:
        return (
            _sketch(raw),
            None,
            f"Arguments of '{clip(name)}' must be a JSON object string, got {type(raw).__name__}.",
        )
    record = escape_surrogates(text)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, integers over 4300 digits, deep nesting
        why = "it nests too deeply" if isinstance(e, RecursionError) else clip(str(e), 120)
        return record, None, f"Arguments of '{clip(name)}' are not valid JSON ({why}). Send a JSON object."
    if not isinstance(value, dict):
        return record, None, f"Arguments of '{clip(name)}' must be a JSON object, got {type(value).__name__}."
    if record is not text or ("\\u" in text and _ESCAPED_SURROGATE.search(text)):
        where = _surrogate_path(value)
        if where is not None:
            why = "it holds a lone surrogate, e.g. half of an emoji"
            return record, None, f"Argument {where} is not valid Unicode text ({why}). Send UTF-8 text."
    return record, value, None


def _surrogate_path(value: dict[str, Any]) -> str | None:
    """Where the first lone surrogate in decoded JSON is, as ``'name'``, ``'name[2].key'`` or ``name 'k'``."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # iterative: decoded JSON may nest deeper than Python's recursion limit allows here
        path, v = stack.pop()
        if isinstance(v, dict):
            for k, item in reversed(list(v.items())):
                if _SURROGATE.search(k):
                    return f"name '{clip(escape_surrogates(k))}'"
                stack.append((f"{path}.{k}" if path else k, item))
        elif isinstance(v, list):
            stack.extend((f"{path}[{j}]", item) for j, item in reversed(list(enumerate(v))))
        elif isinstance(v, str) and _SURROGATE.search(v):
            return f"'{clip(escape_surrogates(path))}'"
    return None


def _shown(value: Any) -> str:
    return clip(_sketch(value), 200)


def _sketch(value: Any, depth: int = 0, budget: list[int] | None = None) -> str:
    """A bounded, escaped text form of a value that JSON cannot encode (for the trajectory).

    At most 20 levels, 50 items per container and 1,000 values in all are shown ("..." for the rest).
    """
    budget = [1000] if budget is None else budget
    budget[0] -= 1
    if depth > 20 or budget[0] < 0:
        return "..."
    if isinstance(value, str):
        return json.dumps(clip(escape_surrogates(value), 1000), ensure_ascii=False)
    if value is None or isinstance(value, (bool, float)):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value) if value.bit_length() < 10_000 else f"<int of {value.bit_length()} bits>"
    if isinstance(value, (bytes, bytearray)):
        return clip(repr(bytes(value[:1001])), 1000)
    if isinstance(value, dict):
        items = [
            f"{_sketch(k, depth + 1, budget)}: {_sketch(v, depth + 1, budget)}" for k, v in list(value.items())[:50]
        ]
        return "{" + ", ".join(items + (["..."] if len(value) > 50 else [])) + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_sketch(v, depth + 1, budget) for v in list(value)[:50]]
        inner = ", ".join(items + (["..."] if len(value) > 50 else []))
        return {list: f"[{inner}]", tuple: f"({inner})"}.get(type(value), f"{type(value).__name__}({inner})")
    return f"<{type(value).__name__} object>"
