r"""Retrieval configurations of tau3-banking: the agent's system prompt and knowledge tools for each.

Keywords, templates, tools and prompt assembly follow tau2-bench's ``banking_knowledge`` registry
(``src/tau2/domains/banking_knowledge/retrieval.py``), all 20 of its configurations, in its order:

==================================  ===============================  ==================================
keyword                             template (``prompts/*.md``)      agent's knowledge tools
==================================  ===============================  ==================================
``no_knowledge``                    ``no_knowledge``                 none
``full_kb``                         ``full_kb``                      none; every document in the prompt
``golden_retrieval``                ``required_docs``                none; the task's documents in it
``qwen_embeddings_grep``            ``classic_rag_qwen``             ``KB_search`` (Qwen3), ``grep``
``openai_embeddings_grep``          ``classic_rag_openai``           ``KB_search`` (OpenAI), ``grep``
``qwen_embeddings_reranker_grep``   ``classic_rag_qwen``             ``KB_search`` (Qwen3 + LLM), ``grep``
``openai_embeddings_reranker_grep`` ``classic_rag_openai``           ``KB_search`` (OpenAI + LLM), ``grep``
``bm25_grep``                       ``classic_rag_bm25``             ``KB_search`` (BM25), ``grep``
``bm25_reranker_grep``              ``classic_rag_bm25``             ``KB_search`` (BM25 + LLM), ``grep``
``qwen_embeddings``                 ``classic_rag_qwen_no_grep``     ``KB_search`` (Qwen3)
``openai_embeddings``               ``classic_rag_openai_no_grep``   ``KB_search`` (OpenAI)
``qwen_embeddings_reranker``        ``classic_rag_qwen_no_grep``     ``KB_search`` (Qwen3 + LLM)
``openai_embeddings_reranker``      ``classic_rag_openai_no_grep``   ``KB_search`` (OpenAI + LLM)
``bm25``                            ``classic_rag_bm25_no_grep``     ``KB_search`` (BM25)
``bm25_reranker``                   ``classic_rag_bm25_no_grep``     ``KB_search`` (BM25 + LLM)
``grep_only``                       ``grep_only``                    ``grep``
``terminal_use``                    ``agentic_search``               ``shell`` (read-only)
``terminal_use_write``              ``agentic_search_write``         ``shell`` (a scratch copy)
``alltools``                        ``all_tools``                    ``KB_search_bm25``, ``KB_search_dense``
                                                                     (OpenAI), ``shell``
``alltools-qwen``                   ``all_tools``                    ``KB_search_bm25``, ``KB_search_dense``
                                                                     (Qwen3), ``shell``
``dense_minilm`` (ours)             ``classic_rag_openai_no_grep``   ``KB_search`` (MiniLM embeddings)
``dense_minilm_grep`` (ours)        ``classic_rag_openai``           ``KB_search`` (MiniLM), ``grep``
==================================  ===============================  ==================================

Prompt assembly, as the benchmark does it: each ``{{component:NAME}}`` becomes the raw text of
``components/NAME.md`` (nothing stripped); then, for ``full_kb`` only, ``{{full_knowledge_base}}``
becomes every document in load order as ``## <title>\n\n<content>``, joined by
``\n\n---\n\n`` (the benchmark substitutes it with ``re.sub`` and a string replacement, so
backslash escapes in documents are expanded; the user's data has none); for ``golden_retrieval``
only, ``{{required_documents}}`` becomes the task's required documents in the task's order, same
format and separator, each reference looked up by title first, then by id, unknown ones skipped,
and ``(No documents provided)`` when none is left (also without a task); for the ``alltools``
variants, ``{{all_tools_dense_instructions}}`` becomes the sentence naming the benchmark's dense
provider and model (its text, whatever endpoint :data:`RetrievalOptions` points at).

Endpoints. Embedding configurations call an OpenAI-compatible ``/embeddings`` endpoint and the
``*_reranker*`` ones a chat-completions endpoint, both named by ``retrieval_options`` (see
:func:`retrieval_options`; defaults: the benchmark's models and providers). The ``shell``
configurations run the agent's commands under bubblewrap
(:func:`tau_env.domains.tau3_banking.shell.shell_tools`). What each needs is checked when the
env is made (:func:`needs`).

``dense_minilm`` and ``dense_minilm_grep`` are ours (``ours=True``), offline counterparts of
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
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tau_env.domains.tau3_banking.retrieval import (
    GREP_SCHEMA,
    KB_SEARCH_BM25_SCHEMA,
    KB_SEARCH_DENSE_SCHEMA,
    KB_SEARCH_SCHEMA,
    QUALNAMES,
    TOP_K,
    BenchmarkBM25,
    EmbeddingSearch,
    PointwiseReranker,
    grep_output,
    timed_search_output,
)
from tau_env.error import DependencyNotInstalled, DomainError, InvalidOptionError, did_you_mean, shown
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
        embedder: What embeds for ``KB_search``/``KB_search_dense``: ``"openai"``, ``"qwen"`` (an
            endpoint; see :data:`EMBEDDERS`), ``"minilm"`` (ours, offline) or None (BM25).
        documents: Documents put in the prompt: ``"all"`` (``full_kb``), ``"required"``
            (``golden_retrieval``) or None.
        reranker: ``KB_search`` results go through the benchmark's pointwise LLM reranker.
        shell: ``"read"`` or ``"write"`` for the ``shell`` tool (bubblewrap), or None.
        dense_instructions: What replaces ``{{all_tools_dense_instructions}}`` (``alltools*``).
        ours: Not a configuration of the benchmark itself.
        rewrite: ``(benchmark's text, ours)`` replacements in the template (ours only).
    """

    prompt: str
    tools: tuple[str, ...] = ()
    embedder: str | None = None
    documents: str | None = None
    reranker: bool = False
    shell: str | None = None
    dense_instructions: str | None = None
    ours: bool = False
    rewrite: tuple[tuple[str, str], ...] = ()


def _dense_sentence(provider: str, model: str) -> str:
    return f"The `KB_search_dense` tool uses **{provider}** with embedding model `{model}` for dense retrieval."


_KB, _GREP, _SHELL = ("KB_search",), ("KB_search", "grep"), ("shell",)
_ALL = ("KB_search_bm25", "KB_search_dense", "shell")

#: The configurations by keyword, the benchmark's 20 in its order, then ours (read-only definitions).
RETRIEVAL: Mapping[str, RetrievalConfig] = MappingProxyType(
    {
        "no_knowledge": RetrievalConfig("no_knowledge"),
        "full_kb": RetrievalConfig("full_kb", documents="all"),
        "golden_retrieval": RetrievalConfig("required_docs", documents="required"),
        "qwen_embeddings_grep": RetrievalConfig("classic_rag_qwen", _GREP, embedder="qwen"),
        "openai_embeddings_grep": RetrievalConfig("classic_rag_openai", _GREP, embedder="openai"),
        "qwen_embeddings_reranker_grep": RetrievalConfig("classic_rag_qwen", _GREP, embedder="qwen", reranker=True),
        "openai_embeddings_reranker_grep": RetrievalConfig(
            "classic_rag_openai", _GREP, embedder="openai", reranker=True
        ),
        "bm25_grep": RetrievalConfig("classic_rag_bm25", _GREP),
        "bm25_reranker_grep": RetrievalConfig("classic_rag_bm25", _GREP, reranker=True),
        "qwen_embeddings": RetrievalConfig("classic_rag_qwen_no_grep", _KB, embedder="qwen"),
        "openai_embeddings": RetrievalConfig("classic_rag_openai_no_grep", _KB, embedder="openai"),
        "qwen_embeddings_reranker": RetrievalConfig("classic_rag_qwen_no_grep", _KB, embedder="qwen", reranker=True),
        "openai_embeddings_reranker": RetrievalConfig(
            "classic_rag_openai_no_grep", _KB, embedder="openai", reranker=True
        ),
        "bm25": RetrievalConfig("classic_rag_bm25_no_grep", _KB),
        "bm25_reranker": RetrievalConfig("classic_rag_bm25_no_grep", _KB, reranker=True),
        "grep_only": RetrievalConfig("grep_only", ("grep",)),
        "terminal_use": RetrievalConfig("agentic_search", _SHELL, shell="read"),
        "terminal_use_write": RetrievalConfig("agentic_search_write", _SHELL, shell="write"),
        "alltools": RetrievalConfig(
            "all_tools",
            _ALL,
            embedder="openai",
            shell="read",
            dense_instructions=_dense_sentence("OpenAI API", "text-embedding-3-large"),
        ),
        "alltools-qwen": RetrievalConfig(
            "all_tools",
            _ALL,
            embedder="qwen",
            shell="read",
            dense_instructions=_dense_sentence("OpenRouter", "qwen3-embedding-8b"),
        ),
        "dense_minilm": RetrievalConfig(
            "classic_rag_openai_no_grep", _KB, embedder="minilm", ours=True, rewrite=_MINILM
        ),
        "dense_minilm_grep": RetrievalConfig(
            "classic_rag_openai", _GREP, embedder="minilm", ours=True, rewrite=_MINILM
        ),
    }
)


# --- endpoint settings ----------------------------------------------------------------------------
def _openai_base_url() -> str:
    """The ``openai`` package's default: ``$OPENAI_BASE_URL``, else OpenAI's API."""
    return os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"


#: The benchmark's embedding endpoints by ``RetrievalConfig.embedder``: model, base URL (None: the
#: ``openai`` package's default), key variable, query prefix (Qwen's instruction; documents get
#: none) and the encoding the benchmark's client asks for.
EMBEDDERS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "openai": MappingProxyType(
            {
                "embedding_model": "text-embedding-3-large",
                "embedding_base_url": None,
                "embedding_api_key_env": "OPENAI_API_KEY",
                "embedding_query_prefix": "",
                "embedding_encoding_format": "base64",
            }
        ),
        "qwen": MappingProxyType(
            {
                "embedding_model": "qwen/qwen3-embedding-8b",
                "embedding_base_url": "https://openrouter.ai/api/v1",
                "embedding_api_key_env": "OPENROUTER_API_KEY",
                "embedding_query_prefix": "Instruct: Given a web search query, retrieve relevant passages "
                "that answer the query\nQuery:",
                "embedding_encoding_format": "float",
            }
        ),
    }
)

#: The benchmark's reranker: ``gpt-5.2`` through the ``openai`` package's default endpoint.
RERANKER: Mapping[str, Any] = MappingProxyType(
    {
        "reranker_model": "gpt-5.2",
        "reranker_base_url": None,
        "reranker_api_key_env": "OPENAI_API_KEY",
        "reranker_min_score": 5,
        "reranker_reasoning_effort": "low",
        "reranker_concurrency": 20,
    }
)

#: Every key of ``retrieval_options`` and the type of its value (``str | None`` keys may be None).
OPTION_TYPES: Mapping[str, Any] = MappingProxyType(
    {
        "embedding_model": str,
        "embedding_base_url": str,
        "embedding_api_key_env": (str, type(None)),
        "embedding_query_prefix": str,
        "embedding_encoding_format": str,
        "embedding_batch_size": int,
        "reranker_model": str,
        "reranker_base_url": str,
        "reranker_api_key_env": (str, type(None)),
        "reranker_min_score": int,
        "reranker_reasoning_effort": (str, type(None)),
        "reranker_concurrency": int,
        "timeout": (int, float),
        "retries": int,
    }
)


def retrieval_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check ``retrieval_options`` (the loader keyword) and return it as a plain dict.

    Keys (each optional; defaults are the benchmark's, per configuration): ``embedding_model``,
    ``embedding_base_url``, ``embedding_api_key_env`` (the variable holding the key; None for a
    server without keys), ``embedding_query_prefix``, ``embedding_encoding_format``
    (``"float"``/``"base64"``), ``embedding_batch_size`` (64); ``reranker_model``,
    ``reranker_base_url``, ``reranker_api_key_env``, ``reranker_min_score`` (5),
    ``reranker_reasoning_effort`` (``"low"``, sent to ``gpt-5*`` models), ``reranker_concurrency``
    (20); ``timeout`` (60 s per request) and ``retries`` (3) for both.

    Raises:
        InvalidOptionError: Not a mapping, an unknown key (with a did-you-mean), or a value of the
            wrong type.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidOptionError(
            f"retrieval_options must be a dict of endpoint settings, got {type(options).__name__}."
        )
    out = {}
    for key, value in options.items():
        kind = OPTION_TYPES.get(key) if isinstance(key, str) else None
        if kind is None:
            hint = did_you_mean(key, OPTION_TYPES) if isinstance(key, str) and len(key) < 100 else ""
            raise InvalidOptionError(
                f"Unknown retrieval option {shown(key)}; expected some of {sorted(OPTION_TYPES)}.{hint}"
            )
        if isinstance(value, bool) or not isinstance(value, kind):
            names = " or ".join(t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,)))
            raise InvalidOptionError(
                f"retrieval option {key!r} must be {names.replace('NoneType', 'None')}, got {shown(value)}."
            )
        out[key] = value
    return out


def _endpoint_settings(config: RetrievalConfig, options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings in effect for ``config``: the benchmark's defaults, overridden by ``options``."""
    settings: dict[str, Any] = {"timeout": 60.0, "retries": 3, "embedding_batch_size": 64}
    if config.embedder in EMBEDDERS:
        settings.update(EMBEDDERS[config.embedder])
    if config.reranker:
        settings.update(RERANKER)
    settings.update(options)
    for key in ("embedding_base_url", "reranker_base_url"):
        if key in settings and settings[key] is None:
            settings[key] = _openai_base_url()
    return settings


def needs(key: str, options: Mapping[str, Any] | None = None) -> list[str]:
    """What configuration ``key`` needs beyond the data folder, one line each (empty: nothing).

    With ``options``, the endpoints shown are the ones in effect.
    """
    config = _config(key)
    s = _endpoint_settings(config, options or {})
    out = []
    if config.embedder == "minilm":
        out.append("the 'embed' extra (offline all-MiniLM-L6-v2)")
    elif config.embedder is not None:
        key_env = s["embedding_api_key_env"]
        out.append(
            f"embeddings endpoint: {s['embedding_model']} at {s['embedding_base_url']}"
            + (f", key in ${key_env}" if key_env else "")
        )
    if config.reranker:
        key_env = s["reranker_api_key_env"]
        out.append(
            f"chat endpoint (LLM reranker): {s['reranker_model']} at {s['reranker_base_url']}"
            + (f", key in ${key_env}" if key_env else "")
        )
    if config.shell is not None:
        out.append(
            "bubblewrap sandbox (apt-get install bubblewrap)" + (", scratch copy" if config.shell == "write" else "")
        )
    return out


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


def _embedding_search(domain: Tau3Domain, config: RetrievalConfig) -> EmbeddingSearch:
    """The domain's embedding index for ``config``'s endpoint, built (documents embedded, or read
    from the on-disk cache) once per domain and endpoint settings.
    """
    from tau_env.knowledge.embed import RemoteEmbedder

    s = _endpoint_settings(config, domain.retrieval_options)
    embedder = RemoteEmbedder(
        s["embedding_model"],
        s["embedding_base_url"],
        api_key_env=s["embedding_api_key_env"],
        batch_size=s["embedding_batch_size"],
        encoding_format=s["embedding_encoding_format"],
        timeout=s["timeout"],
        retries=s["retries"],
    )
    cache_key = ("embedding", embedder.name, s["embedding_query_prefix"])
    found = domain._retrievers.get(cache_key)
    if found is None:
        found = domain._retrievers[cache_key] = EmbeddingSearch(domain.documents, embedder, s["embedding_query_prefix"])
    return found


def _reranker(domain: Tau3Domain, config: RetrievalConfig) -> PointwiseReranker:
    s = _endpoint_settings(config, domain.retrieval_options)
    return PointwiseReranker(
        s["reranker_model"],
        s["reranker_base_url"],
        api_key_env=s["reranker_api_key_env"],
        min_score=s["reranker_min_score"],
        reasoning_effort=s["reranker_reasoning_effort"],
        concurrency=s["reranker_concurrency"],
        timeout=s["timeout"],
        retries=s["retries"],
    )


def _shell_tools(domain: Tau3Domain, key: str, write: bool) -> list[Tool]:
    """The ``shell`` tool, from the sandbox module (imported here: only shell configurations need it)."""
    try:
        from tau_env.domains.tau3_banking.shell import shell_tools
    except ImportError as e:
        raise DependencyNotInstalled(
            f"Retrieval {key!r} needs the sandboxed shell (tau_env.domains.tau3_banking.shell), which this "
            f"installation cannot import ({e}); use a configuration without 'shell', e.g. 'bm25'."
        ) from e
    return list(shell_tools(domain, write=write))


#: What ``retrieval="all"`` gives (replays and checks): the offline tools, BM25 behind ``KB_search``.
_ALL_OFFLINE = ("KB_search", "grep", "KB_search_bm25")


def retrieval_tools(domain: Tau3Domain, key: str) -> list[Tool]:
    """The knowledge tools of configuration ``key``, with the benchmark's schemas and order.

    Endpoints and the sandbox are set up here, so a missing piece fails when the env is made:
    an unset key variable or a bad URL (:class:`InvalidOptionError`), an unreachable embedding
    endpoint (:class:`~tau_env.error.InfrastructureError`, from embedding the documents; cached
    on disk afterwards), a missing extra or sandbox (:class:`DependencyNotInstalled` or the shell
    module's error). ``"all"`` gives the offline tools once each, for replays and checks.
    """
    if key == "all":
        config = RetrievalConfig("", _ALL_OFFLINE)
    else:
        config = _config(key)
    names = config.tools
    encode = rerank = None
    if config.embedder == "minilm":

        def search(q: Any) -> Any:
            return dense_hits(domain, q)

    elif config.embedder is not None:
        index = _embedding_search(domain, config)
        search, encode = index.search, index.encode
    else:

        def search(q: Any) -> Any:
            return _index(domain).search(q)

    if config.reranker:
        rerank = _reranker(domain, config)

    def bm25(q: Any) -> Any:
        return _index(domain).search(q)

    def KB_search(self: Any, query: str) -> str:
        return timed_search_output(search, query, encode=encode, rerank=rerank)

    def KB_search_bm25(self: Any, query: str, k: int = TOP_K) -> str:
        return timed_search_output(bm25, query, k)

    def KB_search_dense(self: Any, query: str, k: int = TOP_K) -> str:
        return timed_search_output(search, query, k, encode=encode)

    def grep(self: Any, pattern: str) -> str:
        return grep_output(domain.documents, pattern)

    schemas = {
        "KB_search": (KB_search, KB_SEARCH_SCHEMA),
        "grep": (grep, GREP_SCHEMA),
        "KB_search_bm25": (KB_search_bm25, KB_SEARCH_BM25_SCHEMA),
        "KB_search_dense": (KB_search_dense, KB_SEARCH_DENSE_SCHEMA),
    }
    tools: list[Tool] = []
    for name in names:
        if name == "shell":
            tools.extend(_shell_tools(domain, key, write=config.shell == "write"))
            continue
        fn, schema = schemas[name]
        fn.__qualname__ = QUALNAMES[name]  # Python's TypeError texts name the benchmark's method so
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
    if config.dense_instructions is not None:
        text = text.replace("{{all_tools_dense_instructions}}", config.dense_instructions)
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
