"""tau3-banking retrieval configurations: the benchmark's BM25 and grep outputs, every keyword's
prompt and tools, golden documents in the prompt, and the offline dense variant (fake encoder).

Reads the benchmark data from ../shared/data (skipped where absent; failed under CI).
"""

import json
import re

import numpy as np
import pytest

import tau_env
from tau_env import TauEnv, call, say
from tau_env.domains.tau3_banking import load
from tau_env.domains.tau3_banking.prompts import RETRIEVAL, build_prompt, format_documents, retrieval_tools
from tau_env.domains.tau3_banking.retrieval import (
    GREP_SCHEMA,
    KB_SEARCH_BM25_SCHEMA,
    KB_SEARCH_DENSE_SCHEMA,
    KB_SEARCH_SCHEMA,
    BenchmarkBM25,
    grep_output,
    kb_search_output,
    strip_timing,
)
from tau_env.error import InvalidOptionError
from tests.conftest import TAU3_DATA as DATA
from tests.conftest import TAU3_GOLDEN, needs_shared
from tests.test_tau3_endpoints import fake_shell, opts, server  # noqa: F401  (fixtures)

SAMPLES = TAU3_GOLDEN / "kb_search_samples.json"
pytestmark = needs_shared(DATA, SAMPLES)

SAMPLE = json.loads(SAMPLES.read_text()) if SAMPLES.is_file() else {"kb_search_bm25": [], "grep": []}
TIMING = re.compile(r"\n\n\[Timing: retrieval=\d+ms, reranking=\d+ms, total=\d+ms\]$")
KNOWLEDGE_TOOLS = {"KB_search", "grep", "KB_search_bm25", "KB_search_dense", "shell"}
EXPECTED_TOOLS = {
    "no_knowledge": [],
    "full_kb": [],
    "golden_retrieval": [],
    "bm25": ["KB_search"],
    "bm25_grep": ["KB_search", "grep"],
    "grep_only": ["grep"],
    "dense_minilm": ["KB_search"],
    "dense_minilm_grep": ["KB_search", "grep"],
    "terminal_use": ["shell"],
    "terminal_use_write": ["shell"],
    "alltools": ["KB_search_bm25", "KB_search_dense", "shell"],
    "alltools-qwen": ["KB_search_bm25", "KB_search_dense", "shell"],
    **{
        f"{base}{rerank}{grep}": ["KB_search", "grep"] if grep else ["KB_search"]
        for base in ("openai_embeddings", "qwen_embeddings", "bm25")
        for rerank in ("", "_reranker")
        for grep in ("", "_grep")
        if (base, rerank) != ("bm25", "")
    },
}
#: tau2-bench's ``RETRIEVAL_VARIANTS`` (commit a2c0247), in its order.
BENCHMARK_NAMES = [
    "no_knowledge",
    "full_kb",
    "golden_retrieval",
    "qwen_embeddings_grep",
    "openai_embeddings_grep",
    "qwen_embeddings_reranker_grep",
    "openai_embeddings_reranker_grep",
    "bm25_grep",
    "bm25_reranker_grep",
    "qwen_embeddings",
    "openai_embeddings",
    "qwen_embeddings_reranker",
    "openai_embeddings_reranker",
    "bm25",
    "bm25_reranker",
    "grep_only",
    "terminal_use",
    "terminal_use_write",
    "alltools",
    "alltools-qwen",
]
TEMPLATES = {  # the benchmark's template per configuration
    **{k: "classic_rag_" + ("qwen" if "qwen" in k else "openai" if "openai" in k else "bm25") for k in EXPECTED_TOOLS},
    "no_knowledge": "no_knowledge",
    "full_kb": "full_kb",
    "golden_retrieval": "required_docs",
    "grep_only": "grep_only",
    "terminal_use": "agentic_search",
    "terminal_use_write": "agentic_search_write",
    "alltools": "all_tools",
    "alltools-qwen": "all_tools",
}
PROMPT_PHRASE = {
    "bm25": "`KB_search` tool (uses BM25 for retrieval)",
    "bm25_grep": "`KB_search` (uses BM25 for retrieval) and `grep` tools",
    "grep_only": "`grep` tool (regex pattern matching)",
    "dense_minilm": "`KB_search` tool (uses all-MiniLM-L6-v2 embeddings for retrieval)",
    "dense_minilm_grep": "`KB_search` (uses all-MiniLM-L6-v2 embeddings for retrieval) and `grep` tools",
    "full_kb": "<knowledge_base>\n## ",
    "golden_retrieval": "<required_documents>\n",  # documents: see the golden tests below
}


class FakeEncoder:
    """Deterministic bag-of-letters vectors: dense search without a model."""

    name = "fake-letters"

    def encode(self, texts):
        out = np.zeros((len(texts), 26), np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


@pytest.fixture(scope="module")
def domain():
    return tau_env.registry.load_domain("tau3-banking", data_dir=str(DATA))


@pytest.fixture(scope="module")
def bm25(domain):
    return BenchmarkBM25(domain.documents)


@pytest.fixture
def fake_dense(domain, monkeypatch, tmp_path):
    """The domain's dense index built with a fake encoder, undone after the test."""
    from tau_env.knowledge import embed

    monkeypatch.setenv("TAU_ENV_CACHE", str(tmp_path))
    monkeypatch.setattr(embed, "default_encoder", FakeEncoder)
    monkeypatch.setattr(domain.kb, "_dense", None)  # restored afterwards: no fake index leaks out
    return domain


# --- the benchmark's samples ----------------------------------------------------------------------
@pytest.mark.parametrize("sample", SAMPLE["kb_search_bm25"], ids=lambda s: s["query"])
def test_bm25_samples_match_exactly(bm25, sample):
    hits = bm25.search(sample["query"])
    assert [(d.id, s) for d, s in hits] == [(r["doc_id"], r["score"]) for r in sample["results"]]
    out = kb_search_output(bm25, sample["query"])
    assert TIMING.search(out)
    assert strip_timing(out) == sample["output_without_timing_line"]


@pytest.mark.parametrize("sample", SAMPLE["grep"], ids=lambda s: s["pattern"])
def test_grep_samples_match_exactly(domain, sample):
    out = grep_output(domain.documents, sample["pattern"])
    assert out == sample["output"]
    ids = re.findall(r"^   ID: (.*)$", out, re.M)
    assert ids == [r["doc_id"] for r in sample["results"]]


def test_sample_counts():
    assert len(SAMPLE["kb_search_bm25"]) == 12 and len(SAMPLE["grep"]) == 6


def test_edge_queries_as_the_benchmark(domain, bm25):
    assert strip_timing(kb_search_output(bm25, "   ")) == "No relevant documents found."
    assert grep_output(domain.documents, "  ") == "No matches found for pattern:   "
    assert grep_output(domain.documents, "") == "No matches found for pattern: "
    assert grep_output(domain.documents, "zzqqxx") == "No matches found for pattern: zzqqxx"
    assert "   ID: " in grep_output(domain.documents, "fee(")  # not a regex: matched literally


# --- every keyword through tau_env.make ---------------------------------------------------------
def test_registry_covers_the_benchmark_names():
    assert set(EXPECTED_TOOLS) == set(RETRIEVAL)
    assert [k for k, c in RETRIEVAL.items() if not c.ours] == BENCHMARK_NAMES
    assert [k for k, c in RETRIEVAL.items() if c.ours] == ["dense_minilm", "dense_minilm_grep"]
    for key, config in RETRIEVAL.items():
        if not config.ours:
            suffix = (
                ""
                if (config.tools and "grep" in config.tools) or not key.startswith(("bm25", "openai", "qwen"))
                else "_no_grep"
            )
            assert config.prompt == TEMPLATES[key] + suffix, key


@pytest.mark.parametrize("key", list(RETRIEVAL))
def test_every_keyword_builds_prompt_and_tools(key, domain, server, fake_shell):  # noqa: F811
    options = opts(server) if key not in ("dense_minilm", "dense_minilm_grep") else None
    env = tau_env.make("tau3-banking", data_dir=str(DATA), retrieval=key, retrieval_options=options)
    env.reset(options={"task_id": domain.tasks[0].id})
    obs = env.observe("agent")
    names = [t["function"]["name"] for t in obs["tools"]]
    assert [n for n in names if n in KNOWLEDGE_TOOLS] == EXPECTED_TOOLS[key]
    schemas = {t["function"]["name"]: t for t in obs["tools"]}
    if "KB_search" in schemas:
        assert schemas["KB_search"] == KB_SEARCH_SCHEMA
    if "grep" in schemas:
        assert schemas["grep"] == GREP_SCHEMA
    if "KB_search_bm25" in schemas:
        assert schemas["KB_search_bm25"] == KB_SEARCH_BM25_SCHEMA
        assert schemas["KB_search_dense"] == KB_SEARCH_DENSE_SCHEMA
    prompt = build_prompt(env.domain, key, domain.tasks[0])  # the policy text; the system message holds it
    assert prompt in obs["messages"][0]["content"]
    assert prompt == build_prompt(env.domain, key, domain.tasks[0])
    assert not re.search(r"\{\{[^}]*\}\}", prompt), key
    policy_header = domain.prompts["components/policy_header"]
    assert prompt.startswith(policy_header)  # the component verbatim, nothing stripped
    assert prompt.count(domain.prompts["components/additional_instructions"]) == 1
    if key in PROMPT_PHRASE:
        assert PROMPT_PHRASE[key] in prompt
    if key == "no_knowledge":
        assert prompt == policy_header + "\n\n" + domain.prompts["components/additional_instructions"] + "\n"


def test_prompts_are_built_as_the_benchmark_does(domain):
    prompts = domain.prompts
    header, extra = prompts["components/policy_header"], prompts["components/additional_instructions"]
    full = build_prompt(domain, "full_kb")
    kb = "\n\n---\n\n".join(f"## {d.title}\n\n{d.content}" for d in domain.documents)
    expected = prompts["full_kb"].replace("{{component:policy_header}}", header)
    expected = expected.replace("{{component:additional_instructions}}", extra)
    assert full == expected.replace("{{full_knowledge_base}}", kb)
    pos = 0
    for d in domain.documents:  # every document once, in load order
        pos = full.index(f"## {d.title}\n\n{d.content}", pos) + 1
    bm25 = build_prompt(domain, "bm25_grep")
    assert bm25 == prompts["classic_rag_bm25"].replace("{{component:policy_header}}", header).replace(
        "{{component:additional_instructions}}", extra
    )


def test_golden_retrieval_puts_exactly_the_required_documents(domain):
    golden = load(str(DATA), retrieval="golden_retrieval")
    for task in golden.tasks[:20]:
        prompt = build_prompt(golden, "golden_retrieval", task)
        inner = prompt.split("<required_documents>\n", 1)[1].rsplit("\n</required_documents>", 1)[0]
        docs = [golden.kb.get(d) for d in task.required_documents]
        assert inner == "\n\n---\n\n".join(f"## {d.title}\n\n{d.content}" for d in docs)
        assert inner == format_documents(docs)
        others = [d for d in golden.documents if d.id not in task.required_documents]
        assert not any(d.content in inner for d in others[::25])  # nothing else
    assert "(No documents provided)" in build_prompt(golden, "golden_retrieval", None)
    # through an env whose domain was loaded for golden_retrieval, the prompt follows the task
    env = TauEnv(golden)
    for task in golden.tasks[:3]:
        env.reset(options={"task_id": task.id})
        prompt = env.observe("agent")["messages"][0]["content"]
        assert prompt == golden.system_prompt("golden_retrieval", task)
        assert build_prompt(golden, "golden_retrieval", task) in prompt


def test_golden_retrieval_through_make(domain):
    env = tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="golden_retrieval")
    task = domain.tasks[0]
    env.reset(options={"task_id": task.id})
    prompt = env.observe("agent")["messages"][0]["content"]
    assert prompt == domain.system_prompt("golden_retrieval", task)
    assert build_prompt(domain, "golden_retrieval", task) in prompt


def test_unknown_keyword_is_a_clear_error(domain):
    expected = r"Unknown retrieval configuration 'bm52'; expected one of \[.*'bm25'.*\]\. Did you mean \"bm25\"\?$"
    with pytest.raises(
        InvalidOptionError, match=r"^make\('tau3-banking', data_dir='.*', retrieval='bm52'\): " + expected
    ):
        tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="bm52")
    with pytest.raises(InvalidOptionError, match="^" + expected):
        load(DATA, retrieval="bm52")


@pytest.mark.parametrize(
    "path",
    [build_prompt, retrieval_tools, lambda d, k: d.system_prompt(k), lambda d, k: d.toolbox(k)],
    ids=["build_prompt", "retrieval_tools", "system_prompt", "toolbox"],
)
@pytest.mark.parametrize(
    "key,shown",
    [("dense", r"'dense'"), ("bm52", r"'bm52'"), (["bm25"], "of type list"), (10**5000, "of type int")],
    ids=["harbor-keyword", "typo", "list", "huge-int"],
)
def test_unknown_keyword_is_the_same_error_on_every_direct_path(domain, path, key, shown):
    """Not only make: the domain's own helpers raise the error every domain raises (was DomainError)."""
    with pytest.raises(InvalidOptionError, match=rf"^Unknown retrieval configuration {shown}; expected one of \[.*\]"):
        path(domain, key)


# --- tools in an episode ------------------------------------------------------------------------
def test_bm25_grep_tools_in_an_episode(domain, bm25):
    env = tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="bm25_grep")
    env.reset(options={"task_id": domain.tasks[0].id})
    env.step(say("hi"))
    q = SAMPLE["kb_search_bm25"][0]
    env.step(call("KB_search", query=q["query"]))
    assert strip_timing(env.observe("agent")["messages"][-1]["content"]) == q["output_without_timing_line"]
    g = SAMPLE["grep"][0]
    env.step(call("grep", pattern=g["pattern"]))
    assert env.observe("agent")["messages"][-1]["content"] == g["output"]
    env.step(call("KB_search", query="x", k=3))  # the benchmark's tool has no k: Python's own error text
    assert env.observe("agent")["messages"][-1]["content"] == (
        "Error: KBSearchMixin.KB_search() got an unexpected keyword argument 'k'"
    )


def test_dense_minilm_with_a_fake_encoder(fake_dense):
    domain = fake_dense
    env = tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="dense_minilm")
    env.reset(options={"task_id": domain.tasks[0].id})
    env.step(say("hi"))
    env.step(call("KB_search", query="debit card dispute"))
    out = env.observe("agent")["messages"][-1]["content"]
    assert TIMING.search(out)
    blocks = re.findall(r"^(\d+)\. (.*)\n   ID: (.*)\n   Score: (-?\d+\.\d{4})\n   Content: ", out, re.M)
    assert [int(b[0]) for b in blocks] == list(range(1, 11))
    expected = domain.kb.search_dense("debit card dispute", 10)
    assert [b[2] for b in blocks] == [h.doc_id for h in expected]
    assert [b[3] for b in blocks] == [f"{h.score:.4f}" for h in expected]
    env.step(call("KB_search", query="  "))
    assert strip_timing(env.observe("agent")["messages"][-1]["content"]) == "No relevant documents found."
    names = [t["function"]["name"] for t in env.observe("agent")["tools"]]
    assert "grep" not in names and "KB_search" in names


# --- the recorded requests' tool schemas are ground truth ----------------------------------------
REQUESTS = TAU3_GOLDEN / "requests"


def recorded_agent_tools(variant: str, task_id: str = "task_001") -> list:
    for line in (REQUESTS / variant / f"{task_id}.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["seat"] == "agent":
            return record["body"].get("tools", [])
    raise AssertionError(f"no agent request in {variant}/{task_id}")


@pytest.mark.parametrize("variant", ["bm25", "bm25_grep", "no_knowledge"])
def test_tool_schemas_equal_the_recorded_requests(variant, domain):
    env = tau_env.make("tau3-banking", data_dir=str(DATA), retrieval=variant)
    env.reset(options={"task_id": "task_001"})
    assert env.observe("agent")["tools"] == recorded_agent_tools(variant)


def test_shell_tool_schemas_equal_the_recorded_request(domain):
    """terminal_use with the real sandbox module (skipped where it cannot run here)."""
    from tau_env.error import DependencyNotInstalled

    try:
        env = tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="terminal_use")
    except DependencyNotInstalled as e:
        pytest.skip(f"the shell sandbox cannot run here: {e}")
    env.reset(options={"task_id": "task_001"})
    assert env.observe("agent")["tools"] == recorded_agent_tools("terminal_use")
