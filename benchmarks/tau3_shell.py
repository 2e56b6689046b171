"""tau3-banking ``shell`` tool: calls per second under our bubblewrap sandbox vs the benchmark's srt.

Runs the benchmark's three latency commands (``true``, ``ls | wc -l``, ``grep -ril "referral" . |
wc -l``) and a filter-blocked one through the tool (the text the agent gets, sandbox start-up
included), ``--repeats`` times each after a warm-up call, and compares the medians with the
benchmark's recorded ones (``../shared/data/tau3_banking_golden/shell/latency.json``: about 0.8 s
a call on 2 vCPUs, almost all of it srt's start-up). Also times building the knowledge-base
folder (the cache's first build) and a write-mode episode's scratch copy.

    python benchmarks/tau3_shell.py [--repeats 20]
    python benchmarks/tau3_shell.py --quick   # smoke run: 2 repeats

Prints a table, then, as the last line, one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, TAU3_DATA, json_line, machine, print_table  # noqa: E402

from tau_env.tools import ToolContext  # noqa: E402

LATENCY = REPO / ".." / "shared" / "data" / "tau3_banking_golden" / "shell" / "latency.json"
COMMANDS = ("true", "ls | wc -l", 'grep -ril "referral" . | wc -l')
BLOCKED = "cat /etc/passwd"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 repeats")
    args = ap.parse_args()
    repeats = 2 if args.quick else args.repeats
    if not (TAU3_DATA / "documents").is_dir():
        print(json.dumps({"skipped": f"no tau3 data at {TAU3_DATA.resolve()}"}))
        return
    if shutil.which("bwrap") is None:
        print(json.dumps({"skipped": "bubblewrap is not installed (apt-get install bubblewrap)"}))
        return
    from tau_env.domains.tau3_banking import shell as sh
    from tau_env.domains.tau3_banking.data import load

    domain = SimpleNamespace(documents=load(TAU3_DATA.resolve()).documents)
    theirs = json.loads(LATENCY.read_text()) if LATENCY.exists() else {}
    results: dict = {"machine": machine(), "repeats": repeats, "commands": {}}

    with tempfile.TemporaryDirectory() as cache:  # a cold cache: time the first build
        import os

        os.environ["TAU_ENV_CACHE"] = cache
        t = time.perf_counter()
        sh.kb_cache(domain.documents)
        results["kb_build_s"] = time.perf_counter() - t
        tool = sh.shell_tools(domain, write=False)[0]
        ctx = ToolContext(conn=sqlite3.connect(":memory:"), now=datetime(2025, 11, 14))
        rows = []
        for cmd in (*COMMANDS, BLOCKED):
            tool.fn(ctx, command=cmd)  # warm-up
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                tool.fn(ctx, command=cmd)
                times.append(time.perf_counter() - t)
            ours = statistics.median(times)
            key = cmd if cmd != BLOCKED else f"{BLOCKED} (blocked by filter)"
            bench = theirs.get(key, {}).get("median_s")
            results["commands"][cmd] = {
                "ours_s": ours,
                "benchmark_s": bench,
                "speedup": bench / ours if bench else None,
            }
            rows.append(
                [
                    cmd,
                    f"{ours * 1000:.2f} ms",
                    f"{bench * 1000:.2f} ms" if bench else "-",
                    f"{bench / ours:.0f}x" if bench else "-",
                    f"{1 / ours:.0f}",
                ]
            )
        wtool = sh.shell_tools(domain, write=True)[0]
        t = time.perf_counter()
        wtool.fn(ToolContext(conn=sqlite3.connect(":memory:"), now=datetime(2025, 11, 14)), command="true")
        results["write_first_call_s"] = time.perf_counter() - t
    print_table(["command", "ours (median)", "benchmark (median)", "speed-up", "calls/s"], rows)
    print(
        f"knowledge-base folder (first use: built, or found in the cache): {results['kb_build_s'] * 1000:.0f} ms; "
        f"first write-mode call (scratch copy + call): {results['write_first_call_s'] * 1000:.0f} ms"
    )
    print(json_line(results))


if __name__ == "__main__":
    main()
