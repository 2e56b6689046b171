"""The benchmark's knowledge tools: their schemas, its BM25 ``KB_search`` and ``grep``, reproduced exactly.

BM25 follows Okapi BM25 as the benchmark computes it (k1 = 1.5, b = 0.75, content only,
lower-cased whitespace tokens, negative idf floored to 0.25 x the mean idf, summed in query-token
order, stable descending sort, the first 10 documents whatever their score). Per-term frequency
vectors are prepared once, so a query costs a few numpy operations per token.

The schemas below are what the benchmark's model sees for ``KB_search`` and ``grep`` (tau2-bench
builds them from the tools' docstrings with docstring-parser and pydantic: the description is the
summary, plus a blank line and the long description where there is one; each parameter carries a
``title``; the object is titled ``parameters``). They are data, kept byte for byte.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tau_env.error import ToolError, shown
from tau_env.knowledge import Document, check_query, grep_counts

K1, B, EPSILON, TOP_K = 1.5, 0.75, 0.25, 10

#: ``KB_search`` as the model sees it in every classic variant (BM25 or embeddings behind it).
KB_SEARCH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "KB_search",
        "description": "Search the knowledge base for relevant documents.",
        "parameters": {
            "properties": {
                "query": {
                    "description": "The search query to find relevant documents",
                    "title": "Query",
                    "type": "string",
                }
            },
            "required": ["query"],
            "title": "parameters",
            "type": "object",
        },
    },
}

#: ``grep`` as the model sees it (``bm25_grep``, ``grep_only`` and the ``*_grep`` variants).
GREP_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "grep",
        "description": "Search for a regex pattern in all knowledge base documents.\n\n"
        "Returns documents ranked by number of matches, with full content.",
        "parameters": {
            "properties": {
                "pattern": {
                    "description": "The regex pattern to search for (e.g., 'credit.*card', 'fee|charge')",
                    "title": "Pattern",
                    "type": "string",
                }
            },
            "required": ["pattern"],
            "title": "parameters",
            "type": "object",
        },
    },
}


def _alltools_search_schema(name: str, description: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "properties": {
                    "query": {
                        "description": "The search query to find relevant documents.",
                        "title": "Query",
                        "type": "string",
                    },
                    "k": {
                        "default": TOP_K,
                        "description": "Maximum number of documents to return (default 10).",
                        "title": "K",
                        "type": "integer",
                    },
                },
                "required": ["query"],
                "title": "parameters",
                "type": "object",
            },
        },
    }


#: ``KB_search_bm25`` of the ``alltools`` variants (BM25, at most ``k`` results, k <= 10 in effect).
KB_SEARCH_BM25_SCHEMA = _alltools_search_schema(
    "KB_search_bm25", "Search the knowledge base using BM25 sparse retrieval."
)
#: ``KB_search_dense`` of the ``alltools`` variants (embeddings).
KB_SEARCH_DENSE_SCHEMA = _alltools_search_schema(
    "KB_search_dense", "Search the knowledge base using dense embedding retrieval."
)

#: The classes that define the tools in the benchmark; Python's TypeError texts name them.
QUALNAMES = {
    "KB_search": "KBSearchMixin.KB_search",
    "grep": "GrepMixin.grep",
    "KB_search_bm25": "KBSearchBm25AllToolsMixin.KB_search_bm25",
    "KB_search_dense": "KBSearchDenseAllToolsMixin.KB_search_dense",
}


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
        if not query or not query.strip():  # the benchmark's test; a non-string raises as there
            return []
        s = self.scores(query)
        order = np.argsort(-s, kind="stable")[: min(k, TOP_K)]
        return [(self.documents[i], float(s[i])) for i in order]


def format_hits(hits: Sequence[tuple[Document, float]]) -> str:
    """One block per hit: title (``Untitled`` if empty), id, score to 4 decimals and the full content."""
    return "\n".join(
        f"{i}. {d.title or 'Untitled'}\n   ID: {d.id}\n   Score: {score:.4f}\n   Content: {d.content}\n"
        for i, (d, score) in enumerate(hits, 1)
    )


def timing_suffix(retrieval_ms: float, total_ms: float, reranking_ms: float = 0.0) -> str:
    """The benchmark's timing line. Its ``reranking=`` part shows whenever the measured
    post-processing time is above zero, which is always (the empty post-processing loop is timed).
    """
    return f"\n\n[Timing: retrieval={retrieval_ms:.0f}ms, reranking={reranking_ms:.0f}ms, total={total_ms:.0f}ms]"


Hits = list[tuple[Document, float]]
_NO_K = object()


def timed_search_output(
    search: Callable[[Any], Sequence[tuple[Document, float]]],
    query: str,
    k: Any = _NO_K,
    *,
    encode: Callable[[str], Any] | None = None,
    rerank: Callable[[str, Hits], Hits] | None = None,
) -> str:
    """The text of every KB search tool, for any backend, in the benchmark's pipeline order.

    ``encode`` (a dense backend's query embedding) runs first, then ``search``, then the cut to
    ``k`` (the ``alltools`` tools' argument; Python's slice rules, as the benchmark's
    ``results[:top_k]``: ``k=0`` finds nothing, ``k=-1`` drops the last hit, ``k="3"`` raises
    its ``TypeError``), then ``rerank``. The text is the hit blocks (or
    ``No relevant documents found.``) and the timing suffix, whose ``total`` also counts the query
    embedding. A query over :data:`~tau_env.knowledge.MAX_QUERY` (8192) characters is refused with
    a :class:`ToolError` (the benchmark has no limit; BM25 over 10 MB would take seconds).
    """
    if isinstance(query, str):  # a non-string fails in ``search`` as in the benchmark
        check_query(query)
    t0 = time.perf_counter()
    prepared = encode(query) if encode is not None else query
    t1 = time.perf_counter()
    hits = list(search(prepared))
    if k is not _NO_K and k is not None:
        hits = hits[:k]
    t2 = time.perf_counter()
    if rerank is not None and hits:
        hits = rerank(query, hits)
    t3 = time.perf_counter()
    body = format_hits(hits) if hits else "No relevant documents found."
    return body + timing_suffix((t2 - t1) * 1000, (t3 - t0) * 1000, (t3 - t2) * 1000)


def kb_search_output(index: BenchmarkBM25, query: str, k: int = TOP_K) -> str:
    """KB_search's text with BM25 behind it, timing suffix included."""
    return timed_search_output(lambda q: index.search(q, k), query)


def grep_hits(documents: Sequence[Document], pattern: str, k: int = TOP_K) -> list[tuple[Document, float]]:
    """The benchmark's grep ranking: non-overlapping matches counted in each document's content
    (case-insensitive; a pattern that is not a valid regex is matched literally), documents with
    a match sorted by count (ties in load order), the first ``k``; a blank pattern finds nothing.

    The pattern is compiled and matched by :func:`tau_env.knowledge.grep_counts`, in a worker
    process under the grep budget (1 s of CPU time, 5 s of wall-clock time, 256 MB of memory);
    past it a :class:`ToolError` says so (the benchmark itself has no budget and can hang).
    """
    if not pattern.strip():
        return []
    counts = grep_counts([d.content for d in documents], pattern)
    scored = [(d, float(n)) for d, n in zip(documents, counts, strict=True)]
    return sorted((h for h in scored if h[1] > 0), key=lambda h: -h[1])[:k]


def grep_output(documents: Sequence[Document], pattern: str) -> str:
    """The text of ``grep``: the hit blocks, without a timing suffix, or ``No matches found for pattern: ...``."""
    hits = grep_hits(documents, pattern)
    return format_hits(hits) if hits else f"No matches found for pattern: {pattern}"


def strip_timing(text: str) -> str:
    """KB_search's output without its wall-clock timing suffix (for comparisons)."""
    return re.sub(r"\n\n\[Timing: [^\]]*\]$", "", text)


# --- embeddings and the LLM reranker (network endpoints the user names) ---------------------------
BLANK_QUERY = "Empty or missing input for key 'query': cannot generate embedding from blank text."


class EmbeddingSearch:
    """The benchmark's dense ``KB_search``: cosine similarity between a query's embedding and each
    document's content embedding, the top 10 by ``argsort`` reversed (its tie order), float64.

    Document vectors come from ``embedder`` through ``cache`` (a second build makes no calls);
    a query is embedded with ``query_prefix`` in front (Qwen's instruction), cached the same way.
    A blank query gets the benchmark's error text (``Error: Empty or missing input ...``).
    """

    def __init__(self, documents: Sequence[Document], embedder: Any, query_prefix: str = "", cache: Any = None):
        from tau_env.knowledge.embed import EmbeddingCache, embed_cached

        self.documents = list(documents)
        self.embedder, self.query_prefix = embedder, query_prefix
        self.cache = cache if cache is not None else EmbeddingCache()
        matrix = embed_cached(embedder, [d.content for d in self.documents], self.cache)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        self._docs = matrix / np.where(norms == 0, 1, norms)

    def encode(self, query: str) -> np.ndarray:
        from tau_env.knowledge.embed import embed_cached

        if not query or not query.strip():  # the benchmark's test; a non-string raises as there
            raise ToolError(BLANK_QUERY)  # the benchmark's ValueError; shown as "Error: <text>" all the same
        return embed_cached(self.embedder, [self.query_prefix + query], self.cache)[0]

    def search(self, vector: np.ndarray, k: int = TOP_K) -> list[tuple[Document, float]]:
        norm = np.linalg.norm(vector)
        scores = np.zeros(len(self.documents)) if norm == 0 else np.dot(self._docs, vector / norm)
        order = np.argsort(scores)[::-1][: min(k, len(self.documents))]
        return [(self.documents[i], float(scores[i])) for i in order]


#: The benchmark's pointwise relevance prompt (``str.format(query, document)``), kept byte for byte.
RERANK_PROMPT = """A document is relevant if it contains information that helps answer or address the query.
A document is not relevant if it doesn't contain information that helps answer the query, even if it mentions similar topics.
Is the document below relevant to answering the query below?
Rate the relevance from 0-10. 0 means completely irrelevant, 10 means highly relevant and completely addresses the query.

Here is the query:
<start_query>
{}
<end_query>

Here is the document:
<start_document>
{}
<end_document>"""  # noqa: E501

#: The structured-output format the ``openai`` package sends for its ``RelevanceScore`` model.
RERANK_RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "schema": {
            "properties": {"relevance_score": {"title": "Relevance Score", "type": "integer"}},
            "required": ["relevance_score"],
            "title": "RelevanceScore",
            "type": "object",
            "additionalProperties": False,
        },
        "name": "RelevanceScore",
        "strict": True,
    },
}


class PointwiseReranker:
    """The benchmark's ``pointwise_llm_reranker``: each hit's content rated 0-10 by a chat model.

    One chat-completions request per hit (at most ``concurrency`` at once), with the benchmark's
    prompt, structured-output format and, for ``gpt-5*`` models, ``reasoning_effort``; the rating
    is read as the ``openai`` package's parser reads it (pydantic's ``int``), clamped to 0-10;
    hits rated below ``min_score`` are dropped, the rest sorted by rating (ties in retrieval
    order) with the rating as score. As in the benchmark, a hit with empty content is not rated, a
    reply that does not parse (or stopped for length or the content filter) drops its hit, and an
    empty reply or a refusal rates 0.

    Deliberate difference: a request that fails (connection, timeout, HTTP error, a reply with no
    message) raises :class:`~tau_env.error.InfrastructureError` after the retries, where the
    benchmark silently drops the hit (so a misconfigured reranker would empty every search).
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        min_score: int = 5,
        reasoning_effort: str | None = "low",
        concurrency: int = 20,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
    ):
        from tau_env.error import InvalidOptionError
        from tau_env.knowledge.embed import api_key, check_base_url

        if not isinstance(model, str) or not model.strip():
            raise InvalidOptionError(f"The reranker model must be a non-empty name, got {shown(model)}.")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidOptionError(f"The reranker's concurrency must be an integer >= 1, got {shown(concurrency)}.")
        self.model, self.base_url = model, check_base_url(base_url, "The reranker base URL")
        self.key = api_key(api_key_env, f"The reranker model {model!r} at {self.base_url}")
        self.min_score, self.reasoning_effort, self.concurrency = min_score, reasoning_effort, concurrency
        self.timeout, self.retries, self.backoff = timeout, retries, backoff

    def body(self, query: str, passage: str) -> dict[str, Any]:
        """The request for one rating, as the benchmark's ``openai`` call sends it."""
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": RERANK_PROMPT.format(query, passage)}],
            "model": self.model,
            "response_format": RERANK_RESPONSE_FORMAT,
        }
        if self.reasoning_effort and self.model.startswith("gpt-5"):
            body["reasoning_effort"] = self.reasoning_effort
        return body

    def rate(self, query: str, passage: str) -> int | None:
        """The rating of one passage, or None where the reply does not parse (dropped)."""
        from pydantic import BaseModel, ValidationError

        from tau_env.error import InfrastructureError
        from tau_env.knowledge.embed import post_json

        class RelevanceScore(BaseModel):
            relevance_score: int

        what = f"The reranker model {self.model!r}"
        reply = post_json(
            f"{self.base_url}/chat/completions",
            self.body(query, passage),
            key=self.key,
            what=what,
            timeout=self.timeout,
            retries=self.retries,
            backoff=self.backoff,
        )
        try:
            choice = reply["choices"][0]
            message = choice["message"]
            finish, content, refusal = choice.get("finish_reason"), message.get("content"), message.get("refusal")
        except (TypeError, KeyError, IndexError, AttributeError):
            raise InfrastructureError(f"{what} at {self.base_url} returned no message: {str(reply)[:200]}") from None
        if finish in ("length", "content_filter"):  # the openai package raises: the hit is dropped
            return None
        if not content or refusal:  # nothing parsed: the benchmark counts 0
            return 0
        try:
            score = RelevanceScore.model_validate_json(content).relevance_score
        except (ValidationError, TypeError, ValueError):
            return None
        return max(0, min(10, score))

    def __call__(self, query: str, hits: Hits) -> Hits:
        todo = [(d, d.content) for d, _ in hits if d.content]
        if not todo:
            return []
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo))) as pool:
            ratings = list(pool.map(lambda item: self.rate(query, item[1]), todo))
        rated = [
            (d, float(r)) for (d, _), r in zip(todo, ratings, strict=True) if r is not None and r >= self.min_score
        ]
        rated.sort(key=lambda h: h[1], reverse=True)
        return rated
