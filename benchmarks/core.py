"""Core latency and memory benchmarks of tau_env.

Run from the repository root::

    python benchmarks/core.py            # about 20 s on 2 cores
    python benchmarks/core.py --quick    # smoke run: every row, a few dozen calls each (seconds)

Measures, on ``tau_env.make("harbor-bank-v0")`` whatever its tasks and documents are:
reset, database tool calls (read and write; through ``env.call_tool``, the tool runtime alone,
and through ``env.step``), BM25 search over the ~700 tau3 banking documents (read from
../shared at run time; skipped if absent), grading (matching and non-matching states) and
memory per live episode (in a fresh subprocess). Prints a table, then, as its last line, one
JSON object with every figure.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import QUERIES, json_line, load_tau3_documents, machine, measure, print_table, stats  # noqa: E402

import tau_env  # noqa: E402
from tau_env.error import ResetNeeded  # noqa: E402
from tau_env.messages import call, say  # noqa: E402

ENV_ID = "harbor-bank-v0"

#: Aims per operation (key prefix -> (limit, unit)).
AIMS = {
    "reset": (300.0, "us"),
    "reset_first_call": (300.0, "us"),  # what a reset really costs: see "reset" in the README
    "tool_call_read": (50.0, "us"),
    "tool_call_write_transfer": (50.0, "us"),
    "tool_call_write_update": (50.0, "us"),
    "bm25_search": (1.0, "ms"),
    "grade_match": (500.0, "us"),
    "grade_mismatch_explain": (500.0, "us"),
    "grade_mismatch_noexplain": (500.0, "us"),
}
MEMORY_AIM_MB = 2.0
#: ``--quick`` (a smoke run of every row in seconds, figures meaningless): timed calls per row,
#: untimed warm-up calls at most, live envs for the memory rows.
QUICK_CALLS, QUICK_WARMUP, QUICK_MEMORY_ENVS = 25, 5, 10


# --- finding valid data in the domain (no hard-coded ids) --------------------------------------
@dataclass
class Customer:
    task_id: str
    customer_id: str
    date_of_birth: str
    phone_last4: str
    transfer_pair: tuple[str, str] | None  # two open, non-CD accounts; the first holds >= $1

    @property
    def verify_args(self) -> dict[str, str]:
        return {"customer_id": self.customer_id, "date_of_birth": self.date_of_birth, "phone_last4": self.phone_last4}


def _agent_has(env: tau_env.TauEnv, name: str) -> bool:
    """Whether the agent can call ``name`` now (at the start of an episode before any reset)."""
    try:
        return name in env.active_tools("agent")
    except ResetNeeded:
        return name in env.toolbox.initial_active()["agent"]


def find_customer(env: tau_env.TauEnv) -> Customer | None:
    """A customer of the seed data (read with SQL) whom ``verify_identity`` accepts, preferring one
    with two open non-CD accounts (for transfers). None if the domain no longer fits."""
    if not _agent_has(env, "verify_identity"):
        return None
    best: Customer | None = None
    for task in env.domain.tasks:
        env.reset(options={"task_id": task.id})
        try:
            people = env.db.conn.execute(
                "SELECT customer_id, date_of_birth, phone FROM customers ORDER BY customer_id"
            ).fetchall()
        except sqlite3.Error:
            return None
        for cid, dob, phone in people:
            digits = "".join(ch for ch in str(phone) if ch.isdigit())
            if len(digits) < 4:
                continue
            res = env.call_tool(
                "agent", "verify_identity", {"customer_id": cid, "date_of_birth": dob, "phone_last4": digits[-4:]}
            )
            if res.error:
                continue
            pair = None
            try:
                accts = env.db.conn.execute(
                    "SELECT account_id, balance_cents FROM accounts WHERE customer_id = ? AND status = 'open' "
                    "AND product != 'cd_12_month' ORDER BY balance_cents DESC, account_id",
                    (cid,),
                ).fetchall()
            except sqlite3.Error:
                accts = []
            if len(accts) >= 2 and accts[0][1] >= 100:
                pair = (accts[0][0], accts[1][0])
            c = Customer(task.id, cid, dob, digits[-4:], pair)
            if pair is not None:
                return c
            best = best or c
    return best


def changed_tables(domain: Any, task: Any, target_digests: dict[str, str]) -> set[str]:
    """The tables whose digest differs between the task's start state and its target.

    Computed here from public calls (the grader keeps no such set), so the benchmark does not
    depend on what a ``Target`` happens to store.
    """
    db = domain.start_db(task)
    try:
        start = db.table_digests()
    finally:
        db.close()
    return {name for name, digest in target_digests.items() if start.get(name) != digest}


def start_episode(env: tau_env.TauEnv, cust: Customer | None, task_id: str | None = None) -> None:
    """Reset to the customer's task (or ``task_id``) and verify the customer (untimed setup)."""
    env.reset(options={"task_id": task_id or (cust.task_id if cust else env.domain.tasks[0].id)})
    if cust is not None:
        res = env.call_tool("agent", "verify_identity", cust.verify_args)
        assert not res.error, res.content


# --- memory (runs in a fresh subprocess) ----------------------------------------------------
def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _sqlite_memory() -> Any:
    """``sqlite3_memory_used()`` of the libsqlite3 that Python uses, or None if not reachable."""
    for name in ("libsqlite3.so.0", "libsqlite3.so", "libsqlite3.dylib"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        return lib.sqlite3_memory_used
    return None


def memory_child(n: int, trace: bool) -> dict[str, Any]:
    """Open ``n`` live envs (each reset and with a few tool calls) and report the growth per env."""
    sqlite_used = _sqlite_memory()
    gc.collect()
    rss_import = _rss_bytes()
    first = tau_env.make(ENV_ID)
    domain = first.domain
    cust = find_customer(first)
    # Warm the shared caches (task images, toolbox, schemas) so only per-env growth is counted.
    for t in domain.tasks:
        first.reset(options={"task_id": t.id})
        first.observe("agent"), first.observe("user")
    task_ids = [cust.task_id] if cust else [t.id for t in domain.tasks]
    gc.collect()
    rss0 = _rss_bytes()
    sq0 = sqlite_used() if sqlite_used else 0
    if trace:
        import tracemalloc

        tracemalloc.start()
    envs = []
    for i in range(n):
        env = tau_env.make(ENV_ID)
        env.reset(options={"task_id": task_ids[i % len(task_ids)]})
        env.step(say("Hi, I need help with my accounts."))  # the user speaks; now the agent's turn
        if cust is not None:
            env.step(call("verify_identity", **cust.verify_args))
            env.step(call("list_accounts", customer_id=cust.customer_id))
        elif _agent_has(env, "get_current_time"):
            env.step(call("get_current_time"))
            env.step(call("get_current_time"))
        env.observe("agent")
        envs.append(env)
    gc.collect()
    out: dict[str, Any] = {
        "n": n,
        "rss_per_env_mb": (_rss_bytes() - rss0) / n / 1e6,
        "sqlite_per_env_mb": ((sqlite_used() - sq0) / n / 1e6) if sqlite_used else None,
        "domain_and_import_mb": (rss0 - rss_import) / 1e6,
        "process_rss_mb": _rss_bytes() / 1e6,
        "image_kb": len(domain.image(domain.task(task_ids[0]))) / 1e3,
        "shared_domain": all(e.domain is domain for e in envs),
        "shared_toolbox": all(e.toolbox is envs[0].toolbox for e in envs),
        "tool_calls_done": cust is not None or _agent_has(first, "get_current_time"),
    }
    if trace:
        import tracemalloc

        cur, _ = tracemalloc.get_traced_memory()
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        out["python_per_env_mb"] = cur / n / 1e6
        root = str(Path(tau_env.__file__).resolve().parent.parent)
        out["python_top_sites"] = [
            {
                "site": f"{s.traceback[0].filename.replace(root + '/', '')}:{s.traceback[0].lineno}",
                "kb_per_env": round(s.size / n / 1e3, 2),
            }
            for s in snap.statistics("lineno")[:6]
        ]
    for e in envs:
        e.close()
    return out


def run_memory(n: int) -> dict[str, Any]:
    """RSS pass and tracemalloc pass, each in a fresh interpreter so earlier benchmarks don't blur it."""
    res: dict[str, Any] = {}
    for trace in (False, True):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", str(n)]
        if trace:
            cmd.append("--trace")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"memory child failed:\n{p.stderr[-3000:]}")
        got = json.loads(p.stdout.strip().splitlines()[-1])
        if trace:
            res["python_per_env_mb"] = got["python_per_env_mb"]
            res["python_top_sites"] = got["python_top_sites"]
        else:
            res.update(got)
    return res


# --- the benchmarks -----------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: every row, tiny sizes, figures meaningless")
    ap.add_argument("--memory-envs", type=int, default=1000, help="live envs for the memory figure")
    ap.add_argument("--memory-child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.trace)))
        return

    t_start = time.perf_counter()

    def timed(fn: Any, n: int, *, warmup: int = 200, before: Any = None) -> list[int]:
        """``measure`` at this run's size: ``n`` timed calls, or a few dozen with ``--quick``."""
        if args.quick:
            n, warmup = QUICK_CALLS, min(warmup, QUICK_WARMUP)
        return measure(fn, n, warmup=warmup, before=before)

    rows: list[tuple[Any, ...]] = []
    fig: dict[str, Any] = {"quick": args.quick}
    notes: list[str] = []

    def record(key: str, label: str, ns: list[int], unit: str = "us", aim: str = "") -> None:
        med, p99 = stats(ns, unit)
        fig[f"{key}_{unit}_median"], fig[f"{key}_{unit}_p99"] = med, p99
        if key in AIMS:
            limit, aim_unit = AIMS[key]
            aim = f"< {limit:g} {aim_unit}" + ("" if med < limit else "  MISSED")
        rows.append((label, len(ns), med, p99, unit, aim))

    env = tau_env.make(ENV_ID)
    domain = env.domain
    tasks = list(domain.tasks)
    fig["n_tasks"] = len(tasks)
    for t in tasks:  # warm-up: every task image is built and cached on the Domain
        env.reset(options={"task_id": t.id})
        env.observe("agent"), env.observe("user")

    # reset ----------------------------------------------------------------------------------
    cycle = [t.id for t in tasks]
    opts = [{"task_id": tid} for tid in cycle]
    k = [0]

    def do_reset() -> None:
        k[0] += 1
        env.reset(options=opts[k[0] % len(opts)])

    record("reset", "reset(options={'task_id'})", timed(do_reset, 20000, warmup=500))

    cust = find_customer(env)
    if cust is None:
        notes.append(
            "no verifiable customer found in the seed data (schema or tools changed): "
            "tool-call and grading-with-writes rows are skipped"
        )
        print("[skip] no verifiable customer in harbor-bank-v0's seed data; tool-call rows skipped.", file=sys.stderr)
    else:
        fig["customer"] = cust.customer_id

    def reset_first_call() -> None:
        env.reset(options={"task_id": cust.task_id})
        env.call_tool("agent", "list_accounts", {"customer_id": cust.customer_id})

    if cust is not None and _agent_has(env, "list_accounts"):
        record("reset_first_call", "reset + first list_accounts call", timed(reset_first_call, 10000))

    # new env: a fresh SQLite connection, then the first database call of its first episode
    first_call = (
        ("list_accounts", {"customer_id": cust.customer_id})
        if cust is not None and _agent_has(env, "list_accounts")
        else ("get_current_time", {})
    )

    def new_env() -> None:
        e = tau_env.make(ENV_ID)
        e.reset(options={"task_id": cust.task_id if cust else tasks[0].id})
        e.call_tool("agent", *first_call)
        e.close()

    record("new_env", f"make + reset + first {first_call[0]} (new env)", timed(new_env, 1500, warmup=50))

    # tool calls -----------------------------------------------------------------------------
    if cust is not None:
        start_episode(env, cust)
        cid = cust.customer_id
        if _agent_has(env, "list_accounts"):
            read_args = {"customer_id": cid}
            res = env.call_tool("agent", "list_accounts", read_args)
            assert not res.error, res.content
            record(
                "tool_call_read",
                "tool call, read (list_accounts)",
                timed(lambda: env.call_tool("agent", "list_accounts", read_args), 20000, warmup=1000),
            )
            fig["tool_call_us_median"] = fig["tool_call_read_us_median"]
            fig["tool_call_us_p99"] = fig["tool_call_read_us_p99"]

        if _agent_has(env, "update_contact_info"):
            emails = [{"customer_id": cid, "email": f"bench{i}@example.com"} for i in range(2)]
            j = [0]

            def update() -> None:
                j[0] ^= 1
                r = env.call_tool("agent", "update_contact_info", emails[j[0]])
                if r.error:
                    raise RuntimeError(r.content)

            record(
                "tool_call_write_update",
                "tool call, write (update_contact_info)",
                timed(update, 20000, warmup=1000),
            )

        if cust.transfer_pair is not None and _agent_has(env, "transfer_funds"):
            a, b = cust.transfer_pair
            # A -> B then B -> A of the same amount, so balances never drift. Transaction ids derive
            # from their content and a repeat probes -2, -3, ...: the amount changes with every pair
            # (1..97 cents) and the episode restarts every 20 calls (untimed), so each call is a
            # plain transfer, not the n-th repeat of an identical one.
            legs = [
                (
                    {"from_account_id": a, "to_account_id": b, "amount_cents": c},
                    {"from_account_id": b, "to_account_id": a, "amount_cents": c},
                )
                for c in range(1, 98)
            ]

            def before(i: int) -> None:
                if i % 20 == 0:
                    start_episode(env, cust)

            def transfer_call(i: list[int] = [0]) -> None:  # noqa: B006
                i[0] += 1
                r = env.call_tool("agent", "transfer_funds", legs[(i[0] // 2) % len(legs)][i[0] % 2])
                if r.error:
                    raise RuntimeError(r.content)

            record(
                "tool_call_write_transfer",
                "tool call, write (transfer_funds A->B, B->A)",
                timed(transfer_call, 10000, warmup=500, before=before),
            )
            fig["tool_call_write_us_median"] = fig["tool_call_write_transfer_us_median"]
            fig["tool_call_write_us_p99"] = fig["tool_call_write_transfer_us_p99"]

        # the full env.step path for one tool-call action (agent's turn) -------------------
        if _agent_has(env, "list_accounts"):
            action = call("list_accounts", customer_id=cid)
            per_episode = max(1, min(40, env.max_steps - 3))

            def before_step(i: int) -> None:
                if i % per_episode == 0:
                    start_episode(env, cust)
                    env.step(say("Hi, I'd like to check my accounts."))  # the user speaks first

            def step() -> None:
                env.step(action)

            record("step_tool_call", "env.step(tool-call action)", timed(step, 10000, before=before_step))
            start_episode(env, cust)
            env.step(say("Hi"))
            env.step(action)
            record("observe", "env.observe('agent')", timed(lambda: env.observe("agent"), 10000))

    # BM25 over the tau3 documents ----------------------------------------------------------------
    docs = load_tau3_documents()
    if docs is None:
        notes.append("tau3 documents absent: BM25 rows skipped")
    else:
        from tau_env.knowledge import KnowledgeBase

        fig["bm25_docs"] = len(docs)
        builds = []
        for _ in range(3 if not args.quick else 1):
            kb = KnowledgeBase(docs)
            t0 = time.perf_counter_ns()
            kb.bm25  # noqa: B018  (builds the index: tokenize + bm25s.index)
            builds.append(time.perf_counter_ns() - t0)
        fig["bm25_build_ms"] = sorted(builds)[len(builds) // 2] / 1e6
        rows.append(("BM25 index build (tokenize + index)", len(builds), fig["bm25_build_ms"], float("nan"), "ms", ""))
        q = [0]

        def search() -> None:
            q[0] += 1
            kb.search_bm25(QUERIES[q[0] % len(QUERIES)], 5)

        assert all(kb.search_bm25(x, 5) for x in QUERIES[:5]), "BM25 found nothing for banking queries"
        record(
            "bm25_search",
            f"BM25 search top-5 ({len(docs)} docs, {len(QUERIES)} queries)",
            timed(search, 5000, warmup=len(QUERIES)),
            unit="ms",
        )

    # grading ------------------------------------------------------------------------------------
    grader = domain.grader
    targets = {t.id: grader.target(t) for t in tasks}  # cached first, as in a training run
    changed = {t.id: changed_tables(domain, t, targets[t.id].digests) for t in tasks}
    task = max(tasks, key=lambda t: (len(changed[t.id]), len(t.actions)))
    fig["grade_task_changed_tables"] = len(changed[task.id])
    fig["grade_task"] = task.id
    replayed, _ = domain.replay(task)
    g = grader.grade(replayed, task)
    if not g.db_match:
        notes.append(f"replaying {task.id!r} does not reach its own target ({g.differing_tables})")
    record("grade_match", "grade, matching state (replayed task)", timed(lambda: grader.grade(replayed, task), 10000))
    replayed.close()

    # A non-matching state: a fresh env of that task after a few unrelated writes (a fresh env, so
    # this state does not depend on what the sections above left behind).
    env.close()
    env = tau_env.make(ENV_ID)
    env.reset(options={"task_id": task.id})
    writes = 0
    if cust is not None:
        for name, a in (
            ("verify_identity", cust.verify_args),
            ("update_contact_info", {"customer_id": cust.customer_id, "email": "someone@example.com"}),
            (
                "transfer_funds",
                {"from_account_id": cust.transfer_pair[0], "to_account_id": cust.transfer_pair[1], "amount_cents": 1}
                if cust.transfer_pair
                else None,
            ),
        ):
            if a is not None and _agent_has(env, name):
                writes += not env.call_tool("agent", name, a).error
    fig["grade_mismatch_writes"] = writes
    g = grader.grade(env.db, task)
    if g.db_match:
        notes.append("the 'non-matching' state happens to match its target; grade_mismatch rows measure a match")
    fig["grade_mismatch_tables"] = len(g.differing_tables)
    record(
        "grade_mismatch_explain",
        "grade, non-matching, explain=True",
        timed(lambda: grader.grade(env.db, task, explain=True), 5000),
    )
    record(
        "grade_mismatch_noexplain",
        "grade, non-matching, explain=False",
        timed(lambda: grader.grade(env.db, task, explain=False), 10000),
    )
    env.reset(options={"task_id": task.id})
    record("grade_untouched", "grade, untouched episode (no writes)", timed(lambda: grader.grade(env.db, task), 10000))
    # env._finish grades with explain=True: the figure a failed episode pays.
    fig["grade_us_median"] = fig["grade_mismatch_explain_us_median"]
    fig["grade_us_p99"] = fig["grade_mismatch_explain_us_p99"]
    env.close()

    # memory -----------------------------------------------------------------------------------
    n_mem = args.memory_envs if not args.quick else min(args.memory_envs, QUICK_MEMORY_ENVS)
    mem = run_memory(n_mem)
    fig["memory_per_episode_mb"] = mem["rss_per_env_mb"]
    fig["memory_sqlite_per_episode_mb"] = mem["sqlite_per_env_mb"]
    fig["memory_python_per_episode_mb"] = mem["python_per_env_mb"]
    fig["memory_shared_domain_mb"] = mem["domain_and_import_mb"]
    fig["memory_envs"] = mem["n"]
    fig["image_kb"] = mem["image_kb"]
    fig["memory_shared"] = {"domain": mem["shared_domain"], "toolbox": mem["shared_toolbox"]}
    fig["memory_python_top_sites"] = mem["python_top_sites"]
    mem_aim = f"< {MEMORY_AIM_MB:g} MB" + ("" if mem["rss_per_env_mb"] < MEMORY_AIM_MB else "  MISSED")
    rows.append(
        (
            f"memory per live episode (RSS / {mem['n']} envs)",
            mem["n"],
            mem["rss_per_env_mb"],
            float("nan"),
            "MB",
            mem_aim,
        )
    )
    rows.append(
        (
            "  of which SQLite (sqlite3_memory_used)",
            mem["n"],
            mem["sqlite_per_env_mb"] if mem["sqlite_per_env_mb"] is not None else float("nan"),
            float("nan"),
            "MB",
            "",
        )
    )
    rows.append(("  of which Python objects (tracemalloc)", mem["n"], mem["python_per_env_mb"], float("nan"), "MB", ""))
    rows.append(
        ("shared: import + Domain + caches (RSS, once)", 1, mem["domain_and_import_mb"], float("nan"), "MB", "")
    )

    # report -----------------------------------------------------------------------------------
    missed = [label for (label, *_rest, aim) in rows if "MISSED" in str(aim)]
    fig["aims_missed"] = missed
    fig["notes"] = notes
    fig["machine"] = machine()
    fig["seconds"] = time.perf_counter() - t_start
    print(
        f"tau_env benchmarks on {ENV_ID}: {len(tasks)} tasks; {fig['machine']['cpus']} CPUs, "
        f"Python {fig['machine']['python']}" + ("  [--quick: a smoke run, not measurements]" if args.quick else "")
    )
    print_table(("operation", "n", "median", "p99", "unit", "aim"), rows)
    for n in notes:
        print(f"note: {n}")
    print(
        f"shared by every env: the Domain (task images, grading targets, knowledge base, toolbox); "
        f"per env: one SQLite connection holding a copy of the {mem['image_kb']:.0f} kB image, "
        f"the two chat views, the tool context, spaces."
    )
    print(f"aims missed: {', '.join(missed) if missed else 'none'}   ({fig['seconds']:.0f} s)")
    print(json_line(fig))


if __name__ == "__main__":
    main()
