"""``tau-env synth``: the synthesis pipeline's stages from the command line.

::

    tau-env synth graphs  DOMAIN --out synth/run1
    tau-env synth tasks   DOMAIN --n 500 --out synth/run1 [--llm-model M --llm-base-url U]
    tau-env synth compose --from synth/run1 --n 200
    tau-env synth sft     --from synth/run1 --agent-model T --agent-base-url U [--user-model ...] | --teacher
    tau-env synth rl      --from synth/run1 --policy-model P --policy-base-url U --rollouts 8 --band 0.1 0.9
    tau-env synth decontaminate --from synth/run1 --against tau3-banking --data-dir PATH
    tau-env synth report  synth/run1

Each subcommand calls the stage function of :mod:`tau_env.synthesis.pipeline` of its name and
prints what it returns as a short table. Errors are one line and exit status 2, as for every
``tau-env`` command.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any

from tau_env.cli import Parser as _Parser  # noqa: F401  (the core CLI's parser and argument types)
from tau_env.cli import echo as _out
from tau_env.cli import float_type as _float
from tau_env.cli import int_type as _int
from tau_env.cli import name_type as _name
from tau_env.cli import path_type as _path
from tau_env.cli import usable_path as _usable
from tau_env.error import InvalidOptionError

RUN_FILE = "run.json"


# -- checks that argparse types cannot do ---------------------------------------------------------


def _run_dir(path: Path, flag: str = "--from") -> Path:
    """An existing run folder (one with run.json)."""
    if not path.exists():
        raise InvalidOptionError(f"{flag} {path} does not exist; pass the --out folder of a 'tau-env synth tasks' run.")
    if not path.is_dir():
        raise InvalidOptionError(f"{flag} {path} is a file; pass a run folder.")
    if not (path / RUN_FILE).is_file():
        raise InvalidOptionError(
            f"{flag} {path} holds no synthesis run (no {RUN_FILE}); pass the --out folder of a 'tau-env synth' run."
        )
    return path


def _band(lo: float, hi: float) -> tuple[float, float]:
    if not 0.0 <= lo < hi <= 1.0:
        raise InvalidOptionError(f"--band needs 0 <= LO < HI <= 1, got {lo:g} {hi:g}.")
    return lo, hi


def _data_dir(args: argparse.Namespace) -> str | None:
    if args.data_dir is None:
        return None
    if not args.data_dir.is_dir():
        raise InvalidOptionError(f"--data-dir {args.data_dir} is not a folder; pass the domain's data folder.")
    return str(args.data_dir)


def _llm(args: argparse.Namespace, out: Path) -> Any:
    """A SynthLLM from the --llm-* flags (its reply cache in the run folder), or None: the template backend."""
    if args.llm_base_url and not args.llm_model:
        raise InvalidOptionError("--llm-base-url needs --llm-model: name the model to use there.")
    if not args.llm_model:
        return None
    from tau_env.synthesis.llm import SynthLLM

    return SynthLLM(
        args.llm_model,
        args.llm_base_url,
        cache_path=out / "llm_cache.sqlite",
        api_key_env=args.llm_api_key_env,
        max_concurrency=args.llm_concurrency,
    )


def _seat(args: argparse.Namespace, seat: str, required: bool) -> dict[str, Any] | None:
    """The model settings of ``seat`` (--<seat>-model, -base-url, -api-key-env), or None."""
    model = getattr(args, f"{seat}_model")
    base_url = getattr(args, f"{seat}_base_url")
    if base_url and not model:
        raise InvalidOptionError(f"--{seat}-base-url needs --{seat}-model: name the model to use there.")
    if not model:
        if required:
            raise InvalidOptionError(f"synth {args.synth_command} needs --{seat}-model (and --{seat}-base-url).")
        return None
    return {"model": model, "base_url": base_url, "api_key_env": getattr(args, f"{seat}_api_key_env")}


def _stage(name: str) -> Any:
    """The pipeline's stage function ``name`` (imported now: only ``tau-env synth`` loads the pipeline)."""
    try:
        from tau_env.synthesis import pipeline
    except ModuleNotFoundError as e:
        if e.name != "tau_env.synthesis.pipeline":
            raise
        pipeline = None
    fn = getattr(pipeline, name, None)
    if fn is None:
        from tau_env.synthesis.errors import SynthesisError

        raise SynthesisError(f"This tau_env has no synthesis stage {name}; reinstall tau-env with the 'synth' extra.")
    return fn


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, less the optional keywords (``quiet``, ``workers``) it does not take."""
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for optional in ("quiet", "workers"):
        if optional in kwargs and not takes_any and optional not in params:
            del kwargs[optional]
    return fn(*args, **kwargs)


def _close(llm: Any) -> None:
    if llm is not None:
        llm.close()


def _table(result: Any) -> None:
    """Print a stage's result: ``key  value`` rows (one level of nesting flattened)."""
    if isinstance(result, tuple | list) and all(isinstance(p, str | Path) for p in result):
        for p in result:
            _out(str(p))
        return
    if not isinstance(result, dict):
        if result is not None:
            _out(str(result))
        return
    rows: list[tuple[str, str]] = []
    for k, v in result.items():
        if isinstance(v, dict) and v and all(not isinstance(x, dict | list) for x in v.values()):
            rows.extend((f"{k}.{k2}", _cell(x)) for k2, x in v.items())
        else:
            rows.append((str(k), _cell(v)))
    width = max((len(k) for k, _ in rows), default=0)
    for k, v in rows:
        _out(f"{k:<{width}}  {v}")


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | dict):
        text = ", ".join(map(str, v)) if isinstance(v, list) else ", ".join(f"{a}={b}" for a, b in v.items())
        return text if len(text) <= 100 else text[:97] + "..."
    return str(v)


# -- the subcommands ----------------------------------------------------------------------------------


def cmd_graphs(args: argparse.Namespace) -> int:
    _usable(args.out, "--out")
    llm = _llm(args, args.out)
    try:
        result = _call(_stage("run_graphs"), args.out, args.domain, data_dir=_data_dir(args), llm=llm, quiet=args.quiet)
    finally:
        _close(llm)
    _table(result)
    return 0


def weight_map(pairs: list[tuple[str, float]] | None) -> dict[str, float] | None:
    """``--weight`` pairs as a mapping (None when none is given); a key given twice is an error
    (recipe_cpu.py's ``--synth-weights`` parses with this and :func:`weight_pair` too).
    """
    if pairs is None:
        return None
    out: dict[str, float] = {}
    for key, w in pairs:
        if key in out and out[key] != w:
            raise InvalidOptionError(f"--weight {key} is given twice ({out[key]:g} and {w:g}); give it once.")
        out[key] = w
    return out


#: ``synth tasks --batch`` of a new run, or of a run that recorded none (the API's default is 200).
CLI_BATCH = 100


def _recorded(out: Path, key: str) -> Any:
    """A setting the run folder ``out`` recorded in its run.json (None: none, or no readable run.json)."""
    try:
        settings = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return settings.get(key) if isinstance(settings, dict) else None


def cmd_tasks(args: argparse.Namespace) -> int:
    _usable(args.out, "--out")
    if args.domain is None and not (args.out / RUN_FILE).is_file():
        raise InvalidOptionError(f"synth tasks needs a DOMAIN: --out {args.out} holds no run yet to take it from.")
    llm = _llm(args, args.out)
    try:
        result = _call(
            _stage("run_tasks"),
            args.out,
            args.domain,
            n=args.n,
            data_dir=_data_dir(args),
            llm=llm,
            seed=args.seed,
            batch=args.batch if args.batch is not None or _recorded(args.out, "batch") is not None else CLI_BATCH,
            review=not args.no_review,
            workers=args.workers,
            quiet=args.quiet,
            ids=args.ids,
            weights=weight_map(args.weight),
        )
    finally:
        _close(llm)
    _table(result)
    if result.get("stopped"):  # the run ended short of --n: say so in the exit status too
        _out(f"tau-env: {result['stopped']}", file=sys.stderr)
        return 1
    return 0


def cmd_compose(args: argparse.Namespace) -> int:
    run = _run_dir(args.from_)
    llm = _llm(args, run)
    try:
        result = _call(_stage("run_compose"), run, n=args.n, seed=args.seed, llm=llm, quiet=args.quiet)
    finally:
        _close(llm)
    _table(result)
    if result.get("stopped"):  # fewer composites than --n: say why, and so in the exit status
        _out(f"tau-env: {result['stopped']}", file=sys.stderr)
        return 1
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    run = _run_dir(args.from_)
    if args.teacher and (args.agent_model or args.agent_base_url):
        raise InvalidOptionError("synth sft takes --teacher or --agent-model, not both: one plays the agent seat.")
    if args.teacher:
        from tau_env.agents import TeacherAgent

        agent: Any = TeacherAgent
    else:
        if not args.agent_model and not args.agent_base_url:
            raise InvalidOptionError(
                "synth sft needs --agent-model (and --agent-base-url) or --teacher (the built-in TeacherAgent)."
            )
        agent = _seat(args, "agent", required=True)
    user = _seat(args, "user", required=False)
    result = _call(
        _stage("run_sft"), run, agent=agent, user=user, trials=args.trials, workers=args.workers, quiet=args.quiet
    )
    _table(result)
    return 0


def cmd_rl(args: argparse.Namespace) -> int:
    band = _band(*args.band)
    run = _run_dir(args.from_)
    policy = _seat(args, "policy", required=True)
    result = _call(
        _stage("run_rl"), run, policy=policy, rollouts=args.rollouts, band=band, workers=args.workers, quiet=args.quiet
    )
    _table(result)
    return 0


def cmd_decontaminate(args: argparse.Namespace) -> int:
    run = _run_dir(args.from_)
    result = _call(
        _stage("run_decontaminate"),
        run,
        against=args.against,
        data_dir=_data_dir(args),
        task_ids=args.task_ids,
        detectors=args.detectors,
        quiet=args.quiet,
    )
    _table(result)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    if args.run is not None and args.from_ is not None and args.run != args.from_:
        raise InvalidOptionError(f"Two run folders given, {args.run} and --from {args.from_}; give one.")
    target = args.run or args.from_
    if target is None:
        raise InvalidOptionError("synth report needs a run folder: tau-env synth report RUN_FOLDER.")
    run = _run_dir(target, "run folder" if args.run is not None else "--from")
    _table(_stage("run_report")(run))
    return 0


# -- the parser ---------------------------------------------------------------------------------------


def _llm_flags(s: argparse.ArgumentParser) -> None:
    s.add_argument("--llm-model", type=_name, help="model that writes wording and reviews (default: templates only)")
    s.add_argument("--llm-base-url", type=_name, help="its OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    s.add_argument(
        "--llm-api-key-env",
        type=_name,
        default="OPENAI_API_KEY",
        help="environment variable holding the key (keys never go on the command line)",
    )
    s.add_argument("--llm-concurrency", type=_int(1), default=16, help="model requests in flight (default 16)")


def _seat_flags(s: argparse.ArgumentParser, seat: str, what: str) -> None:
    s.add_argument(f"--{seat}-model", type=_name, help=f"{what}: model name on an OpenAI-compatible server")
    s.add_argument(f"--{seat}-base-url", type=_name, help=f"{what}: the server's base URL")
    s.add_argument(
        f"--{seat}-api-key-env", type=_name, default="OPENAI_API_KEY", help=f"{what}: environment variable of the key"
    )


def _names(text: str) -> list[str]:
    """A comma-separated list of names (``a,b,c``), none empty."""
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise argparse.ArgumentTypeError(f"expected names separated by commas, got {text!r}")
    return [_name(n) for n in names]


def weight_pair(text: str) -> tuple[str, float]:
    """One ``KEY=WEIGHT`` of ``--weight``: a planner key and a finite number >= 0."""
    import math

    key, eq, value = text.rpartition("=")
    try:
        w = float(value)
    except ValueError:
        w = math.nan
    if not eq or not key.strip() or not math.isfinite(w) or w < 0:
        raise argparse.ArgumentTypeError(
            f"expected KEY=WEIGHT with a finite weight >= 0 (failure:-=4), got {text[:80]!r}"
        )
    return key.strip(), w


def _from(s: argparse.ArgumentParser, required: bool = True) -> None:
    s.add_argument("--from", dest="from_", type=_path, required=required, metavar="RUN", help="the run folder")


def _common(s: argparse.ArgumentParser) -> None:
    s.add_argument("--quiet", action="store_true", help="no progress bars")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``synth`` and its subcommands to ``tau-env``'s subparsers; returns the ``synth`` parser."""
    p = subparsers.add_parser(
        "synth",
        help="synthesize verified training tasks (graphs, tasks, compose, sft, rl, decontaminate, report)",
        description="Synthesize verified training tasks from a domain's documents and tools.",
    )
    sub = p.add_subparsers(dest="synth_command", required=True, parser_class=_Parser)
    data_dir = dict(type=_path, help="data folder, for domains loaded from a path (e.g. tau3-banking)")

    s = sub.add_parser("graphs", help="build the entity graph and the tool graph (JSON and a picture)")
    s.add_argument("domain", type=_name, help="environment id, e.g. harbor-bank-v0")
    s.add_argument("--out", type=_path, required=True, help="the run folder")
    s.add_argument("--data-dir", **data_dir)
    _llm_flags(s)
    _common(s)
    s.set_defaults(fn=cmd_graphs)

    s = sub.add_parser("tasks", help="plan, synthesize, verify and review single-request tasks")
    s.add_argument("domain", nargs="?", type=_name, help="environment id (default: the run folder's)")
    s.add_argument("--out", type=_path, required=True, help="the run folder (resumed when it holds this run)")
    s.add_argument("--n", type=_int(1), required=True, help="accepted tasks wanted")
    s.add_argument(
        "--seed",
        type=_int(-(2**63), 2**63 - 1),
        default=None,
        help="the run's seed (default: 0 for a new run, the run's own when continuing)",
    )
    s.add_argument(
        "--batch",
        type=_int(1),
        default=None,
        help="plans per batch; reflection runs between (default: 100 for a new run, the run's own when "
        "continuing, so a stopped run resumed gives the tasks an uninterrupted run would; another batch, say "
        "for a top-up, is taken with a warning that it plans other tasks)",
    )
    s.add_argument("--no-review", action="store_true", help="skip the LLM reviewer (verification still runs)")
    s.add_argument("--workers", type=_int(1, 64), default=1, help="verification processes, 1 to 64 (default 1)")
    s.add_argument(
        "--ids",
        choices=("plan", "domain"),  # templates.ID_STYLES, written out: building the parser imports nothing
        default=None,
        help="record ids of new customers: 'plan' (CHK-P017-1, the plan id inside) or 'domain' (CHK-482913: "
        "digits only, shaped as the domain's own CHK-2001) (default: plan for a new run, the run's own when "
        "continuing)",
    )
    s.add_argument(
        "--weight",
        type=weight_pair,
        action="append",
        metavar="KEY=W",
        help="a planner weight, repeatable: a template (wire=2), a cell (wire/refusal/multi_doc=0), outcome:X, "
        "failure:Y, or failure:- for the plain variants (failure:-=4: four plain requests to one of each edge "
        "case) (default: none for a new run, the run's own when continuing)",
    )
    s.add_argument("--data-dir", **data_dir)
    _llm_flags(s)
    _common(s)
    s.set_defaults(fn=cmd_tasks)

    s = sub.add_parser("compose", help="join verified tasks into multi-request sessions along the tool graph")
    _from(s)
    s.add_argument("--n", type=_int(1), required=True, help="composite tasks wanted")
    s.add_argument("--seed", type=_int(-(2**63), 2**63 - 1), default=0, help="seed of the composition (default 0)")
    _llm_flags(s)
    _common(s)
    s.set_defaults(fn=cmd_compose)

    s = sub.add_parser("sft", help="teacher rollouts on verified tasks, kept when successful: an SFT dataset")
    _from(s)
    _seat_flags(s, "agent", "teacher agent")
    s.add_argument(
        "--teacher",
        action="store_true",
        help="the built-in TeacherAgent instead of a model: the reference actions, after asking the user for "
        "every fact they use (no server)",
    )
    _seat_flags(s, "user", "user simulator (default: the scripted user)")
    s.add_argument("--trials", type=_int(1), default=1, help="rollouts per task (default 1)")
    s.add_argument("--workers", type=_int(1, 1024), default=16, help="episodes in flight, 1 to 1024 (default 16)")
    _common(s)
    s.set_defaults(fn=cmd_sft)

    s = sub.add_parser("rl", help="composite tasks whose pass rate under a policy lies in a band: an RL dataset")
    _from(s)
    _seat_flags(s, "policy", "policy")
    s.add_argument("--rollouts", type=_int(1), default=8, help="rollouts per task, G (default 8)")
    s.add_argument(
        "--band",
        nargs=2,
        type=_float(lo=0.0),
        default=(0.1, 0.9),
        metavar=("LO", "HI"),
        help="keep tasks whose pass rate p has LO <= p <= HI (default 0.1 0.9)",
    )
    s.add_argument("--workers", type=_int(1, 1024), default=16, help="episodes in flight, 1 to 1024 (default 16)")
    _common(s)
    s.set_defaults(fn=cmd_rl)

    s = sub.add_parser("decontaminate", help="drop tasks too close to an evaluation domain's tasks")
    _from(s)
    s.add_argument("--against", type=_name, required=True, help="the evaluation environment id, e.g. tau3-banking")
    s.add_argument("--data-dir", **data_dir)
    s.add_argument(
        "--task-ids",
        type=_names,
        metavar="ID,ID,...",
        help="only these of its tasks (a held-out split; default: all of them)",
    )
    s.add_argument(
        "--detectors",
        type=_names,
        metavar="NAME,...",
        help="detectors to run (default: all: chain, chain_abstract, ids, state_change, ngram, embedding; "
        "chain,ids,ngram,embedding removes copies of the evaluation tasks and keeps other instances of their "
        "procedures)",
    )
    _common(s)
    s.set_defaults(fn=cmd_decontaminate)

    s = sub.add_parser("report", help="the run's report (report.txt and report.html)")
    s.add_argument("run", nargs="?", type=_path, help="the run folder")
    _from(s, required=False)
    s.set_defaults(fn=cmd_report)
    return p
