"""Parquet for veRL's trainers: SFT conversations from tau_env episodes, RL rows of tasks.

SFT (``verl.trainer.sft_trainer``, its ``MultiTurnSFTDataset``): one row per successful episode, as
``tau-env export-sft --jsonl`` (and a synthesis run's ``sft/sft.jsonl``) write them: ``messages``
(the agent's chat, OpenAI format, tool calls included), ``tools`` (its tool schemas) and ``train``
(one flag per message). veRL's dataset trains every assistant message, including the env's fixed
greeting, which the recipe does not train; :class:`TauSFTDataset` (``data.custom_cls.path=
pkg://tau_env.reference_trainers.verl_data``, ``data.custom_cls.name=TauSFTDataset``, as
``configs/tau_sft.yaml`` sets) is veRL's dataset with the loss mask of an assistant message set only
where ``train`` is true. Messages and tools are stored as JSON text (``messages_json``,
``tools_json``) next to the nested columns, so nothing of a tool schema is lost to parquet's
struct typing; the dataset reads the JSON. The tools are those the agent had at the episode's start
(``tau_env.sft.initial_tools``), as the agent loop renders them once: an episode record keeps its
last tools, and one unlocked mid-episode would otherwise be in the prompt of the turns before its
unlock, the lookup that finds its name among them.

RL (``verl.trainer.main_ppo`` with the ``tau_agent`` loop): one row per task, holding what
:class:`~tau_env.reference_trainers.verl_agent_loop.TauAgentLoop` needs in ``extra_info``:
``env_id``, ``make_kwargs`` (JSON: loader and env settings, e.g. ``data_dir``), ``task_id``,
``task`` (the task's JSON, so tasks from a synthesis run need no file on the workers; empty: the
env's own task of that id), ``seed`` and optional ``user``. ``prompt`` is a one-message placeholder
(veRL's dataset requires one; the loop builds the real prompt from the env), ``agent_name`` is
``tau_agent``, ``data_source`` ``tau_env/<env_id>`` and ``reward_model.ground_truth`` the task id.

``python -m tau_env.reference_trainers.verl_data sft SRC.jsonl OUT.parquet`` and
``python -m tau_env.reference_trainers.verl_data rl ENV_ID OUT.parquet [--tasks FILE] [--make-kwargs JSON]``
write them. A source given twice, or one with no example, is refused. A ``tasks`` in
``--make-kwargs`` is taken as ``--tasks`` (both together are refused): the tasks are embedded in the
rows, so no path is left for the workers to find; a path the env's loader takes (``data_dir``) is
stored absolute, as the workers run in another folder.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tau_env.error import InvalidOptionError, TaskFileError, one_line
from tau_env.sft import initial_tools, sft_example_problem, training_problem

AGENT_LOOP = "tau_agent"
log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------
# SFT


def read_sft_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The examples of a ``tau-env export-sft --jsonl`` file (or a synthesis run folder: its
    ``sft/sft.jsonl``), as SFT rows. A line that is no example is refused by file and line, and so
    is a file with no example (empty or blank); an example that would train nothing or a broken call
    (:func:`~tau_env.sft.training_problem`) is left out with a warning, as the CPU trainer does.
    """
    p = _sft_file(path)
    if p.is_file() and _is_parquet(p):
        raise InvalidOptionError(
            f"{p} is a parquet file; the sources are export-sft JSONL (tau-env export-sft --jsonl)."
        )
    if not p.is_file():
        raise InvalidOptionError(
            f"No SFT file at {p}: expected the JSONL that `tau-env export-sft RUN --jsonl FILE` writes "
            "(or a synthesis run's sft/sft.jsonl)."
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InvalidOptionError(
            f"{p} is not UTF-8 text ({e.reason} at byte {e.start}); expected export-sft JSONL."
        ) from None
    out = []
    left_out = []
    found = 0
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 and U+0085 are text in a line
        if not line.strip():
            continue
        try:
            ex = json.loads(line)
        except (ValueError, RecursionError) as e:  # RecursionError: nested too deeply
            raise InvalidOptionError(f"{p}:{n}: not JSON ({e}); expected one export-sft example per line.") from e
        row = sft_row(ex, where=f"{p}:{n}")
        found += 1
        unusable = training_problem({"messages": json.loads(row["messages_json"]), "train": row["train"]})
        if unusable:
            left_out.append(f"{p}:{n} ({unusable})")
            continue
        out.append(row)
    if not found:
        raise InvalidOptionError(f"{p} holds no SFT example (it is empty or blank); expected export-sft JSONL.")
    if left_out:
        log.warning("left out %d SFT example(s) that train nothing or a broken call: %s", len(left_out), left_out[0])
    return out


def _sft_file(path: str | Path) -> Path:
    """The file a source names: itself, or a folder's ``sft/sft.jsonl`` (a synthesis run) or ``sft.jsonl``."""
    p = Path(path)
    if p.is_dir():
        p = p / "sft" / "sft.jsonl" if (p / "sft" / "sft.jsonl").is_file() else p / "sft.jsonl"
    return p


def sft_row(example: Mapping[str, Any], where: str = "example") -> dict[str, Any]:
    """One SFT parquet row of one export-sft example (``messages``, ``tools``, ``train``)."""
    if not isinstance(example, Mapping):
        raise InvalidOptionError(f"{where}: a JSON {type(example).__name__}, not an export-sft example (an object).")
    decoded: dict[str, Any] = {}
    for key, default in (("messages", None), ("tools", []), ("train", None)):
        value = example.get(key, default)
        if isinstance(value, str):  # a parquet row's JSON-encoded column
            try:
                value = json.loads(value)
            except (ValueError, RecursionError) as e:
                raise InvalidOptionError(f"{where}: '{key}' is a string but not JSON ({e}).") from None
        decoded[key] = [] if key == "tools" and value is None else value
    messages, tools, train = decoded["messages"], decoded["tools"], decoded["train"]
    if train is None and isinstance(messages, list):  # not an export-sft example: train every assistant message
        train = [isinstance(m, dict) and m.get("role") == "assistant" for m in messages]
    problem = sft_example_problem({"messages": messages, "tools": tools, "train": train})
    if problem:
        raise InvalidOptionError(f"{where}: not an export-sft example ({problem}).")
    # the tools of the episode's start, as the agent loop renders them once: not the ones unlocked later
    tools = initial_tools({"messages": messages, "tools": tools})
    return {
        "task_id": str(example.get("task_id", "")),
        "messages_json": json.dumps(messages),  # ASCII: a lone surrogate stays an escape parquet can store
        "tools_json": json.dumps(tools),
        "train": [bool(t) for t in train],
    }


def write_sft_parquet(sources: Iterable[str | Path], out: str | Path) -> int:
    """Write the examples of export-sft JSONL files as one SFT parquet; returns the row count.

    A file given twice (the same path again, or another path to it: a link, a run folder and its
    ``sft/sft.jsonl``) is refused: each of its examples would be written twice.
    """
    sources = list(sources)
    _check_out(out, sources)
    _check_sources_once(sources)
    rows = [r for src in sources for r in read_sft_jsonl(src)]
    _write_parquet(rows, out)
    return len(rows)


def _check_sources_once(sources: Sequence[str | Path]) -> None:
    seen: dict[tuple[int, int], int] = {}
    for i, src in enumerate(sources):
        try:
            st = _sft_file(src).stat()
        except OSError:  # missing or unreadable: read_sft_jsonl names it
            continue
        j = seen.setdefault((st.st_dev, st.st_ino), i)
        if j != i:
            same = "is" if str(sources[j]) == str(src) else f"and {sources[j]} are the same file,"
            raise InvalidOptionError(
                f"{src} {same} given twice as a source: each of its examples would be written twice; give it once."
            )


def _is_parquet(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def _check_out(out: str | Path, sources: Iterable[str | Path | None] = ()) -> None:
    """Refuse an ``out`` that would destroy what it should not: one of the sources (OUT forgotten on
    the command line: the last source taken for it), a file that is not parquet, a folder, a path
    under a file; one the system cannot name (too long) as :class:`InvalidOptionError` too.
    """
    try:
        _check_out_path(Path(out), sources)
    except OSError as e:
        raise InvalidOptionError(f"Cannot write {out}: {e.strerror or e}.") from None


def _check_out_path(out: Path, sources: Iterable[str | Path | None]) -> None:
    for src in sources:
        if src is not None and Path(src).exists() and out.exists() and os.path.samefile(src, out):
            raise InvalidOptionError(
                f"OUT {out} is also a source: give the parquet file to write as the last argument."
            )
    if out.is_dir():
        raise InvalidOptionError(f"OUT {out} is a folder: give the parquet file to write.")
    if out.exists() and not _is_parquet(out):
        raise InvalidOptionError(
            f"OUT {out} exists and is not a parquet file: refusing to overwrite it (was OUT, or --tasks, forgotten?). "
            "Give a new path, or delete it first."
        )
    for above in out.parents:
        if above.exists():
            if not above.is_dir():
                raise InvalidOptionError(f"OUT {out}: {above} is a file, not a folder.")
            break


def _write_parquet(rows: list[dict[str, Any]], out: str | Path) -> None:
    """``rows`` as a parquet file at ``out``, written whole or not at all (a temporary file renamed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _check_out(out)
    if not rows:
        raise InvalidOptionError(f"Nothing to write to {out}: no rows.")
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), str(tmp))
        os.replace(tmp, out)
    except OSError as e:  # a folder that cannot be made or written, a name too long: said, the old file kept
        raise InvalidOptionError(f"Cannot write {out}: {e.strerror or e}.") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def _sft_dataset_base() -> type:
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    return MultiTurnSFTDataset


def _make_sft_dataset() -> type:
    import torch

    base = _sft_dataset_base()

    class TauSFTDataset(base):  # type: ignore[misc, valid-type]
        """veRL's ``MultiTurnSFTDataset`` on our rows: JSON messages and tools, loss only on ``train`` messages."""

        def __init__(self, *args: Any, **kwargs: Any):
            config = kwargs["config"] if "config" in kwargs else (args[2] if len(args) > 2 else None)
            self._tau_family = config.get("tau_family") if config is not None else None
            super().__init__(*args, **kwargs)

        def _read_files_and_process(self) -> None:
            import pandas as pd
            from tau_env.reference_trainers.cpu_common import chat_template_for, tokenizer_family
            from tau_env.reference_trainers.rollout import FAMILIES

            # rendered as the tau_agent loop and the CPU trainers render: the family's tool template
            # (data.tau_family; null: the tokenizer's family), not whatever template the model ships
            family = self._tau_family or tokenizer_family(self.tokenizer)
            if family not in FAMILIES:
                raise InvalidOptionError(f"data.tau_family must be one of {', '.join(FAMILIES)}, not {family!r}.")
            self.tokenizer.chat_template = chat_template_for(self.tokenizer, family)

            frames = [pd.read_parquet(f) for f in self.parquet_files]
            df = pd.concat(frames, ignore_index=True)
            missing = {"messages_json", "tools_json", "train"} - set(df.columns)
            if missing:
                raise InvalidOptionError(
                    f"{self.parquet_files}: no column(s) {sorted(missing)}; write the file with "
                    "python -m tau_env.reference_trainers.verl_data sft."
                )
            if self.max_samples > 0 and self.max_samples < len(df):
                df = df.iloc[: self.max_samples]
            df = df.reset_index(drop=True)
            self.messages = [json.loads(s) for s in df["messages_json"]]
            self.tools = [json.loads(s) or None for s in df["tools_json"]]
            self.train_flags = [[bool(x) for x in t] for t in df["train"]]
            if self.truncation == "error":  # veRL would stop the run when its loader reached a longer one
                self._leave_out_longer()
            self.enable_thinking = None
            self.dataframe = pd.DataFrame({self.messages_key: self.messages})
            from verl.utils.tokenizer.chat_template import extract_system_prompt_and_generation

            self.system_prompt, self.generation_prompt = extract_system_prompt_and_generation(
                self.tokenizer, **self.apply_chat_template_kwargs
            )

        def _leave_out_longer(self) -> None:
            """Leave out (with a warning) the examples longer than ``data.max_length`` tokens as
            rendered, as the CPU trainer leaves out those over its ``--max-len``: with
            ``truncation: error`` veRL raises on one when its loader reaches it, hours into a run.
            """
            kwargs = dict(self.apply_chat_template_kwargs or {})
            keep = []
            for messages, tools in zip(self.messages, self.tools, strict=True):
                rendered = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, **kwargs)
                ids = rendered["input_ids"] if isinstance(rendered, Mapping) else rendered
                keep.append(len(ids) <= self.max_length)
            dropped = keep.count(False)
            if not dropped:
                return
            if dropped == len(keep):
                raise InvalidOptionError(
                    f"{self.parquet_files}: all {dropped} SFT examples are longer than data.max_length="
                    f"{self.max_length} tokens; raise data.max_length."
                )
            log.warning(
                "%d of %d SFT examples are longer than data.max_length=%d tokens and are left out (with "
                "truncation: error veRL would stop when its loader reached one); raise data.max_length to keep them.",
                dropped, len(keep), self.max_length,
            )  # fmt: skip
            self.messages = [m for m, k in zip(self.messages, keep, strict=True) if k]
            self.tools = [t for t, k in zip(self.tools, keep, strict=True) if k]
            self.train_flags = [f for f, k in zip(self.train_flags, keep, strict=True) if k]

        def __getitem__(self, item: int) -> dict[str, Any]:
            self._current = item
            self._turn = 0
            return super().__getitem__(item)

        def _build_messages(self, example: dict) -> list:
            import copy

            return copy.deepcopy(self.messages[self._current])

        def _process_single_message(self, index: int, message: dict, full_message: list, tools=None, **kw):  # noqa: ANN001
            input_ids, loss_mask, attention_mask, inputs = super()._process_single_message(
                index, message, full_message, tools=tools, **kw
            )
            if message.get("role") == "assistant" and not self.train_flags[self._current][index]:
                loss_mask = torch.zeros_like(loss_mask)
            return input_ids, loss_mask, attention_mask, inputs

    return TauSFTDataset


def __getattr__(name: str) -> Any:  # TauSFTDataset is built on first use: importing this module needs no verl
    if name == "TauSFTDataset":
        cls = _make_sft_dataset()
        cls.__module__ = __name__
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------
# RL


@dataclass
class EpisodeSpec:
    """What one RL row tells the agent loop."""

    env_id: str
    task_id: str
    seed: int = 0
    make_kwargs: dict[str, Any] = field(default_factory=dict)
    task: dict[str, Any] | None = None
    user: str | None = None


def rl_row(
    env_id: str,
    task: Any,
    index: int,
    *,
    make_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    embed_task: bool = True,
    user: str | None = None,
) -> dict[str, Any]:
    """One RL parquet row (see the module's docstring) for a :class:`tau_env.Task`."""
    task_json = task.model_dump(mode="json", exclude_defaults=True) if embed_task else None
    return {
        "data_source": f"tau_env/{env_id}",
        "agent_name": AGENT_LOOP,
        "prompt": [{"role": "user", "content": f"tau_env task {task.id}"}],
        "reward_model": {"style": "tau_env", "ground_truth": task.id},
        "extra_info": {
            "index": int(index),
            "env_id": env_id,
            "task_id": task.id,
            "seed": int(seed),
            "make_kwargs": json.dumps(dict(make_kwargs or {}), sort_keys=True),
            "task": json.dumps(task_json, ensure_ascii=False) if task_json is not None else "",
            "user": user or "",
        },
    }


def rl_rows(
    env_id: str,
    *,
    tasks: str | Path | Sequence[Any] | None = None,
    task_ids: Sequence[str] | None = None,
    make_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    user: str | None = None,
) -> list[dict[str, Any]]:
    """RL rows for the tasks of ``tasks`` (a task file or :class:`tau_env.Task` list; None: the env's own).

    A task file's (or list's) tasks are embedded in the rows; the env's own are referred to by id
    (``task`` empty), so a row stays small. ``task_ids`` keeps those tasks only, in that order; a
    ``task_ids`` among ``make_kwargs`` (the env's own pool) does the same, and ``task_ids`` must then
    be among it (a row outside the pool would be a task its env cannot reset to).

    A ``tasks`` among ``make_kwargs`` is taken as ``tasks`` (its tasks embedded in the rows, no path
    left for the workers to find); given in both, it is refused. A path the env's loader takes
    (``data_dir``: a keyword it types ``os.PathLike``) is stored absolute: the rollout workers run in
    another folder.
    """
    import tau_env

    make_kwargs = dict(make_kwargs or {})
    if "tasks" in make_kwargs:
        if tasks is not None:
            raise InvalidOptionError(
                f"Tasks given twice: as tasks ({one_line(str(tasks))[:80]}) and among make_kwargs "
                f"({one_line(repr(make_kwargs['tasks']))[:80]}); give the task file once, as --tasks."
            )
        tasks = make_kwargs.pop("tasks")
    # the env id and its keywords as each rollout worker will make them: said here, not on the GPUs
    given = {} if tasks is None else {"tasks": str(tasks) if isinstance(tasks, (str, Path)) else tasks}
    check = tau_env.make(env_id, **make_kwargs, **given)
    check.close()
    make_kwargs = _absolute_paths(env_id, make_kwargs)
    if task_ids is not None:
        task_ids = list(dict.fromkeys(task_ids))  # each task once
    if make_kwargs.get("task_ids") is not None:  # the env's pool (make checked its ids): the rows too
        pool_ids = list(dict.fromkeys(make_kwargs["task_ids"]))
        outside = [t for t in task_ids or () if t not in pool_ids]
        if outside:
            raise InvalidOptionError(
                f"task id(s) {outside[:5]} are not among make_kwargs' task_ids {pool_ids[:5]}"
                f"{' ...' if len(pool_ids) > 5 else ''}: an env made with those keywords plays only its task_ids."
            )
        task_ids = task_ids if task_ids is not None else pool_ids
    embed = tasks is not None
    if tasks is None:
        loader = {k: v for k, v in make_kwargs.items() if k not in _env_kwargs()}
        pool = list(tau_env.registry.load_domain(env_id, **loader).tasks)
    elif isinstance(tasks, (str, Path)):
        pool = tau_env.load_tasks(tasks)
    else:
        pool = list(tasks)
    if task_ids is not None:
        by_id = {t.id: t for t in pool}
        unknown = [t for t in task_ids if t not in by_id]
        if unknown:
            raise TaskFileError(f"No task(s) {unknown[:5]} among the {len(pool)} tasks given for {env_id}.")
        pool = [by_id[t] for t in task_ids]
    return [
        rl_row(env_id, t, i, make_kwargs=make_kwargs, seed=seed, embed_task=embed, user=user)
        for i, t in enumerate(pool)
    ]


def _absolute_paths(env_id: str, make_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``make_kwargs`` with each path the env's loader takes (a keyword typed ``os.PathLike``) given as
    a string made absolute, as the folder a rollout worker runs in is not this one.
    """
    import inspect

    import tau_env

    params = inspect.signature(tau_env.registry.spec(env_id).loader()).parameters
    out = dict(make_kwargs)
    for name, value in make_kwargs.items():
        param = params.get(name)
        if param is not None and "PathLike" in str(param.annotation) and isinstance(value, str) and value:
            out[name] = os.path.abspath(os.path.expanduser(value))
    return out


def _env_kwargs() -> tuple[str, ...]:
    from tau_env.registry import ENV_KWARGS

    return tuple(ENV_KWARGS)


def write_rl_parquet(rows: list[dict[str, Any]], out: str | Path) -> int:
    """Write RL rows as parquet; returns the row count."""
    _check_out(out)
    _write_parquet(rows, out)
    return len(rows)


def episode_spec(extra_info: Any) -> EpisodeSpec:
    """The :class:`EpisodeSpec` of a row's ``extra_info`` (as veRL hands it to the agent loop)."""
    if not isinstance(extra_info, Mapping):
        raise InvalidOptionError(
            f"The RL row has no extra_info mapping (got {type(extra_info).__name__}); write the parquet with "
            "python -m tau_env.reference_trainers.verl_data rl."
        )
    missing = [k for k in ("env_id", "task_id") if not extra_info.get(k)]
    if missing:
        raise InvalidOptionError(f"The RL row's extra_info lacks {missing}; it has {sorted(extra_info)}.")
    where = f"The RL row of task {str(extra_info['task_id'])[:80]!r}"

    def obj(key: str) -> dict[str, Any] | None:
        value = extra_info.get(key) or None
        try:
            value = json.loads(value) if isinstance(value, str) else value
        except (ValueError, RecursionError) as e:
            raise InvalidOptionError(f"{where}: extra_info.{key} is not JSON ({e}).") from None
        if value is not None and not isinstance(value, Mapping):
            raise InvalidOptionError(f"{where}: extra_info.{key} must be a JSON object, not {type(value).__name__}.")
        return dict(value) if value is not None else None

    seed = extra_info.get("seed") or 0
    try:
        seed = int(seed)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"{where}: extra_info.seed must be an integer, not {seed!r:.40}.") from None
    task = obj("task")
    if task is not None:
        try:
            import tau_env

            tau_env.Task.model_validate(task)
        except ValueError as e:  # pydantic's ValidationError is one
            first = str(e).splitlines()
            raise InvalidOptionError(f"{where}: extra_info.task is not a task ({'; '.join(first[:3])}).") from None
    return EpisodeSpec(
        env_id=str(extra_info["env_id"]),
        task_id=str(extra_info["task_id"]),
        seed=seed,
        make_kwargs=obj("make_kwargs") or {},
        task=task,
        user=str(extra_info.get("user") or "") or None,
    )


def _json_object(text: str, flag: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidOptionError(f"{flag} is not JSON ({e}): give an object, e.g. '{{\"max_steps\": 30}}'.") from None
    if not isinstance(value, dict):
        raise InvalidOptionError(f"{flag} must be a JSON object of tau_env.make keywords, not {text!r}.")
    return value


def _seed(text: str) -> int:
    """``--seed``: an integer in eval's range (the rows carry it as a 64-bit integer)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
    if not -(2**63) <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be from {-(2**63)} to {2**63 - 1}, not {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Write SFT or RL parquet for veRL (see the module's docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m tau_env.reference_trainers.verl_data", description=__doc__.split("\n")[0]
    )
    sub = p.add_subparsers(dest="kind", required=True)
    s = sub.add_parser("sft", help="SFT parquet from export-sft JSONL files")
    s.add_argument("sources", nargs="+", type=Path, help="export-sft --jsonl files (or synthesis sft/sft.jsonl)")
    s.add_argument("out", type=Path)
    r = sub.add_parser("rl", help="RL parquet, one row per task")
    r.add_argument("env_id")
    r.add_argument("out", type=Path)
    r.add_argument("--tasks", type=Path, help="a task file (e.g. a synthesis run's rl/tasks.jsonl); default: the env's")
    r.add_argument("--task-id", action="append", dest="task_ids", help="keep this task (repeatable)")
    r.add_argument(
        "--make-kwargs",
        default="{}",
        help='JSON of tau_env.make keywords, e.g. \'{"data_dir": "..."}\'; a "tasks" among them is taken as --tasks '
        "(refused with --tasks too); a relative data_dir is stored absolute",
    )
    r.add_argument("--seed", type=_seed, default=0, help="base seed of the rows' episodes (as eval's --seed)")
    r.add_argument("--user", choices=("scripted", "llm"), default=None, help="override the loop's user per row")
    args = p.parse_args(argv)
    import sys

    from tau_env.reference_trainers._extras import missing

    from tau_env.error import Error

    try:
        gone = missing("pyarrow")
    except Error as e:
        p.error(str(e))
    if gone:  # said before any work, not after it
        p.error("writing parquet needs pyarrow: pip install 'tau-env[sft]' (or the 'verl' extra)")

    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the left-out examples' warning

    try:
        return _write(args)
    except Error as e:
        print(f"{p.prog}: error: {one_line(e)}", file=sys.stderr)
        return 2


def _write(args: argparse.Namespace) -> int:
    import sys

    if args.kind == "sft":
        n = write_sft_parquet(args.sources, args.out)
    else:
        _check_out(args.out, [args.tasks])
        rows = rl_rows(
            args.env_id,
            tasks=args.tasks,
            task_ids=args.task_ids,
            make_kwargs=_json_object(args.make_kwargs, "--make-kwargs"),
            seed=args.seed,
            user=args.user,
        )
        n = write_rl_parquet(rows, args.out)
    sys.stdout.write(f"wrote {n} rows to {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
