"""The synthesis pipeline: each stage a function over a run folder, so a run resumes and a stage reruns alone.

Stages (``tau-env synth <stage>`` calls the function of the same name):

- :func:`run_graphs`: the entity graph and the tool graph (``graphs/``).
- :func:`run_tasks`: rounds of plan -> synthesize -> verify -> review (regenerating only the
  rejected component, up to a budget) -> accept, with reflection between rounds (``tasks.jsonl``).
- :func:`run_compose`: multi-request sessions from the accepted singles (``composite.jsonl``).
- :func:`run_sft` / :func:`run_rl`: teacher rollouts and band-filtered RL tasks (``sft/``, ``rl/``).
- :func:`run_decontaminate`: remove what resembles an evaluation domain's tasks (``decontamination.json``).
- :func:`run_report`: ``report.txt`` and ``report.html``.

Every stage appends records as it goes; a killed stage started again skips what is on disk.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.records import Plan, Problem, chain_signature
from tau_env.synthesis.templates import ID_STYLES

from tau_env import Task
from tau_env.error import Error, InvalidOptionError

#: Regenerations of one candidate's rejected component before it is dropped.
REGENERATION_BUDGET = 2
#: Accepted tasks each write tool should reach (fewer when ``n`` is too small for every tool to get it).
MIN_PER_TOOL = 20
#: Plans per round of a new ``run_tasks`` run given no ``batch`` (``tau-env synth tasks``: 100).
BATCH = 200
#: Rounds in a row that accept nothing before ``run_tasks`` stops short of ``n``.
STALL_ROUNDS = 3
#: Failed plans (none passing) after which coverage stops asking for a template's write tools.
HOPELESS_TRIES = 10
#: The largest weight a run may give one planner key (products of a few stay finite).
MAX_PLAN_WEIGHT = 1e6
#: Candidates synthesized concurrently (LLM calls overlap; the template backend is CPU-bound).
CONCURRENCY = 16


# ---------------------------------------------------------------- the run folder and its graphs


def _backend(llm: Any) -> Any:
    return "template" if llm is None else {"model": llm.model, "base_url": llm.base_url}


#: What a run folder holds before it has produced anything (a failed first try may leave them).
_NOTHING_YET = ("run.json", "stages.jsonl", "plans.jsonl", "graphs", "reflection")


def _open(
    out: str | Path,
    domain_id: str | None,
    data_dir: str | Path | None,
    llm: Any,
    seed: int | None,
    quiet: bool,
    *,
    same_backend: bool = False,
    ids: str | None = None,
    weights: dict[str, float] | None = None,
):
    """The run folder ``out``: created for ``domain_id`` (or resumed if it holds that run), or, with
    ``domain_id`` None, the run already there; a ``seed`` (and with ``same_backend`` the model)
    given for a run that continues must be the run's own, and so must an ``ids`` style and ``weights``.
    """
    from tau_env.synthesis.run import RunFolder, id_style, plan_weights

    path = Path(out)
    if domain_id is None:  # a stage that continues a run: the folder says everything
        if not (path / "run.json").is_file():
            raise SynthesisError(
                f"{path} is not a synthesis run folder (no run.json); "
                f"run `tau-env synth tasks DOMAIN --out {path}` first."
            )
        run = RunFolder.open(path)
        differ = []
        if seed is not None and run.settings.get("seed", 0) != seed:
            differ.append(f"seed: {run.settings.get('seed', 0)} in the folder, {seed} now")
        theirs, ours = run.settings.get("backend", "template"), _backend(llm)
        model = lambda b: b.get("model") if isinstance(b, dict) else b  # noqa: E731
        if same_backend and model(theirs) != model(ours):
            differ.append(f"backend: {model(theirs)} in the folder, {model(ours)} now")
        if ids is not None and id_style(run.settings) != ids:
            differ.append(f"ids: {id_style(run.settings)} in the folder, {ids} now")
        if weights is not None and plan_weights(run.settings) != weights:
            differ.append(f"weights: {json.dumps(plan_weights(run.settings))} in the folder, {json.dumps(weights)} now")
        if differ:
            run.close()
            raise SynthesisError(
                f"{path} holds a synthesis run with other settings: {'; '.join(differ)}. "
                "Pass the run's own settings to continue it, or another --out."
            )
        return run
    if not (path / "run.json").is_file():
        # the domain must load before a new folder records it: a failed first try (say, without
        # --data-dir) must not leave a run.json that refuses the corrected command
        from tau_env.registry import registry

        registry.load_domain(domain_id, **({"data_dir": str(data_dir)} if data_dir is not None else {}))
    if data_dir is not None:  # recorded absolute: a later stage may run from another folder
        given = Path(data_dir).resolve()
        data_dir = str(given)
        try:
            recorded = json.loads((path / "run.json").read_text(encoding="utf-8")).get("loader", {}).get("data_dir")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if isinstance(recorded, str) and Path(recorded).resolve() == given:
            data_dir = recorded  # a run that recorded it as typed: the same folder is the same setting
    settings: dict[str, Any] = {
        "domain": domain_id,
        "loader": {"data_dir": str(data_dir)} if data_dir is not None else {},
        "seed": 0 if seed is None else seed,
        "backend": _backend(llm),
        "quiet": quiet,
        "ids": ids,
        "weights": weights,
    }
    from tau_env.synthesis.run import _Lock

    try:
        return RunFolder.create(path, settings)
    except SynthesisError:
        if not _produced_nothing(path):
            raise
        lock = _Lock.acquire(path)  # a folder another run holds (before its first verdict) is that run's: refused
        if not _produced_nothing(path):  # it produced something between the two looks: it is a run, keep it
            lock.release()
            raise
    # a first try that produced nothing (its model never answered, say): start the folder afresh
    try:
        for name in _NOTHING_YET:
            target = path / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
    finally:
        lock.release()
    return RunFolder.create(path, settings)


def check_weights(weights: Any) -> dict[str, float] | None:
    """``weights`` (planner weights, key -> number) as a run records them: string keys, numbers
    from 0 to :data:`MAX_PLAN_WEIGHT`, sorted; None stays None. Which keys exist depends on the domain's templates
    (:func:`_known_weights` checks them once those are loaded).
    """
    if weights is None:
        return None
    if not isinstance(weights, dict):
        raise SynthesisError(f"weights={weights!r}: expected a mapping of planner keys to numbers >= 0.")
    out: dict[str, float] = {}
    for k, v in weights.items():
        if not isinstance(k, str) or not k.strip():
            raise SynthesisError(
                f"weights: the key {k!r} is not a planner key (a template, a cell, outcome:X, failure:Y)."
            )
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= MAX_PLAN_WEIGHT):
            raise SynthesisError(f"weights[{k!r}] = {v!r}: expected a number from 0 to {MAX_PLAN_WEIGHT:g}.")
        if k.strip() in out:
            raise SynthesisError(f"weights: the key {k.strip()!r} is given twice; give it once.")
        out[k.strip()] = float(v)
    return dict(sorted(out.items()))


def _known_weights(weights: dict[str, float], planner: Any) -> None:
    """Refuse weight keys that no cell of the domain reads: a misspelt key would change nothing."""
    import difflib

    known = planner.weight_keys()
    bad = [k for k in weights if k not in known]
    if bad:
        hints = []
        for k in bad:
            near = difflib.get_close_matches(k, sorted(known), n=3)
            hints.append(f"{k!r}" + (f" (did you mean {', '.join(near)}?)" if near else ""))
        raise SynthesisError(
            f"weights: no template of this domain reads {'; '.join(hints)}. Keys are a template "
            "(wire), a cell (wire/refusal/multi_doc, '-' for no failure mode), outcome:X or failure:Y "
            f"(failure:- for the plain variants). This domain's templates: {', '.join(sorted(planner.templates))}; "
            f"outcomes: {', '.join(sorted({c[1] for c in planner.cells()}))}; failure modes: "
            f"{', '.join(sorted({c[2] or '-' for c in planner.cells()}))}."
        )
    if weights and not any(planner.weight(c) > 0 for c in planner.cells()):
        raise SynthesisError("weights: they give every cell of this domain weight 0; nothing could be planned.")


def _merged(prior: dict[str, float], reflected: dict[str, float]) -> dict[str, float]:
    """The planner's weights: the run's own (``prior``) times reflection's, key by key."""
    return {k: prior.get(k, 1.0) * reflected.get(k, 1.0) for k in {*prior, *reflected}}


def _entries(path: Path) -> set[str] | None:
    """The names in the folder ``path`` (None when there is no folder)."""
    try:
        return {e.name for e in path.iterdir()}
    except OSError:
        return None


#: What a run writes before it plans anything (:func:`_undo_new_run` removes only these).
_RUN_START = (*_NOTHING_YET, "synth.db", "synth.db-wal", "synth.db-shm", "llm_cache.sqlite", "llm_cache.sqlite-wal",
              "llm_cache.sqlite-shm")  # fmt: skip


def _undo_new_run(path: Path, before: set[str] | None) -> None:
    """Remove what a run that planned nothing added to ``path``: the run's own start files that were
    not there before (``before``: the folder's names then, None when there was no folder, which then
    goes too if nothing else is in it). Files of other programs, and anything that was there, stay.
    """
    from tau_env.synthesis.run import LOCK_NAME

    for name in (*_RUN_START, LOCK_NAME):
        entry = path / name
        if (before is None or name not in before) and (entry.exists() or entry.is_symlink()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    if before is None:
        try:
            path.rmdir()  # only when empty
        except OSError:
            pass


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _produced_nothing(path: Path) -> bool:
    """Whether a run folder holds no verdict and no task yet (only what :data:`_NOTHING_YET` names)."""
    try:
        entries = list(path.iterdir())
    except OSError:
        return False
    allowed = {
        *_NOTHING_YET,
        "llm_cache.sqlite",
        "llm_cache.sqlite-wal",
        "llm_cache.sqlite-shm",
        "synth.db",
        ".tau_env.lock",
    }
    return all(e.name in allowed or e.name.startswith(".") for e in entries)


def _graphs(run: Any, domain: Any, llm: Any = None) -> tuple[Any, Any]:
    """The run's graphs: read from ``graphs/`` when built, else built and written."""
    from tau_env.synthesis.entity_graph import EntityGraph, build_entity_graph
    from tau_env.synthesis.tool_graph import ToolGraph, build_tool_graph, rule_constants

    folder = run.path / "graphs"
    eg_file, tg_file = folder / "entity_graph.json", folder / "tool_graph.json"
    if eg_file.is_file() and tg_file.is_file():
        return EntityGraph.from_json(run.read_json("graphs/entity_graph.json")), ToolGraph.from_json(
            run.read_json("graphs/tool_graph.json")
        )
    started = time.perf_counter()
    eg = build_entity_graph(domain, llm=llm)
    tg = build_tool_graph(domain, eg)
    folder.mkdir(parents=True, exist_ok=True)
    eg.write(folder)
    tg.write(folder)
    rules = rule_constants(eg, tg)
    run.write_json("graphs/rule_constants.json", rules)
    run.record_stage(
        "graphs",
        {
            "constants": len(eg.constants),
            "conflicts": len(eg.conflicts),
            "rule_constants": len(rules),
            "tools": len(tg.nodes),
            "edges": dict(Counter(e.kind for e in tg.edges)),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )
    return eg, tg


def run_graphs(
    out: str | Path,
    domain_id: str,
    *,
    data_dir: str | Path | None = None,
    llm: Any = None,
    seed: int | None = None,
    quiet: bool = True,
) -> dict[str, Any]:
    """Build (or read) the entity and tool graphs of ``domain_id`` into ``out/graphs``."""
    run = _open(out, domain_id, data_dir, llm, seed, quiet)
    with run:
        domain = run.domain()
        eg, tg = _graphs(run, domain, llm)
        rules = run.read_json("graphs/rule_constants.json", [])
        return {
            "run": str(run.path),
            "constants": len(eg.constants),
            "conflicts": len(eg.conflicts),
            "rule constants": len(rules),
            "tools": len(tg.nodes),
            "edges": len(tg.edges),
        }


# ---------------------------------------------------------------- single-request tasks


class _Stage:
    """What one round of ``run_tasks`` needs: the domain, graphs, templates and the model."""

    def __init__(self, run: Any, domain: Any, eg: Any, tg: Any, llm: Any, review: bool):
        from tau_env.synthesis.run import id_style
        from tau_env.synthesis.templates import IdAllocator, SynthContext, templates_for

        self.run, self.domain, self.eg, self.tg, self.llm, self.review = run, domain, eg, tg, llm, review
        self.templates = templates_for(domain, eg, tg)
        if not self.templates:
            raise SynthesisError(f"No templates for the domain {domain.name!r}: nothing to synthesize.")
        # ids come from plan ids (unique in a run), in the run's style; randomness from each plan's seed
        ids = IdAllocator(style=id_style(run.settings))
        self.ctx = SynthContext(domain=domain, entity_graph=eg, tool_graph=tg, ids=ids, templates=self.templates)

    async def check(self, task: Task, prompts: dict[str, Any], clock: Counter | None = None) -> list[Problem]:
        """The verifier's problems, else the reviewer's (``clock`` adds each one's CPU seconds)."""
        from tau_env.synthesis.review import review
        from tau_env.synthesis.verify import verify

        clock = Counter() if clock is None else clock
        t0 = time.process_time()
        problems = verify(task, self.domain, self.eg, self.tg)
        t1 = time.process_time()
        clock["verify"] += t1 - t0
        if not problems and self.review:
            problems = await review(task, self.domain, llm=self.llm, prompts=prompts)
            clock["review"] += time.process_time() - t1
        return problems

    async def one(self, plan: Any, prompts: dict[str, Any]) -> dict[str, Any]:
        """Synthesize, verify and review one plan, regenerating the rejected component up to the budget."""
        from tau_env.synthesis.synthesizer import regenerate, synthesize

        clock: Counter = Counter()  # CPU seconds of this process per step (model time is not CPU time here)
        task: Task | None = None
        problems: list[Problem] = []
        t0 = time.process_time()
        rounds = 0
        while True:
            try:
                task = await synthesize(
                    plan, self.ctx, llm=self.llm, prompts=prompts, variant=rounds, critique=_critique(problems)
                )
                problems = await self.check(task, prompts, clock)
                break
            except SynthesisError as e:  # the template cannot instantiate this plan, or the wording was refused
                refused = getattr(e, "problems", None)  # a model's wording: ask again with what was wrong
                problems = list(refused or [Problem("template", "plan", str(e))])
                if not refused or rounds >= REGENERATION_BUDGET:
                    break
                rounds += 1
        clock["synthesize"] += time.process_time() - t0 - clock["verify"] - clock["review"]
        while problems and task is not None and rounds < REGENERATION_BUDGET:
            rounds += 1
            component = problems[0].component
            t0 = time.process_time()
            try:
                task = await regenerate(task, component, problems, self.ctx, llm=self.llm, prompts=prompts)
            except SynthesisError as e:
                problems = list(getattr(e, "problems", None) or [Problem("regeneration", component, str(e))])
                continue
            finally:
                clock["regenerate"] += time.process_time() - t0
            problems = await self.check(task, prompts, clock)
        return _verdict(plan, task, problems, rounds, clock)


def _critique(problems: list[Problem]) -> str | None:
    """What was wrong with the last wording, for the model's next try (None the first time)."""
    return "; ".join(p.message for p in problems) or None


def _verdict(plan: Any, task: Task | None, problems: list[Problem], rounds: int, clock: Counter) -> dict[str, Any]:
    return {
        "id": plan.id,
        "template": plan.template,
        "cell": plan.cell,
        "accepted": not problems,
        # passed the deterministic verifier (rejected, if at all, by the reviewer only)
        "verified": task is not None and all(p.check.startswith("review") for p in problems),
        "regenerations": rounds,
        "problems": [p.to_dict() for p in problems],
        "task": task.model_dump(mode="json", exclude_defaults=True) if task is not None else None,
        "cpu_seconds": {k: round(v, 5) for k, v in clock.items()},
    }


def _batch_stats(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    by_template: dict[str, dict[str, int]] = {}
    problems = []
    for v in verdicts:
        t = by_template.setdefault(v["template"], {"planned": 0, "accepted": 0})
        t["planned"] += 1
        t["accepted"] += int(v["accepted"])
        problems += [{"template": v["template"], **p} for p in v["problems"]]
    return {
        "planned": len(verdicts),
        "accepted": sum(v["accepted"] for v in verdicts),
        "by_template": by_template,
        "problems": problems,
    }


_WORKER: dict[str, Any] = {}


def _worker_init(path: str, llm: Any, review: bool) -> None:
    """A verification process: its own domain, graphs and templates, read from the run folder."""
    from tau_env.synthesis.run import RunFolder

    run = RunFolder.open(path, lock=False)
    domain = run.domain()
    eg, tg = _graphs(run, domain)
    _WORKER["stage"] = _Stage(run, domain, eg, tg, llm, review)


def _worker_chunk(plans: list[dict[str, Any]], prompts: dict[str, Any]) -> list[dict[str, Any]]:
    from tau_env.synthesis.records import Plan

    stage = _WORKER["stage"]

    async def all_of() -> list[dict[str, Any]]:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(p: dict[str, Any]) -> dict[str, Any]:
            async with gate:
                return await stage.one(Plan.from_dict(p), prompts)

        return list(await asyncio.gather(*(one(p) for p in plans)))

    return asyncio.run(all_of())


#: Plans per chunk: verdicts are written after each chunk, so a killed run loses at most one.
CHUNK = 25


def _chunks(
    stage: _Stage, pool: ProcessPoolExecutor | None, plans: list[Any], prompts: dict[str, Any], workers: int, bar: Any
):
    """The plans' verdicts, chunk by chunk in plan order: from ``workers`` processes, or this one."""
    chunks = [plans[i : i + CHUNK] for i in range(0, len(plans), CHUNK)]
    if pool is not None:
        dicts = [[p.to_dict() for p in c] for c in chunks]
        for verdicts in pool.map(_worker_chunk, dicts, [prompts] * len(dicts)):
            bar.update(len(verdicts))
            yield verdicts
        return
    for c in chunks:
        yield asyncio.run(_round(stage, c, prompts, bar))


async def _round(stage: _Stage, plans: list[Any], prompts: dict[str, Any], bar: Any) -> list[dict[str, Any]]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def guarded(plan: Any) -> dict[str, Any]:
        async with gate:
            v = await stage.one(plan, prompts)
        bar.update(1)
        return v

    return list(await asyncio.gather(*(guarded(p) for p in plans)))


def run_tasks(
    out: str | Path,
    domain_id: str | None = None,
    *,
    n: int,
    data_dir: str | Path | None = None,
    llm: Any = None,
    seed: int | None = None,
    batch: int | None = None,
    review: bool = True,
    reflect: bool = True,
    quiet: bool = True,
    max_rounds: int | None = None,
    workers: int = 1,
    ids: str | None = None,
    weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Synthesize until ``n`` verified, reviewed, distinct single-request tasks are in ``out/tasks.jsonl``.

    Rounds of ``batch`` plans each (None: the run's own; :data:`BATCH` for a new run); after a
    round, reflection proposes new prompts and plan weights for the next, and the round after that
    decides whether the update stays (its yield did not drop) or is rolled back. A run that is
    stopped goes on from its files: accepted tasks, verdicts and the current reflection version are
    on disk. The run records its batch, and continues with it when given none: it then gives the
    tasks an uninterrupted run would. Another batch (a top-up in smaller rounds, say) is taken for
    this call, with a warning: from the next round on it plans other tasks than the run's own would.

    ``weights`` shapes the mix of plans (:mod:`~tau_env.synthesis.planner`'s keys: a template, a
    cell ``template/outcome/failure``, ``outcome:X``, ``failure:Y``, ``failure:-`` for the plain
    variants; say ``{"failure:-": 4}`` for four plain requests to one of each edge case). Coverage
    still comes first (each write tool its share, rule constants made decisive, each cell of weight
    above 0 planned once); the weights pick the cells of a tool's coverage plans and sample the
    rest. Reflection's weights multiply them. The run records them: a run continues only with its
    own (None: whatever they are).
    """
    from tau_env.synthesis.planner import Planner, coverage_wants
    from tau_env.synthesis.reflect import Reflector

    _positive("n", n)
    if batch is not None:
        _positive("batch", batch)
    _positive("workers", workers)
    if ids is not None and ids not in ID_STYLES:
        raise SynthesisError(f"ids={ids!r}: one of {', '.join(ID_STYLES)}")
    weights = check_weights(weights)
    folder = Path(out)
    before = _entries(folder)  # None: no folder yet
    try:
        recorded = (folder / "run.json").read_bytes()  # what a refused weight must not change
    except OSError:
        recorded = None
    run = _open(out, domain_id, data_dir, llm, seed, quiet, same_backend=True, ids=ids, weights=weights)
    seed = run.settings.get("seed", 0)  # the run's own, when it continues
    if run.settings.get("batch") is None:  # a new run given none, or a folder from before batches were recorded
        run.settings["batch"] = batch or BATCH
        run.write_json("run.json", run.settings)
    own = run.settings["batch"]
    if batch is None and (isinstance(own, bool) or not isinstance(own, int) or own < 1):
        run.close()
        raise SynthesisError(
            f"{run.path / 'run.json'}: its batch is {own!r:.40}, not a positive integer; fix it, or pass --batch."
        )
    if batch is not None and batch != own:
        warnings.warn(
            f"{run.path}: batch {batch} for this call, the run's own is {own}: the rounds from here plan other "
            "tasks than an uninterrupted run would.",
            stacklevel=2,
        )
    batch = batch or own
    pool: ProcessPoolExecutor | None = None
    with run:
        from tau_env.synthesis.run import plan_weights

        domain = run.domain()
        eg, tg = _graphs(run, domain, llm)
        stage = _Stage(run, domain, eg, tg, llm, review)
        prior = plan_weights(run.settings)
        try:
            _known_weights(prior, Planner(stage.templates, weights=prior))
        except SynthesisError:
            # a weight the domain has no use for: the folder is left as it was (a run this command began
            # goes; a run.json it merged the weight into gets its old content back), so the corrected
            # command, or one without --weight, is not refused for the recorded mistake
            if weights is not None:
                if recorded is None:
                    run.close()  # the lock file goes with the rest
                    _undo_new_run(folder, before)
                else:
                    _write_bytes_atomic(folder / "run.json", recorded)
            raise
        reflector = Reflector(run.path / "reflection")
        accepted = len(_tasks(run, "tasks.jsonl"))
        seen = {chain_signature(t) for t in [*_tasks(run, "tasks.jsonl"), *_tasks(run, "contaminated.jsonl")]}
        guard = _Guard.of(run, domain)
        done_rounds = [s for s in run.stages() if s.get("stage") == "tasks"]
        r = len(done_rounds)
        previous = done_rounds[-1] if done_rounds else None
        started = time.perf_counter()
        stalled, stop = 0, None
        hopeless = _hopeless(run.read("verdicts.jsonl"), stage.templates)
        while accepted < n and (max_rounds is None or r < max_rounds):
            if stalled >= STALL_ROUNDS:
                stop = (
                    f"stopped short of n={n}: {STALL_ROUNDS} rounds in a row accepted nothing new "
                    "(verdicts.jsonl says why each plan was rejected)"
                )
                warnings.warn(f"{run.path}: {stop}.", stacklevel=2)
                break
            version = reflector.current()
            prompts = version.prompts or {}
            # a round cut short keeps its plans (plans.jsonl) and its finished verdicts (verdicts.jsonl)
            plans = [Plan.from_dict(p) for p in run.read("plans.jsonl") if p.get("round") == r]
            if not plans:
                planner = Planner(
                    stage.templates,
                    weights=_merged(prior, version.weights or {}) or None,
                    seed=seed,
                    weighted_coverage=bool(prior),
                )
                # coverage first: write tools short of their share, rule constants not yet decisive
                tools = [t for t in planner.write_tools() if t not in hopeless]
                want_tools, want_rules = coverage_wants(
                    _tasks(run, "tasks.jsonl"),
                    write_tools=tools,
                    rule_ids=run.read_json("graphs/rule_constants.json", []),
                    min_per_tool=min(MIN_PER_TOOL, max(1, n // (2 * max(1, len(tools))))),
                )
                plans = planner.plan(
                    min(batch, 2 * (n - accepted) + 10), round=r, want_rules=want_rules, want_tools=want_tools
                )
                run.append("plans.jsonl", [{**p.to_dict(), "round": r} for p in plans])
            ids = {p.id for p in plans}
            verdicts = [v for v in run.read("verdicts.jsonl") if v["id"] in ids]
            done = {v["id"] for v in verdicts}
            todo = [p for p in plans if p.id not in done]
            with run.progress(f"round {r}", len(todo)) as bar:
                if workers > 1 and todo and pool is None:
                    pool = ProcessPoolExecutor(workers, initializer=_worker_init, initargs=(str(run.path), llm, review))
                for chunk in _chunks(stage, pool, todo, prompts, workers, bar):
                    # in plan order, so the same seed gives the same tasks whatever finishes first
                    fresh = []
                    for v in chunk:
                        if v["accepted"]:
                            task = Task.model_validate(v["task"])
                            sig = chain_signature(task)
                            if sig in seen:
                                v["accepted"] = False
                                v["problems"] = [
                                    Problem(
                                        "duplicate", "plan", "the same reference chain as an accepted task"
                                    ).to_dict()
                                ]
                            else:
                                seen.add(sig)
                                fresh.append(task)
                    if guard is not None and fresh and accepted < n:  # a decontaminated run stays clean when topped up
                        # before the cut at n: a rejected task's place goes to the next clean one, so
                        # a round with clean accepted tasks always keeps one or reaches n
                        dirty = guard.check(fresh, chunk)
                        fresh = [t for t in fresh if t.id not in dirty]
                    fresh = fresh[: max(0, n - accepted)]  # the rest passed but are not needed
                    accepted += len(fresh)
                    run.append("verdicts.jsonl", chunk)
                    run.append("tasks.jsonl", [t.model_dump(mode="json", exclude_defaults=True) for t in fresh])
                    verdicts += chunk
            stats = _batch_stats(verdicts)
            new_here = sum(v["accepted"] for v in verdicts)
            stalled = 0 if new_here else stalled + 1
            hopeless = _hopeless(run.read("verdicts.jsonl"), stage.templates)
            summary = {
                "round": r,
                "planned": len(plans),
                "synthesized": sum(v["task"] is not None for v in verdicts),
                "verified": sum(v["verified"] for v in verdicts),
                "accepted": stats["accepted"],
                "regenerated": sum(v["regenerations"] > 0 for v in verdicts),
                "problems": dict(Counter(p["check"] for p in stats["problems"])),
                "prompt_version": version.number,
                "yield": round(stats["accepted"] / max(1, len(verdicts)), 4),
                "cpu_seconds": {
                    k: round(sum(v["cpu_seconds"].get(k, 0.0) for v in verdicts), 3)
                    for k in ("synthesize", "verify", "review", "regenerate")
                },
            }
            run.record_stage("tasks", summary)
            if reflect:
                _reflect(run, reflector, version, previous, summary, stats, llm)
            previous = summary
            r += 1
        if pool is not None:
            pool.shutdown()
        if llm is not None:
            llm.save_usage(run)
        run.index()
        return {
            "run": str(run.path),
            "accepted": accepted,
            **({"stopped": stop} if stop else {}),
            "rounds": r,
            "seconds": round(time.perf_counter() - started, 1),
            "tasks file": str(run.path / "tasks.jsonl"),
        }


def _hopeless(verdicts: list[dict[str, Any]], templates: dict[str, Any]) -> set[str]:
    """Write tools whose every template has failed ``HOPELESS_TRIES`` plans or more and passed none:
    coverage stops asking for them (plain sampling may still try them).
    """
    tried: Counter = Counter()
    passed: Counter = Counter()
    for v in verdicts:
        tried[v["template"]] += 1
        passed[v["template"]] += int(v["accepted"])
    by_tool: dict[str, list[str]] = {}
    for name, tpl in templates.items():
        for tool in getattr(tpl, "tools", ()):
            by_tool.setdefault(tool, []).append(name)
    return {tool for tool, names in by_tool.items() if all(tried[n] >= HOPELESS_TRIES and not passed[n] for n in names)}


class _Guard:
    """The evaluation set a decontaminated run was checked against, to check new tasks on arrival.

    Every pass recorded in ``decontamination.json`` (its evaluation tasks and detectors) is checked:
    a later, narrower pass never loosens what an earlier one enforced.
    """

    def __init__(self, domain: Any, evaluation: Any, passes: list[dict[str, Any]] | None = None):
        self.domain, self.evaluation = domain, evaluation
        self.passes = passes or [{"task_ids": None, "detectors": None}]

    @classmethod
    def of(cls, run: Any, domain: Any) -> _Guard | None:
        from tau_env.registry import registry

        record = run.read_json("decontamination.json", None)
        if not record or not record.get("against"):
            return None
        if record.get("data_dir"):
            kwargs = {"data_dir": record["data_dir"]}
        elif record["against"] == run.settings.get("domain"):  # the run's own domain: its own data folder
            kwargs = dict(run.settings.get("loader") or {})
        else:
            kwargs = {}
        try:
            return cls(domain, registry.load_domain(record["against"], **kwargs), record.get("passes"))
        except Error as e:
            raise SynthesisError(
                f"{run.path}: this run was decontaminated against {record['against']}, which cannot be loaded "
                f"now ({e}); new tasks could not be checked against it."
            ) from e

    def check(self, tasks: list[Task], verdicts: list[dict[str, Any]]) -> set[str]:
        """The ids of ``tasks`` that resemble the evaluation set; their verdicts become rejections."""
        from tau_env.synthesis.decontam import DETECTORS, decontaminate

        why: dict[str, list[dict[str, Any]]] = {}
        for one in self.passes:
            against = _evaluation_tasks(self.evaluation, one.get("task_ids"))
            report = decontaminate(
                tasks,
                against,
                domain=self.domain,
                against_domain=self.evaluation,
                detectors=one.get("detectors") or DETECTORS,
            )
            for r in report.removed:
                why.setdefault(r["id"], []).extend(r["reasons"])
        for v in verdicts:
            task_id = (v.get("task") or {}).get("id")
            if task_id in why:
                v["accepted"] = False
                v["problems"] = [
                    Problem(
                        "contamination", "plan", f"resembles {self.evaluation.name}'s tasks: {why[task_id]}"
                    ).to_dict()
                ]
        return set(why)


def _evaluation_tasks(evaluation: Any, task_ids: Sequence[str] | None) -> list[Task]:
    """``evaluation``'s tasks, or those of ``task_ids`` (each must be one of them)."""
    tasks = list(evaluation.tasks)
    if task_ids is None:
        return tasks
    by_id = {t.id: t for t in tasks}
    unknown = [i for i in task_ids if i not in by_id]
    if unknown:
        shown = ", ".join(map(repr, unknown[:5])) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise SynthesisError(
            f"decontaminate: {evaluation.name} has no task {shown}; its tasks are e.g. "
            f"{', '.join(list(by_id)[:5])} ({len(by_id)} in all)."
        )
    return [by_id[i] for i in dict.fromkeys(task_ids)]


def _reflect(
    run: Any, reflector: Any, version: Any, previous: dict | None, summary: dict, stats: dict, llm: Any
) -> None:
    """Judge the version this round used against the round before it, then propose the next one."""
    if previous is not None and version.parent is not None and previous.get("prompt_version") != version.number:
        decision = reflector.decide(version, before=previous, after=summary)
        run.record_stage(
            "reflection",
            {
                "round": summary["round"],
                "version": version.number,
                "changes": version.changes,
                "decision": decision,
                "yield_before": previous["yield"],
                "yield_after": summary["yield"],
            },
        )
    reflector.propose(stats, llm=llm, seed=summary["round"])


def _tasks(run: Any, name: str) -> list[Task]:
    return [Task.model_validate(d) for d in run.read(name)]


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOptionError(f"{name} must be a positive integer, got {value!r:.40}.")


# ---------------------------------------------------------------- composite tasks


def run_compose(run_dir: str | Path, *, n: int, seed: int = 0, llm: Any = None, review: bool = True) -> dict[str, Any]:
    """Join accepted singles into ``n`` verified, reviewed multi-request tasks in ``composite.jsonl``."""
    from tau_env.synthesis.compose import acompose

    _positive("n", n)
    run = _open(run_dir, None, None, None, None, True)  # ``seed`` is the composition's own, not the run's
    with run:
        domain = run.domain()
        eg, tg = _graphs(run, domain)
        stage = _Stage(run, domain, eg, tg, llm, review)
        singles = _tasks(run, "tasks.jsonl")
        if len(singles) < 2:
            raise SynthesisError(f"{run.path}: {len(singles)} accepted single-request tasks; compose needs at least 2.")
        kept = _tasks(run, "composite.jsonl")
        earlier = [r["seed"] for r in run.stages("compose") if r.get("accepted") and "seed" in r]
        if kept and earlier and earlier[-1] != seed:  # a top-up draws the joins of its own seed
            raise SynthesisError(
                f"{run.path}/composite.jsonl was composed with --seed {earlier[-1]}, not {seed}: pass its seed to add "
                "to it, or compose into another run folder."
            )
        # a join whose later requests add nothing (e.g. a refusal after the same identity check) would
        # repeat a single's chain: duplicates of singles count too
        seen = {chain_signature(t) for t in [*singles, *kept]}
        tried, rounds, problems = 0, 0, Counter()
        started = time.perf_counter()
        while len(kept) < n and rounds < 10:
            want = n - len(kept)
            made = asyncio.run(acompose(singles, tg, 2 * want + 5, seed=seed + rounds, llm=llm, domain=domain))
            rounds += 1
            if not made:
                break
            fresh = []
            with run.progress(f"compose {rounds}", len(made)) as bar:
                for task in made:
                    tried += 1
                    bar.update(1)
                    sig = chain_signature(task)
                    if sig in seen:
                        problems["duplicate"] += 1
                        continue
                    found = asyncio.run(stage.check(task, {}))
                    if found:
                        problems.update(p.check for p in found)
                        continue
                    seen.add(sig)
                    fresh.append(task)
                    if len(kept) + len(fresh) >= n:
                        break
            run.append("composite.jsonl", [t.model_dump(mode="json", exclude_defaults=True) for t in fresh])
            kept += fresh
        run.record_stage(
            "compose",
            {
                "seed": seed,
                "planned": tried,
                "accepted": len(kept),
                "problems": dict(problems),
                "seconds": round(time.perf_counter() - started, 2),
            },
        )
        if llm is not None:
            llm.save_usage(run)
        run.index()
        result = {
            "run": str(run.path),
            "composite tasks": len(kept),
            "tried": tried,
            "file": str(run.path / "composite.jsonl"),
        }
        if len(kept) < n:
            why = (
                "no two singles could be joined: joins need singles of one customer profile whose customer "
                "row is in their initial state, without conflicting writes"
                if not tried
                else "the joins tried were rejected (stages.jsonl's compose record says why)"
            )
            result["stopped"] = f"made {len(kept)} of {n} composite tasks: {why}"
        return result


# ---------------------------------------------------------------- datasets


def _loader(run: Any) -> dict[str, Any]:
    return dict(run.settings.get("loader") or {})


def run_sft(
    run_dir: str | Path,
    *,
    agent: Any,
    user: Any = None,
    trials: int = 1,
    tasks: str = "tasks.jsonl",
    workers: int = 32,
    quiet: bool = True,
) -> dict[str, Any]:
    """Teacher rollouts on the accepted singles; successful episodes without loops become ``sft/sft.jsonl``."""
    from tau_env.synthesis.datasets import build_sft

    run = _open(run_dir, None, None, None, None, True)
    with run:
        path = _nonempty(run, tasks)
        stats = asyncio.run(
            build_sft(
                path,
                run.settings["domain"],
                run.path / "sft",
                agent=agent,
                user=user,
                trials=trials,
                loader=_loader(run),
                concurrency=workers,
                progress=not quiet,
            )
        )
        run.record_stage("sft", stats)
        return {"run": str(run.path), **stats}


def run_rl(
    run_dir: str | Path,
    *,
    policy: Any,
    user: Any = None,
    rollouts: int = 8,
    band: Sequence[float] = (0.1, 0.9),
    tasks: str = "composite.jsonl",
    workers: int = 32,
    quiet: bool = True,
) -> dict[str, Any]:
    """``rollouts`` episodes of ``policy`` per composite task; those whose pass rate lies in ``band`` go to ``rl/``."""
    from tau_env.synthesis.datasets import build_rl

    lo, hi = band
    if not 0.0 <= lo < hi <= 1.0:
        raise InvalidOptionError(f"band must be two numbers 0 <= low < high <= 1, got {lo!r} {hi!r}.")
    run = _open(run_dir, None, None, None, None, True)
    with run:
        path = _nonempty(run, tasks)
        stats = asyncio.run(
            build_rl(
                path,
                run.settings["domain"],
                run.path / "rl",
                policy=policy,
                user=user,
                rollouts=rollouts,
                band=(lo, hi),
                loader=_loader(run),
                concurrency=workers,
                progress=not quiet,
            )
        )
        run.record_stage("rl", stats)
        return {"run": str(run.path), **stats}


def _nonempty(run: Any, name: str) -> Path:
    path = run.path / name
    if not path.is_file() or not path.stat().st_size:
        stage = "synth compose" if name == "composite.jsonl" else "synth tasks"
        raise SynthesisError(f"{path} holds no tasks yet; run `tau-env {stage}` first.")
    return path


# ---------------------------------------------------------------- decontamination and report


def run_decontaminate(
    run_dir: str | Path,
    *,
    against: str,
    data_dir: str | Path | None = None,
    embedder: Any = None,
    task_ids: Sequence[str] | None = None,
    detectors: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Remove the run's tasks that resemble ``against``'s (an env id) and say why, in ``decontamination.json``.

    The removed tasks move out of ``tasks.jsonl`` / ``composite.jsonl`` into ``contaminated.jsonl``.
    Once a run is decontaminated, ``run_tasks`` on it checks every new task against the same
    evaluation set before accepting it, so topping a run up to ``n`` again stays clean.

    Args:
        task_ids: Only these of ``against``'s tasks (e.g. a held-out split); default: all of them.
        detectors: The detectors of :func:`tau_env.synthesis.decontam.decontaminate` to run; default:
            all. ``("chain", "ids", "ngram", "embedding")`` removes copies of the evaluation tasks
            (their chains, customers and records, wording) but keeps other instances of the same
            procedures, which ``chain_abstract`` and ``state_change`` remove.
    """
    from tau_env.synthesis.decontam import DETECTORS, decontaminate

    from tau_env.registry import registry

    if task_ids is not None:
        if (
            isinstance(task_ids, str)
            or not isinstance(task_ids, Sequence)
            or not task_ids
            or not all(isinstance(i, str) and i for i in task_ids)
        ):
            raise InvalidOptionError(f"decontaminate: task_ids must be a non-empty list of task ids, not {task_ids!r}.")
        task_ids = list(dict.fromkeys(task_ids))
    if detectors is not None:
        if isinstance(detectors, str) or not isinstance(detectors, Sequence) or not detectors:
            raise InvalidOptionError(
                f"decontaminate: detectors must be a non-empty list of {list(DETECTORS)}, not {detectors!r}."
            )
        unknown = [d for d in detectors if d not in DETECTORS]
        if unknown:
            raise InvalidOptionError(f"decontaminate: unknown detectors {unknown}; choose from {list(DETECTORS)}.")
        detectors = list(dict.fromkeys(detectors))
        if set(detectors) == set(DETECTORS):
            detectors = None  # all of them, as by default
    run = _open(run_dir, None, None, None, None, True)
    with run:
        domain = run.domain()
        if data_dir is not None:
            kwargs = {"data_dir": str(data_dir)}
        elif against == run.settings.get("domain"):  # the run's own domain: its own data folder
            kwargs = dict(run.settings.get("loader") or {})
        else:
            kwargs = {}
        try:
            evaluation = registry.load_domain(against, **kwargs)
        except Error as e:
            raise SynthesisError(f"--against {against}: {e}") from e
        against_tasks = _evaluation_tasks(evaluation, task_ids)  # checked before anything moves
        removed_all: list[dict[str, Any]] = []
        checked = kept_n = 0
        by_detector: Counter = Counter()
        for name in ("tasks.jsonl", "composite.jsonl"):
            tasks = _tasks(run, name)
            if not tasks:
                continue
            report = decontaminate(
                tasks,
                against_tasks,
                domain=domain,
                against_domain=evaluation,
                embedder=embedder,
                detectors=detectors or DETECTORS,
            )
            gone = {r["id"] for r in report.removed}
            checked += len(tasks)
            kept_n += len(tasks) - len(gone)
            by_detector.update(report.by_detector)
            removed_all += [{**r, "file": name} for r in report.removed]
            if gone:
                run.append(
                    "contaminated.jsonl",
                    [t.model_dump(mode="json", exclude_defaults=True) for t in tasks if t.id in gone],
                )
                run.rewrite(name, [t.model_dump(mode="json", exclude_defaults=True) for t in tasks if t.id not in gone])
        derived = _drop_derived(run.path, {r["id"] for r in removed_all})
        this_pass = {"task_ids": task_ids, "detectors": detectors}
        passes = [this_pass]
        before = run.read_json("decontamination.json", {}) or {}
        if before.get("against") == against:  # a later pass adds to the earlier one's record
            removed_all = [*before.get("removed", []), *removed_all]
            by_detector.update(before.get("by_detector", {}))
            earlier = before.get("passes") or [{"task_ids": None, "detectors": None}]
            passes = [*earlier, *([this_pass] if this_pass not in earlier else [])]
        result = {
            "against": against,
            "data_dir": kwargs.get("data_dir"),
            "passes": passes,
            "checked": checked,
            "kept": kept_n,
            "removed": removed_all,
            "by_detector": dict(by_detector),
        }
        run.write_json("decontamination.json", result)
        run.record_stage(
            "decontaminate", {k: v for k, v in result.items() if k != "removed"} | {"removed": len(removed_all)}
        )
        run.index()
        return {
            "run": str(run.path),
            "checked": checked,
            "kept": kept_n,
            "removed": len(removed_all),
            **{f"by {k}": v for k, v in by_detector.items()},
            **{f"dropped from {k}": v for k, v in derived.items() if v},
        }


#: What later stages made from a run's tasks, and the key of the task each row comes from.
_DERIVED = (("sft/sft.jsonl", "task_id"), ("sft/kept.jsonl", "task_id"), ("rl/tasks.jsonl", "id"))


def _drop_derived(run_path: Path, gone: set[str]) -> dict[str, int]:
    """Remove the rows of removed tasks from the SFT examples and RL tasks already made from the run
    (a run decontaminated after ``synth sft`` or ``synth rl``): a contaminated task must not stay in
    the training data through them. Returns how many rows each file lost.
    """
    dropped: dict[str, int] = {}
    for name, key in _DERIVED:
        path = run_path / name
        if not gone or not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8").split("\n")
        keep = []
        for line in lines:
            try:
                row = json.loads(line) if line.strip() else None
            except ValueError:
                row = None
            if isinstance(row, dict) and row.get(key) in gone:
                continue
            keep.append(line)
        if len(keep) != len(lines):
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text("\n".join(keep), encoding="utf-8")
            os.replace(tmp, path)
            dropped[name] = len(lines) - len(keep)
    return dropped


def run_report(run_dir: str | Path) -> tuple[Path, Path]:
    """Write ``report.txt`` and ``report.html`` of the run."""
    from tau_env.synthesis.report import write_report
    from tau_env.synthesis.run import RunFolder

    path = Path(run_dir)
    if not (path / "run.json").is_file():
        raise SynthesisError(f"{path} is not a synthesis run folder (no run.json).")
    with RunFolder.open(path, lock=False) as run:  # a report may be written while a stage runs
        return write_report(run)
