"""SynthLLM against a scripted OpenAI-compatible server on loopback, and the JSON extraction."""

from __future__ import annotations

import asyncio
import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.llm import JSONReplyError, SynthLLM, extract_json, run_sync
from tau_env.synthesis.run import RunFolder

from tau_env.error import InfrastructureError
from tau_env.testing import FakeOpenAI, Reply, text

MSG = [{"role": "user", "content": "Give me JSON."}]


def scripted(*replies):
    """A script answering with ``replies`` in order (the last one repeats)."""
    queue = list(replies)

    def script(request):
        r = queue.pop(0) if len(queue) > 1 else queue[0]
        return r if isinstance(r, Reply) else text(r)

    return script


# ---------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    "reply",
    [
        '{"a": 1}',
        '```json\n{"a": 1}\n```',
        'Sure! Here it is:\n```\n{"a": 1}\n```\nAnything else?',
        'The answer is {"a": 1}. Done.',
        'Use {name} as a slot; the object: {"a": 1}',
        '<think>maybe {"a": 0}</think>{"a": 1}',
        'prose ```python\nx = {}\n``` then ```json\n{"a": 1}\n```',
    ],
)
def test_extract_json_forms(reply):
    assert extract_json(reply) == {"a": 1}


def test_extract_json_object_with_backticks_in_a_string():
    assert extract_json('Here: {"a": "```x```"} ok') == {"a": "```x```"}


@pytest.mark.parametrize("reply", [None, "", "   ", "no json here", "[1, 2]", "{broken", "<think>only</think>"])
def test_extract_json_refuses(reply):
    with pytest.raises(JSONReplyError):
        extract_json(reply)


_text = st.text(alphabet=st.characters(blacklist_characters="`", blacklist_categories=("Cs",)), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_prose = st.text(alphabet=string.ascii_letters + string.digits + " .,:;!?\n-_()[]'\"", max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    obj=st.dictionaries(_text, _json, max_size=5),
    before=_prose,
    after=_prose,
    fence=st.booleans(),
    indent=st.booleans(),
)
def test_extract_json_round_trips_in_prose(obj, before, after, fence, indent):
    body = json.dumps(obj, indent=2 if indent else None, ensure_ascii=False)
    if fence:
        body = f"```json\n{body}\n```"
    assert extract_json(f"{before}{body}{after}") == obj


# ---------------------------------------------------------------- the client


def test_json_in_fences_and_usage(tmp_path):
    with FakeOpenAI(scripted('```json\n{"x": 1}\n```')) as server:
        llm = SynthLLM("m", server.url)
        assert llm.json("wording", MSG, seed=7) == {"x": 1}
        assert server.requests[0]["seed"] == 7 and server.requests[0]["temperature"] == 0.0
    assert llm.usage == {
        "wording": {"calls": 1, "cached": 0, "failures": 0, "prompt_tokens": 10, "completion_tokens": 5}
    }


def test_bad_json_then_good_sends_a_correction():
    with FakeOpenAI(scripted("I think the answer is yes", 'Fine: {"ok": true}')) as server:
        llm = SynthLLM("m", server.url)
        assert llm.json("review", MSG) == {"ok": True}
        second = server.requests[1]["messages"]
        assert second[-2] == {"role": "assistant", "content": "I think the answer is yes"}
        assert second[-1]["role"] == "user" and "no JSON object" in second[-1]["content"]
    assert llm.usage["review"]["failures"] == 1 and llm.usage["review"]["calls"] == 2


def test_never_json_raises_synthesis_error():
    with FakeOpenAI(scripted("nope")) as server:
        llm = SynthLLM("m", server.url)
        with pytest.raises(SynthesisError, match=r"'review' role in 2 replies.*Last reply: 'nope'"):
            llm.json("review", MSG, attempts=2)
        assert len(server.requests) == 2
    assert llm.usage["review"]["failures"] == 2


def test_server_500_retries_then_infrastructure_error():
    with FakeOpenAI(scripted(Reply(status=500))) as server:
        llm = SynthLLM("m", server.url, retries=2, backoff=0.0)
        with pytest.raises(InfrastructureError, match="3 attempts"):
            llm.json("wording", MSG)
        assert len(server.requests) == 3
    assert llm.usage.get("wording", {}).get("failures", 0) == 0


def test_cache_hit_costs_no_request_and_seed_is_in_the_key(tmp_path):
    cache = tmp_path / "llm_cache.sqlite"
    with FakeOpenAI(scripted('{"n": 1}', '{"n": 2}', '{"n": 3}')) as server:
        a = SynthLLM("m", server.url, cache_path=cache)
        assert a.json("wording", MSG, seed=1) == {"n": 1}
        b = SynthLLM("m", server.url, cache_path=cache)  # a resumed run
        assert b.json("wording", MSG, seed=1) == {"n": 1}
        assert len(server.requests) == 1
        assert b.usage["wording"]["cached"] == 1 and b.usage["wording"]["calls"] == 0
        assert b.json("wording", MSG, seed=2) == {"n": 2}  # another seed: another request
        assert len(server.requests) == 2


def test_a_reply_that_does_not_parse_is_never_cached(tmp_path):
    # a model that answered garbage once, then was fixed: the rerun asks it again instead of replaying garbage
    cache = tmp_path / "c.sqlite"
    with FakeOpenAI(scripted("lol not json {{{", '{"v": 1}')) as server:
        assert SynthLLM("m", server.url, cache_path=cache).json("r", MSG) == {"v": 1}
        assert len(server.requests) == 2  # the garbage, then the answer to the correction
        again = SynthLLM("m", server.url, cache_path=cache)
        assert again.json("r", MSG) == {"v": 1}
        assert len(server.requests) == 3  # the first request was not cached: asked again, answered well
        assert again.usage["r"] == {"calls": 1, "cached": 0, "failures": 0, "prompt_tokens": 10, "completion_tokens": 5}
        third = SynthLLM("m", server.url, cache_path=cache)
        assert third.json("r", MSG) == {"v": 1}
        assert len(server.requests) == 3 and third.usage["r"]["cached"] == 1  # now cached


def test_a_huge_reply_is_a_failure_asked_again_and_never_cached(tmp_path):
    from tau_env.synthesis.llm import MAX_REPLY_CHARS

    huge = '{"v": "' + "x" * (MAX_REPLY_CHARS + 10) + '"}'
    cache = tmp_path / "c.sqlite"
    with FakeOpenAI(scripted(huge, '{"v": 2}')) as server:
        llm = SynthLLM("m", server.url, cache_path=cache)
        assert llm.json("r", MSG) == {"v": 2}
        assert llm.usage["r"]["failures"] == 1
        correction = server.requests[1]["messages"]
        assert "characters long" in correction[-1]["content"]
        assert len(correction[-2]["content"]) <= 2000  # the huge reply is not sent back whole
    assert cache.stat().st_size < MAX_REPLY_CHARS


def test_concurrency_is_bounded():
    in_flight = peak = 0

    def script(request):
        return Reply({"role": "assistant", "content": json.dumps({"i": request["seed"]})}, delay=0.05)

    async def main(llm):
        nonlocal in_flight, peak

        async def one(i):
            nonlocal in_flight, peak
            return await llm.ajson("wording", MSG, seed=i)

        return await asyncio.gather(*(one(i) for i in range(12)))

    with FakeOpenAI(script) as server:
        llm = SynthLLM("m", server.url, max_concurrency=3)
        orig = llm._client

        def counting_client():
            client, sem = orig()
            return client, _Counting(sem)

        class _Counting:
            def __init__(self, sem):
                self.sem = sem

            async def __aenter__(self):
                nonlocal in_flight, peak
                await self.sem.acquire()
                in_flight += 1
                peak = max(peak, in_flight)

            async def __aexit__(self, *exc):
                nonlocal in_flight
                in_flight -= 1
                self.sem.release()

        llm._client = counting_client  # type: ignore[method-assign]
        results = asyncio.run(main(llm))
        assert [r["i"] for r in results] == list(range(12))
        assert peak == 3
        assert server.connections <= 3
    assert llm.usage["wording"]["calls"] == 12


def test_json_works_inside_a_running_loop():
    with FakeOpenAI(scripted('{"k": "v"}')) as server:
        llm = SynthLLM("m", server.url)

        async def caller():
            return llm.json("wording", MSG)  # sync code called from async code

        assert asyncio.run(caller()) == {"k": "v"}


def test_run_sync_without_and_with_a_loop():
    async def value():
        return 5

    assert run_sync(value()) == 5

    async def outer():
        return run_sync(value())

    assert asyncio.run(outer()) == 5


def test_save_usage_adds_only_new_counts(tmp_path):
    with FakeOpenAI(scripted('{"a": 1}')) as server, RunFolder.create(tmp_path / "r", {"domain": "d"}) as run:
        llm = SynthLLM("m", server.url)
        llm.json("wording", MSG, seed=1)
        llm.save_usage(run)
        llm.json("review", MSG, seed=2)
        rec = llm.save_usage(run)
        assert rec["roles"]["wording"]["calls"] == 1 and rec["roles"]["review"]["calls"] == 1
        other = SynthLLM("m", server.url)  # a later stage adds its own
        other.json("composition", MSG, seed=3)
        other.json("wording", MSG, seed=4)
        rec = other.save_usage(run)
        assert rec["roles"]["wording"]["calls"] == 2
        assert rec["totals"]["calls"] == 4 and rec["totals"]["prompt_tokens"] == 40
        assert run.read_json("llm_usage.json") == rec
    assert llm.usage_totals()["calls"] == 2


def test_bad_settings():
    from tau_env.error import InvalidOptionError

    with pytest.raises(InvalidOptionError):
        SynthLLM("")
    with pytest.raises(InvalidOptionError):
        SynthLLM("m", max_concurrency=0)
    with pytest.raises(InvalidOptionError):
        SynthLLM("m", "http://127.0.0.1:1/v1").json("r", MSG, attempts=0)


def test_pickles_for_worker_processes(tmp_path):
    import pickle

    with FakeOpenAI(scripted('{"p": 1}')) as server:
        llm = SynthLLM("m", server.url, cache_path=tmp_path / "c.sqlite")
        assert llm.json("wording", MSG) == {"p": 1}
        copy = pickle.loads(pickle.dumps(llm))
        assert copy.json("wording", MSG) == {"p": 1}
        assert len(server.requests) == 1 and copy.usage["wording"]["cached"] == 1
