"""tau3-banking's default prompts are the benchmark's: the requests match recorded transcripts.

``../shared/data/tau3_banking_golden/requests/`` holds every HTTP request tau2-bench's runner sent
to the agent and user models against a scripted server (24 runs: 4 retrieval variants x 6
tasks). Here tau_env plays each run's task with ``LLMAgent`` and ``LLMUser`` against
``FakeOpenAI`` returning the recorded replies in order, and every request it sends must equal the
recorded body, seat by seat and request by request: messages (roles, order, content, tool-call
ids, the benchmark's ``name`` beside ``function``), tools, tool_choice, temperature and seed.

Documented exceptions: ``model`` (the server's name); KB_search's wall-clock timing suffix;
nothing else (``Sampling(max_tokens=None)`` sends no ``max_tokens``, as the benchmark).
Search ties follow the recorded document load order (``document_order``).

The user-simulator guidelines are not in the shared data folder (the product reads them from the
user's copy of tau2-bench): the test rebuilds the two files from the recorded system messages.
"""

from __future__ import annotations

import asyncio
import json
import re
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tau_env
from tau_env import arun_episode
from tau_env.domains.tau3_banking import benchmark_prompts as bp
from tau_env.domains.tau3_banking import ordered_documents
from tau_env.error import DependencyNotInstalled, DomainError, InvalidOptionError
from tau_env.knowledge import Document
from tau_env.llm import ChatClient, LLMAgent, LLMUser, Sampling
from tau_env.testing import FakeOpenAI, Reply
from tests.conftest import TAU3_DATA, TAU3_GOLDEN, needs_shared

REQUESTS = TAU3_GOLDEN / "requests"
ORDER = REQUESTS / "kb_document_load_order.json"
SEED = 626729  # the benchmark's trial seed for --seed 300
TIMING = re.compile(r"\[Timing: retrieval=\d+ms(?:, reranking=\d+ms)?, total=\d+ms\]")
SCENARIO = "\n\n<scenario>\n"

pytestmark = needs_shared(TAU3_DATA, REQUESTS)


def _runs() -> list[tuple[str, str]]:
    if not (REQUESTS / "runs.json").exists():
        return []
    return [(r["variant"], r["task_id"]) for r in json.loads((REQUESTS / "runs.json").read_text())]


def _golden(variant: str, task_id: str) -> list[dict]:
    with open(REQUESTS / variant / f"{task_id}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def guidelines_dir(tmp_path_factory) -> Path:
    """The two guideline files, rebuilt from the recorded user system messages (each must agree)."""
    texts: dict[str, set[str]] = {bp.GUIDELINES_WITH_TOOLS: set(), bp.GUIDELINES_WITHOUT_TOOLS: set()}
    for variant, task_id in _runs():
        for r in _golden(variant, task_id):
            if r["seat"] == "user":
                system = r["body"]["messages"][0]["content"]
                name = bp.GUIDELINES_WITH_TOOLS if "tools" in r["body"] else bp.GUIDELINES_WITHOUT_TOOLS
                texts[name].add(system[: system.index(SCENARIO)])
    folder = tmp_path_factory.mktemp("user_simulator")
    for name, found in texts.items():
        assert len(found) == 1, f"{name}: the recorded requests disagree ({len(found)} versions)"
        (folder / name).write_text(found.pop(), encoding="utf-8")
    return folder


def _normal(body: dict) -> dict:
    """The compared part of a body: all but ``model``, timing suffixes normalised."""

    def norm(x):
        if isinstance(x, str):
            return TIMING.sub("[Timing: <normalised>]", x)
        if isinstance(x, list):
            return [norm(v) for v in x]
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items()}
        return x

    return norm({k: v for k, v in body.items() if k != "model"})


def _first_difference(a, b, path="$") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} != {type(b).__name__}: {str(a)[:200]!r} vs {str(b)[:200]!r}"
    if isinstance(a, dict):
        if set(a) != set(b):
            return f"{path}: keys {sorted(a)} != {sorted(b)}"
        return next((d for k in a if (d := _first_difference(a[k], b[k], f"{path}.{k}"))), None)
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        return next((d for i, (u, v) in enumerate(zip(a, b)) if (d := _first_difference(u, v, f"{path}[{i}]"))), None)
    if a != b:
        i = next((i for i, (p, q) in enumerate(zip(str(a), str(b))) if p != q), min(len(str(a)), len(str(b))))
        lo, hi = max(0, i - 60), i + 80
        return f"{path}: differs at {i}: golden {str(a)[lo:hi]!r} | ours {str(b)[lo:hi]!r}"
    return None


def _replay(variant: str, task_id: str, guidelines: Path) -> tuple[list[dict], list[dict]]:
    """Play the run in tau_env against the recorded replies; (golden records, bodies tau_env sent)."""
    golden = _golden(variant, task_id)
    replies = {s: [r["reply_message"] for r in golden if r["seat"] == s] for s in ("agent", "user")}
    served = {"agent": 0, "user": 0}

    def script(body: dict) -> Reply:
        seat = "agent" if "agent" in body["model"] else "user"
        k = served[seat]
        served[seat] += 1
        if k >= len(replies[seat]):  # more requests than recorded: end the chat, the count check fails
            return Reply({"role": "assistant", "content": "###STOP###"})
        return Reply(replies[seat][k])

    env = tau_env.make(
        "tau3-banking",
        data_dir=str(TAU3_DATA),
        retrieval=variant,
        user_guidelines_dir=str(guidelines),
        document_order=str(ORDER),
    )
    with FakeOpenAI(script) as server:
        sampling = Sampling(temperature=0.0, max_tokens=None)  # the benchmark's default: {"temperature": 0.0}
        agent = LLMAgent(ChatClient("scripted-agent", server.url, sampling=sampling, retries=0))
        user = LLMUser(ChatClient("scripted-user", server.url, sampling=sampling, retries=0))
        result = asyncio.run(arun_episode(env, agent, user, task_id=task_id, seed=SEED))
        sent = list(server.requests)
    env.close()
    assert result.termination_reason in ("user_stop", "transfer")
    return golden, sent


@pytest.mark.parametrize(("variant", "task_id"), _runs())
def test_requests_match_the_benchmark(variant, task_id, guidelines_dir):
    from tau_env.domains.tau3_banking.prompts import RETRIEVAL

    if variant not in RETRIEVAL:
        pytest.xfail(f"retrieval configuration {variant!r} does not exist in tau_env yet")
    try:
        golden, sent = _replay(variant, task_id, guidelines_dir)
    except DependencyNotInstalled as e:
        pytest.skip(f"{variant}: {e}")
    for seat in ("agent", "user"):
        want = [_normal(r["body"]) for r in golden if r["seat"] == seat]
        got = [_normal(b) for b in sent if seat in b["model"]]
        for k, (w, g) in enumerate(zip(want, got)):
            diff = _first_difference(w, g)
            assert diff is None, f"{variant}/{task_id} {seat} request {k}: {diff}"
        assert len(got) == len(want), f"{variant}/{task_id} {seat}: {len(got)} requests, recorded {len(want)}"


def test_benchmark_sampling_sends_no_max_tokens():
    """The benchmark's body has no max_tokens; Sampling(max_tokens=None) must leave the key out."""
    client = ChatClient("m", "http://127.0.0.1:1/v1", sampling=Sampling(temperature=0.0, max_tokens=None))
    body = client.request([{"role": "user", "content": "hi"}], None, SEED)
    assert set(body) == {"model", "messages", "temperature", "seed"}


# --- the prompt style -------------------------------------------------------------------------------
def test_agent_prompt_is_the_wrapped_policy_and_tau_env_style_keeps_ours(guidelines_dir):
    from tau_env.domains.tau3_banking.prompts import build_prompt

    bench = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), user_guidelines_dir=str(guidelines_dir))
    ours = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), prompt_style="tau_env")
    policy = build_prompt(ours.domain, "bm25")
    assert (
        bench.system_prompt == f"<instructions>\n{bp.AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>"
    )
    assert ours.system_prompt == policy
    for env in (bench, ours):
        env.reset(options={"task_id": "task_060"})  # user_tools: []
        env.step("Hi, I need help.")
        env.step(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_current_time", "arguments": '{"x":"é"}'}}
                ],
            }
        )
    b_call, b_result = bench.observe("agent")["messages"][-2:]
    o_call, o_result = ours.observe("agent")["messages"][-2:]
    assert b_call == {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "c1",
                "name": "get_current_time",
                "function": {"name": "get_current_time", "arguments": '{"x": "\\u00e9"}'},
                "type": "function",
            }
        ],
    }
    assert list(b_result) == ["role", "content", "tool_call_id"]
    assert o_call["content"] is None and o_call["tool_calls"][0]["function"]["arguments"] == '{"x":"é"}'
    assert o_result["name"] == "get_current_time"
    # the user's prompt: the benchmark's no-tools guidelines, then the scenario; no tools for task_060
    user = bench.observe("user")
    assert user["tools"] == []
    assert user["messages"][0]["content"].startswith((guidelines_dir / bp.GUIDELINES_WITHOUT_TOOLS).read_text())
    assert "<scenario>\nInstructions:\n\t" in user["messages"][0]["content"]
    assert ours.observe("user")["messages"][0]["content"] != user["messages"][0]["content"]


def test_prompt_style_is_checked():
    with pytest.raises(InvalidOptionError, match=r"^make\('tau3-banking'.*prompt_style must be one of \['benchmark'"):
        tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), prompt_style="tau2")


def test_missing_guidelines_warn_and_are_recorded(tmp_path):
    tau_env.registry.clear_cache()
    with pytest.warns(UserWarning, match=r"^tau3-banking: tau2-bench's user-simulator guidelines are not beside"):
        env = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA))
    config = env.domain.prompt_config()
    assert config == {
        "prompt_style": "benchmark",
        "user_prompt_version": "tau_env-user-v1",
        "user_guidelines_sha256": None,
    }
    with pytest.raises(DomainError, match=r"user_guidelines_dir='.*': expected the folder of tau2-bench's"):
        tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), user_guidelines_dir=str(tmp_path / "nope"))
    (tmp_path / bp.GUIDELINES_WITH_TOOLS).write_text("x\n")
    with pytest.raises(DomainError, match=r"missing simulation_guidelines\.md\."):
        tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), user_guidelines_dir=str(tmp_path))


def test_guidelines_are_found_beside_the_data_folder(tmp_path, guidelines_dir):
    """tau2-bench's layout: data/tau2/domains/banking_knowledge and data/tau2/user_simulator."""
    data = tmp_path / "data" / "tau2" / "domains" / "banking_knowledge"
    data.mkdir(parents=True)
    for part in ("db.json", "documents", "tasks", "prompts"):
        (data / part).symlink_to(TAU3_DATA / part)
    sim = tmp_path / "data" / "tau2" / "user_simulator"
    sim.mkdir()
    for name in bp.GUIDELINE_FILES:
        (sim / name).write_text((guidelines_dir / name).read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = tau_env.make("tau3-banking", data_dir=str(data))
    config = env.domain.prompt_config()
    assert config["prompt_style"] == "benchmark" and config["user_prompt_version"] == "tau2-bench"
    assert set(config["user_guidelines_sha256"]) == set(bp.GUIDELINE_FILES)


def test_config_json_records_the_prompt_style_and_identifies_the_run(tmp_path, guidelines_dir):
    from tau_env.harness.results import differences

    kw = dict(data_dir=str(TAU3_DATA), user_guidelines_dir=str(guidelines_dir))
    env = tau_env.make("tau3-banking", **kw)
    config = env.domain.prompt_config()
    assert config["prompt_style"] == "benchmark"
    assert config["user_guidelines_sha256"] == bp.find_guidelines(TAU3_DATA, guidelines_dir).sha256()
    ours = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), prompt_style="tau_env").domain.prompt_config()
    assert differences(config, ours)
    # a results folder written before the key existed was tau_env's style
    assert not differences({"user_prompt_version": "tau_env-user-v1"}, {k: v for k, v in ours.items()})


# --- the document load order ------------------------------------------------------------------------
def test_document_order_is_an_explicit_input():
    ids = json.loads(ORDER.read_text())["ids"]
    env = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), document_order=ids, prompt_style="tau_env")
    assert [d.id for d in env.domain.documents] == ids
    again = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), document_order=str(ORDER), prompt_style="tau_env")
    assert again.domain is env.domain  # the same order, the same cached domain
    rev = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), document_order=ids[::-1], prompt_style="tau_env")
    assert [d.id for d in rev.domain.documents] == ids[::-1]
    with pytest.raises(InvalidOptionError, match=r"document_order lacks 1 of the data folder's 698 documents"):
        tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), document_order=ids[1:])
    with pytest.raises(InvalidOptionError, match=r"document_order names 'nope', which is not a document"):
        tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), document_order=[*ids, "nope"])
    with pytest.raises(InvalidOptionError, match=r"document_order must be None, a list of document ids"):
        tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), document_order=42)


@given(st.permutations(list(range(6))), st.integers(0, 5))
def test_ordered_documents_is_a_permutation_or_an_error(perm, dup):
    docs = [Document(f"d{i}", f"t{i}", "c") for i in range(6)]
    order = [f"d{i}" for i in perm]
    assert [d.id for d in ordered_documents(docs, order)] == order
    with pytest.raises(InvalidOptionError, match=r"^document_order names 'd\d' twice\.$"):
        ordered_documents(docs, [*order, f"d{dup}"])


@given(st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.integers(), st.none()), max_size=3))
def test_own_message_reserialises_arguments_as_the_benchmark(args):
    raw = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "i", "type": "function", "function": {"name": "f", "arguments": raw}}],
    }
    out = bp.own_message(msg)
    assert out == {
        "role": "assistant",
        "tool_calls": [
            {"id": "i", "name": "f", "function": {"name": "f", "arguments": json.dumps(args)}, "type": "function"}
        ],
    }
