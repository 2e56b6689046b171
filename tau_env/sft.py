"""Teacher data: successful episodes as chat-format SFT examples.

Each example is the agent's own view of an episode: ``messages`` (system prompt, the
conversation, its tool calls and results), ``tools`` (its tool schemas), and ``train``, one flag
per message, true for the agent's own turns (the env's fixed greeting excluded).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tau_env.error import DependencyNotInstalled

EXCLUDED_ENDINGS = frozenset({"loop", "max_steps", "infrastructure_error"})


def read_episodes(path: str | Path) -> Iterator[dict[str, Any]]:
    """Episodes of a ``trajectories.jsonl`` (or a results folder holding one); a torn line is skipped."""
    p = Path(path)
    if p.is_dir():
        p = p / "trajectories.jsonl"
    with p.open(encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def to_example(episode: dict[str, Any], greeting_turns: int = 1) -> dict[str, Any]:
    """One SFT example from one episode record."""
    view = episode.get("agent_view") or {}
    messages = view.get("messages") or []
    if not messages:
        raise ValueError(
            f"episode {episode.get('task_id')}/{episode.get('trial')} has no agent_view; "
            "it was recorded by an older tau_env."
        )
    train, seen = [], 0
    for m in messages:
        own = m.get("role") == "assistant"
        if own:
            seen += 1
        train.append(own and seen > greeting_turns)
    return {
        "task_id": episode["task_id"],
        "trial": episode["trial"],
        "reward": episode["reward"],
        "messages": messages,
        "tools": view.get("tools") or [],
        "train": train,
    }


def select(episodes: Iterable[dict[str, Any]], min_reward: float = 1.0) -> Iterator[dict[str, Any]]:
    """Successful episodes that did not end by a loop, the step budget or an infrastructure error."""
    for ep in episodes:
        if ep.get("reward", 0) >= min_reward and ep.get("termination_reason") not in EXCLUDED_ENDINGS:
            yield ep


def export(
    source: str | Path,
    jsonl: str | Path | None = None,
    parquet: str | Path | None = None,
    min_reward: float = 1.0,
    greeting_turns: int = 1,
) -> int:
    """Write the SFT examples of ``source`` as JSONL and/or parquet; returns how many were written."""
    examples = [to_example(ep, greeting_turns) for ep in select(read_episodes(source), min_reward)]
    if jsonl is not None:
        with open(jsonl, "w", encoding="utf-8") as f:
            for ex in examples:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    if parquet is not None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as e:
            raise DependencyNotInstalled("Parquet output needs pyarrow: pip install pyarrow.") from e
        rows = [
            {
                **ex,
                "messages": json.dumps(ex["messages"], ensure_ascii=False),
                "tools": json.dumps(ex["tools"], ensure_ascii=False),
            }
            for ex in examples
        ]
        pq.write_table(pa.Table.from_pylist(rows), parquet)
    return len(examples)
