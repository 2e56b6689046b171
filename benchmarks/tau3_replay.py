"""tau3-banking: the 97-task gold replay with grading, and the benchmark's BM25 search.

For each task: start an episode (the seed image plus the task's initial state), replay its
reference actions through the pack's tools, and grade (compare the state's digests with the
task's cached target). This is the public implementation's "gold replay" (fresh environment,
initial state, reference actions, hash), whose own figures on a 2-core machine are 3.3 s for the
97 tasks (a median of 30 ms per task) and about 0.7 ms per BM25 search.

    python benchmarks/tau3_replay.py [--data-dir PATH] [--runs 7]
    python benchmarks/tau3_replay.py --quick    # smoke run: one replay pass, one round of searches

Prints a table, then one JSON line with ``tau3_replay_97_s`` (best of the runs) and
``bm25_search_ms`` (median).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import TAU3_DATA  # noqa: E402

import tau_env  # noqa: E402
from tau_env.db import EpisodeDB  # noqa: E402

PUBLIC = {"replay_97_s": 3.3, "per_task_ms": 30.0, "bm25_search_ms": 0.7}
QUERIES = [
    "debit card dispute",
    "credit limit increase",
    "open savings account eligibility",
    "cash back dispute",
    "replacement credit card lost stolen",
    "close checking account early closure fee",
    "wire transfer fee",
    "Regulation E provisional credit",
    "reset debit card PIN",
    "ATM fee rebate",
    "overdraft protection",
    "transfer to human agent reason",
    "What's the APY for the Gold Account?",
    "referral bonus platinum card",
]


def replay_all(domain, tasks, box, grade: bool = True) -> list[float]:
    """One pass over every task; returns per-task seconds."""
    db = EpisodeDB(domain.schema)
    times = []
    for task in tasks:
        t0 = time.perf_counter()
        db.start(domain.seed_image, domain.initializer(task))
        ctx = domain.context(db, task, box)
        for a in task.actions:
            box.call(ctx, a.requestor, a.name, dict(a.arguments))
        if grade:
            domain.grader.differing_tables(db, task)
        times.append(time.perf_counter() - t0)
    db.close()
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(TAU3_DATA.resolve()))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: one pass, one round of searches; figures meaningless"
    )
    args = ap.parse_args()
    if args.quick:
        args.runs = 1
    search_rounds = 1 if args.quick else 50
    if not Path(args.data_dir).is_dir():
        print(f"skipped: no tau3-banking data at {args.data_dir}", file=sys.stderr)
        print(json.dumps({"skipped": f"no data at {args.data_dir}"}))
        return 0
    t0 = time.perf_counter()
    domain = tau_env.registry.load_domain("tau3-banking", data_dir=args.data_dir)
    load_s = time.perf_counter() - t0
    tasks = list(domain.tasks)
    box = domain.toolbox("all")
    t0 = time.perf_counter()
    for task in tasks:  # targets: each task's reference replay, computed once and cached
        domain.grader.target(task)
    targets_s = time.perf_counter() - t0
    runs = [replay_all(domain, tasks, box) for _ in range(args.runs)]
    totals = [sum(r) for r in runs]
    best = min(totals)
    per_task = sorted(x for r in runs for x in r)
    from tau_env.domains.tau3_banking.prompts import _index

    index = _index(domain)
    lat = []
    for _ in range(search_rounds):
        for q in QUERIES:
            t = time.perf_counter_ns()
            index.search(q)
            lat.append((time.perf_counter_ns() - t) / 1e6)
    bm25_ms = statistics.median(lat)
    p99 = per_task[int(0.99 * (len(per_task) - 1))]
    rows = [
        ("load domain (97 tasks, 698 docs)", f"{load_s * 1000:.0f} ms", ""),
        ("first target computation, 97 tasks", f"{targets_s * 1000:.0f} ms", ""),
        (
            f"97-task replay + grading (best of {args.runs})",
            f"{best * 1000:.1f} ms",
            f"{PUBLIC['replay_97_s'] * 1000:.0f} ms public -> {PUBLIC['replay_97_s'] / best:.0f}x",
        ),
        (
            "per task, median / p99",
            f"{statistics.median(per_task) * 1000:.2f} / {p99 * 1000:.2f} ms",
            f"{PUBLIC['per_task_ms']:.0f} ms public",
        ),
        ("BM25 search, median (698 docs)", f"{bm25_ms:.3f} ms", f"{PUBLIC['bm25_search_ms']} ms public"),
    ]
    width = max(len(r[0]) for r in rows)
    quick = "  [--quick: a smoke run, not measurements]" if args.quick else ""
    print(f"tau3-banking gold replay on {len(tasks)} tasks; 2-core machine, noisy{quick}")
    print(f"{'measure':<{width}}  {'tau_env':>18}  public implementation")
    for name, ours, theirs in rows:
        print(f"{name:<{width}}  {ours:>18}  {theirs}")
    print(
        json.dumps(
            {
                "tau3_replay_97_s": round(best, 5),
                "tau3_replay_97_s_median": round(statistics.median(totals), 5),
                "per_task_ms_median": round(statistics.median(per_task) * 1000, 4),
                "per_task_ms_p99": round(p99 * 1000, 4),
                "targets_first_s": round(targets_s, 4),
                "load_s": round(load_s, 4),
                "bm25_search_ms": round(bm25_ms, 5),
                "speedup_vs_public": round(PUBLIC["replay_97_s"] / best, 1),
                "tasks": len(tasks),
                "runs": args.runs,
                "quick": args.quick,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
