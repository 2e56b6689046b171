"""Helpers shared by the benchmark scripts: timing, statistics, tables, the tau3 documents and queries.

Not a benchmark itself (the ``_`` keeps it out of the benchmark smoke test); the scripts import it
(they put this folder on ``sys.path`` when run as ``python benchmarks/<script>.py``).
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The public tau3-banking data (tasks, documents, db.json), read at run time only, never copied.
TAU3_DATA = REPO / ".." / "shared" / "data" / "tau3_banking"
#: Its knowledge base (698 JSON documents).
TAU3_DOCS = TAU3_DATA / "documents"

#: Fifty realistic banking questions (what an agent would type into search_documents).
QUERIES: tuple[str, ...] = (
    "how do I report a lost debit card",
    "stolen card replacement fee and shipping",
    "order a new debit card for a bank account",
    "reset or change debit card PIN",
    "dispute an unauthorized debit card transaction",
    "provisional credit for a debit card dispute",
    "overdraft protection transfer fee",
    "international wire transfer SWIFT SEPA fees",
    "open a personal checking account eligibility requirements",
    "close a savings account with remaining balance",
    "interest rate on high yield savings account",
    "how is interest calculated and when is it paid",
    "monthly maintenance fee waiver minimum balance",
    "refund an overdraft fee as a courtesy",
    "request a statement credit or fee adjustment",
    "credit limit increase request",
    "downgrade credit card to a no annual fee card",
    "cash back rewards redemption",
    "travel insurance coverage on rewards card",
    "foreign transaction fees when travelling abroad",
    "ATM fee rebates for out of network ATMs",
    "mobile check deposit limits",
    "payment didn't go through troubleshooting",
    "why can't I cancel my payment",
    "block a contact in peer to peer payments",
    "send money to a friend daily limit",
    "business checking account opening requirements",
    "buy now pay later early payoff penalty",
    "BNPL eligibility for a business",
    "crypto cash back rewards FAQ",
    "teen account spending limits for minors",
    "add an authorized user to an account",
    "FDIC insurance coverage for high balance accounts",
    "estate planning partner services",
    "dedicated support for senior customers",
    "change mailing address on file",
    "update phone number and email address",
    "verify customer identity before account changes",
    "transfer funds between my own accounts",
    "freeze account after suspected fraud",
    "annual fee for premium business credit card",
    "0% APR promotional period for new customers",
    "referral program bonus for referring friends",
    "minimum opening deposit for a saver account",
    "early withdrawal penalty on a certificate of deposit",
    "set up direct deposit of payroll",
    "track virtual card transactions and spending",
    "24/7 concierge service for diamond elite members",
    "late payment fee on a credit card",
    "transfer money to an external bank account",
)


def git_revision() -> str | None:
    """The repository's commit, with ``+dirty`` when tracked files differ from it (None outside git)."""
    import subprocess

    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (rev + ("+dirty" if dirty else "")) or None


def machine() -> dict[str, Any]:
    """Where (and on which revision) the figures were measured."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "revision": git_revision(),
    }


def load_tau3_documents() -> list[Any] | None:
    """The tau3 documents as ``tau_env.knowledge.Document``s (file-name order), or None if absent."""
    from tau_env.knowledge import load_documents

    folder = TAU3_DOCS.resolve()
    if not folder.is_dir() or not any(folder.glob("*.json")):
        print(
            f"[skip] tau3 banking documents not found at {folder}; the BM25 part is skipped. "
            "Put the shared data next to the repository (../shared/data/tau3_banking/documents/*.json).",
            file=sys.stderr,
        )
        return None
    return load_documents(folder)


def measure(
    fn: Callable[[], Any], n: int, *, warmup: int = 200, before: Callable[[int], Any] | None = None
) -> list[int]:
    """Time ``fn()`` ``n`` times (after ``warmup`` untimed calls); returns nanoseconds per call.

    ``before(i)``, if given, runs untimed before the i-th timed call (e.g. to reset a state that
    would otherwise drift). The garbage collector stays on (it is part of real costs), but a full
    collection runs first so a previous benchmark's garbage is not billed to this one.
    """
    for i in range(warmup):
        if before is not None:
            before(i)
        fn()
    gc.collect()
    out = [0] * n
    clock = time.perf_counter_ns
    for i in range(n):
        if before is not None:
            before(i)
        t0 = clock()
        fn()
        out[i] = clock() - t0
    return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation of sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stats(ns: Sequence[int], unit: str = "us") -> tuple[float, float]:
    """(median, p99) of nanosecond samples in ``unit`` (ns, us or ms)."""
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6}[unit]
    s = sorted(ns)
    return percentile(s, 0.5) / scale, percentile(s, 0.99) / scale


def fmt(x: Any) -> str:
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"
    return str(x)


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in cells:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def rounded(d: dict[str, Any], digits: int = 4) -> dict[str, Any]:
    """Floats rounded to ``digits`` significant digits, for a readable JSON line."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, float) and math.isfinite(v) and v != 0:
            out[k] = float(f"{v:.{digits}g}")
        elif isinstance(v, float) and not math.isfinite(v):
            out[k] = None
        elif isinstance(v, dict):
            out[k] = rounded(v, digits)
        else:
            out[k] = v
    return out


def json_line(d: dict[str, Any]) -> str:
    return json.dumps(rounded(d), sort_keys=False)
