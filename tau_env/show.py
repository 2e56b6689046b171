"""Readable transcripts of trajectories."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def _short(text: str, limit: int) -> str:
    text = text.replace("\n", "\n      ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_events(events: Iterable[dict[str, Any]], limit: int = 600) -> str:
    """Format trajectory events (as in ``TauEnv.trajectory``) one turn per line."""
    lines = []
    for ev in events:
        seat, msg = ev["seat"], ev["message"]
        tag = f"[{ev.get('step', '?'):>3}] {seat:<5}"
        if msg.get("content"):
            lines.append(f"{tag} {_short(msg['content'], limit)}")
        for tc, res in zip(msg.get("tool_calls") or [], ev.get("tool_results") or []):
            fn = tc["function"]
            try:
                args = json.dumps(json.loads(fn["arguments"]), ensure_ascii=False)
            except (ValueError, TypeError):
                args = fn["arguments"]
            lines.append(f"{tag} -> {fn['name']}({_short(args, 200)})")
            mark = "!!" if res.get("error") else "<-"
            lines.append(f"{' ' * len(tag)} {mark} {_short(res['content'], limit)}")
    return "\n".join(lines)


def format_episode(record: dict[str, Any], limit: int = 600) -> str:
    """Format one line of ``trajectories.jsonl``: header, transcript, grade."""
    head = (
        f"== task {record['task_id']} | trial {record.get('trial', 0)} | reward {record['reward']} | "
        f"ended: {record.get('termination_reason')} | steps {record.get('steps')}"
    )
    out = [head, format_events(record.get("events", []), limit)]
    grade = record.get("grade") or {}
    if grade and not grade.get("db_match", True):
        out.append("-- database differs from the target:")
        out.append(json.dumps(grade.get("diff", {}), indent=2, ensure_ascii=False, default=str))
    return "\n".join(out)
