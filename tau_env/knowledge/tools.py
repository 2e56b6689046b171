"""The agent's knowledge tools for each retrieval configuration."""

from __future__ import annotations

from tau_env.error import ToolError
from tau_env.tools import Tool, ToolContext, tool

#: Retrieval configurations and the knowledge tools each gives the agent.
RETRIEVAL_CONFIGS: dict[str, tuple[str, ...]] = {
    "bm25": ("search_documents",),
    "grep": ("grep_documents",),
    "bm25+grep": ("search_documents", "grep_documents"),
    "dense": ("search_documents_dense",),
    "hybrid": ("search_documents_hybrid",),
    "all": ("search_documents", "search_documents_dense", "grep_documents"),
    "none": (),
}


def _format_hits(ctx: ToolContext, hits: list) -> str:
    if not hits:
        return "No documents matched."
    parts = []
    for h in hits:
        d = ctx.kb.get(h.doc_id)
        parts.append(f"[{d.id}] {d.title}\n{d.content}")
    return "\n\n---\n\n".join(parts)


def _search(ctx: ToolContext, method: str, query: str, k: int) -> str:
    q = query.strip()
    if not q:
        raise ToolError("The query is empty; describe what you are looking for in a few words.")
    if not 1 <= k <= 10:
        raise ToolError(f"k must be between 1 and 10, got {k}.")
    return _format_hits(ctx, ctx.kb.search(q, k, method=method))


@tool
def search_documents(ctx: ToolContext, query: str, k: int = 5) -> str:
    """Search the bank's policy documents by keywords (BM25) and return the best matches in full.

    Args:
        query: Keywords describing what you need, e.g. "wire transfer fee premier checking".
        k: How many documents to return (1-10).
    """
    return _search(ctx, "bm25", query, k)


@tool
def search_documents_dense(ctx: ToolContext, query: str, k: int = 5) -> str:
    """Search the bank's policy documents by meaning (sentence embeddings) and return the best matches in full.

    Args:
        query: A question or description of what you need.
        k: How many documents to return (1-10).
    """
    return _search(ctx, "dense", query, k)


@tool
def search_documents_hybrid(ctx: ToolContext, query: str, k: int = 5) -> str:
    """Search the bank's policy documents by keywords and meaning together, and return the best matches in full.

    Args:
        query: A question or keywords describing what you need.
        k: How many documents to return (1-10).
    """
    return _search(ctx, "hybrid", query, k)


@tool
def grep_documents(ctx: ToolContext, pattern: str) -> str:
    r"""Find lines of the policy documents that match a regular expression (case-insensitive).

    Args:
        pattern: A regular expression, e.g. "overdraft.*fee" or "close_\\w+".
    """
    matches = ctx.kb.grep(pattern)
    if not matches:
        return "No lines matched."
    return "\n".join(f"[{doc_id}:{n}] {line}" for doc_id, n, line in matches)


_ALL = {t.name: t for t in (search_documents, search_documents_dense, search_documents_hybrid, grep_documents)}


def knowledge_tools(retrieval: str) -> list[Tool]:
    """The knowledge tools of a retrieval configuration (see ``RETRIEVAL_CONFIGS``)."""
    from tau_env.error import did_you_mean

    if retrieval not in RETRIEVAL_CONFIGS:
        raise ValueError(
            f"Unknown retrieval configuration {retrieval!r}; expected one of "
            f"{sorted(RETRIEVAL_CONFIGS)}.{did_you_mean(retrieval, RETRIEVAL_CONFIGS)}"
        )
    return [_ALL[n] for n in RETRIEVAL_CONFIGS[retrieval]]
