"""The benchmark's knowledge tools: its BM25 ``KB_search`` and ``grep``, reproduced exactly.

BM25 follows Okapi BM25 as the benchmark computes it (k1 = 1.5, b = 0.75, content only,
lower-cased whitespace tokens, negative idf floored to 0.25 x the mean idf, summed in query-token
order, stable descending sort, the first 10 documents whatever their score). Per-term frequency
vectors are prepared once, so a query costs a few numpy operations per token.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence

import numpy as np

from tau_env.knowledge import Document

K1, B, EPSILON, TOP_K = 1.5, 0.75, 0.25, 10


class BenchmarkBM25:
    """Okapi BM25 with the benchmark's tokenization, idf floor, float operations and ordering."""

    def __init__(self, documents: Sequence[Document]):
        self.documents = list(documents)
        corpus = [d.content.lower().split() for d in self.documents]
        self.n = len(corpus)
        self.doc_len = np.array([len(toks) for toks in corpus])
        self.avgdl = sum(len(toks) for toks in corpus) / self.n
        postings: dict[str, dict[int, int]] = {}  # word -> {doc: tf}, words in first-seen order
        for i, toks in enumerate(corpus):
            for w in toks:
                postings.setdefault(w, {})
                postings[w][i] = postings[w].get(i, 0) + 1
        idf_sum = 0.0
        self.idf: dict[str, float] = {}
        negative = []
        for w, docs in postings.items():
            value = math.log(self.n - len(docs) + 0.5) - math.log(len(docs) + 0.5)
            self.idf[w] = value
            idf_sum += value
            if value < 0:
                negative.append(w)
        eps = EPSILON * (idf_sum / len(self.idf))
        for w in negative:
            self.idf[w] = eps
        self._tf = {
            w: (np.fromiter(d.keys(), int, len(d)), np.fromiter(d.values(), int, len(d))) for w, d in postings.items()
        }
        self._norm = K1 * (1 - B + B * self.doc_len / self.avgdl)

    def scores(self, query: str) -> np.ndarray:
        score = np.zeros(self.n)
        for q in query.lower().split():
            idf = self.idf.get(q) or 0
            tf = np.zeros(self.n, dtype=int)
            if q in self._tf:
                idx, counts = self._tf[q]
                tf[idx] = counts
            score += idf * (tf * (K1 + 1) / (tf + self._norm))
        return score

    def search(self, query: str, k: int = TOP_K) -> list[tuple[Document, float]]:
        if not query.strip():
            return []
        s = self.scores(query)
        order = np.argsort(-s, kind="stable")[: min(k, TOP_K)]
        return [(self.documents[i], float(s[i])) for i in order]


def format_hits(hits: list[tuple[Document, float]]) -> str:
    """One block per hit: title, id, score to 4 decimals and the full content."""
    return "\n".join(
        f"{i}. {d.title}\n   ID: {d.id}\n   Score: {score:.4f}\n   Content: {d.content}\n"
        for i, (d, score) in enumerate(hits, 1)
    )


def kb_search_output(index: BenchmarkBM25, query: str, k: int = TOP_K) -> str:
    """KB_search's text, with the timing suffix the benchmark appends (wall-clock milliseconds)."""
    started = time.perf_counter()
    hits = index.search(query, k)
    ms = round((time.perf_counter() - started) * 1000)
    body = format_hits(hits) if hits else "No relevant documents found."
    return f"{body}\n\n[Timing: retrieval={ms}ms, reranking=0ms, total={ms}ms]"


def grep_output(documents: Sequence[Document], pattern: str) -> str:
    """The benchmark's grep: matches counted per document, top 10 by count; a bad regex is literal."""
    if not pattern:
        return f"No matches found for pattern: {pattern}"
    try:
        rx = re.compile(pattern, re.IGNORECASE)
    except re.error:
        rx = re.compile(re.escape(pattern), re.IGNORECASE)
    scored = [(d, float(len(rx.findall(d.content)))) for d in documents]
    hits = sorted((h for h in scored if h[1] > 0), key=lambda h: -h[1])[:TOP_K]
    return format_hits(hits) if hits else f"No matches found for pattern: {pattern}"


def strip_timing(text: str) -> str:
    """KB_search's output without its wall-clock timing suffix (for comparisons)."""
    return re.sub(r"\n\n\[Timing: [^\]]*\]$", "", text)
