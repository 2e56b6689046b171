"""Tasks: a user scenario, an initial-state patch and reference actions (q = (u, s0, A*)).

Tasks load from and save to JSON (one task or a list) and JSONL (one task per line).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tau_env.error import TaskError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Scenario(_Model):
    """What the simulated user wants and knows.

    The scripted user sends ``requests`` one at a time, reveals a fact from ``facts`` only when
    the agent's message asks for it (by its name), and ends once every request is answered.
    LLM user simulators get the same fields rendered as text.
    """

    persona: str = Field("", description="Who the user is and how they talk.")
    requests: list[str] = Field(
        ..., min_length=1, description="What the user asks, in order; the first opens the chat."
    )
    facts: dict[str, str] = Field(
        default_factory=dict,
        description="Private facts, revealed only when asked; keyed as an agent would ask (e.g. 'date of birth').",
    )
    unknown: list[str] = Field(default_factory=list, description="Things the user does not know.")
    instructions: str = Field(
        "", description="Extra guidance for an LLM user simulator (how to react, what to refuse)."
    )


class Action(_Model):
    """One reference action: a tool call by a seat."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    requestor: Literal["agent", "user"] = "agent"


class Task(_Model):
    """One task of a domain."""

    id: str = Field(..., min_length=1)
    description: str = Field("", description="What the task tests (for authors; never shown to a seat).")
    scenario: Scenario
    initial_state: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict,
        description="Patch over the domain's seed data: {table: [rows]}; rows are upserted, "
        "a row with '_delete': true is deleted.",
    )
    actions: list[Action] = Field(
        default_factory=list, description="Reference actions A*; replayed to get the target state."
    )
    expect_no_change: bool = Field(
        False, description="The correct outcome leaves the database unchanged (e.g. a refusal)."
    )
    required_documents: list[str] = Field(default_factory=list, description="Documents whose rules decide the task.")
    tags: list[str] = Field(default_factory=list)
    clock: str | None = Field(None, description="ISO date-time the tools see as 'now'; the domain's default if unset.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Anything else (e.g. a benchmark's own fields).")


def _parse(obj: Any, where: str) -> Task:
    try:
        return Task.model_validate(obj)
    except ValidationError as e:
        raise TaskError(f"{where}: not a valid task:\n{e}") from e


def load_tasks(path: str | Path) -> list[Task]:
    """Load tasks from a ``.json`` file (one task or a list) or a ``.jsonl`` file."""
    p = Path(path)
    if not p.is_file():
        raise TaskError(f"Expected a task file (.json or .jsonl) at {p}, found none.")
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".jsonl":
        tasks = []
        for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): \x85 and \u2028 are data
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TaskError(f"{p}:{n}: invalid JSON ({e}).") from e
                tasks.append(_parse(obj, f"{p}:{n}"))
    else:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskError(f"{p}: invalid JSON ({e}).") from e
        items = obj if isinstance(obj, list) else [obj]
        tasks = [_parse(o, f"{p}[{i}]") for i, o in enumerate(items)]
    seen: set[str] = set()
    for t in tasks:
        if t.id in seen:
            raise TaskError(f"{p}: two tasks share the id {t.id!r}.")
        seen.add(t.id)
    return tasks


def save_tasks(tasks: Iterable[Task], path: str | Path) -> None:
    """Save tasks as ``.jsonl`` (one per line) or ``.json`` (an indented list), by the suffix."""
    p = Path(path)
    items = [t.model_dump(mode="json", exclude_defaults=True) for t in tasks]
    if p.suffix == ".jsonl":
        p.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in items), encoding="utf-8")
    else:
        p.write_text(json.dumps(items, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
