"""Turning a model's reply into an action: native tool calls, or tool calls printed as text.

Some models (and servers without a tool parser) print tool calls in the hermes format,
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. ``to_action`` converts those into
OpenAI tool calls. A block that is not valid JSON (or nested too deeply to decode) stays a tool call
with an empty name and its raw text as arguments: the environment then answers with a tool error,
as for any malformed call.

``message_problem`` is the line between the server's faults and the model's: a reply whose message
does not have the shape of a chat completion message is the server's (the client raises
:class:`~tau_env.error.InfrastructureError`), while a well-shaped tool call with a bad name or
arguments is the model's mistake, answered by the environment.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tau_env.error import InfrastructureError

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_THINK = re.compile(r"<think>.*?(?:</think>|$)\s*", re.S)


def message_problem(message: Any) -> str | None:
    """What keeps ``message`` from having the shape of a chat completion message, or None.

    The shape: an object whose ``content`` is a string, null, or a list of content parts (objects,
    whose ``text``, where there is one, is a string); ``reasoning_content`` a string or null;
    ``tool_calls`` null or a list of objects, each with a ``function`` object holding a string
    ``name``. A call's ``id`` and ``arguments`` are not checked: bad ones are the model's mistake.
    """
    if not isinstance(message, dict):
        return f"the message is a {type(message).__name__}, expected an object"
    content = message.get("content")
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                return f"a content part is {_shown(part)}, expected an object with a string 'text'"
    elif content is not None and not isinstance(content, str):
        return f"'content' is {_shown(content)}, expected a string, null or a list of text parts"
    reasoning = message.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        return f"'reasoning_content' is {_shown(reasoning)}, expected a string or null"
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f"'tool_calls' is {_shown(calls)}, expected a list or null"
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return f"a tool call is {_shown(call)}, expected an object with a 'function' object holding a string 'name'"
    return None


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # e.g. nested too deeply to print: the type says enough
        text = "..."
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def strip_reasoning(text: str | None) -> str | None:
    """Remove ``<think>...</think>`` blocks (reasoning some models print before answering)."""
    if not text:
        return text
    return _THINK.sub("", text).strip() or None


def parse_text_tool_calls(content: str, prefix: str = "text_call") -> tuple[str | None, list[dict[str, Any]]]:
    """Split hermes-style tool calls out of ``content``: (remaining text or None, tool calls)."""
    calls = []
    for i, m in enumerate(_TOOL_CALL.finditer(content)):
        raw = m.group(1).strip()
        name, args = "", raw
        try:
            obj = json.loads(raw)
            if isinstance(obj, dict) and isinstance(obj.get("name"), str):
                arguments = obj.get("arguments", obj.get("parameters", {}))
                args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
                name = obj["name"]
        except (ValueError, RecursionError):  # not JSON, or nested too deeply: a malformed call
            name, args = "", raw
        calls.append({"id": f"{prefix}_{i}", "type": "function", "function": {"name": name, "arguments": args}})
    if not calls:
        return content, []
    rest = _TOOL_CALL.sub("", content).strip()
    return rest or None, calls


def to_action(
    message: dict[str, Any],
    *,
    parse_text_calls: bool = True,
    drop_reasoning: bool = False,
    call_prefix: str = "text_call",
) -> dict[str, Any]:
    """An assistant message from a server's reply, ready for ``env.step``.

    Raises:
        InfrastructureError: ``message`` does not have the shape of a chat completion message
            (see :func:`message_problem`; :class:`~tau_env.llm.ChatClient` already refuses those).
    """
    problem = message_problem(message)
    if problem is not None:
        raise InfrastructureError(f"The client returned a reply that is not a chat completion message: {problem}.")
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    tool_calls = list(message.get("tool_calls") or [])
    if drop_reasoning:
        content = strip_reasoning(content)
    if not tool_calls and parse_text_calls and content and "<tool_call>" in content:
        content, tool_calls = parse_text_tool_calls(content, call_prefix)
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        out["tool_calls"] = tool_calls
    reasoning = message.get("reasoning_content")
    if reasoning and not drop_reasoning:
        out["reasoning_content"] = reasoning
    return out
