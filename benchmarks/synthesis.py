"""The synthesis pipeline with the template backend (no model): verified tasks per second per stage,
and the pipeline's CPU time per task apart from model time.

Runs ``synth graphs``, ``synth tasks`` (``--n`` verified single-request tasks) and ``synth compose``
(``--composite`` multi-request tasks) on Harbor Bank in a temporary run folder, in one process
(``--workers 1``) unless told otherwise. With the template backend there is no model time: the
wall time is the pipeline's own work, and the CPU time per task per step (synthesize, verify,
review, regenerate) is read from the stage records (``time.process_time`` around each step).

    python benchmarks/synthesis.py [--n 1000] [--composite 300] [--workers 1]
    python benchmarks/synthesis.py --quick   # smoke run: 20 tasks, 5 composites

Prints a table, then, as the last line, one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import json_line, machine, print_table  # noqa: E402

STEPS = ("synthesize", "verify", "review", "regenerate")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="harbor-bank-v0")
    ap.add_argument("--n", type=int, default=1000, help="verified single-request tasks")
    ap.add_argument("--composite", type=int, default=300, help="composite tasks")
    ap.add_argument("--workers", type=int, default=1, help="verification processes")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20 tasks, 5 composites")
    args = ap.parse_args()
    n, composite = (20, 5) if args.quick else (args.n, args.composite)

    from tau_env.synthesis import pipeline
    from tau_env.synthesis.run import RunFolder

    rows, result = [], {"domain": args.domain, "n": n, "composite": composite, "workers": args.workers}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        t0, c0 = time.perf_counter(), time.process_time()
        pipeline.run_graphs(out, args.domain)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows.append(("graphs", "-", f"{wall:.2f} s", f"{cpu:.2f} s", "-"))
        result["graphs"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}

        t0, c0 = time.perf_counter(), time.process_time()
        pipeline.run_tasks(out, args.domain, n=n, batch=min(300, 2 * n), workers=args.workers)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        with RunFolder.open(out, lock=False) as run:
            rounds = run.stages("tasks")
        planned = sum(r["planned"] for r in rounds)
        per_step = {s: sum(r["cpu_seconds"].get(s, 0.0) for r in rounds) for s in STEPS}
        rows.append(("tasks", f"{n / wall:.1f} /s", f"{wall:.2f} s", f"{cpu:.2f} s", f"{1000 * cpu / n:.1f} ms"))
        for step in STEPS:
            rows.append((f"  {step}", "", "", f"{per_step[step]:.2f} s", f"{1000 * per_step[step] / n:.2f} ms"))
        result["tasks"] = {
            "verified_per_s": round(n / wall, 2),
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "cpu_ms_per_task": round(1000 * cpu / n, 3),
            "planned": planned,
            "yield": round(sum(r["accepted"] for r in rounds) / max(1, planned), 4),
            "cpu_ms_per_task_by_step": {s: round(1000 * v / n, 3) for s, v in per_step.items()},
        }

        if composite:
            t0, c0 = time.perf_counter(), time.process_time()
            made = pipeline.run_compose(out, n=composite)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            got = made.get("composite tasks", 0)
            rows.append(
                (
                    "compose",
                    f"{got / wall:.1f} /s",
                    f"{wall:.2f} s",
                    f"{cpu:.2f} s",
                    f"{1000 * cpu / max(1, got):.1f} ms",
                )
            )
            result["compose"] = {
                "composite": got,
                "verified_per_s": round(got / wall, 2),
                "wall_s": round(wall, 3),
                "cpu_ms_per_task": round(1000 * cpu / max(1, got), 3),
            }

    print_table(("stage", "verified tasks", "wall", "CPU", "CPU per task"), rows)
    print(json_line({**result, "quick": args.quick, "machine": machine()}))


if __name__ == "__main__":
    main()
