"""Retrieval configurations of tau3-banking: the agent's system prompt and knowledge tools for each.

Keywords follow the benchmark's names. ``dense_minilm`` is our variant: the benchmark's dense
configurations call hosted embedding models; ours uses the offline all-MiniLM-L6-v2 model (the
``embed`` extra), so its results are not the benchmark's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tau_env.domains.tau3_banking.retrieval import BenchmarkBM25, format_hits, grep_output, kb_search_output
from tau_env.error import DomainError
from tau_env.tools import Tool, raw_tool

if TYPE_CHECKING:
    from tau_env.domains.tau3_banking import Tau3Domain
    from tau_env.tasks import Task


@dataclass(frozen=True)
class RetrievalConfig:
    prompt: str  # template file under prompts/, without .md
    tools: tuple[str, ...]
    ours: bool = False  # not a configuration of the benchmark itself


RETRIEVAL: dict[str, RetrievalConfig] = {
    "bm25": RetrievalConfig("classic_rag_bm25_no_grep", ("KB_search",)),
    "bm25_grep": RetrievalConfig("classic_rag_bm25", ("KB_search", "grep")),
    "grep_only": RetrievalConfig("grep_only", ("grep",)),
    "golden_retrieval": RetrievalConfig("required_docs", ()),
    "full_kb": RetrievalConfig("full_kb", ()),
    "no_knowledge": RetrievalConfig("no_knowledge", ()),
    "dense_minilm": RetrievalConfig("classic_rag_bm25_no_grep", ("KB_search_dense",), ours=True),
}
_COMPONENT = re.compile(r"\{\{component:(\w+)\}\}")


def _index(domain: Tau3Domain) -> BenchmarkBM25:
    idx = domain.__dict__.get("_bm25")
    if idx is None:
        idx = domain.__dict__["_bm25"] = BenchmarkBM25(domain.documents)
    return idx


def retrieval_tools(domain: Tau3Domain, key: str) -> list[Tool]:
    """The knowledge tools of configuration ``key`` (``"all"``: every one, for replays)."""
    names = {n for c in RETRIEVAL.values() for n in c.tools} if key == "all" else set(_config(key).tools)

    def kb_search(self: Any, query: str) -> str:
        return kb_search_output(_index(domain), query)

    def grep(self: Any, pattern: str) -> str:
        return grep_output(domain.documents, pattern)

    def kb_search_dense(self: Any, query: str) -> str:
        hits = [(domain.kb.get(h.doc_id), h.score) for h in domain.kb.search_dense(query, 10)]
        return format_hits(hits) if hits else "No relevant documents found."

    specs = {
        "KB_search": (kb_search, "Search the knowledge base for relevant information.", "query", "The search query."),
        "grep": (
            grep,
            "Search the knowledge base documents with a regular expression pattern.",
            "pattern",
            "The regular expression pattern to search for.",
        ),
        "KB_search_dense": (
            kb_search_dense,
            "Search the knowledge base for relevant information (dense embeddings, offline MiniLM).",
            "query",
            "The search query.",
        ),
    }
    tools = []
    for name in ("KB_search", "grep", "KB_search_dense"):
        if name in names:
            fn, desc, param, pdesc = specs[name]
            fn.__qualname__ = f"KnowledgeTools.{name}"
            schema = {
                "type": "function",
                "function": {
                    "name": name,
                    "description": desc,
                    "parameters": {
                        "type": "object",
                        "properties": {param: {"type": "string", "description": pdesc}},
                        "required": [param],
                    },
                },
            }
            tools.append(raw_tool(fn, schema, kind="read"))
    return tools


def _config(key: str) -> RetrievalConfig:
    try:
        return RETRIEVAL[key]
    except KeyError:
        raise DomainError(
            f"Unknown tau3-banking retrieval configuration {key!r}; expected one of {sorted(RETRIEVAL)}."
        ) from None


def _docs_text(docs: list[Any]) -> str:
    return "\n\n".join(f"## {d.title}\n\n{d.content}" for d in docs)


def build_prompt(domain: Tau3Domain, key: str, task: Task | None = None) -> str:
    """The agent's system prompt for configuration ``key`` (and ``task``, for the required documents)."""
    config = _config(key)
    prompts = domain.prompts
    if config.prompt not in prompts:
        raise DomainError(f"The data folder has no prompts/{config.prompt}.md (needed by retrieval {key!r}).")
    text = _COMPONENT.sub(lambda m: prompts.get(f"components/{m.group(1)}", "").strip(), prompts[config.prompt])
    if "{{required_documents}}" in text:
        docs = [domain.kb.get(d) for d in (task.required_documents if task else [])]
        text = text.replace("{{required_documents}}", _docs_text([d for d in docs if d is not None]))
    if "{{full_knowledge_base}}" in text:
        text = text.replace("{{full_knowledge_base}}", _docs_text(domain.documents))
    return text
