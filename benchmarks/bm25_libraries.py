"""rank-bm25 vs bm25s on the 698 tau3 banking documents: speed and agreement.

Run from the repository root::

    python benchmarks/bm25_libraries.py           # a few seconds on 2 cores
    python benchmarks/bm25_libraries.py --quick   # smoke run: one build and one round per library

Every library gets the same tokens (``tau_env.knowledge.tokenize`` of title + content, the
tokens ``KnowledgeBase`` indexes) and the same k1=1.5, b=0.75. Per-query latency is one query
at a time, scoring plus a top-10 with ties broken by document order (the same selection code
for all), tokenization excluded. Agreement is against rank-bm25's ``BM25Okapi`` (the usual
reference): top-10 overlap, identical top-10 lists, Pearson of the full score vectors, Spearman
over the documents either side scores above zero, and the largest score difference.

Prints a table, then, as its last line, one JSON object with every figure. The tau3 documents
are read at run time from ../shared/data/tau3_banking/documents; without them the script says
so and prints ``{"skipped": ...}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import QUERIES, json_line, load_tau3_documents, machine, print_table, stats  # noqa: E402

K1, B, TOP = 1.5, 0.75, 10


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the k best positive scores, ties broken by document order (as tau_env does)."""
    n = len(scores)
    k = max(0, min(k, n))
    if k == 0:
        return []
    if k < n:
        cand = np.argpartition(-scores, k - 1)[:k]
        cand = np.flatnonzero(scores >= scores[cand].min())
    else:
        cand = np.arange(n)
    order = cand[np.lexsort((cand, -scores[cand]))][:k]
    return [int(i) for i in order if scores[i] > 0]


def rankdata(a: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank), as scipy.stats.rankdata(method='average')."""
    sorter = np.argsort(a, kind="mergesort")
    inv = np.empty(len(a), dtype=np.intp)
    inv[sorter] = np.arange(len(a))
    s = a[sorter]
    obs = np.r_[True, s[1:] != s[:-1]]
    dense = obs.cumsum()[inv]
    count = np.r_[np.nonzero(obs)[0], len(obs)]
    return 0.5 * (count[dense] + count[dense - 1] + 1)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


# --- the contenders ------------------------------------------------------------------------------
class Contender:
    def __init__(
        self,
        name: str,
        build: Callable[[list[list[str]]], Any],
        scores: Callable[[Any, list[str]], np.ndarray],
        rank: Callable[[Any, list[str]], list[int]] | None = None,
    ):
        self.name, self._build, self._scores, self._rank = name, build, scores, rank
        self.model: Any = None

    def build(self, corpus: list[list[str]]) -> None:
        self.model = self._build(corpus)

    def scores(self, q: list[str]) -> np.ndarray:
        return np.asarray(self._scores(self.model, q), dtype=np.float64)

    def search(self, q: list[str]) -> list[int]:
        """What a query costs: scores, then the deterministic top-10."""
        if self._rank is not None:
            return self._rank(self.model, q)
        return top_k(self._scores(self.model, q), TOP)


def contenders() -> list[Contender]:
    import inspect

    import bm25s
    from rank_bm25 import BM25Okapi

    from tau_env.knowledge import BM25Index

    tau_method = inspect.signature(BM25Index).parameters["method"].default

    def bm25s_build(method: str) -> Callable[[list[list[str]]], Any]:
        def build(corpus: list[list[str]]) -> Any:
            m = bm25s.BM25(k1=K1, b=B, method=method)
            m.index([t or ["\x00"] for t in corpus], show_progress=False)
            return m

        return build

    def bm25s_scores(m: Any, q: list[str]) -> np.ndarray:
        known = [t for t in q if t in m.vocab_dict]  # bm25s rejects an empty or unknown-only query
        return m.get_scores(known) if known else np.zeros(m.scores["num_docs"], dtype=np.float32)

    return [
        Contender("rank-bm25 BM25Okapi (reference)", lambda c: BM25Okapi(c, k1=K1, b=B), lambda m, q: m.get_scores(q)),
        Contender(
            "rank-bm25 BM25Okapi epsilon=0",
            lambda c: BM25Okapi(c, k1=K1, b=B, epsilon=0.0),
            lambda m, q: m.get_scores(q),
        ),
        Contender("bm25s robertson", bm25s_build("robertson"), bm25s_scores),
        Contender("bm25s lucene", bm25s_build("lucene"), bm25s_scores),
        Contender(
            f"tau_env BM25Index (bm25s {tau_method})",
            lambda c: BM25Index(c, k1=K1, b=B),
            lambda m, q: m.scores(q),
            lambda m, q: [i for i, _ in m.top_k(q, TOP)],
        ),
    ]


def agreement(ref: Contender, other: Contender, queries: Sequence[list[str]]) -> dict[str, float]:
    overlap, identical, pear, spear, maxdiff, scales = [], [], [], [], [], []
    for q in queries:
        a, b = ref.scores(q), other.scores(q)
        both = (a > 0) & (b > 0)
        scale = float(np.median(a[both] / b[both])) if both.any() else 1.0  # rank-bm25 has a (k1 + 1) factor
        scales.append(scale)
        ta, tb = top_k(a, TOP), top_k(b, TOP)
        overlap.append(len(set(ta) & set(tb)) / max(1, len(ta), len(tb)))
        identical.append(float(ta == tb))
        pear.append(pearson(a, b))
        nz = (a > 0) | (b > 0)
        spear.append(pearson(rankdata(a[nz]), rankdata(b[nz])) if nz.sum() > 1 else float("nan"))
        maxdiff.append(float(np.max(np.abs(a - scale * b)) / max(1e-12, float(np.max(np.abs(a))))))
    return {
        "top10_overlap": float(np.mean(overlap)),
        "top10_identical": float(np.mean(identical)),
        "pearson": float(np.nanmean(pear)),
        "spearman": float(np.nanmean(spear)),
        "score_scale": float(np.median(scales)),
        "max_rel_score_diff": float(np.max(maxdiff)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: one build, one round of queries; figures meaningless"
    )
    args = ap.parse_args()
    t_start = time.perf_counter()
    docs = load_tau3_documents()
    if docs is None:
        print(json_line({"skipped": "tau3 banking documents not found (../shared/data/tau3_banking/documents)"}))
        return

    from tau_env.knowledge import tokenize

    corpus = [tokenize(f"{d.title}\n\n{d.content}") for d in docs]
    queries = [tokenize(q) for q in QUERIES]
    n_docs = len(corpus)
    df: dict[str, int] = {}
    for toks in corpus:
        for t in set(toks):
            df[t] = df.get(t, 0) + 1
    common = sorted(t for t, c in df.items() if c > n_docs / 2)  # where the idf variants differ
    builds = 1 if args.quick else 5
    rounds = 1 if args.quick else 20

    fig: dict[str, Any] = {
        "quick": args.quick,
        "docs": n_docs,
        "queries": len(queries),
        "vocabulary": len(df),
        "mean_doc_tokens": float(np.mean([len(c) for c in corpus])),
        "tokens_in_over_half_the_docs": common,
        "queries_with_such_tokens": sum(any(t in common for t in q) for q in queries),
        "libraries": {},
    }
    cs = contenders()
    for c in cs:
        times = []
        for _ in range(builds):
            t0 = time.perf_counter_ns()
            c.build(corpus)
            times.append(time.perf_counter_ns() - t0)
        for q in queries:  # warm-up
            c.search(q)
        lat = []
        for _ in range(rounds):
            for q in queries:
                t0 = time.perf_counter_ns()
                c.search(q)
                lat.append(time.perf_counter_ns() - t0)
        med, p99 = stats(lat, "us")
        fig["libraries"][c.name] = {
            "build_ms": sorted(times)[len(times) // 2] / 1e6,
            "query_us_median": med,
            "query_us_p99": p99,
            "query_samples": len(lat),
        }
    ref = cs[0]
    for c in cs:
        fig["libraries"][c.name].update(agreement(ref, c, queries))
    eps0 = cs[1]
    fig["vs_okapi_epsilon0"] = {c.name: agreement(eps0, c, queries) for c in cs[2:]}
    fig["lucene_vs_robertson"] = agreement(cs[2], cs[3], queries)
    lib = fig["libraries"]
    r, s = lib[cs[0].name], lib[cs[2].name]
    fig["speedup_bm25s_robertson_vs_rank_bm25"] = r["query_us_median"] / s["query_us_median"]
    fig["tau_env_method"] = cs[4].name
    fig["speedup_tau_env_vs_rank_bm25"] = r["query_us_median"] / lib[cs[4].name]["query_us_median"]
    fig["build_speedup_bm25s_robertson_vs_rank_bm25"] = r["build_ms"] / s["build_ms"]
    fig["machine"] = machine()
    fig["seconds"] = time.perf_counter() - t_start

    print(
        f"BM25 libraries on {n_docs} tau3 documents ({len(df)} distinct tokens, "
        f"{fig['mean_doc_tokens']:.0f} tokens per document), {len(queries)} queries x {rounds} rounds, top-{TOP}"
        + ("  [--quick: a smoke run, not measurements]" if args.quick else "")
    )
    rows = []
    for name, d in lib.items():
        rows.append(
            (
                name,
                d["build_ms"],
                d["query_us_median"],
                d["query_us_p99"],
                d["top10_overlap"],
                d["top10_identical"],
                d["pearson"],
                d["spearman"],
                d["max_rel_score_diff"],
            )
        )
    print_table(
        (
            "library",
            "build ms",
            "query us median",
            "p99",
            "top10 overlap",
            "top10 same",
            "pearson",
            "spearman",
            "max rel diff",
        ),
        rows,
    )
    print(
        "agreement columns: against rank-bm25 BM25Okapi (epsilon=0.25); 'max rel diff' after dividing out the "
        "constant scale (rank-bm25 multiplies by k1 + 1 = 2.5)."
    )
    print(
        f"tokens in more than half the documents ({', '.join(common) or 'none'}) get idf 0 in bm25s robertson and "
        f"BM25Okapi epsilon=0, 0.25 x mean idf in BM25Okapi, a small positive idf in lucene; "
        f"{fig['queries_with_such_tokens']} of {len(queries)} queries contain one."
    )
    for name, e in fig["vs_okapi_epsilon0"].items():
        print(
            f"  {name} vs BM25Okapi epsilon=0: top-10 identical {e['top10_identical']:.0%}, "
            f"overlap {e['top10_overlap']:.1%}, spearman {e['spearman']:.3f}, "
            f"max rel diff {e['max_rel_score_diff']:.1e}"
        )
    print(
        f"bm25s robertson answers a query {fig['speedup_bm25s_robertson_vs_rank_bm25']:.0f}x faster than rank-bm25 "
        f"(tau_env's index: {fig['speedup_tau_env_vs_rank_bm25']:.0f}x); index build {s['build_ms']:.0f} ms vs "
        f"{r['build_ms']:.0f} ms ({fig['seconds']:.0f} s)"
    )
    print(json_line(fig))


if __name__ == "__main__":
    main()
