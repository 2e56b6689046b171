"""Teacher data: successful episodes as chat-format SFT examples.

Each example is the agent's own view of an episode: ``messages`` (system prompt, the
conversation, its tool calls and results), ``tools`` (its tool schemas), and ``train``, one flag
per message, true for the agent's own turns (the env's fixed greeting excluded).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tau_env.env import TerminationReason
from tau_env.error import DependencyNotInstalled, ResultsFolderError
from tau_env.messages import clip
from tau_env.show import escape

#: Episodes that ended so are not exported, whatever their reward (a record's plain string matches its member).
EXCLUDED_ENDINGS = frozenset(
    {TerminationReason.LOOP, TerminationReason.MAX_STEPS, TerminationReason.INFRASTRUCTURE_ERROR}
)


#: What a record needs to be read as an episode: field -> accepted JSON types.
REQUIRED_FIELDS: dict[str, tuple[type, ...]] = {
    "task_id": (str,),
    "trial": (int,),
    "reward": (int, float),
    "termination_reason": (str, type(None)),
    "events": (list,),
}


def record_problem(record: Any) -> str | None:
    """Why ``record`` (one parsed line of ``trajectories.jsonl``) is not an episode, or None if it is."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an episode object"
    for name, types in REQUIRED_FIELDS.items():
        if name not in record:
            return f"the episode has no {name!r}"
        value = record[name]
        if isinstance(value, bool) or not isinstance(value, types):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            return f"{name!r} is a {type(value).__name__}, expected {expected}"
    return None


def read_episodes(path: str | Path, on_skip: Callable[[int, str], None] | None = None) -> Iterator[dict[str, Any]]:
    """Episodes of a ``trajectories.jsonl`` (or a results folder holding one).

    A line that is not an episode (a torn write, invalid UTF-8 or JSON, a record without the
    fields of :data:`REQUIRED_FIELDS`) is skipped; ``on_skip(line_number, reason)`` hears of it.
    """
    for _, record in _numbered_episodes(path, on_skip):
        yield record


def _numbered_episodes(
    path: str | Path, on_skip: Callable[[int, str], None] | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`read_episodes`, each episode with its line number."""
    p = Path(path)
    try:
        if p.is_dir():
            p = p / "trajectories.jsonl"
        if not p.is_file():
            raise ResultsFolderError(
                f"No trajectories at {p}: expected a results folder holding trajectories.jsonl, or such a file."
            )
        yield from _read_lines(p, on_skip)
    except OSError as e:  # unreadable (permissions, an I/O error, a name too long): one line naming the path
        raise ResultsFolderError(f"Cannot read trajectories at {p}: {e.strerror or e}.") from e


def unique_episodes(source: str | Path, on_skip: Callable[[int, str], None] | None = None) -> list[dict[str, Any]]:
    """The episodes of ``source`` (as :func:`read_episodes`), each (task, trial) once, as the harness
    reads a results folder: the first record of it, or a later one when the first ended in an
    infrastructure error. The duplicates skipped are counted in a warning that names the first.
    """
    kept: dict[tuple[str, int], dict[str, Any]] = {}
    duplicates, first = 0, ""
    for n, ep in _numbered_episodes(source, on_skip):
        key = (ep["task_id"], ep["trial"])
        if key in kept and kept[key]["termination_reason"] != TerminationReason.INFRASTRUCTURE_ERROR:
            duplicates += 1
            first = first or f"line {n}: trial {ep['trial']} of {clip(ep['task_id'], 80)!r}"
            continue
        kept[key] = ep
    if duplicates:
        warnings.warn(
            f"{source}: skipped {duplicates} duplicate episode(s), a task and trial already read (first at {first}).",
            stacklevel=2,
        )
    return list(kept.values())


def _read_lines(p: Path, on_skip: Callable[[int, str], None] | None) -> Iterator[tuple[int, dict[str, Any]]]:
    with p.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                problem = "not valid UTF-8"
            except ValueError:  # JSONDecodeError, or an integer too long to convert
                problem = "not valid JSON"
            except RecursionError:
                problem = "JSON nested too deeply"
            else:
                problem = record_problem(record)
            if problem is None:
                yield n, record
            elif on_skip is not None:
                on_skip(n, problem)


def to_example(episode: dict[str, Any], greeting_turns: int = 1) -> dict[str, Any]:
    """One SFT example from one episode record."""
    view = episode.get("agent_view")
    messages = view.get("messages") if isinstance(view, dict) else None
    if not messages or not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ResultsFolderError(
            f"Episode {episode.get('task_id')!r} trial {episode.get('trial')!r} has no agent_view with a list of "
            "messages: it was recorded by an older tau_env or altered; run the evaluation again to export it."
        )
    tools = view.get("tools") or []
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
        "tools": tools,
        "train": train,
    }


def sft_example_problem(ex: Any) -> str:
    """What makes ``ex`` no SFT example of ``tau-env export-sft`` (``""``: nothing): ``messages``, a list
    of chat messages (objects with a string ``role``); ``train``, one flag per message; ``tools``, a
    list of tool schemas when present.
    """
    if not isinstance(ex, dict):
        return f"a JSON {type(ex).__name__}, not an object"
    messages, train = ex.get("messages"), ex.get("train")
    if not isinstance(messages, list) or not messages:
        return "no list of messages"
    bad = next(
        (i for i, m in enumerate(messages) if not isinstance(m, dict) or not isinstance(m.get("role"), str)), None
    )
    if bad is not None:
        return f"message {bad} is no object with a string role"
    for i, m in enumerate(messages):
        problem = _message_problem(m)
        if problem:
            return f"message {i} {problem}"
    if not isinstance(train, list) or len(train) != len(messages):
        return f"train is not a list of {len(messages)} flags, one per message"
    if not all(isinstance(t, (bool, int)) for t in train):
        return "train holds something other than true/false flags"
    if train[0] and messages[0]["role"] == "assistant":  # a rollout starts from the messages before its first turn
        return "its first message is a trained assistant turn, with no context before it to start from"
    if "tools" in ex and not (isinstance(ex["tools"], list) and all(isinstance(t, dict) for t in ex["tools"])):
        return "tools is not a list of tool schemas"
    try:  # a JSON escape can spell a lone surrogate, which is no character: no tokenizer encodes it
        json.dumps(ex, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end].encode("unicode_escape").decode("ascii")
        return f"it holds a lone surrogate ({bad}), which is no character: no tokenizer can encode it"
    return ""


#: The roles of an exported conversation (a chat template renders no other).
ROLES = ("system", "user", "assistant", "tool")


def _message_problem(m: dict[str, Any]) -> str:
    """What makes one chat message unrenderable as a trained conversation (``""``: nothing)."""
    role = m["role"]
    if role not in ROLES:
        return f"has role {clip(role, 20)!r}, not one of {', '.join(ROLES)}"
    content = m.get("content")
    if role != "assistant" and not isinstance(content, str):
        what = "missing" if content is None else f"a JSON {type(content).__name__}"
        return f"({role}) has content that is {what}, not text"
    if content is not None and not isinstance(content, str):
        return f"has content that is a JSON {type(content).__name__}, not text or null"
    calls = m.get("tool_calls")
    if calls is None:
        return ""
    if role != "assistant":
        return f"is a {role} message with tool_calls (only the assistant calls tools)"
    if not isinstance(calls, list):
        return "has tool_calls that are not a list"
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not (
            isinstance(fn, dict) and isinstance(fn.get("name"), str) and isinstance(fn.get("arguments"), (str, dict))
        ):
            return "has a tool call without a function name and arguments"
    return ""


def training_problem(ex: dict[str, Any]) -> str:
    """What makes a well-formed SFT example (:func:`sft_example_problem` ``""``) teach nothing or
    teach a malformed call (``""``: nothing): no trained assistant turn, or a trained tool call whose
    arguments are not a JSON object (an agent's broken call kept in an exported episode).
    """
    trained = [m for m, t in zip(ex["messages"], ex["train"], strict=True) if t and m["role"] == "assistant"]
    if not trained:
        return "no trained assistant turn"
    for m in trained:
        for call in m.get("tool_calls") or []:
            args = call["function"]["arguments"]
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except (ValueError, RecursionError):
                    args = None
            if not isinstance(args, dict):
                return f"a trained call of {clip(call['function']['name'], 40)!r} whose arguments are no JSON object"
    return ""


def initial_tools(example: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools the agent had at the episode's start: the example's tools (the episode's last, as
    ``agent_view`` keeps them) less those its messages unlock with ``unlock_tool``.

    The reference trainers render the tool schemas once, at the start, in rollouts and in SFT alike
    (the sampled prefix of a rollout cannot change when a tool is unlocked later), so an example is
    trained with these. A tool that stayed in the prompt would show the model, before its lookup,
    the name the lookup is for.
    """
    unlocked = set()
    for m in example.get("messages") or []:
        for call in (m.get("tool_calls") if isinstance(m, dict) else None) or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and fn.get("name") == "unlock_tool":
                try:
                    unlocked.add(json.loads(fn.get("arguments") or "{}").get("tool_name"))
                except (ValueError, AttributeError, TypeError):
                    pass

    def name(tool: Any) -> Any:
        spec = (tool.get("function") or tool) if isinstance(tool, dict) else None
        return spec.get("name") if isinstance(spec, dict) else None

    return [t for t in example.get("tools") or [] if name(t) is None or name(t) not in unlocked]


def truncate(example: dict[str, Any], end: int) -> dict[str, Any]:
    """The example's first ``end`` messages (and their ``train`` flags), with the tools the agent
    had at the start (:func:`initial_tools` of the whole example).

    Cutting the messages alone would keep the tools unlocked after the cut and lose the calls that
    show they were unlocked: the cut example would be trained with the tool its first lookup is
    for already in the prompt.
    """
    return {
        **example,
        "messages": example["messages"][:end],
        "train": example["train"][:end],
        "tools": initial_tools(example),
    }


def select(episodes: Iterable[dict[str, Any]], min_reward: float = 1.0) -> Iterator[dict[str, Any]]:
    """Successful episodes that did not end by a loop, the step budget or an infrastructure error."""
    for ep in episodes:
        if ep.get("reward", 0) >= min_reward and ep.get("termination_reason") not in EXCLUDED_ENDINGS:
            yield ep


def _dumps(value: Any) -> str:
    r"""JSON text that UTF-8 can encode: lone surrogates (and terminal controls) become ``\uXXXX`` escapes."""
    return escape(json.dumps(value, ensure_ascii=False), as_json=True)


def export(
    source: str | Path,
    jsonl: str | Path | None = None,
    parquet: str | Path | None = None,
    min_reward: float = 1.0,
    greeting_turns: int = 1,
    on_skip: Callable[[int, str], None] | None = None,
) -> int:
    """Write the SFT examples of ``source`` as JSONL and/or parquet; returns how many were written.

    Lines of ``source`` that are not episodes are skipped (``on_skip`` as in :func:`read_episodes`),
    and so are the duplicates of an episode (:func:`unique_episodes`: a warning counts them);
    an episode whose agent has no turn after the ``greeting_turns`` (nothing to train) is left out;
    missing parent folders of the outputs are made. The parquet has its columns (``task_id``,
    ``trial``, ``reward``, ``messages`` and ``tools`` as JSON text, ``train``) with no example too.
    Text the model wrote is kept exactly; characters UTF-8 cannot hold (lone surrogates) are
    written as JSON escapes.
    """
    examples = [to_example(ep, greeting_turns) for ep in select(unique_episodes(source, on_skip), min_reward)]
    examples = [ex for ex in examples if any(ex["train"])]
    if jsonl is not None:
        Path(jsonl).parent.mkdir(parents=True, exist_ok=True)
        with open(jsonl, "w", encoding="utf-8") as f:
            for ex in examples:
                f.write(_dumps(ex) + "\n")
    if parquet is not None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as e:
            raise DependencyNotInstalled("Parquet output needs pyarrow: pip install pyarrow.") from e
        rows = [
            {
                **ex,
                "task_id": ex["task_id"].encode("utf-8", "backslashreplace").decode("utf-8"),
                "messages": _dumps(ex["messages"]),
                "tools": _dumps(ex["tools"]),
            }
            for ex in examples
        ]
        schema = pa.schema(
            [
                ("task_id", pa.string()),
                ("trial", pa.int64()),
                ("reward", pa.float64()),
                ("messages", pa.string()),
                ("tools", pa.string()),
                ("train", pa.list_(pa.bool_())),
            ]
        )  # given, not inferred: with no example the columns are there all the same
        table = pa.Table.from_pylist(rows, schema=schema)
        Path(parquet).parent.mkdir(parents=True, exist_ok=True)
        with open(parquet, "wb") as f:  # Python's open: an unusable path is an OSError naming it
            pq.write_table(table, f)
    return len(examples)
