"""Property tests: LLM-style garbage never crashes an episode or corrupts its state.

For every action: no exception escapes except InvalidActionError for non-messages; a call that
fails leaves the database digest unchanged; a read tool never changes it.
"""

import functools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tau_env
from tau_env import RandomAgent, call, say
from tau_env.error import InvalidActionError
from tests.conftest import TAU3_DATA, require_shared

HOSTILE = [
    "'; DROP TABLE accounts; --",
    '" OR 1=1 --',
    "(a+)+$",
    "[[[",
    "\\",
    "%s%n",
    "\x00",
    "ünïcødé ✓ 名前 🙂",
    "\u202e",
    "A" * 20_000,
    "",
    " ",
    "null",
    "NaN",
    "1e400",
    "-0",
    "CHK-",
    "C-1001' --",
]


@pytest.fixture(scope="module")
def env():
    """One harbor-bank env for the module's property tests (each example resets it)."""
    e = tau_env.make("harbor-bank-v0", max_steps=10_000)
    yield e
    e.close()


@functools.cache
def _harbor() -> tuple[list[str], dict]:
    """What the strategies draw from, read on the first draw (not at import): ids in Harbor Bank's
    tables after ``reset(seed=0)``, and its tools by name.
    """
    e = tau_env.make("harbor-bank-v0")
    try:
        e.reset(seed=0)
        tables = (
            ("customers", "customer_id"),
            ("accounts", "account_id"),
            ("cards", "card_id"),
            ("transactions", "txn_id"),
        )
        ids = [r[0] for t, col in tables for r in e.db.conn.execute(f"SELECT {col} FROM {t} LIMIT 8")]
        return ids, {t.name: t for t in e.toolbox.tools.values()}
    finally:
        e.close()


def _ids() -> list[str]:
    return _harbor()[0]


def _tools() -> dict:
    return _harbor()[1]


def _agent_tools() -> list[str]:
    return sorted(n for n, t in _tools().items() if t.side == "agent")


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.deferred(lambda: st.sampled_from(HOSTILE + _ids())),
)
json_values = st.recursive(
    json_scalars,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=8), c, max_size=3)),
    max_leaves=6,
)


@st.composite
def tool_args(draw, name):
    t = _tools().get(name)
    props = t.parameters["properties"] if t else {}
    args = {}
    for p, schema in props.items():
        if draw(st.integers(0, 9)) == 0:
            continue  # missing argument
        if "enum" in schema and draw(st.booleans()):
            args[p] = draw(st.sampled_from(schema["enum"]))
        elif schema.get("type") == "integer" and draw(st.booleans()):
            args[p] = draw(st.integers(-5, 10**6))
        elif draw(st.booleans()):
            args[p] = draw(st.sampled_from(_ids() + HOSTILE))
        else:
            args[p] = draw(json_values)
    if draw(st.integers(0, 9)) == 0:
        args[draw(st.text(min_size=1, max_size=10))] = draw(json_values)  # extra argument
    return args


@st.composite
def actions(draw):
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.text(max_size=200))  # plain text is a message
    if kind == 1:
        return {"role": "assistant", "content": draw(st.sampled_from(HOSTILE))}
    name = draw(
        st.one_of(
            st.sampled_from(_agent_tools() + ["unlock_tool"] * 3),
            st.text(max_size=20),
            st.sampled_from(["", "approve_wire_in_app", "DROP TABLE", "get_customer "]),
        )
    )
    raw = draw(
        st.one_of(
            tool_args(name).map(lambda a: json.dumps(a, ensure_ascii=False)),
            tool_args(name),  # a dict instead of a JSON string
            st.sampled_from(["{", "[1,2]", "null", '"x"', '{"a":}', "", "{}" * 3]),
        )
    )
    if name == "unlock_tool" and draw(st.booleans()):
        raw = json.dumps({"tool_name": draw(st.sampled_from([n for n, t in _tools().items() if t.discoverable]))})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "f", "type": "function", "function": {"name": name, "arguments": raw}}],
    }


not_messages = st.one_of(
    st.integers(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.fixed_dictionaries({"role": st.sampled_from(["user", "tool", "system"])}),
    st.fixed_dictionaries({"role": st.just("assistant"), "tool_calls": st.integers()}),
)


def _verify_someone(e):
    row = e.db.conn.execute("SELECT customer_id, date_of_birth, substr(phone, -4) FROM customers").fetchone()
    e.call_tool("agent", "verify_identity", {"customer_id": row[0], "date_of_birth": row[1], "phone_last4": row[2]})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), verify=st.booleans(), batch=st.lists(actions(), min_size=1, max_size=25))
def test_random_actions_never_crash_or_corrupt(env, seed, verify, batch):
    env.reset(seed=seed)
    env.step("I need help")  # the user opens; the agent now acts
    if verify:
        _verify_someone(env)
    for action in batch:
        if env.termination_reason is not None:
            break  # the agent transferred: the episode is over
        if env.agent_selection != "agent":
            env.step("go on")
        before = env.db_digest()
        env.step(action)
        results = env.trajectory[-1].get("tool_results", [])
        after = env.db_digest()
        for r in results:
            tool = _tools().get(r["name"])
            if r["error"] or tool is None or tool.kind == "read":
                assert after == before, (r, action)
        assert env.observation_space("agent").contains(env.observe("agent"))


@settings(max_examples=100, deadline=None)
@given(bad=not_messages)
def test_non_messages_raise_invalid_action_and_change_nothing(env, bad):
    env.reset(seed=1)
    before = (env.db_digest(), env.num_steps, env.agent_selection, len(env.observe("user")["messages"]))
    with pytest.raises(
        InvalidActionError, match=r"^Expected (an assistant message dict|role 'assistant'|'tool_calls')"
    ):
        env.step(bad)
    assert (env.db_digest(), env.num_steps, env.agent_selection, len(env.observe("user")["messages"])) == before


def test_random_policies_thousands_of_steps():
    """Both seats fuzz (the random user never says STOP), checked step by step."""
    e = tau_env.make("harbor-bank-v0", max_steps=300)
    policies = {"agent": RandomAgent(p_text=0.05), "user": RandomAgent(p_text=0.3)}
    steps = seed = 0
    while steps < 5000 and seed < 200:
        e.reset(seed=seed)
        policies["agent"].reset(seed=seed)
        policies["user"].reset(seed=seed + 10_000)
        for seat in e.agent_iter():
            obs, _, term, trunc, _ = e.last()
            if term or trunc:
                e.step(None)
                continue
            before = e.db_digest()
            e.step(policies[seat](obs))
            steps += 1
            for r in e.trajectory[-1].get("tool_results", []):
                tool = _tools().get(r["name"])
                if r["error"] or tool is None or tool.kind == "read":
                    assert e.db_digest() == before, r
        seed += 1
    assert steps >= 5000


# --- arguments JSON cannot encode, and lone surrogates anywhere --------------------------------------
class _Opaque:
    def __repr__(self):
        raise RuntimeError("a repr that fails")


def _nested(depth):
    value = "leaf"
    for _ in range(depth):
        value = [value]
    return value


surrogate_text = st.text(
    alphabet=st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"])),
    max_size=12,
)
unencodable = st.one_of(
    st.binary(max_size=8),
    st.sets(st.integers(), max_size=2),
    st.frozensets(st.text(max_size=3), max_size=2),
    st.just(float("nan")),
    st.just(float("inf")),
    st.integers(10**4300, 10**4400),
    st.builds(_Opaque),
    st.builds(object),
    st.sampled_from([100_000, 900, 50]).map(_nested),  # built on draw: hypothesis cannot repr them
)
odd_values = st.recursive(
    st.one_of(json_scalars, surrogate_text, unencodable),
    lambda c: st.one_of(
        st.lists(c, max_size=3),
        st.tuples(c, c),
        st.dictionaries(st.one_of(st.text(max_size=6), surrogate_text, st.tuples(st.integers())), c, max_size=3),
    ),
    max_leaves=5,
)


@st.composite
def odd_actions(draw, names=None):
    """An assistant message of 1-3 calls to ``names`` (default: Harbor Bank's agent tools) or odd names."""
    names = names or _agent_tools()
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.one_of(st.sampled_from(names), surrogate_text))
        keys = st.one_of(
            st.sampled_from(["customer_id", "account_id", "user_id", "query", "tool_name"]), surrogate_text
        )
        args = draw(st.dictionaries(keys, odd_values, max_size=3))
        as_text = draw(st.booleans())
        if as_text:  # the model's JSON text, raw surrogates and all (when it can be written at all)
            try:
                args = json.dumps(args, ensure_ascii=draw(st.booleans()))
            except (TypeError, ValueError, RecursionError):
                pass
        call_id = draw(st.one_of(st.none(), st.just("dup"), st.text(max_size=3), surrogate_text, st.integers()))
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})
    content = draw(st.one_of(st.none(), surrogate_text))
    return {"role": "assistant", "content": content, "tool_calls": calls}


def _check_odd_step(e, action):
    n, before = e.num_steps, e.db_digest()
    e.step(action)  # never raises: everything odd inside a message is the model's mistake
    assert e.num_steps == n + 1 == len(e.trajectory)
    results = e.trajectory[-1]["tool_results"]
    assert len({r["tool_call_id"] for r in results}) == len(results)  # each result answers one call
    if all(r["error"] for r in results):
        assert e.db_digest() == before, results
    for r in results:
        assert r["content"].startswith("Error") or not r["error"]
        assert "failed internally" not in r["content"], r  # never blamed on the domain
    # the record and the observations can be written as UTF-8 JSON (what the harness does)
    json.dumps(e.trajectory[-1], ensure_ascii=False, allow_nan=False).encode("utf-8")
    json.dumps(e.observe(e.agent_selection), ensure_ascii=False).encode("utf-8")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), batch=st.lists(odd_actions(), min_size=1, max_size=4))
def test_unencodable_and_surrogate_arguments_become_observations(env, seed, batch):
    env.reset(seed=seed)
    env.step("I need help \ud83d")
    assert env.trajectory[-1]["message"]["content"] == "I need help \\ud83d"
    for action in batch:
        if env.termination_reason is not None:
            break
        _check_odd_step(env, action)


@pytest.fixture(scope="module")
def tau3_env():
    require_shared(TAU3_DATA)
    e = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA), retrieval="no_knowledge", max_steps=10_000)
    yield e
    e.close()


def test_unencodable_and_surrogate_arguments_in_tau3(tau3_env):
    from tau_env.domains.tau3_banking import interface

    names = [s["function"]["name"] for s in interface.AGENT_SCHEMAS] + ["call_discoverable_agent_tool"]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(batch=st.lists(odd_actions(names), min_size=1, max_size=3))
    def run(batch):
        tau3_env.reset(options={"task_id": "task_001"})
        tau3_env.step(say("hi"))
        for action in batch:
            if tau3_env.termination_reason is not None:
                break
            _check_odd_step(tau3_env, action)

    run()


def test_tau3_surrogates_and_long_names(tau3_env):
    tau3_env.reset(options={"task_id": "task_001"})
    tau3_env.step(say("hi"))
    before = tau3_env.db_digest()
    for args in ('{"user_id": "\\ud83d"}', {"user_id": "\ud83d"}, {"user_id": ["ok", {"x": "\udc00"}]}):
        tau3_env.step(_raw_call("get_user_information_by_id", args))
        (r,) = tau3_env.trajectory[-1]["tool_results"]
        assert r["error"] and r["content"].startswith("Error: Argument 'user_id") and "lone surrogate" in r["content"]
    tau3_env.step(_raw_call("get_user_information_by_id", {"user_id": "x", "extra": b"\x00"}))
    assert tau3_env.trajectory[-1]["tool_results"][0]["content"].startswith(
        "Error: Arguments of 'get_user_information_by_id' cannot be encoded as JSON (Object of type bytes"
    )
    assert tau3_env.db_digest() == before
    # the benchmark's own unknown-tool text: verbatim up to 200 characters, clipped beyond
    for name, shown in (("n" * 200, "n" * 200), ("n" * 201, "n" * 200 + "... (201 characters)")):
        tau3_env.step(call(name))
        assert tau3_env.trajectory[-1]["tool_results"][0]["content"] == f"Error: Tool '{shown}' not found."


def _raw_call(name, arguments):
    return {"role": "assistant", "tool_calls": [{"id": "t", "function": {"name": name, "arguments": arguments}}]}
