"""The ``tau-env`` command: list, check, eval, show."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

AGENTS = ("oracle", "noop", "random")
USERS = ("scripted",)


def _agent(name: str) -> Any:
    from tau_env.agents import NoopAgent, OracleAgent, RandomAgent

    return {"oracle": OracleAgent, "noop": NoopAgent, "random": RandomAgent}[name]


def _domain_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"data_dir": args.data_dir} if getattr(args, "data_dir", None) else {}


def cmd_list(args: argparse.Namespace) -> int:
    from tau_env.registry import registry

    width = max(len(i) for i in registry.ids())
    for env_id in registry.ids():
        print(f"{env_id:<{width}}  {registry.spec(env_id).description}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from tau_env.checker import domain_problems
    from tau_env.registry import registry

    domain = registry.load_domain(args.domain, **_domain_kwargs(args))
    started = time.perf_counter()
    problems = domain_problems(domain, args.task or None, play=not args.no_play)
    n = len(args.task) if args.task else len(domain.tasks)
    if not problems:
        print(
            f"{args.domain}: {n} tasks and {len(domain.documents)} documents pass every check "
            f"({time.perf_counter() - started:.1f} s)."
        )
        return 0
    for key, ps in problems.items():
        print(f"{key}:")
        for p in ps:
            print(f"  - {p}")
    print(f"{args.domain}: {len(problems)} of {n} entries fail.", file=sys.stderr)
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

        cache = ResponseCache(Path(args.cache) if args.cache else cache_dir() / "responses.sqlite")
    client = ChatClient(
        model,
        getattr(args, f"{seat}_base_url"),
        api_key_env=getattr(args, f"{seat}_api_key_env"),
        sampling=Sampling(temperature=getattr(args, f"{seat}_temperature"), max_tokens=args.max_tokens),
        timeout=args.timeout,
        retries=args.retries,
        cache=cache,
    )
    return LLMAgent(client, strip_reasoning=args.strip_reasoning) if seat == "agent" else LLMUser(client)


def cmd_eval(args: argparse.Namespace) -> int:
    import asyncio

    from tau_env.harness import aevaluate, evaluate, format_metrics

    domain = args.domain_opt or args.domain
    agent = _llm(args, "agent") or _agent(args.agent)
    user = _llm(args, "user") or _user(args.user)
    agent_name = args.agent_model or args.agent
    user_name = args.user_model or args.user
    out = args.out or Path("runs") / f"{domain}-{agent_name.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
    make_kwargs: dict[str, Any] = {**_domain_kwargs(args)}
    if args.max_steps:
        make_kwargs["max_steps"] = args.max_steps
    if args.retrieval:
        make_kwargs["retrieval"] = args.retrieval
    common = dict(
        task_ids=args.task or None,
        trials=args.trials,
        seed=args.seed,
        out_dir=out,
        progress=not args.quiet,
        resume=not args.restart,
        **make_kwargs,
    )
    if args.backend == "ray":
        from tau_env.harness.ray_backend import ray_evaluate

        run = ray_evaluate(domain, agent, user, concurrency=args.concurrency, **common)
    elif args.agent_model or args.user_model or args.concurrency > 1:
        run = asyncio.run(aevaluate(domain, agent, user, concurrency=args.concurrency, **common))
    else:
        run = evaluate(domain, agent, user, **common)
    print(format_metrics(run.metrics, f"{domain} | agent {agent_name} | user {user_name}"))
    print(f"results: {run.out_dir}")
    return 0


def _user(name: str) -> Any:
    from tau_env.users import ScriptedUser

    return {"scripted": ScriptedUser}[name]


def cmd_show(args: argparse.Namespace) -> int:
    from tau_env.show import format_episode

    path = Path(args.path)
    if path.is_dir():
        path = path / "trajectories.jsonl"
    if not path.is_file():
        print(f"No trajectory file at {path}; pass a results folder or a trajectories.jsonl.", file=sys.stderr)
        return 2
    shown = 0
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                print(f"(line {n + 1} is not valid JSON; skipped)", file=sys.stderr)
                continue
            if args.task and rec.get("task_id") not in args.task:
                continue
            if args.failed and rec.get("reward", 0) >= 1:
                continue
            print(format_episode(rec, limit=args.width))
            print()
            shown += 1
            if args.limit and shown >= args.limit:
                break
    if not shown:
        print("No episode matched.", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from tau_env.registry import registry

    domain = registry.load_domain(args.domain, **_domain_kwargs(args))
    tasks = domain.tasks if args.task == "all" else [domain.task(args.task)]
    for task in tasks:
        record = domain.replay_record(task)
        if args.json:
            print(json.dumps(record, ensure_ascii=False))
        else:
            print(f"== {task.id}: {len(record['actions'])} actions")
            for i, a in enumerate(record["actions"]):
                flag = " (error)" if a["error"] else ""
                print(f"[{i:>2}] {a['requestor']:<9} {a['name']}{flag}\n     {a['output'][:300]}")
    return 0


def cmd_export_sft(args: argparse.Namespace) -> int:
    from tau_env.sft import export

    if not args.jsonl and not args.parquet:
        print("Give --jsonl FILE and/or --parquet FILE.", file=sys.stderr)
        return 2
    n = export(args.run, args.jsonl, args.parquet, min_reward=args.min_reward, greeting_turns=args.greeting_turns)
    print(f"wrote {n} examples" + "".join(f" to {p}" for p in (args.jsonl, args.parquet) if p))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tau-env", description="Evaluate and check tau_env domains.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="list registered environments")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("check", help="check a domain's tasks (replay, determinism, oracle play)")
    s.add_argument("domain", help="environment id, e.g. harbor-bank-v0")
    s.add_argument("--task", action="append", help="check only this task (repeatable)")
    s.add_argument("--no-play", action="store_true", help="skip the oracle-vs-scripted-user episode")
    s.add_argument("--data-dir", help="data folder, for domains loaded from a path")
    s.set_defaults(fn=cmd_check)

    s = sub.add_parser("eval", help="evaluate policies (built-in or model servers) on a domain")
    s.add_argument("domain", nargs="?", default="harbor-bank-v0", help="environment id (default: harbor-bank-v0)")
    s.add_argument("--domain", dest="domain_opt", help="environment id (same as the positional argument)")
    s.add_argument("--agent", choices=AGENTS, default="oracle", help="built-in agent policy (default: oracle)")
    s.add_argument("--user", choices=USERS, default="scripted", help="built-in user policy (default: scripted)")
    for seat in ("agent", "user"):
        s.add_argument(f"--{seat}-model", help=f"model name on an OpenAI-compatible server, for the {seat} seat")
        s.add_argument(f"--{seat}-base-url", help=f"the {seat} server's base URL, e.g. http://127.0.0.1:8000/v1")
        s.add_argument(
            f"--{seat}-api-key-env",
            default="OPENAI_API_KEY",
            help="environment variable holding the key (keys never go on the command line)",
        )
        s.add_argument(f"--{seat}-temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    s.add_argument("--max-tokens", type=int, default=1024, help="per-turn token cap of model replies")
    s.add_argument("--timeout", type=float, default=120.0, help="seconds per model request")
    s.add_argument("--retries", type=int, default=3, help="retries of a failed model request")
    s.add_argument("--strip-reasoning", action="store_true", help="drop the agent's reasoning from its history")
    s.add_argument("--cache", help="user-simulator response cache file (default: ~/.cache/tau_env/responses.sqlite)")
    s.add_argument("--no-cache", action="store_true", help="do not cache user-simulator replies")
    s.add_argument("--concurrency", type=int, default=1, help="episodes in flight (asyncio)")
    s.add_argument("--backend", choices=("local", "ray"), default="local", help="where episodes run")
    s.add_argument("--restart", action="store_true", help="ignore finished episodes in --out and start over")
    s.add_argument("--trials", type=int, default=1, help="trials per task (default: 1)")
    s.add_argument("--task", action="append", help="run only this task (repeatable)")
    s.add_argument("--seed", type=int, default=0, help="base seed (default: 0)")
    s.add_argument("--max-steps", type=int, help="step budget per episode")
    s.add_argument("--retrieval", help="knowledge-tool configuration, e.g. bm25, grep, bm25+grep, none")
    s.add_argument("--out", type=Path, help="results folder (default: runs/<domain>-<agent>-<time>)")
    s.add_argument("--data-dir", help="data folder, for domains loaded from a path")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("replay", help="replay tasks' reference actions: outputs and final database")
    s.add_argument("domain", help="environment id, e.g. tau3-banking")
    s.add_argument("--task", required=True, help="a task id, or 'all' (one line per task)")
    s.add_argument(
        "--json",
        action="store_true",
        help='print {"task_id", "actions": [{"name", "requestor", "output", "error"}], "final_db"}',
    )
    s.add_argument("--data-dir", help="data folder, for domains loaded from a path")
    s.set_defaults(fn=cmd_replay)

    s = sub.add_parser("export-sft", help="turn successful episodes into chat-format SFT data")
    s.add_argument("run", help="a results folder or a trajectories.jsonl file")
    s.add_argument("--jsonl", help="write JSONL here")
    s.add_argument("--parquet", help="write parquet here (needs pyarrow)")
    s.add_argument("--min-reward", type=float, default=1.0, help="keep episodes with at least this reward")
    s.add_argument(
        "--greeting-turns",
        type=int,
        default=1,
        help="leading assistant messages that are the env's greeting, not trained on (default 1)",
    )
    s.set_defaults(fn=cmd_export_sft)

    s = sub.add_parser("show", help="print trajectories readably")
    s.add_argument("path", help="a results folder or a trajectories.jsonl file")
    s.add_argument("--task", action="append", help="only this task (repeatable)")
    s.add_argument("--failed", action="store_true", help="only episodes with reward < 1")
    s.add_argument("--limit", type=int, help="at most this many episodes")
    s.add_argument("--width", type=int, default=600, help="truncate long texts to this many characters")
    s.set_defaults(fn=cmd_show)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from tau_env.error import Error

    try:
        return args.fn(args)
    except Error as e:
        print(f"tau-env: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (e.g. `head`) stopped early: not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
