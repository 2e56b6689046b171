"""tau3-banking retrieval quality: recall of each task's required documents, and per-query latency.

For each of the 97 tasks, the query is the task's scenario text (``user_scenario.instructions`` of
its task file, whole) and the relevant set is its ``required_documents`` (1 to 30 documents,
about 10 on average). For each retriever we take its top 10 and compute, per task,
recall@k = |required in top k| / |required|, then average over the tasks (mean per-task recall,
every task weighing the same). ``ceiling`` is the best any ranking could do: mean of
min(k, |required|) / |required|. hit@10 is the share of tasks with at least one required
document in the top 10.

Retrievers:
- ``benchmark BM25``: the benchmark's own KB_search (``BenchmarkBM25``: content only,
  whitespace tokens), top 10;
- ``tau_env BM25``: ``KnowledgeBase.search_bm25`` (title + content, word tokens, stopwords
  removed, Lucene idf);
- ``MiniLM dense``: ``KnowledgeBase.search_dense`` with ``MiniLMEncoder`` (all-MiniLM-L6-v2,
  title + content, cosine); document embeddings are cached on disk (``$TAU_ENV_CACHE`` or
  ~/.cache/tau_env), so only the first run embeds the 698 documents (about a minute on 2 cores);
- ``hybrid (RRF)``: ``KnowledgeBase.search_hybrid`` (reciprocal-rank fusion of the two above,
  each to depth 50).

Latency: each query is run ``--repeats`` times after the index is built (and one warm-up query);
a query's latency is the median of its runs; the table gives the median and 95th percentile over
the 97 queries, in milliseconds, on this machine's CPU.

    python benchmarks/tau3_retrieval.py [--data-dir PATH] [--repeats 3] [--no-dense]
    python benchmarks/tau3_retrieval.py --quick   # smoke run: every retriever on 3 tasks (seconds)

Prints a table, then, as the last line, one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import TAU3_DATA, machine, percentile, print_table  # noqa: E402

from tau_env.domains.tau3_banking.data import load_documents  # noqa: E402
from tau_env.domains.tau3_banking.retrieval import BenchmarkBM25  # noqa: E402
from tau_env.error import DependencyNotInstalled  # noqa: E402
from tau_env.knowledge import KnowledgeBase  # noqa: E402

K = (5, 10)
#: ``--quick``: this many tasks, over their required documents plus this many others.
QUICK_TASKS, QUICK_EXTRA_DOCS = 3, 10


def load_tasks(root: Path) -> list[tuple[str, str, list[str]]]:
    """(task id, scenario text, required document ids) for every task file."""
    out = []
    for p in sorted((root / "tasks").glob("task_*.json")):
        raw = json.loads(p.read_text(encoding="utf-8"))
        instr = (raw.get("user_scenario") or {}).get("instructions") or ""
        if isinstance(instr, dict):  # tau2's structured form; the banking tasks use plain text
            instr = "\n\n".join(f"{k}: {v}" for k, v in instr.items() if v)
        out.append((str(raw["id"]), instr, list(raw.get("required_documents") or [])))
    return out


def evaluate(
    search: Callable[[str], Sequence[str]], tasks: Sequence[tuple[str, str, list[str]]], repeats: int
) -> dict[str, float]:
    """Mean per-task recall@5/@10, hit@10 and per-query latency (ms) of ``search`` (top-10 ids)."""
    search(tasks[0][1])  # warm-up
    recall = {k: [] for k in K}
    hits, lat = [], []
    for _tid, query, required in tasks:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            ranked = list(search(query))
            times.append((time.perf_counter_ns() - t0) / 1e6)
        lat.append(statistics.median(times))
        if not required:
            continue
        need = set(required)
        for k in K:
            recall[k].append(len(need & set(ranked[:k])) / len(need))
        hits.append(1.0 if need & set(ranked[:10]) else 0.0)
    lat.sort()
    return {
        **{f"recall@{k}": statistics.fmean(v) for k, v in recall.items()},
        "hit@10": statistics.fmean(hits),
        "latency_ms_median": percentile(lat, 0.5),
        "latency_ms_p95": percentile(lat, 0.95),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(TAU3_DATA.resolve()))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-dense", action="store_true", help="skip the MiniLM and hybrid rows")
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: a few tasks and documents, one repeat; figures meaningless"
    )
    args = ap.parse_args()
    root = Path(args.data_dir)
    if not (root / "documents").is_dir() or not (root / "tasks").is_dir():
        print(f"skipped: no tau3-banking data at {root}", file=sys.stderr)
        print(json.dumps({"skipped": f"no data at {root}"}))
        return 0

    docs = load_documents(root)  # the benchmark's load order (the folder's listing order)
    tasks = [t for t in load_tasks(root) if t[2]]
    if args.quick:  # every retriever on a corner of the data: their required documents and a few more
        args.repeats = 1
        tasks = tasks[:QUICK_TASKS]
        keep = {d for t in tasks for d in t[2]} | {d.id for d in docs[:QUICK_EXTRA_DOCS]}
        docs = [d for d in docs if d.id in keep]
    results: dict[str, dict[str, float]] = {}
    notes: list[str] = []

    t0 = time.perf_counter()
    bench = BenchmarkBM25(docs)
    build = time.perf_counter() - t0
    results["benchmark BM25 (content)"] = {
        **evaluate(lambda q: [d.id for d, _ in bench.search(q, 10)], tasks, args.repeats),
        "build_s": build,
    }

    kb = KnowledgeBase(docs)
    t0 = time.perf_counter()
    _ = kb.bm25
    build = time.perf_counter() - t0
    results["tau_env BM25 (title+content)"] = {
        **evaluate(lambda q: [h.doc_id for h in kb.search_bm25(q, 10)], tasks, args.repeats),
        "build_s": build,
    }

    if not args.no_dense:
        try:
            from tau_env.knowledge.embed import MiniLMEncoder

            enc = MiniLMEncoder()
        except DependencyNotInstalled as e:  # the embed extra is optional; any other failure is a bug
            notes.append(f"dense rows skipped: {e}")
            print(f"[skip] dense rows: {e}", file=sys.stderr)
        else:
            kb = KnowledgeBase(docs, embedder=enc)
            _ = kb.bm25
            t0 = time.perf_counter()
            kb.dense()  # embeds the documents, or reads them from the on-disk cache
            build = time.perf_counter() - t0
            results["MiniLM dense (title+content)"] = {
                **evaluate(lambda q: [h.doc_id for h in kb.search_dense(q, 10)], tasks, args.repeats),
                "build_s": build,
            }
            results["hybrid (RRF, depth 50)"] = {
                **evaluate(lambda q: [h.doc_id for h in kb.search_hybrid(q, 10)], tasks, args.repeats),
                "build_s": 0.0,
            }
            seq = getattr(getattr(enc, "_model", None), "max_seq_length", None)
            if seq:
                notes.append(
                    f"MiniLM reads at most {seq} word pieces of a query or document; scenario texts are "
                    "longer, so dense search sees their beginning only"
                )

    ceiling = {f"recall@{k}": statistics.fmean(min(k, len(req)) / len(req) for _, _, req in tasks) for k in K}
    rows = [
        (
            name,
            r["recall@5"],
            r["recall@10"],
            r["hit@10"],
            r["latency_ms_median"],
            r["latency_ms_p95"],
            r["build_s"],
        )
        for name, r in results.items()
    ]
    rows.append(("(ceiling: best possible ranking)", ceiling["recall@5"], ceiling["recall@10"], 1.0, "", "", ""))
    print(
        f"tau3-banking: recall of required documents, query = task scenario text; {len(tasks)} tasks, "
        f"{len(docs)} documents; mean per-task recall"
        + ("  [--quick: a smoke run, not measurements]" if args.quick else "")
    )
    print_table(["retriever", "recall@5", "recall@10", "hit@10", "ms median", "ms p95", "index build s"], rows)
    for n in notes:
        print(f"note: {n}")
    print(
        json.dumps(
            {
                "benchmark": "tau3_retrieval",
                "tasks": len(tasks),
                "documents": len(docs),
                "query": "user_scenario.instructions",
                "averaging": "mean per-task recall (macro)",
                "retrievers": {n: {k: round(v, 4) for k, v in r.items()} for n, r in results.items()},
                "ceiling": {k: round(v, 4) for k, v in ceiling.items()},
                "repeats": args.repeats,
                "quick": args.quick,
                "notes": notes,
                "machine": machine(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
