"""The ``tau-env`` command: list, check, eval, replay, export-sft, show, synth, serve.

A user's mistake (a bad flag value, a path that cannot be used, an unknown task, a domain error)
ends with one line on stderr, ``tau-env: <what is wrong>``, and exit status 2; an interrupt with
status 130. Only a bug in tau_env shows a traceback. Text from episodes and data goes through
:func:`tau_env.show.escape` before it reaches the terminal.
"""

from __future__ import annotations

import argparse
import errno
import inspect
import io
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from tau_env.error import DependencyNotInstalled, Error, InvalidOptionError, one_line
from tau_env.show import escape

AGENTS = ("oracle", "teacher", "noop", "random")
USERS = ("scripted",)
#: Trials per task beyond this are refused: the plan alone would exhaust memory long before they ran.
MAX_TRIALS = 10_000
#: OSErrors that are about the user's files or machine, not a bug: reported in one line.
_USER_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


def _out(text: str, file: Any = None) -> None:
    """Print ``text`` with terminal controls escaped (it may hold model text or data)."""
    print(escape(text), file=file or sys.stdout)


def _err(text: str) -> None:
    """One line on stderr, ``tau-env: <text>``, with newlines folded and controls escaped."""
    print(f"tau-env: {escape(one_line(text))}", file=sys.stderr)


# -- argument types: a bad value is an argparse error (one line, status 2) ---------------------------


def _int(lo: int, hi: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"expected an integer {bound}, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def _float(lo: float = -math.inf, positive: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < lo or (positive and value <= 0):
            bound = "above 0" if positive else f"at least {lo:g}" if lo > -math.inf else "finite"
            raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def _path(text: str) -> Path:
    if not text or "\x00" in text:
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    return Path(text)


def _name(text: str) -> str:
    """A non-empty word without control characters (ids, model names, variable names)."""
    if not text.strip() or escape(text) != text or "\n" in text or "\t" in text:
        raise argparse.ArgumentTypeError(f"expected a non-empty name without control characters, got {text!r}")
    return text


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (``tau-env: ...``) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        _err(f"{message} (see: {self.prog} --help)")
        self.exit(2)


def _usable(path: Path, flag: str, kind: str = "folder") -> None:
    """Refuse, before any work, a ``path`` where a ``kind`` ("folder" or "file") cannot be written."""
    if kind == "file" and path.is_dir():
        raise InvalidOptionError(f"{flag} {path} is a folder; pass a file path.")
    start = path if kind == "folder" else path.parent
    for p in (start, *start.parents):
        if p.exists():
            if not p.is_dir():
                raise InvalidOptionError(f"{flag} {path}: {p} is a file, not a folder; pass another path.")
            if not os.access(p, os.W_OK | os.X_OK):
                raise InvalidOptionError(f"{flag} {path}: {p} is not writable; pass another path.")
            return


def _agent(name: str) -> Any:
    from tau_env.agents import NoopAgent, OracleAgent, RandomAgent, TeacherAgent

    return {"oracle": OracleAgent, "teacher": TeacherAgent, "noop": NoopAgent, "random": RandomAgent}[name]


def _domain_kwargs(args: argparse.Namespace, env_id: str) -> dict[str, Any]:
    """The loader keywords of the flags: ``--tasks`` (any domain), ``--data-dir`` (refused for a domain
    whose loader takes none).
    """
    kw: dict[str, Any] = {}
    if getattr(args, "tasks", None) is not None:
        kw["tasks"] = str(args.tasks)
    if getattr(args, "data_dir", None) is None:
        return kw
    from tau_env.registry import registry

    fn = registry.spec(env_id).entry_point
    if isinstance(fn, str):
        import importlib

        module, _, attr = fn.partition(":")
        fn = getattr(importlib.import_module(module), attr)
    if "data_dir" not in inspect.signature(fn).parameters:
        raise InvalidOptionError(f"{env_id} is not loaded from a data folder; drop --data-dir.")
    if not args.data_dir.is_dir():
        raise InvalidOptionError(f"--data-dir {args.data_dir} is not a folder; pass the domain's data folder.")
    return {**kw, "data_dir": str(args.data_dir)}


def _retrieval_rows(env_id: str) -> list[tuple[str, str, str]]:
    """(configuration, knowledge tools, what it needs) for each retrieval configuration of ``env_id``."""
    from tau_env.registry import registry

    registry.spec(env_id)  # UnknownEnvError for an unregistered id
    if env_id == "tau3-banking":
        from tau_env.domains.tau3_banking.prompts import RETRIEVAL, needs

        rows = []
        for key, config in RETRIEVAL.items():
            in_prompt = {"all": " (every document in the prompt)", "required": " (the task's documents in the prompt)"}
            tools = ", ".join(config.tools) or "none" + in_prompt.get(config.documents or "", "")
            need = "; ".join(needs(key)) or "nothing"
            rows.append((key + (" (ours)" if config.ours else ""), tools, need))
        return rows
    from tau_env.knowledge.tools import EMBEDDING_TOOLS, RETRIEVAL_CONFIGS

    return [
        (key, ", ".join(names) or "none", "the 'embed' extra" if EMBEDDING_TOOLS.intersection(names) else "nothing")
        for key, names in RETRIEVAL_CONFIGS.items()
    ]


def cmd_list(args: argparse.Namespace) -> int:
    from tau_env.registry import registry

    if args.retrieval is not None:
        rows = [("configuration", "knowledge tools", "needs"), *_retrieval_rows(args.retrieval)]
        widths = [max(len(r[i]) for r in rows) for i in range(2)]
        for name, tools, need in rows:
            _out(f"{name:<{widths[0]}}  {tools:<{widths[1]}}  {need}")
        return 0
    width = max(len(i) for i in registry.ids())
    for env_id in registry.ids():
        _out(f"{env_id:<{width}}  {registry.spec(env_id).description}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from tau_env.checker import domain_problems
    from tau_env.registry import registry

    kwargs = _domain_kwargs(args, args.domain)
    tasks = kwargs.pop("tasks", None)
    domain = registry.load_domain(args.domain, **kwargs)
    if tasks is not None:  # as a list: loading a file by path would stop at its first problem
        from tau_env.tasks import load_tasks

        domain = domain.with_tasks(load_tasks(tasks))
    started = time.perf_counter()
    task_ids = list(dict.fromkeys(args.task)) if args.task else None  # each task once
    problems = domain_problems(domain, task_ids, play=not args.no_play)
    n = len(task_ids) if task_ids else len(domain.tasks)
    if not problems:
        _out(
            f"{args.domain}: {n} tasks and {len(domain.documents)} documents pass every check "
            f"({time.perf_counter() - started:.1f} s)."
        )
        return 0
    for key, ps in problems.items():
        _out(f"{key}:")
        for p in ps:
            _out(f"  - {p}")
    _out(f"{args.domain}: {len(problems)} of {n} entries fail.", file=sys.stderr)
    return 1


def _llm(args: argparse.Namespace, seat: str) -> Any:
    """An LLM policy for ``seat`` from the --<seat>-model flags, or None."""
    model = getattr(args, f"{seat}_model")
    if not model:
        return None
    from tau_env.llm import ChatClient, LLMAgent, LLMUser, ResponseCache, Sampling

    cache = None
    if seat == "user" and not args.no_cache:
        from tau_env.knowledge.embed import cache_dir

        path = args.cache or cache_dir() / "responses.sqlite"
        _usable(path, "--cache", "file")
        cache = ResponseCache(path)
    client = ChatClient(
        model,
        getattr(args, f"{seat}_base_url"),
        api_key_env=getattr(args, f"{seat}_api_key_env") or "OPENAI_API_KEY",
        sampling=Sampling(temperature=getattr(args, f"{seat}_temperature"), max_tokens=args.max_tokens),
        timeout=args.timeout,
        retries=args.retries,
        cache=cache,
        backend=args.client,
    )
    return LLMAgent(client, strip_reasoning=args.strip_reasoning) if seat == "agent" else LLMUser(client)


def _checkpoint(args: argparse.Namespace, held: list[Any]) -> dict[str, Any]:
    """What ``--agent-checkpoint`` names, read without loading its model: the checkpoint folder (a run
    folder: its latest), its trainer's record and the domain it was trained on. The flags that would
    configure another agent are refused here, before any weight is read. The checkpoint is held
    (appended to ``held``) so that a live run does not prune it before it is loaded.
    """
    others = [
        flag
        for flag, given in (
            ("--agent-model", args.agent_model),
            ("--agent", args.agent is not None),
            ("--agent-base-url", args.agent_base_url),
            ("--agent-api-key-env", args.agent_api_key_env is not None),
            ("--strip-reasoning", args.strip_reasoning),
        )
        if given
    ]
    if others:
        raise InvalidOptionError(
            f"--agent-checkpoint plays the checkpoint in process; {' and '.join(others)} configure"
            f"{'s' if len(others) == 1 else ''} another agent: give one or the other."
        )
    if args.backend == "ray":  # its policy holds a lock and a loaded model: not something to ship to workers
        raise InvalidOptionError(
            "--agent-checkpoint plays the model in this process; --backend ray cannot ship it to its workers: "
            "use --backend local (--concurrency N episodes share the model)."
        )
    try:  # the 'train' extra (torch, transformers), only for this flag
        from tau_env.reference_trainers.checkpoint import hold_checkpoint, read_info
    except ImportError as e:
        raise DependencyNotInstalled(
            f"--agent-checkpoint plays the model in process and needs the 'train' extra ({e.name or e}): "
            "pip install 'tau-env[train]'."
        ) from e
    from tau_env.reference_trainers.cpu_common import resolve_device

    resolve_device(args.agent_device or "auto", "--agent-device")  # a GPU this machine lacks, said first
    lease = hold_checkpoint(args.agent_checkpoint)  # a run folder: its latest checkpoint
    held.append(lease)
    args.agent_checkpoint = lease.path
    info = read_info(args.agent_checkpoint)
    return {"info": info, "domain": (info.get("agent") or {}).get("domain")}


def _checkpoint_policy(args: argparse.Namespace, checkpoint: dict[str, Any]) -> None:
    """Load ``--agent-checkpoint``'s model as the agent seat (as the trainer rolled it out: its chat
    template, tool schemas rendered once) into ``checkpoint``, with the record that identifies it in
    the results folder. On the domain it was trained on, the retrieval configuration and step budget
    it was trained with are the defaults; on another they are that domain's own.
    """
    from tau_env.reference_trainers.checkpoint import checkpoint_digest, checkpoint_policy

    digest = checkpoint_digest(args.agent_checkpoint)
    policy, info = checkpoint_policy(
        args.agent_checkpoint,
        temperature=args.agent_temperature,
        max_new_tokens=args.max_tokens,
        device=args.agent_device or "auto",
        name=f"checkpoint {digest}",  # its content names it in the record, not the path it was read from
    )
    checkpoint["policy"] = policy
    checkpoint["record"] = {
        "trainer": info.get("trainer"),
        "step": info.get("step"),
        "digest": digest,
        "retrieval": args.retrieval,
        "max_tokens": policy.max_new_tokens,
    }  # the content, not the path (a folder trained again in place is another policy, the same one named
    # another way is not), nor the device (a folder begun on a CPU resumes on a GPU)


def _trained_defaults(args: argparse.Namespace, checkpoint: dict[str, Any], domain: str) -> None:
    """The checkpoint's retrieval configuration and step budget where the flags leave them open, on the
    domain it was trained on only (another domain's configurations are not its).
    """
    trained = checkpoint["info"].get("agent") or {}
    if domain != (trained.get("domain") or domain):
        return
    if args.retrieval is None and trained.get("retrieval"):
        args.retrieval = trained["retrieval"]
    if args.max_steps is None and trained.get("max_steps"):
        args.max_steps = int(trained["max_steps"])


def cmd_eval(args: argparse.Namespace) -> int:
    held: list[Any] = []  # --agent-checkpoint's lease: a live run keeps the checkpoint until it is loaded
    try:
        return _eval(args, held)
    finally:
        for lease in held:
            lease.release()


def _eval(args: argparse.Namespace, held: list[Any]) -> int:
    import asyncio

    from tau_env.harness import aevaluate, evaluate, format_metrics

    if args.domain and args.domain_opt and args.domain != args.domain_opt:
        raise InvalidOptionError(f"Two domains given, {args.domain!r} and --domain {args.domain_opt!r}; give one.")
    for seat in ("agent", "user"):
        if seat == "agent" and args.agent_checkpoint is not None:
            continue  # said by _checkpoint: the checkpoint is the agent
        if getattr(args, f"{seat}_base_url") and not getattr(args, f"{seat}_model"):
            raise InvalidOptionError(f"--{seat}-base-url needs --{seat}-model: name the model to use there.")
    if args.agent is not None and args.agent_model:
        raise InvalidOptionError(f"--agent {args.agent} and --agent-model both name the agent; give one.")
    if args.agent_device is not None and args.agent_checkpoint is None:
        raise InvalidOptionError("--agent-device places --agent-checkpoint's model; give --agent-checkpoint too.")
    checkpoint = _checkpoint(args, held) if args.agent_checkpoint is not None else None
    domain = args.domain_opt or args.domain or (checkpoint or {}).get("domain") or "harbor-bank-v0"
    if checkpoint:
        _trained_defaults(args, checkpoint, domain)
    agent_name = args.agent_model or (
        f"checkpoint-{args.agent_checkpoint.name}" if checkpoint else (args.agent or "oracle")
    )
    user_name = args.user_model or args.user
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or Path("runs") / f"{domain}-{agent_name.replace('/', '_')}-{stamp}"
    _usable(out, "--out")
    if checkpoint:  # results written into the checkpoint (or its run's checkpoints/) replace or lose files there
        from tau_env.reference_trainers.checkpoint import check_out_apart

        check_out_apart(out, args.agent_checkpoint)
    make_kwargs: dict[str, Any] = {**_domain_kwargs(args, domain)}
    if args.max_steps is not None:
        make_kwargs["max_steps"] = args.max_steps
    if args.retrieval is not None:
        make_kwargs["retrieval"] = args.retrieval
    options = retrieval_options_of(args)
    if options:
        make_kwargs["retrieval_options"] = options
    for flag in ("prompt_style", "user_guidelines_dir", "document_order"):  # loader options (tau3-banking)
        if getattr(args, flag) is not None:
            make_kwargs[flag] = str(getattr(args, flag))
    user = _llm(args, "user") or _user(args.user)
    if checkpoint:  # what is cheap to check is checked before the model loads (minutes for a large one)
        from tau_env.registry import make

        env = make(domain, **make_kwargs)  # the domain, its task file, the retrieval configuration
        try:
            for task_id in dict.fromkeys(args.task or ()):
                env.domain.task(task_id)
        finally:
            env.close()
        from tau_env.llm.local import quiet_loading

        with quiet_loading(args.quiet):
            _checkpoint_policy(args, checkpoint)
        for lease in held:  # loaded: the run may prune it now
            lease.release()
    agent = checkpoint["policy"] if checkpoint else _llm(args, "agent") or _agent(args.agent or "oracle")
    common = dict(
        task_ids=args.task or None,
        trials=args.trials,
        seed=args.seed,
        out_dir=out,
        progress=not args.quiet,
        resume=not args.restart,
        **make_kwargs,
    )
    if checkpoint:
        common["config"] = {
            "agent_checkpoint": checkpoint["record"],
            "agent_checkpoint_path": str(args.agent_checkpoint),
        }
    if args.backend == "ray":
        from tau_env.harness.ray_backend import ray_evaluate

        run = ray_evaluate(domain, agent, user, concurrency=args.concurrency, **common)
    elif args.agent_model or args.user_model or args.concurrency > 1:
        run = asyncio.run(aevaluate(domain, agent, user, concurrency=args.concurrency, **common))
    else:
        run = evaluate(domain, agent, user, **common)
    _out(format_metrics(run.metrics, f"{domain} | agent {agent_name} | user {user_name}"))
    if run.resumed:
        played = len(run.results) - run.resumed
        _out(
            f"resumed: all {run.resumed} episodes were in the folder already; nothing ran"
            if not played
            else f"resumed: {run.resumed} episodes from the folder, {played} played now"
        )
    _out(f"results: {run.out_dir}")
    return 0


#: ``tau-env eval`` flags that set ``retrieval_options`` (endpoints of embedding and reranker configurations).
RETRIEVAL_FLAGS = (
    "embedding_model",
    "embedding_base_url",
    "embedding_api_key_env",
    "reranker_model",
    "reranker_base_url",
    "reranker_api_key_env",
)


def retrieval_options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``retrieval_options`` the --embedding-* and --reranker-* flags give (those set)."""
    return {k: getattr(args, k) for k in RETRIEVAL_FLAGS if getattr(args, k, None) is not None}


def _user(name: str) -> Any:
    from tau_env.users import ScriptedUser

    return {"scripted": ScriptedUser}[name]


def cmd_show(args: argparse.Namespace) -> int:
    from tau_env.sft import read_episodes
    from tau_env.show import format_episode

    def skipped(n: int, why: str) -> None:
        _out(f"({args.path}: line {n} is {why}; skipped)", file=sys.stderr)

    shown = 0
    for rec in read_episodes(args.path, on_skip=skipped):
        if args.task and rec["task_id"] not in args.task:
            continue
        if args.failed and rec["reward"] >= 1:
            continue
        print(format_episode(rec, limit=args.width))  # escaped by format_episode
        print()
        shown += 1
        if args.limit is not None and shown >= args.limit:
            break
    if not shown:
        print("No episode matched.", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from tau_env.registry import registry

    domain = registry.load_domain(args.domain, **_domain_kwargs(args, args.domain))
    tasks = domain.tasks if args.task == "all" else [domain.task(args.task)]
    for task in tasks:
        record = domain.replay_record(task)
        if args.json:  # JSON escapes for terminal controls keep it valid JSON of the same value
            print(escape(json.dumps(record, ensure_ascii=False), as_json=True))
        else:
            _out(f"== {task.id}: {len(record['actions'])} actions")
            for i, a in enumerate(record["actions"]):
                flag = " (error)" if a["error"] else ""
                _out(f"[{i:>2}] {a['requestor']:<9} {a['name']}{flag}\n     {a['output'][:300]}")
    return 0


def _real(path: Path) -> Path:
    """``path`` absolute, with its links resolved as far as they exist (``..`` after a link too)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop, a name too long: the path as spelled, made absolute
        return Path(os.path.abspath(path))


def _results_folder_of(run: Path, source: Path) -> Path | None:
    """The results folder (resolved) whose trajectories ``source`` is, given as ``run``: ``run`` itself
    if it is a folder; the folder of the file (its links resolved) if that file is a results folder's
    ``trajectories.jsonl`` or sits beside a results folder's own files; None for a file elsewhere, or
    none at all (the export says so).
    """
    from tau_env.harness.results import OWN_FILES, TRAJECTORIES

    if not source.is_file():
        return None
    if run.is_dir():
        return _real(run)
    real = _real(source)
    beside = [name for name in OWN_FILES if name != TRAJECTORIES and (real.parent / name).exists()]
    return real.parent if real.name == TRAJECTORIES or beside else None


def cmd_export_sft(args: argparse.Namespace) -> int:
    from tau_env.sft import export

    if args.jsonl is None and args.parquet is None:
        raise InvalidOptionError("export-sft needs an output: give --jsonl FILE and/or --parquet FILE.")
    if args.jsonl is not None and args.parquet is not None and _real(args.jsonl) == _real(args.parquet):
        raise InvalidOptionError(  # however spelled: x/../out, a link to the other
            f"--jsonl {args.jsonl} and --parquet {args.parquet} name one file; give two files."
        )
    source = args.run / "trajectories.jsonl" if args.run.is_dir() else args.run
    folder = _results_folder_of(args.run, source)
    for flag, path in (("--jsonl", args.jsonl), ("--parquet", args.parquet)):
        if path is not None:
            _usable(path, flag, "file")
            if _real(path) == _real(source) or (path.exists() and source.exists() and path.samefile(source)):
                raise InvalidOptionError(f"{flag} {path} is the trajectory file being read; pass another path.")
            if folder is not None and _real(path).parent == folder:  # its files are a flat list; a subfolder is apart
                raise InvalidOptionError(
                    f"{flag} {path} is in the results folder being read ({folder}), whose own files it could "
                    "overwrite; pass a path outside it (or in a subfolder of it)."
                )

    def skipped(n: int, why: str) -> None:
        _out(f"({args.run}: line {n} is {why}; skipped)", file=sys.stderr)

    # written under temporary names, then renamed: a failed export leaves the outputs as they were
    # (beside the file itself, its path resolved: "x/../out" names no temporary place when x does not exist)
    real = {p: _real(p) for p in (args.jsonl, args.parquet) if p is not None}
    temps = {p: r.with_name(f".{r.name}.tmp-{os.getpid()}") for p, r in real.items()}
    try:
        n = export(
            args.run,
            temps.get(args.jsonl),
            temps.get(args.parquet),
            args.min_reward,
            greeting_turns=args.greeting_turns,
            on_skip=skipped,
        )
        if n == 0:
            _out(
                f"(no episode of {args.run} gives an SFT example: none has reward >= {args.min_reward:g} and an agent "
                f"turn to train after its first {args.greeting_turns} agent turn(s); the output holds none)",
                file=sys.stderr,
            )
        for final, tmp in temps.items():
            os.replace(tmp, real[final])
    finally:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
    _out(f"wrote {n} examples" + "".join(f" to {p}" for p in (args.jsonl, args.parquet) if p))
    return 0


def build_parser(synth: bool = False, serve: bool = False) -> argparse.ArgumentParser:
    """The ``tau-env`` parser; with ``synth``, the ``synth`` subcommands too (importing ``tau_env.synthesis``),
    with ``serve``, ``serve``'s flags (importing ``tau_env.adapters``).
    """
    p = _Parser(prog="tau-env", description="Evaluate and check tau_env domains.")
    sub = p.add_subparsers(dest="command", required=True)
    data_dir = dict(type=_path, help="data folder, for domains loaded from a path")
    task_file = dict(
        type=_path, help="play the tasks of this file (.json or .jsonl, e.g. a synthesis run's) instead of the domain's"
    )
    tasks = dict(action="append", type=_name)

    s = sub.add_parser("list", help="list registered environments, or an environment's retrieval configurations")
    s.add_argument(
        "--retrieval",
        metavar="ENV_ID",
        type=_name,
        help="list this environment's retrieval configurations: tools and what each needs (endpoint, sandbox)",
    )
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("check", help="check a domain's tasks (replay, determinism, oracle play)")
    s.add_argument("domain", type=_name, help="environment id, e.g. harbor-bank-v0")
    s.add_argument("--task", **tasks, help="check only this task (repeatable)")
    s.add_argument("--no-play", action="store_true", help="skip the oracle-vs-scripted-user episode")
    s.add_argument("--data-dir", **data_dir)
    s.add_argument("--tasks", **task_file)
    s.set_defaults(fn=cmd_check)

    s = sub.add_parser("eval", help="evaluate policies (built-in or model servers) on a domain")
    s.add_argument("domain", nargs="?", type=_name, help="environment id (default: harbor-bank-v0)")
    s.add_argument("--domain", dest="domain_opt", type=_name, help="environment id (same as the positional argument)")
    s.add_argument("--agent", choices=AGENTS, help="built-in agent policy (default: oracle)")
    s.add_argument(
        "--agent-checkpoint",
        type=_path,
        help="a checkpoint of tau_env's reference trainers (RUN/checkpoints/step-N, or a run folder RUN: its latest "
        "checkpoint) played in process, with the "
        "chat template and, unless flags say otherwise, the domain, retrieval and step budget it was trained with",
    )
    s.add_argument(
        "--agent-device",
        type=_name,
        help="where --agent-checkpoint's model generates: auto (default: a GPU when torch sees one), cpu, cuda[:N]",
    )
    s.add_argument("--user", choices=USERS, default="scripted", help="built-in user policy (default: scripted)")
    for seat in ("agent", "user"):
        s.add_argument(
            f"--{seat}-model", type=_name, help=f"model name on an OpenAI-compatible server, for the {seat} seat"
        )
        s.add_argument(
            f"--{seat}-base-url", type=_name, help=f"the {seat} server's base URL, e.g. http://127.0.0.1:8000/v1"
        )
        s.add_argument(
            f"--{seat}-api-key-env",
            type=_name,
            help="environment variable holding the key (default: OPENAI_API_KEY; keys never go on the command line)",
        )
        s.add_argument(
            f"--{seat}-temperature", type=_float(lo=0.0), default=0.0, help="sampling temperature (default 0)"
        )
    s.add_argument(
        "--max-tokens",
        type=_int(1),
        help="per-turn token cap of model replies (default: none sent, the server's own limit, as the benchmark)",
    )
    s.add_argument("--timeout", type=_float(positive=True), default=120.0, help="seconds per model request")
    s.add_argument("--retries", type=_int(0), default=3, help="retries of a failed model request")
    s.add_argument(
        "--client",
        choices=("http", "openai"),
        default="http",
        help="HTTP transport to model servers: tau_env's lean keep-alive client (default) or the openai package",
    )
    s.add_argument("--strip-reasoning", action="store_true", help="drop the agent's reasoning from its history")
    s.add_argument(
        "--cache", type=_path, help="user-simulator response cache file (default: ~/.cache/tau_env/responses.sqlite)"
    )
    s.add_argument("--no-cache", action="store_true", help="do not cache user-simulator replies")
    s.add_argument("--concurrency", type=_int(1), default=1, help="episodes in flight (asyncio)")
    s.add_argument("--backend", choices=("local", "ray"), default="local", help="where episodes run")
    s.add_argument("--restart", action="store_true", help="ignore finished episodes in --out and start over")
    s.add_argument(
        "--trials", type=_int(1, MAX_TRIALS), default=1, help=f"trials per task, 1 to {MAX_TRIALS} (default: 1)"
    )
    s.add_argument("--task", **tasks, help="run only this task (repeatable)")
    s.add_argument("--seed", type=_int(-(2**63), 2**63 - 1), default=0, help="base seed (default: 0)")
    s.add_argument("--max-steps", type=_int(1), help="step budget per episode")
    s.add_argument(
        "--retrieval",
        type=_name,
        help="knowledge-tool configuration, e.g. bm25 or alltools (see: tau-env list --retrieval ENV_ID)",
    )
    for seat, what in (("embedding", "OpenAI-compatible /embeddings"), ("reranker", "chat-completions (LLM reranker)")):
        s.add_argument(f"--{seat}-model", type=_name, help=f"model of the {what} endpoint (default: the benchmark's)")
        s.add_argument(f"--{seat}-base-url", type=_name, help=f"base URL of the {what} endpoint")
        s.add_argument(
            f"--{seat}-api-key-env", type=_name, help=f"environment variable holding the {seat} endpoint's key"
        )
    s.add_argument(
        "--prompt-style",
        choices=("benchmark", "tau_env"),
        help="tau3-banking: the benchmark's agent and user prompts (its default) or tau_env's",
    )
    s.add_argument(
        "--user-guidelines-dir",
        type=_path,
        help="tau3-banking: your copy of tau2-bench's data/tau2/user_simulator (default: found beside --data-dir)",
    )
    s.add_argument(
        "--document-order",
        type=_path,
        help="tau3-banking: a JSON list of document ids (e.g. kb_document_load_order.json): the order ties break in",
    )
    s.add_argument("--out", type=_path, help="results folder (default: runs/<domain>-<agent>-<time>)")
    s.add_argument("--data-dir", **data_dir)
    s.add_argument("--tasks", **task_file)
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("replay", help="replay tasks' reference actions: outputs and final database")
    s.add_argument("domain", type=_name, help="environment id, e.g. tau3-banking")
    s.add_argument("--task", required=True, type=_name, help="a task id, or 'all' (one line per task)")
    s.add_argument(
        "--json",
        action="store_true",
        help='print {"task_id", "actions": [{"name", "requestor", "output", "error"}], "final_db"}',
    )
    s.add_argument("--data-dir", **data_dir)
    s.add_argument("--tasks", **task_file)
    s.set_defaults(fn=cmd_replay)

    s = sub.add_parser("export-sft", help="turn successful episodes into chat-format SFT data")
    s.add_argument("run", type=_path, help="a results folder or a trajectories.jsonl file")
    s.add_argument("--jsonl", type=_path, help="write JSONL here")
    s.add_argument("--parquet", type=_path, help="write parquet here (needs pyarrow)")
    s.add_argument("--min-reward", type=_float(), default=1.0, help="keep episodes with at least this reward")
    s.add_argument(
        "--greeting-turns",
        type=_int(0),
        default=1,
        help="leading assistant messages that are the env's greeting, not trained on (default 1)",
    )
    s.set_defaults(fn=cmd_export_sft)

    s = sub.add_parser("show", help="print trajectories readably")
    s.add_argument("path", type=_path, help="a results folder or a trajectories.jsonl file")
    s.add_argument("--task", **tasks, help="only this task (repeatable)")
    s.add_argument("--failed", action="store_true", help="only episodes with reward < 1")
    s.add_argument("--limit", type=_int(1), help="at most this many episodes")
    s.add_argument(
        "--width", type=_int(1), default=600, help="truncate long texts to this many characters (default 600)"
    )
    s.set_defaults(fn=cmd_show)

    if synth:  # only `tau-env synth ...` imports the synthesis package
        from tau_env.synthesis.cli import add_parser

        add_parser(sub)
    else:
        s = sub.add_parser(
            "synth", help="synthesize verified training tasks (see: tau-env synth --help)", add_help=False
        )
        s.add_argument("rest", nargs=argparse.REMAINDER)
        s.set_defaults(fn=lambda args: main(["synth", *args.rest]))
    if serve:  # only `tau-env serve ...` imports the adapters package
        from tau_env.adapters.serve_cli import add_parser as add_serve_parser

        add_serve_parser(sub)
    else:
        s = sub.add_parser(
            "serve", help="serve a domain over OpenEnv's protocol (see: tau-env serve --help)", add_help=False
        )
        s.add_argument("rest", nargs=argparse.REMAINDER)
        s.set_defaults(fn=lambda args: main(["serve", *args.rest]))
    return p


def _synth_missing() -> str | None:
    """Why ``tau-env synth`` cannot run here (its extra is not installed), or None."""
    import importlib.util

    if importlib.util.find_spec("sqlite_utils") is None:
        return "tau-env synth needs the 'synth' extra (sqlite-utils): pip install 'tau-env[synth]'."
    return None


def _os_error(e: OSError) -> str | None:
    """One line for an OSError about the user's files or machine; None for any other (a bug: it propagates)."""
    if e.filename is None and e.errno not in _USER_ERRNOS:
        return None
    where = "".join(f"{name}: " for name in (e.filename, e.filename2) if name is not None)
    return f"{where}{e.strerror or e}"


def main(argv: list[str] | None = None) -> int:
    """Run the ``tau-env`` command line; returns the exit status (argparse exits itself on bad flags)."""
    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show a character gets an escape, not a crash
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    argv = sys.argv[1:] if argv is None else list(argv)
    synth = bool(argv) and argv[0] == "synth"
    if synth and (why := _synth_missing()):
        _err(why)
        return 2
    serve = bool(argv) and argv[0] == "serve"
    if synth:
        parser = build_parser(synth=True)
    elif serve:
        parser = build_parser(serve=True)
    else:  # a test may replace build_parser with a function of no arguments
        parser = build_parser()
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        # A library warning (e.g. tau3's missing user-simulator guidelines) is one escaped line, not
        # Python's file:line dump with a source line.
        warnings.showwarning = _show_warning
        return _run(args)


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    _err(f"warning: {message}")


def _run(args: argparse.Namespace) -> int:
    try:
        return args.fn(args)
    except Error as e:
        _err(str(e))
        return 2
    except BrokenPipeError:  # the reader (e.g. `head`) stopped early: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        line = _os_error(e)
        if line is None:
            raise
        _err(line)
        return 2
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


# The pieces the subcommands of the consumer packages (``tau-env synth ...``) build on, so their
# flags fail the same way as the core's: one ``tau-env: ...`` line and exit status 2.
Parser = _Parser
int_type = _int
float_type = _float
path_type = _path
name_type = _name
usable_path = _usable
echo = _out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
