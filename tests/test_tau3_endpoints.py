"""tau3-banking's endpoint configurations against a scripted loopback server: embeddings
(``openai_embeddings*``, ``qwen_embeddings*``, ``alltools*``) and the pointwise LLM reranker
(``*_reranker*``).

The server answers ``/embeddings`` with deterministic bag-of-letters vectors and
``/chat/completions`` with a rating computed from the document; it logs every request and can be
told to fail. Proves: the benchmark's ranking, output and ``k`` rules; documents embedded once
per machine (a second build makes no call); batching; the Qwen query instruction; retries, then
InfrastructureError; a missing key, a bad URL or option fails at make.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import tau_env
from tau_env import call, say
from tau_env.domains.tau3_banking.prompts import EMBEDDERS, RETRIEVAL, build_prompt
from tau_env.domains.tau3_banking.retrieval import (
    BLANK_QUERY,
    KB_SEARCH_BM25_SCHEMA,
    KB_SEARCH_DENSE_SCHEMA,
    RERANK_PROMPT,
    BenchmarkBM25,
    PointwiseReranker,
    format_hits,
    strip_timing,
)
from tau_env.error import DependencyNotInstalled, InfrastructureError, InvalidOptionError
from tau_env.knowledge.embed import RemoteEmbedder
from tests.conftest import TAU3_DATA as DATA
from tests.conftest import needs_shared

pytestmark = needs_shared(DATA)

TIMING = re.compile(r"\n\n\[Timing: retrieval=\d+ms, reranking=\d+ms, total=\d+ms\]$")
QWEN_PREFIX = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"


def fake_vector(text: str) -> np.ndarray:
    """Letter counts plus a length term: deterministic, unnormalised, distinct for most texts."""
    v = np.zeros(27)
    for ch in text.lower():
        if "a" <= ch <= "z":
            v[ord(ch) - 97] += 1
    v[26] = len(text) % 7
    return v


def fake_rating(prompt: str) -> int:
    """A rating from the document part of the reranker prompt: how often it says "card"."""
    doc = prompt.split("<start_document>\n", 1)[1]
    return min(10, doc.lower().count("card"))


class Server:
    """The scripted endpoint: ``fail`` holds statuses to answer the next requests with."""

    def __init__(self):
        self.log: list[dict] = []
        self.fail: list[int] = []
        self.reply_override = None  # a function (path, body) -> dict, or None
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.log.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                    status = outer.fail.pop(0) if outer.fail else 200
                if status != 200:
                    data = json.dumps({"error": {"message": f"scripted {status}"}}).encode()
                else:
                    reply = outer.reply_override(self.path, body) if outer.reply_override else None
                    data = json.dumps(reply if reply is not None else outer.answer(self.path, body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, path: str, body: dict) -> dict:
        if path.endswith("/embeddings"):
            data = []
            for i, text in enumerate(body["input"]):
                v = fake_vector(text)
                if body.get("encoding_format") == "base64":
                    emb = base64.b64encode(v.astype("<f4").tobytes()).decode()
                else:
                    emb = v.tolist()
                data.append({"object": "embedding", "index": i, "embedding": emb})
            return {"object": "list", "data": data[::-1], "model": body["model"]}  # out of order on purpose
        prompt = body["messages"][0]["content"]
        content = json.dumps({"relevance_score": fake_rating(prompt)})
        return {
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]
        }

    def calls(self, path: str) -> list[dict]:
        return [r for r in self.log if r["path"].endswith(path)]


@pytest.fixture
def server(monkeypatch, tmp_path):
    """A fresh server, a fresh embedding cache folder, fresh domains, a key in $TAU_TEST_KEY."""
    monkeypatch.setenv("TAU_ENV_CACHE", str(tmp_path))
    monkeypatch.setenv("TAU_TEST_KEY", "sk-test")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    tau_env.registry.clear_cache()
    s = Server()
    yield s
    s.httpd.shutdown()
    tau_env.registry.clear_cache()


def opts(server: Server, **more) -> dict:
    return {
        "embedding_base_url": server.url,
        "embedding_api_key_env": "TAU_TEST_KEY",
        "reranker_base_url": server.url,
        "reranker_api_key_env": "TAU_TEST_KEY",
        **more,
    }


def make(server: Server, retrieval: str, **more):
    return tau_env.make("tau3-banking", data_dir=str(DATA), retrieval=retrieval, retrieval_options=opts(server, **more))


def episode(env):
    env.reset(options={"task_id": env.domain.tasks[0].id})
    env.step(say("hi"))
    return env


def last(env) -> str:
    return env.observe("agent")["messages"][-1]["content"]


def expected_dense(documents, query: str, prefix: str = "", k: int = 10):
    """The benchmark's cosine ranking, computed here from the fake vectors."""
    docs = np.stack([fake_vector(d.content) for d in documents])
    docs = docs / np.where(
        np.linalg.norm(docs, axis=1, keepdims=True) == 0, 1, np.linalg.norm(docs, axis=1, keepdims=True)
    )
    q = fake_vector(prefix + query)
    scores = docs @ (q / np.linalg.norm(q))
    order = np.argsort(scores)[::-1][:k]
    return [(documents[i], float(scores[i])) for i in order]


# --- embeddings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["openai_embeddings", "qwen_embeddings_grep"])
def test_dense_kb_search_is_the_benchmark_ranking_and_text(server, key):
    env = episode(make(server, key))
    prefix = EMBEDDERS[RETRIEVAL[key].embedder]["embedding_query_prefix"]
    env.step(call("KB_search", query="close my debit card"))
    out = last(env)
    assert TIMING.search(out)
    assert strip_timing(out) == format_hits(expected_dense(env.domain.documents, "close my debit card", prefix))
    queries = [r["body"]["input"] for r in server.calls("/embeddings") if len(r["body"]["input"]) == 1]
    assert queries == [[prefix + "close my debit card"]]  # the Qwen instruction on queries only
    docs_sent = [t for r in server.calls("/embeddings") if len(r["body"]["input"]) > 1 for t in r["body"]["input"]]
    assert docs_sent == [d.content for d in env.domain.documents]  # content only, no prefix, each once
    fmt = {r["body"]["encoding_format"] for r in server.calls("/embeddings")}
    assert fmt == {"base64" if key.startswith("openai") else "float"}
    assert {r["body"]["model"] for r in server.calls("/embeddings")} == {
        EMBEDDERS[RETRIEVAL[key].embedder]["embedding_model"]
    }
    assert {r["auth"] for r in server.log} == {"Bearer sk-test"}


def test_blank_and_badly_typed_queries_as_the_benchmark(server):
    env = episode(make(server, "openai_embeddings"))
    n = len(server.log)
    for q in ("", "   "):
        env.step(call("KB_search", query=q))
        assert last(env) == f"Error: {BLANK_QUERY}"
    env.step(call("KB_search", query=5))
    assert last(env) == "Error: 'int' object has no attribute 'strip'"
    assert len(server.log) == n  # refused before any call


def test_a_second_build_makes_no_call(server):
    env = episode(make(server, "openai_embeddings_grep"))
    env.step(call("KB_search", query="wire transfer fee"))
    first = last(env)
    n = len(server.log)
    assert n >= 2
    tau_env.registry.clear_cache()  # a fresh domain: documents and the query come from the disk cache
    env = episode(make(server, "openai_embeddings_grep"))
    env.step(call("KB_search", query="wire transfer fee"))
    assert strip_timing(last(env)) == strip_timing(first)
    assert len(server.log) == n
    # another model is another cache entry
    tau_env.registry.clear_cache()
    make(server, "openai_embeddings", embedding_model="other-model")
    assert len(server.log) > n


def test_documents_are_sent_in_batches(server):
    make(server, "qwen_embeddings", embedding_batch_size=100)
    sizes = [len(r["body"]["input"]) for r in server.calls("/embeddings")]
    n = len(tau_env.registry.load_domain("tau3-banking", data_dir=str(DATA)).documents)
    assert sizes == [100] * (n // 100) + ([n % 100] if n % 100 else [])


def test_retried_then_infrastructure_error(server):
    server.fail = [503, 429]
    make(server, "openai_embeddings", retries=2)  # two failures, then success
    assert len(server.log) > 2 and server.log[2]["path"].endswith("/embeddings")
    tau_env.registry.clear_cache()
    server.fail = [500] * 3
    with pytest.raises(
        InfrastructureError,
        match=r"^make\('tau3-banking'.*\): The embedding model 'other' at http://127\.0\.0\.1:\d+/v1/embeddings "
        r"failed after 3 attempts: HTTP 500: scripted 500$",
    ):
        make(server, "openai_embeddings", embedding_model="other", retries=2)


def test_a_bad_request_is_not_retried(server):
    server.fail = [401]
    with pytest.raises(InfrastructureError, match=r"embeddings: HTTP 401: scripted 401$"):
        make(server, "openai_embeddings", retries=3)
    assert len(server.log) == 1


@pytest.mark.parametrize(
    "reply,why",
    [
        ({"data": []}, r"returned 0 vectors of lengths \[\] for \d+ inputs; expected one non-empty vector per input"),
        ({"nodata": 1}, "returned a malformed reply"),
        ({"data": [{"index": 0, "embedding": ["x"]}]}, "returned a malformed reply"),
    ],
)
def test_a_malformed_reply_is_an_infrastructure_error(server, reply, why):
    server.reply_override = lambda path, body: reply
    with pytest.raises(InfrastructureError, match=why):
        make(server, "qwen_embeddings")


def test_missing_key_bad_url_and_bad_options_fail_at_make(server, monkeypatch):
    monkeypatch.delenv("TAU_TEST_MISSING", raising=False)
    with pytest.raises(
        InvalidOptionError,
        match=r"^make\(.*\): The embedding model 'text-embedding-3-large' at http://127\.0\.0\.1:\d+/v1 needs an API "
        r"key in \$TAU_TEST_MISSING, which is unset: export TAU_TEST_MISSING=",
    ):
        make(server, "openai_embeddings", embedding_api_key_env="TAU_TEST_MISSING")
    with pytest.raises(InvalidOptionError, match=r"needs an API key in \$TAU_TEST_MISSING"):
        make(server, "bm25_reranker", reranker_api_key_env="TAU_TEST_MISSING")
    with pytest.raises(InvalidOptionError, match=r"The embedding base URL must be an http:// or https:// base URL"):
        make(server, "alltools", embedding_base_url="ftp://x")
    with pytest.raises(InvalidOptionError, match=r"Unknown retrieval option 'embeding_model'.*Did you mean"):
        make(server, "openai_embeddings", embeding_model="x")
    with pytest.raises(InvalidOptionError, match=r"retrieval option 'retries' must be int, got '3'"):
        make(server, "openai_embeddings", retries="3")
    with pytest.raises(InvalidOptionError, match=r"retrieval_options must be a dict"):
        tau_env.make("tau3-banking", data_dir=str(DATA), retrieval_options=["x"])
    assert server.log == []  # nothing was sent


def test_no_key_variable_sends_no_key(server):
    make(server, "openai_embeddings", embedding_api_key_env=None)
    assert {r["auth"] for r in server.log} == {None}


def test_the_default_endpoints_are_the_benchmarks(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    e = RemoteEmbedder("m", "https://openrouter.ai/api/v1", api_key_env=None)
    assert e.name == "m @ https://openrouter.ai/api/v1"
    from tau_env.domains.tau3_banking.prompts import needs

    assert needs("alltools") == [
        "embeddings endpoint: text-embedding-3-large at https://api.openai.com/v1, key in $OPENAI_API_KEY",
        "bubblewrap sandbox (apt-get install bubblewrap)",
    ]
    assert needs("qwen_embeddings_reranker") == [
        "embeddings endpoint: qwen/qwen3-embedding-8b at https://openrouter.ai/api/v1, key in $OPENROUTER_API_KEY",
        "chat endpoint (LLM reranker): gpt-5.2 at https://api.openai.com/v1, key in $OPENAI_API_KEY",
    ]
    monkeypatch.setenv("OPENAI_BASE_URL", "http://proxy.local/v1")  # the openai package's variable
    assert "at http://proxy.local/v1" in needs("openai_embeddings")[0]
    assert needs("bm25") == needs("golden_retrieval") == []


# --- alltools: k, the two searches, the prompt ------------------------------------------------------
@pytest.fixture
def fake_shell(monkeypatch):
    """A stand-in sandbox module, recording the write flag it was asked for."""
    import sys
    import types

    from tau_env.tools import raw_tool

    asked = []

    def shell_tools(domain, *, write):
        asked.append(write)

        def shell(self, command):
            return f"ran {command}"

        schema = {"type": "function", "function": {"name": "shell", "description": "d", "parameters": {}}}
        return [raw_tool(shell, schema)]

    module = types.ModuleType("tau_env.domains.tau3_banking.shell")
    module.shell_tools = shell_tools
    monkeypatch.setitem(sys.modules, "tau_env.domains.tau3_banking.shell", module)
    return asked


@pytest.mark.parametrize("key", ["alltools", "alltools-qwen"])
def test_alltools_tools_prompt_and_k(server, fake_shell, key):
    env = episode(make(server, key))
    tools = env.observe("agent")["tools"]
    assert [t["function"]["name"] for t in tools[:3]] == ["KB_search_bm25", "KB_search_dense", "shell"]
    assert tools[0] == KB_SEARCH_BM25_SCHEMA and tools[1] == KB_SEARCH_DENSE_SCHEMA
    assert fake_shell == [False]
    prompts = env.domain.prompts
    expected = prompts["all_tools"]
    for name in ("policy_header", "shell_instructions", "additional_instructions"):
        expected = expected.replace("{{component:" + name + "}}", prompts[f"components/{name}"])
    provider, model = (
        ("OpenAI API", "text-embedding-3-large") if key == "alltools" else ("OpenRouter", "qwen3-embedding-8b")
    )
    sentence = f"The `KB_search_dense` tool uses **{provider}** with embedding model `{model}` for dense retrieval."
    assert build_prompt(env.domain, key) == expected.replace("{{all_tools_dense_instructions}}", sentence)
    bm25 = BenchmarkBM25(env.domain.documents)
    prefix = QWEN_PREFIX if key == "alltools-qwen" else ""
    q = "dispute a credit card charge"
    for k, n in ((10, 10), (3, 3), (25, 10), (0, 0), (-2, 8), (True, 1), (None, 10)):
        env.step(call("KB_search_bm25", query=q, k=k))
        assert strip_timing(last(env)) == (format_hits(bm25.search(q)[:n]) if n else "No relevant documents found.")
        env.step(call("KB_search_dense", query=q, k=k))
        hits = expected_dense(env.domain.documents, q, prefix)[:n]
        assert strip_timing(last(env)) == (format_hits(hits) if n else "No relevant documents found.")
    env.step(call("KB_search_bm25", query=q))  # k defaults to 10
    assert strip_timing(last(env)) == format_hits(bm25.search(q))
    for name in ("KB_search_bm25", "KB_search_dense"):
        env.step(call(name, query=q, k="3"))
        assert last(env) == "Error: slice indices must be integers or None or have an __index__ method"
        env.step(call(name, query=q, top_k=3))
        mixin = "KBSearchBm25AllToolsMixin" if name.endswith("bm25") else "KBSearchDenseAllToolsMixin"
        assert last(env) == f"Error: {mixin}.{name}() got an unexpected keyword argument 'top_k'"
    env.step(call("KB_search_dense", query=" ", k="3"))  # the query is embedded first, as in the benchmark
    assert last(env) == f"Error: {BLANK_QUERY}"


def test_shell_configurations_pass_the_write_flag(server, fake_shell):
    for key, write in (("terminal_use", False), ("terminal_use_write", True)):
        env = episode(tau_env.make("tau3-banking", data_dir=str(DATA), retrieval=key))
        names = [t["function"]["name"] for t in env.observe("agent")["tools"]]
        assert names[0] == "shell" and names.count("shell") == 1 and "KB_search" not in names
        env.step(call("shell", command="ls"))
        assert last(env) == "ran ls"
        assert fake_shell[-1] is write
    assert server.log == []


def test_a_missing_shell_module_fails_at_make(monkeypatch):
    import sys

    tau_env.registry.clear_cache()
    monkeypatch.setitem(sys.modules, "tau_env.domains.tau3_banking.shell", None)  # import fails
    with pytest.raises(
        DependencyNotInstalled,
        match=r"^make\(.*\): Retrieval 'terminal_use' needs the sandboxed shell "
        r"\(tau_env\.domains\.tau3_banking\.shell\), which this installation cannot import",
    ):
        tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="terminal_use")
    tau_env.registry.clear_cache()


# --- the reranker -------------------------------------------------------------------------------------
def expected_reranked(hits, min_score=5):
    rated = [(d, float(min(10, d.content.lower().count("card")))) for d, _ in hits if d.content]
    rated = [h for h in rated if h[1] >= min_score]
    return sorted(rated, key=lambda h: -h[1])


def test_bm25_reranker_rates_each_hit_and_filters(server):
    env = episode(make(server, "bm25_reranker_grep"))
    q = "credit card late fee"
    env.step(call("KB_search", query=q))
    out = last(env)
    assert TIMING.search(out)
    hits = expected_reranked(BenchmarkBM25(env.domain.documents).search(q))
    assert hits  # the fake rating keeps some
    assert strip_timing(out) == format_hits(hits)
    chats = server.calls("/chat/completions")
    assert len(chats) == 10
    body = chats[0]["body"]
    assert body["model"] == "gpt-5.2" and body["reasoning_effort"] == "low"
    assert body["response_format"]["json_schema"]["name"] == "RelevanceScore"
    prompts = sorted(c["body"]["messages"][0]["content"] for c in chats)
    assert prompts == sorted(
        RERANK_PROMPT.format(q, d.content) for d, _ in BenchmarkBM25(env.domain.documents).search(q)
    )


def test_dense_reranker_and_min_score(server):
    env = episode(make(server, "openai_embeddings_reranker", reranker_min_score=0, reranker_model="local-judge"))
    q = "card"
    env.step(call("KB_search", query=q))
    hits = expected_reranked(expected_dense(env.domain.documents, q), min_score=0)
    assert strip_timing(last(env)) == format_hits(hits)
    assert "reasoning_effort" not in server.calls("/chat/completions")[0]["body"]  # only for gpt-5* models


def _reranker(server, **kw):
    return PointwiseReranker("gpt-5.2", server.url, api_key_env="TAU_TEST_KEY", backoff=0.0, **kw)


@pytest.mark.parametrize(
    "message,finish,rating",
    [
        ({"content": '{"relevance_score": 7}'}, "stop", 7),
        ({"content": '{"relevance_score": "8"}'}, "stop", 8),  # pydantic's lax int, as the openai package reads
        ({"content": '{"relevance_score": 42}'}, "stop", 10),  # clamped
        ({"content": '{"relevance_score": -3}'}, "stop", 0),
        ({"content": '{"relevance_score": 7.5}'}, "stop", None),  # does not parse: dropped
        ({"content": "seven"}, "stop", None),
        ({"content": '{"relevance_score": 9}'}, "length", None),  # the openai package raises: dropped
        ({"content": None, "refusal": "no"}, "stop", 0),  # nothing parsed: 0
        ({"content": ""}, "stop", 0),
    ],
)
def test_reranker_reads_ratings_as_the_openai_package(server, message, finish, rating):
    server.reply_override = lambda path, body: {"choices": [{"finish_reason": finish, "message": message}]}
    assert _reranker(server).rate("q", "doc") == rating


def test_reranker_failures_are_infrastructure_errors(server):
    server.fail = [502]
    assert _reranker(server, retries=1).rate("q", "card card card card card") == 5
    server.fail = [500, 500]
    with pytest.raises(InfrastructureError, match=r"^The reranker model 'gpt-5\.2' at .* failed after 2 attempts"):
        _reranker(server, retries=1).rate("q", "d")
    server.reply_override = lambda path, body: {"choices": []}
    with pytest.raises(InfrastructureError, match=r"^The reranker model 'gpt-5\.2' at .* returned no message"):
        _reranker(server).rate("q", "d")
