r"""Readable transcripts of trajectories, safe to print to a terminal.

Model text is untrusted: a reply may hold escape sequences (window title, screen clear), bidi
overrides that reorder what a reader sees, or lone surrogates that a UTF-8 stream cannot encode.
Everything these functions return has passed through :func:`escape`, which shows such characters
as visible escapes (``\x1b``, ``\u202e``) and keeps newlines and tabs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

#: Characters a terminal may act on or cannot print: C0 controls but newline and tab, DEL, C1 controls
#: (CSI ``\x9b`` included), bidi marks, embeddings, overrides and isolates, and lone surrogates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def _json_escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def escape(text: str, as_json: bool = False) -> str:
    r"""``text`` with every unsafe character shown as an escape: ``\x1b``, ``\u202e``, ``\udc80``.

    With ``as_json=True`` every escape is a JSON ``\uXXXX`` escape, so the output of ``json.dumps``
    stays valid JSON that decodes to the same value.
    """
    return _UNSAFE.sub(_json_escape if as_json else _visible, text)


def _dump(value: Any, indent: int | None = None) -> str:
    try:
        return json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    except RecursionError:
        return "(too deeply nested to show)"


def _text(value: Any) -> str:
    """Any JSON value as text: strings as they are, lists and objects as JSON, the rest as ``str``."""
    if isinstance(value, str):
        return value
    return _dump(value) if isinstance(value, dict | list) else str(value)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` when ``obj`` is a dict holding it, else ``default`` (records may be malformed)."""
    return obj.get(key, default) if isinstance(obj, dict) else default


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _short(text: str, limit: int) -> str:
    text = text.replace("\n", "\n      ")
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..." if limit > 3 else text[:limit]


def _events(events: Iterable[Any], limit: int) -> list[str]:
    lines = []
    for ev in events:
        seat, msg = _text(_get(ev, "seat", "?")), _get(ev, "message", {})
        tag = f"[{_text(_get(ev, 'step', '?')):>3}] {seat:<5}"
        if _get(msg, "content"):
            lines.append(f"{tag} {_short(_text(msg['content']), limit)}")
        for tc, res in zip(_list(_get(msg, "tool_calls")), _list(_get(ev, "tool_results"))):
            fn = _get(tc, "function", {})
            args = _get(fn, "arguments", "")
            try:
                args = json.dumps(json.loads(args), ensure_ascii=False)
            except (ValueError, TypeError, RecursionError):
                args = _text(args)
            lines.append(f"{tag} -> {_text(_get(fn, 'name', '?'))}({_short(args, 200)})")
            mark = "!!" if _get(res, "error") else "<-"
            lines.append(f"{' ' * len(tag)} {mark} {_short(_text(_get(res, 'content', '')), limit)}")
    return lines


def format_events(events: Iterable[dict[str, Any]], limit: int = 600) -> str:
    """Format trajectory events (as in ``TauEnv.trajectory``) one turn per line, escaped for a terminal."""
    return escape("\n".join(_events(events, limit)))


def format_episode(record: dict[str, Any], limit: int = 600) -> str:
    """Format one line of ``trajectories.jsonl``: header, transcript, grade; escaped for a terminal."""
    head = (
        f"== task {_text(_get(record, 'task_id'))} | trial {_text(_get(record, 'trial', 0))} | "
        f"reward {_text(_get(record, 'reward'))} | ended: {_text(_get(record, 'termination_reason'))} | "
        f"steps {_text(_get(record, 'steps'))}"
    )
    out = [head, *_events(_list(_get(record, "events")), limit)]
    grade = _get(record, "grade") or {}
    if grade and not _get(grade, "db_match", True):
        out.append("-- database differs from the target:")
        out.append(_dump(_get(grade, "diff", {}), indent=2))
    return escape("\n".join(out))
