"""The agent's knowledge tools for each retrieval configuration."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from tau_env.error import InvalidOptionError, ToolError, did_you_mean
from tau_env.knowledge import check_query
from tau_env.messages import clip
from tau_env.tools import Tool, ToolContext, tool

#: Retrieval configurations and the knowledge tools each gives the agent (read-only: definitions).
RETRIEVAL_CONFIGS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "bm25": ("search_documents",),
        "grep": ("grep_documents",),
        "bm25+grep": ("search_documents", "grep_documents"),
        "dense": ("search_documents_dense",),
        "hybrid": ("search_documents_hybrid",),
        "all": ("search_documents", "search_documents_dense", "grep_documents"),
        "none": (),
    }
)

#: Knowledge tools that embed the query with the ``embed`` extra's model.
EMBEDDING_TOOLS = frozenset({"search_documents_dense", "search_documents_hybrid"})


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
    check_query(q)
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


#: The knowledge tools by name: definitions shared by every domain's toolboxes, never changed (read-only).
_ALL: Mapping[str, Tool] = MappingProxyType(
    {t.name: t for t in (search_documents, search_documents_dense, search_documents_hybrid, grep_documents)}
)


def unknown_retrieval(key: object, choices: Iterable[str]) -> InvalidOptionError:
    """The error for a retrieval configuration a domain lacks: the same in every domain and on every
    path (``make``, ``Domain.toolbox``/``system_prompt``, a domain's own helpers; ``make`` adds the call).
    """
    choices = sorted(choices)
    if isinstance(key, str):
        shown, hint = repr(clip(key, 80)), did_you_mean(key, choices) if len(key) < 100 else ""
    else:
        shown, hint = f"of type {type(key).__name__}", ""
    return InvalidOptionError(f"Unknown retrieval configuration {shown}; expected one of {choices}.{hint}")


def knowledge_tools(retrieval: str) -> list[Tool]:
    """The knowledge tools of a retrieval configuration (see ``RETRIEVAL_CONFIGS``).

    Raises:
        InvalidOptionError: ``retrieval`` is not a configuration.
    """
    if not (isinstance(retrieval, str) and retrieval in RETRIEVAL_CONFIGS):
        raise unknown_retrieval(retrieval, RETRIEVAL_CONFIGS)
    return [_ALL[n] for n in RETRIEVAL_CONFIGS[retrieval]]


def require_extras(retrieval: str) -> None:
    """Raise :class:`DependencyNotInstalled` if an env of ``retrieval`` would embed queries without the
    ``embed`` extra. Called when an env is made (not when a toolbox is built: replaying reference
    actions for grading needs every tool's definition, not its extra).
    """
    if isinstance(retrieval, str) and EMBEDDING_TOOLS.intersection(RETRIEVAL_CONFIGS.get(retrieval, ())):
        from tau_env.knowledge.embed import require_embed

        require_embed(f"retrieval {retrieval!r}")
