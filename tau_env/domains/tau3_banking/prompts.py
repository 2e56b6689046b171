r"""Retrieval configurations of tau3-banking: the agent's system prompt and knowledge tools for each.

Keywords, templates, tools and prompt assembly follow tau2-bench's ``banking_knowledge`` registry
(``src/tau2/domains/banking_knowledge/retrieval.py``):

============================  ===============================  ==================================
keyword                       template (``prompts/*.md``)      agent's knowledge tools
============================  ===============================  ==================================
``no_knowledge``              ``no_knowledge``                 none
``full_kb``                   ``full_kb``                      none; every document in the prompt
``golden_retrieval``          ``required_docs``                none; the task's documents in it
``bm25``                      ``classic_rag_bm25_no_grep``     ``KB_search`` (BM25)
``bm25_grep``                 ``classic_rag_bm25``             ``KB_search`` (BM25), ``grep``
``grep_only``                 ``grep_only``                    ``grep``
``dense_minilm`` (ours)       ``classic_rag_openai_no_grep``   ``KB_search`` (MiniLM embeddings)
``dense_minilm_grep`` (ours)  ``classic_rag_openai``           ``KB_search`` (MiniLM), ``grep``
============================  ===============================  ==================================

Prompt assembly, as the benchmark does it: each ``{{component:NAME}}`` becomes the raw text of
``components/NAME.md`` (nothing stripped); then, for ``full_kb`` only, ``{{full_knowledge_base}}``
becomes every document in load order as ``## <title>\n\n<content>``, joined by
``\n\n---\n\n`` (the benchmark substitutes it with ``re.sub`` and a string replacement, so
backslash escapes in documents are expanded; the user's data has none); for ``golden_retrieval``
only, ``{{required_documents}}`` becomes the task's required documents in the task's order, same
format and separator, each reference looked up by title first, then by id, unknown ones skipped,
and ``(No documents provided)`` when none is left (also without a task).
``{{all_tools_dense_instructions}}`` belongs to the benchmark's ``alltools`` variants only.

Not reproduced: the benchmark's hosted-embedding variants (``openai_embeddings*``,
``qwen_embeddings*``), its LLM-reranker variants (``*_reranker*``), and the ``shell`` variants
(``terminal_use*``, ``alltools*``), which need network services or the ``srt`` sandbox.

``dense_minilm`` and ``dense_minilm_grep`` are ours (``ours=True``), the offline counterparts of
``openai_embeddings`` and ``openai_embeddings_grep``: the same ``KB_search`` schema and output
format, backed by all-MiniLM-L6-v2 through the domain's :class:`~tau_env.knowledge.KnowledgeBase`
(the ``embed`` extra), so their rankings are not the benchmark's. Choices made where the benchmark
has nothing to copy: the prompt is the OpenAI variant's template with the model's name replaced
(``uses all-MiniLM-L6-v2 embeddings for retrieval``); the embedded text is the document's title
and content (the knowledge base's convention; the benchmark embeds content only); scores are
cosine similarities; a blank query finds nothing (as the benchmark's BM25 does).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tau_env.domains.tau3_banking.retrieval import (
    GREP_SCHEMA,
    KB_SEARCH_SCHEMA,
    QUALNAMES,
    TOP_K,
    BenchmarkBM25,
    grep_output,
    timed_search_output,
)
from tau_env.error import DomainError
from tau_env.knowledge import Document
from tau_env.knowledge.tools import unknown_retrieval
from tau_env.tools import Tool, raw_tool

if TYPE_CHECKING:
    from tau_env.domains.tau3_banking import Tau3Domain
    from tau_env.tasks import Task

log = logging.getLogger(__name__)

_MINILM = (("OpenAI text-embedding-3-large", "all-MiniLM-L6-v2 embeddings"),)


@dataclass(frozen=True)
class RetrievalConfig:
    """One retrieval configuration.

    Attributes:
        prompt: The template file under ``prompts/``, without ``.md``.
        tools: The knowledge tools the agent gets, in the benchmark's order.
        search: What answers ``KB_search``: ``"bm25"`` (the benchmark's) or ``"dense"`` (MiniLM).
        documents: Documents put in the prompt: ``"all"`` (``full_kb``), ``"required"``
            (``golden_retrieval``) or None.
        ours: Not a configuration of the benchmark itself.
        rewrite: ``(benchmark's text, ours)`` replacements in the template (ours only).
    """

    prompt: str
    tools: tuple[str, ...] = ()
    search: str = "bm25"
    documents: str | None = None
    ours: bool = False
    rewrite: tuple[tuple[str, str], ...] = ()


#: The configurations by keyword (read-only: definitions, never changed at run time).
RETRIEVAL: Mapping[str, RetrievalConfig] = MappingProxyType(
    {
        "no_knowledge": RetrievalConfig("no_knowledge"),
        "full_kb": RetrievalConfig("full_kb", documents="all"),
        "golden_retrieval": RetrievalConfig("required_docs", documents="required"),
        "bm25": RetrievalConfig("classic_rag_bm25_no_grep", ("KB_search",)),
        "bm25_grep": RetrievalConfig("classic_rag_bm25", ("KB_search", "grep")),
        "grep_only": RetrievalConfig("grep_only", ("grep",)),
        "dense_minilm": RetrievalConfig(
            "classic_rag_openai_no_grep", ("KB_search",), search="dense", ours=True, rewrite=_MINILM
        ),
        "dense_minilm_grep": RetrievalConfig(
            "classic_rag_openai", ("KB_search", "grep"), search="dense", ours=True, rewrite=_MINILM
        ),
    }
)

_COMPONENT = re.compile(r"\{\{component:(\w+)\}\}")
_FULL_KB = re.compile(r"\{\{full_knowledge_base\}\}")
_SEPARATOR = "\n\n---\n\n"
NO_DOCUMENTS = "(No documents provided)"


def _config(key: str) -> RetrievalConfig:
    """The configuration ``key``; InvalidOptionError (the error every domain raises) for another value."""
    config = RETRIEVAL.get(key) if isinstance(key, str) else None
    if config is None:
        raise unknown_retrieval(key, RETRIEVAL)
    return config


# --- tools --------------------------------------------------------------------------------------
def _index(domain: Tau3Domain) -> BenchmarkBM25:
    """The benchmark's BM25 over the domain's documents, built once per domain."""
    if domain._bm25 is None:
        domain._bm25 = BenchmarkBM25(domain.documents)
    return domain._bm25


def dense_hits(domain: Tau3Domain, query: str, k: int = TOP_K) -> list[tuple[Document, float]]:
    """The top ``k`` documents by cosine similarity of MiniLM embeddings (the domain's knowledge base)."""
    if not query or not query.strip():
        return []
    return [(domain.kb.by_id[h.doc_id], h.score) for h in domain.kb.search_dense(query, k)]


def retrieval_tools(domain: Tau3Domain, key: str) -> list[Tool]:
    """The knowledge tools of configuration ``key``, with the benchmark's schemas.

    ``"all"`` gives every tool name once, for replays and checks; its ``KB_search`` is the
    benchmark's BM25.
    """
    if key == "all":
        names = {n for c in RETRIEVAL.values() for n in c.tools}
        search = "bm25"
    else:
        config = _config(key)
        names, search = set(config.tools), config.search

    if search == "dense":

        def KB_search(self: Any, query: str) -> str:
            return timed_search_output(lambda q: dense_hits(domain, q), query)

    else:

        def KB_search(self: Any, query: str) -> str:
            return timed_search_output(lambda q: _index(domain).search(q), query)

    def grep(self: Any, pattern: str) -> str:
        return grep_output(domain.documents, pattern)

    tools = []
    for fn, schema in ((KB_search, KB_SEARCH_SCHEMA), (grep, GREP_SCHEMA)):
        if fn.__name__ in names:
            fn.__qualname__ = QUALNAMES[fn.__name__]  # Python's TypeError texts name the method so
            tools.append(raw_tool(fn, schema, kind="read"))
    return tools


# --- prompts ------------------------------------------------------------------------------------
def format_documents(docs: Sequence[Document]) -> str:
    r"""Documents as the benchmark puts them in a prompt: ``## <title>\n\n<content>``, separated by rules."""
    return _SEPARATOR.join(f"## {d.title}\n\n{d.content}" for d in docs)


def required_documents_text(domain: Tau3Domain, task: Task | None) -> str:
    """What fills ``{{required_documents}}``: the task's documents (by title, else id), in its order."""
    by_title = {d.title: d for d in domain.documents}
    found = []
    for ref in (task.required_documents if task is not None else None) or []:
        doc = by_title.get(ref) or domain.kb.get(ref)
        if doc is None:
            log.warning("Required document not found in the knowledge base: %s", ref)
        else:
            found.append(doc)
    return format_documents(found) if found else NO_DOCUMENTS


def _component(domain: Tau3Domain, name: str, key: str) -> str:
    text = domain.prompts.get(f"components/{name}")
    if text is None:
        text = next((v for k, v in domain.prompts.items() if k.replace("\\", "/") == f"components/{name}"), None)
    if text is None:
        raise DomainError(f"The data folder has no prompts/components/{name}.md (needed by retrieval {key!r}).")
    return text


def _task_free_prompt(domain: Tau3Domain, key: str, config: RetrievalConfig) -> str:
    cache = domain._prompt_cache
    if key in cache:
        return cache[key]
    template = domain.prompts.get(config.prompt)
    if template is None:
        raise DomainError(f"The data folder has no prompts/{config.prompt}.md (needed by retrieval {key!r}).")
    for theirs, ours in config.rewrite:
        if theirs not in template:
            raise DomainError(f"prompts/{config.prompt}.md no longer says {theirs!r}; retrieval {key!r} needs it.")
        template = template.replace(theirs, ours)
    text = _COMPONENT.sub(lambda m: _component(domain, m.group(1), key), template)
    if config.documents == "all":
        try:  # a string replacement, as the benchmark's (escapes in documents are expanded)
            text = _FULL_KB.sub(format_documents(domain.documents), text)
        except re.error as e:
            raise DomainError(
                f"A document's backslash escape breaks the full_kb prompt, as in the benchmark: {e}."
            ) from e
    cache[key] = text
    return text


def build_prompt(domain: Tau3Domain, key: str, task: Task | None = None) -> str:
    """The agent's system prompt (the benchmark's policy text) for configuration ``key``.

    ``task`` matters only to ``golden_retrieval``, whose prompt holds the task's required documents.
    """
    config = _config(key)
    text = _task_free_prompt(domain, key, config)
    if config.documents == "required":
        text = text.replace("{{required_documents}}", required_documents_text(domain, task))
    return text
