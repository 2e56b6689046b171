r"""OpenAI-style chat messages: the one format both seats act in.

An action is an assistant message, exactly what an OpenAI-compatible server returns::

    {"role": "assistant", "content": "Hello", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_customer", "arguments": "{\\"customer_id\\": \\"C-1\\"}"}}]}

``assistant_message`` and ``tool_call`` build such messages for hand-written policies;
``normalize_action`` validates what a caller passes to ``env.step``.
"""

from __future__ import annotations

import json
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
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": "..."}]
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise InvalidActionError(
                    f"Expected each content part to be {{'type': 'text', 'text': str}}, got {part!r:.200}."
                )
        return "".join(parts)
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
        return {"role": "assistant", "content": action}
    if not isinstance(action, dict) and hasattr(action, "model_dump"):
        action = action.model_dump(exclude_none=True)
    if not isinstance(action, dict):
        raise InvalidActionError(
            f"Expected an assistant message dict such as {{'role': 'assistant', 'content': 'Hi'}}, "
            f"got {type(action).__name__}: {action!r:.200}. Build one with tau_env.assistant_message()."
        )
    role = action.get("role", "assistant")
    if role != "assistant":
        raise InvalidActionError(
            f"Expected role 'assistant' (both seats act as the assistant of their own chat), got {role!r}."
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
                    f"Expected tool_calls[{i}] to be a dict with 'function': {{'name', 'arguments'}}, got {tc!r:.200}."
                )
            calls.append(tc)
        out["tool_calls"] = calls
    reasoning = action.get("reasoning_content")
    if isinstance(reasoning, str):
        out["reasoning_content"] = reasoning
    return out


def parse_tool_calls(message: Message, id_prefix: str) -> list[ParsedCall]:
    """Parse the tool calls of a normalized message; malformed calls carry an ``error``.

    Missing ids are replaced by deterministic ones built from ``id_prefix``, and the message's
    tool calls are rewritten in canonical form (id, type, function name, arguments string).
    """
    parsed: list[ParsedCall] = []
    canonical = []
    for i, tc in enumerate(message.get("tool_calls") or []):
        call_id = tc.get("id") if isinstance(tc.get("id"), str) and tc.get("id") else f"{id_prefix}_{i}"
        fn = tc.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        raw = fn.get("arguments") if isinstance(fn, dict) else None
        error = None
        args: dict[str, Any] | None = None
        if not isinstance(name, str) or not name:
            error = "Malformed tool call: expected 'function': {'name': str, 'arguments': JSON string}."
            name = name if isinstance(name, str) else ""
        if raw is None or raw == "":
            raw_text, args = "{}", {}
        elif isinstance(raw, dict):
            raw_text, args = json.dumps(raw, ensure_ascii=False), raw
        elif isinstance(raw, str):
            raw_text = raw
            try:
                value = json.loads(raw)
            except (json.JSONDecodeError, RecursionError) as e:
                error = error or f"Arguments of '{name}' are not valid JSON ({e}). Send a JSON object."
            else:
                if isinstance(value, dict):
                    args = value
                else:
                    error = error or f"Arguments of '{name}' must be a JSON object, got {type(value).__name__}."
        else:
            raw_text = repr(raw)
            error = error or f"Arguments of '{name}' must be a JSON object string, got {type(raw).__name__}."
        parsed.append(ParsedCall(call_id, name, args if error is None else None, raw_text, error))
        canonical.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw_text}})
    if canonical:
        message["tool_calls"] = canonical
    return parsed
