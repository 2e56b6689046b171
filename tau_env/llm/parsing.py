"""Turning a model's reply into an action: native tool calls, or tool calls printed as text.

Some models (and servers without a tool parser) print tool calls in the hermes format,
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. ``to_action`` converts those into
OpenAI tool calls. A block that is not valid JSON stays a tool call with an empty name and its raw
text as arguments: the environment then answers with a tool error, as for any malformed call.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_THINK = re.compile(r"<think>.*?(?:</think>|$)\s*", re.S)


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
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            name = obj["name"]
            arguments = obj.get("arguments", obj.get("parameters", {}))
            args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
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
    """An assistant message from a server's reply, ready for ``env.step``."""
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    tool_calls = [tc for tc in (message.get("tool_calls") or []) if isinstance(tc, dict)]
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
