"""Hypothesis fuzz of every route of tau-env serve: random JSON, wrong types, huge and hostile strings,
on the request models' fields and beside them. Every answer is JSON; no answer is a 5xx.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tau_env
from tests.conftest import make_domain

pytest.importorskip("fastapi")
from starlette.testclient import TestClient  # noqa: E402
from tau_env.adapters.openenv import SESSION_HEADER, ServeLimits, create_app  # noqa: E402

HOSTILE = ["", "\x00", "'; DROP TABLE items; --", "\ud800", "ünï ✓ 名前", "A" * 70_000, "{", "null", "9" * 400]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=50),
    st.sampled_from(HOSTILE),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {"function": st.fixed_dictionaries({"name": st.sampled_from(["get_item", "add_stock", "nope", ""]) | scalars})},
        optional={"arguments": json_values, "id": scalars, "type": scalars},
    ),
    max_size=40,
)
actions = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"content": scalars, "tool_calls": tool_calls | json_values, "role": scalars}),
)
reset_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "seed": scalars,
            "task_id": st.sampled_from(["restock", "confirm", "nothing"]) | scalars,
            "task_index": scalars,
            "episode_id": scalars,
            "session_id": scalars,
        },
    ),
)
step_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries({"action": actions}, optional={"timeout_s": scalars, "request_id": scalars}),
)
raw_bodies = st.one_of(st.binary(max_size=200), st.just(b"[" * 50_000), st.just(b'{"a":' * 3000))
ws_messages = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["reset", "step", "state", "bogus"]) | scalars},
        optional={"data": actions | reset_bodies},
    ),
)


@pytest.fixture(scope="module")
def http():
    with tau_env.registry.scoped():
        tau_env.register("tiny-fuzz-v0", make_domain)
        app = create_app("tiny-fuzz-v0", limits=ServeLimits(max_request_bytes=200_000, max_sessions=10_000))
        local = {"base_url": "http://127.0.0.1", "headers": {"content-type": "application/json"}}
        with TestClient(app, raise_server_exceptions=True, **local) as client:
            yield client


def check(r):
    assert r.status_code < 500, r.text[:500]
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    if r.status_code >= 400:
        assert isinstance(body.get("message"), str) and "Traceback" not in r.text


def encode(body):
    return json.dumps(body, ensure_ascii=True).encode()  # lone surrogates travel as \ud800 escapes


fuzz = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@fuzz
@given(body=reset_bodies | raw_bodies)
def test_reset(http, body):
    r = http.post("/reset", content=body if isinstance(body, bytes) else encode(body))
    check(r)
    if r.status_code == 200:
        http.post("/close", headers={SESSION_HEADER: r.headers[SESSION_HEADER]})


@fuzz
@given(body=step_bodies | raw_bodies, reset=st.booleans(), header=st.booleans())
def test_step(http, body, reset, header):
    sid = http.post("/reset", json={"task_id": "confirm"}).headers[SESSION_HEADER]
    headers = {SESSION_HEADER: sid} if header else {}
    if reset:
        check(http.post("/reset", json={}, headers={SESSION_HEADER: sid}))
    check(http.post("/step", content=body if isinstance(body, bytes) else encode(body), headers=headers))
    check(http.get("/state", headers={SESSION_HEADER: sid}))
    check(http.post("/close", headers={SESSION_HEADER: sid}))


@fuzz
@given(
    path=st.sampled_from(["/state", "/close", "/health", "/schema", "/metadata", "/nope", "/ws"]),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    sid=scalars.map(str),
    body=raw_bodies,
)
def test_other_routes(http, path, method, sid, body):
    sid = sid.encode("ascii", "ignore").decode()
    check(http.request(method, path, content=body, headers={SESSION_HEADER: sid[:200]}))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(ws_messages | raw_bodies, min_size=1, max_size=6))
def test_websocket(http, messages):
    with http.websocket_connect("ws://127.0.0.1/ws") as ws:
        for m in messages:
            if isinstance(m, bytes):
                ws.send_bytes(m)
            else:
                ws.send_text(json.dumps(m))
            answer = ws.receive_json()
            assert answer["type"] in ("observation", "state", "error")
            if answer["type"] == "error":
                assert isinstance(answer["data"]["message"], str) and 400 <= answer["data"]["status"] < 500
        ws.send_text(json.dumps({"type": "state"}))
        assert ws.receive_json()["type"] in ("state", "error")
