"""Caller misuse raises a named tau_env error whose message says what to do, whatever the env's state.

States: never reset, closed (before or after an episode), finished. Also bad reset options and
constructor settings (nothing changes when they are refused), make() keywords, forged or altered
snapshots (refused before the live episode is touched), strict-tool bugs (the step is not counted),
and copying (deepcopy is fork, pickling is refused).
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re

import numpy as np
import pytest

import tau_env
from tau_env import TauEnv, call, registry, say
from tau_env.env import EpisodeSnapshot
from tau_env.error import (
    ClosedEnvError,
    EpisodeOverError,
    InvalidActionError,
    InvalidOptionError,
    NotPicklableError,
    ResetNeeded,
    SnapshotError,
    UnknownEnvError,
    UnknownTaskError,
)

#: Every method that needs a live episode: name -> how to call it.
EPISODE_METHODS = {
    "last": lambda e: e.last(),
    "observe": lambda e: e.observe("agent"),
    "agent_iter": lambda e: e.agent_iter(),
    "step": lambda e: e.step(say("hi")),
    "end_episode": lambda e: e.end_episode("loop"),
    "grade": lambda e: e.grade(),
    "snapshot": lambda e: e.snapshot(),
    "db_digest": lambda e: e.db_digest(),
    "db": lambda e: e.db,
    "num_steps": lambda e: e.num_steps,
    "fork": lambda e: e.fork(),
    "transcript": lambda e: e.transcript(),
    "render": lambda e: e.render(),
}
#: Methods that work without an episode, but not after close().
OTHER_METHODS = {
    "reset": lambda e: e.reset(),
    "restore": lambda e: e.restore(None),
    "observation_space": lambda e: e.observation_space("agent"),
    "action_space": lambda e: e.action_space("agent"),
    "__enter__": lambda e: e.__enter__(),
    "deepcopy": lambda e: copy.deepcopy(e),
}


@pytest.fixture
def fresh(domain):
    e = TauEnv(domain, render_mode="ansi")
    yield e
    e.close()


@pytest.mark.parametrize("method", sorted(EPISODE_METHODS))
def test_before_reset_every_episode_method_raises_reset_needed(fresh, method):
    with pytest.raises(ResetNeeded, match=rf"^Call reset\(\) before {re.escape(method)}\(\)\.$"):
        EPISODE_METHODS[method](fresh)


@pytest.mark.parametrize(
    "attr", ["task", "trajectory", "termination_reason", "grade_result", "infos", "agent_selection"]
)
def test_before_reset_episode_attributes_raise_reset_needed(fresh, attr):
    with pytest.raises(ResetNeeded, match=rf"^Call reset\(\) before reading env\.{attr}\.$"):
        getattr(fresh, attr)
    assert not hasattr(fresh, attr)  # also an AttributeError, so hasattr and getattr(x, n, default) work
    assert fresh.agents == [] and fresh.num_agents == 0  # PettingZoo: no seat is live yet


@pytest.mark.parametrize("history", ["never_reset", "mid_episode", "finished"])
@pytest.mark.parametrize("method", sorted({**EPISODE_METHODS, **OTHER_METHODS}))
def test_after_close_every_method_raises_closed(fresh, history, method):
    if history != "never_reset":
        fresh.reset(options={"task_id": "restock"})
        fresh.step(say("hi"))
        if history == "finished":
            fresh.end_episode("loop")
    fresh.close()
    fresh.close()  # closing twice is fine
    with pytest.raises(ClosedEnvError, match=rf"^This env is closed; {re.escape(method)}\(\) cannot run\. Create"):
        {**EPISODE_METHODS, **OTHER_METHODS}[method](fresh)


@pytest.mark.parametrize("history", ["never_reset", "mid_episode", "finished"])
@pytest.mark.parametrize(
    "attr", ["task", "trajectory", "termination_reason", "grade_result", "episode_reward", "infos", "agent_selection"]
)
def test_after_close_episode_attributes_raise_closed_whatever_the_history(fresh, history, attr):
    if history != "never_reset":
        fresh.reset(options={"task_id": "restock"})
        fresh.step(say("hi"))
        if history == "finished":
            fresh.end_episode("loop")
    fresh.close()
    with pytest.raises(ClosedEnvError, match=rf"^This env is closed; env\.{attr} no longer exists \(close\(\) drops"):
        getattr(fresh, attr)
    assert not hasattr(fresh, attr)
    assert fresh.agents == [] and fresh.rewards == {} and fresh.terminations == {}  # as before any reset
    with pytest.raises(ClosedEnvError, match=r"^This env is closed; state\(\) cannot run\."):
        fresh.state()


def test_state_is_not_implemented_while_open(fresh):
    with pytest.raises(NotImplementedError):
        fresh.state()


def test_with_block_closes(domain):
    with TauEnv(domain) as env:
        env.reset()
    with pytest.raises(ClosedEnvError, match=r"^This env is closed; step\(\) cannot run\. Create a new one"):
        env.step(say("x"))


def test_after_the_end(fresh):
    fresh.reset(options={"task_id": "nothing"})
    fresh.step(say("bye ###STOP###"))
    assert fresh.observe("agent")["messages"]  # reading a finished episode is fine
    fresh.grade()
    with pytest.raises(EpisodeOverError, match=r"^The episode is over for 'user'; step\(None\)"):
        fresh.step(say("more"))
    fresh.step(None)
    fresh.step(None)
    assert fresh.agents == []
    for method in ("step", "last"):
        with pytest.raises(EpisodeOverError, match=r"^The episode is over \(user_stop\) and both seats have left"):
            fresh.step(None) if method == "step" else fresh.last()
    fresh.end_episode("late")  # a no-op once over
    assert fresh.termination_reason == "user_stop" and fresh.num_steps == len(fresh.trajectory) == 1
    fresh.reset()  # and a new episode starts normally
    assert fresh.agents == ["agent", "user"]


def test_unknown_seat(fresh):
    fresh.reset()
    for bad in ("nobody", None, 3, ["agent"]):
        with pytest.raises(InvalidOptionError, match=r"^Unknown seat .*; the seats are \['agent', 'user'\]\.$"):
            fresh.observe(bad)
        with pytest.raises(InvalidOptionError, match="^Unknown seat"):
            fresh.observation_space(bad)


# --- reset options ---------------------------------------------------------------------------
BAD_OPTIONS = [
    ({"options": {"task_index": -1}}, InvalidOptionError, r"^options\['task_index'\] must be an integer from 0 to 2"),
    ({"options": {"task_index": 3}}, InvalidOptionError, r"^options\['task_index'\] must be an integer from 0 to 2"),
    ({"options": {"task_index": True}}, InvalidOptionError, r"^options\['task_index'\] must be an integer"),
    ({"options": {"task_index": 1.0}}, InvalidOptionError, r"^options\['task_index'\] must be an integer"),
    ({"options": {"task_index": "0"}}, InvalidOptionError, r"^options\['task_index'\] must be an integer"),
    ({"options": {"task_id": 0}}, InvalidOptionError, r"^options\['task_id'\] must be a task id string, got 0\.$"),
    ({"options": {"task_id": "nope"}}, UnknownTaskError, r"^Domain 'tiny' has no task 'nope'"),
    ({"options": {"task_id": "x" * 10**6}}, UnknownTaskError, r"^Domain 'tiny' has no task 'x{80}\.\.\. \(1000000 "),
    ({"options": {"task_id": "nothing", "task_index": 0}}, InvalidOptionError, r"^Give reset\(\) options task_id or"),
    ({"options": ["restock"]}, InvalidOptionError, r"^options must be a dict such as \{'task_id': 'T1'\} or None"),
    ({"options": "restock"}, InvalidOptionError, r"^options must be a dict"),
    ({"seed": -1}, InvalidOptionError, r"^seed must be an integer >= 0 or None, got -1\.$"),
    ({"seed": 1.5}, InvalidOptionError, r"^seed must be an integer >= 0 or None, got 1\.5\.$"),
    ({"seed": "0"}, InvalidOptionError, r"^seed must be an integer >= 0 or None"),
    ({"seed": True}, InvalidOptionError, r"^seed must be an integer >= 0 or None, got True\.$"),
]


@pytest.mark.parametrize("kwargs,error,match", BAD_OPTIONS)
def test_bad_reset_options_raise_and_change_nothing(fresh, kwargs, error, match):
    fresh.reset(seed=3)
    fresh.step(say("hello"))
    before = (fresh.task.id, fresh.num_steps, fresh.db_digest(), len(fresh.trajectory))
    expected_next = copy.deepcopy(fresh._rng).integers(3)
    with pytest.raises(error, match=match):
        fresh.reset(**kwargs, **({"seed": 5} if "seed" not in kwargs else {}))
    assert (fresh.task.id, fresh.num_steps, fresh.db_digest(), len(fresh.trajectory)) == before
    assert fresh._rng.integers(3) == expected_next  # a refused reset does not reseed either


def test_good_reset_options(fresh):
    fresh.reset(seed=np.int64(4), options={"task_index": np.int64(2)})
    assert fresh.task.id == "nothing"
    fresh.reset(options={})
    with pytest.warns(UserWarning, match=r"ignores unknown options \['taskid'\]"):
        fresh.reset(options={"taskid": "x"})


# --- constructor and make ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"max_steps": 0}, InvalidOptionError, r"^max_steps must be an integer of at least 1, got 0\.$"),
        ({"max_steps": "x"}, InvalidOptionError, r"^max_steps must be an integer of at least 1, got 'x'\.$"),
        ({"max_steps": True}, InvalidOptionError, r"^max_steps must be an integer of at least 1, got True\.$"),
        ({"max_steps": 2.5}, InvalidOptionError, r"^max_steps must be an integer"),
        ({"render_mode": "rgb"}, InvalidOptionError, r"^render_mode must be one of \['human', 'ansi'\] or None"),
        ({"task_ids": ["nope"]}, UnknownTaskError, r"^Domain 'tiny' has no task 'nope'"),
        ({"task_ids": "restock"}, InvalidOptionError, r"^task_ids must be a list of task id strings, got 'restock'"),
        ({"task_ids": [1]}, InvalidOptionError, r"^task_ids must be a list of task id strings"),
        ({"task_ids": 5}, InvalidOptionError, r"^task_ids must be a list of task id strings"),
        ({"task_ids": []}, InvalidOptionError, r"^Domain 'tiny': no tasks to play \(task_ids=\[\]\); pass None"),
        ({"strict_tools": "yes"}, InvalidOptionError, r"^strict_tools must be True or False"),
        ({"retrieval": 5}, InvalidOptionError, r"^retrieval must be a configuration name \(str\), got 5\.$"),
        ({"retrieval": "bm52"}, InvalidOptionError, r"^Unknown retrieval configuration 'bm52'"),
    ],
)
def test_bad_constructor_settings(domain, kwargs, error, match):
    with pytest.raises(error, match=match):
        TauEnv(domain, **kwargs)


def test_constructor_needs_a_domain():
    with pytest.raises(InvalidOptionError, match=r"^TauEnv needs a tau_env\.Domain, got str; use tau_env\.make"):
        TauEnv("harbor-bank-v0")


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            {"max_step": 5},
            InvalidOptionError,
            r"^make\('tiny-v0', max_step=5\): unknown keyword 'max_step'.*\"max_steps\"",
        ),
        ({"max_steps": "x"}, InvalidOptionError, r"^make\('tiny-v0', max_steps='x'\): max_steps must be an integer"),
        (
            {"task_ids": ["nope"]},
            UnknownTaskError,
            r"^make\('tiny-v0', task_ids=\['nope'\]\): Domain 'tiny' has no task 'nope'",
        ),
        ({"render_mode": 1}, InvalidOptionError, r"^make\('tiny-v0', render_mode=1\): render_mode must be one of"),
    ],
)
def test_make_keyword_errors_name_the_env(domain, kwargs, error, match):
    def loader(flavour: str = "plain"):
        return domain

    with registry.scoped():
        tau_env.register("tiny-v0", loader)
        with pytest.raises(error, match=match):
            tau_env.make("tiny-v0", **kwargs)


def test_make_errors_of_shipped_domain_and_loader():
    with pytest.raises(
        InvalidOptionError, match=r"^make\('harbor-bank-v0', data_dri='x'\): unknown keyword 'data_dri'"
    ):
        tau_env.make("harbor-bank-v0", data_dri="x")
    with pytest.raises(
        InvalidOptionError, match=r"^make\('harbor-bank-v0', retrieval='bm52'\): Unknown retrieval configuration"
    ):
        tau_env.make("harbor-bank-v0", retrieval="bm52")
    with pytest.raises(UnknownEnvError, match=r"^Env ids are strings such as 'harbor-bank-v0', got list\.$"):
        tau_env.make(["harbor-bank-v0"])

    def loader(size: int):
        raise ValueError(f"size must be positive, got {size}")

    with registry.scoped():
        tau_env.register("tiny-v2", loader)
        with pytest.raises(InvalidOptionError, match=r"^make\('tiny-v2', size=-1\): size must be positive, got -1$"):
            tau_env.make("tiny-v2", size=-1)


# --- snapshots ------------------------------------------------------------------------------------
@pytest.fixture
def played(domain):
    env = TauEnv(domain)
    env.reset(options={"task_id": "restock"})
    env.step(say("restock please"))
    env.step(call("unlock_tool", tool_name="secret_restock_1234"))
    yield env
    env.close()


def _live_state(env):
    return (env.task.id, env.num_steps, env.db_digest(), env.agent_selection, pickle.dumps(env.trajectory))


def test_snapshots_are_immutable(played):
    snap = played.snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"^cannot assign to field 'image'$"):
        snap.image = b""  # type: ignore[misc]
    assert isinstance(snap.state, bytes) and isinstance(snap.image, bytes)  # nothing mutable to reach into
    played.step(call("secret_restock_1234", item_id="widget"))  # the live episode goes on ...
    played.restore(snap)
    assert played.num_steps == 2 and "secret_restock_1234" in played.active_tools("agent")  # ... the snapshot did not


def _forgeries(snap, other):
    state = pickle.loads(snap.state)
    state["steps"] = 0
    yield "state edited", dataclasses.replace(snap, state=pickle.dumps(state))
    yield "image of another state", dataclasses.replace(snap, image=other.image)
    yield "image truncated", dataclasses.replace(snap, image=snap.image[:-1])
    yield "step count edited", dataclasses.replace(snap, num_steps=5)
    yield "task edited", dataclasses.replace(snap, task_id="confirm")
    yield "seal guessed", dataclasses.replace(snap, seal=b"\0" * 32)
    yield "hand made", EpisodeSnapshot("restock", 2, snap.image, snap.state, b"")
    yield "wrong types", EpisodeSnapshot(["restock"], "2", bytearray(snap.image), snap.state, snap.seal)
    mutated = copy.copy(snap)
    object.__setattr__(mutated, "state", pickle.dumps(state))
    yield "mutated in place", mutated


def test_forged_or_altered_snapshots_are_refused_before_touching_the_episode(played):
    snap = played.snapshot()
    played.step(call("secret_restock_1234", item_id="widget"))
    other = played.snapshot()
    before = _live_state(played)
    for what, forged in _forgeries(snap, other):
        with pytest.raises(SnapshotError, match=r"^This snapshot was altered, or taken by an env of another"):
            played.restore(forged)
        assert _live_state(played) == before, what
    for bad in (None, {"image": snap.image}, snap.image):
        with pytest.raises(SnapshotError, match=r"^restore\(\) needs an EpisodeSnapshot from env\.snapshot\(\)"):
            played.restore(bad)
    played.restore(snap)  # the genuine one still works
    assert played.num_steps == 2


def test_snapshots_restore_only_into_a_matching_env(played, domain):
    snap = played.snapshot()
    with pytest.raises(SnapshotError, match="another domain, schema or retrieval configuration"):
        tau_env.make("harbor-bank-v0").restore(snap)
    with pytest.raises(SnapshotError, match="another domain, schema or retrieval configuration"):
        TauEnv(domain, retrieval="grep").restore(snap)
    twin = TauEnv(domain)  # same domain and settings, never reset: restore is how fork() starts
    twin.restore(pickle.loads(pickle.dumps(snap)))  # snapshots pickle (within this process)
    assert twin.db_digest() == played.db_digest() and twin.num_steps == 2


# --- strict tools: a bug re-raises, and the step did not happen ----------------------------------
def test_strict_tool_bug_undoes_the_whole_message(domain):
    env = TauEnv(domain, strict_tools=True)
    env.reset(options={"task_id": "restock"})
    env.step(say("hi"))
    before = _live_state(env)
    views = pickle.dumps(env._views)
    msg = call("add_stock", item_id="widget", qty=2)
    msg["tool_calls"] += call("unlock_tool", tool_name="secret_restock_1234")["tool_calls"]
    msg["tool_calls"] += call("buggy_write", item_id="widget")["tool_calls"]
    with pytest.raises(KeyError, match="missing"):
        env.step(msg)
    assert _live_state(env) == before and pickle.dumps(env._views) == views
    assert "secret_restock_1234" not in env.active_tools("agent")
    env.step(call("add_stock", item_id="widget", qty=2))  # and the episode goes on
    assert env.num_steps == len(env.trajectory) == 2


# --- copying --------------------------------------------------------------------------------------
def test_deepcopy_is_fork_and_pickling_is_refused(played, domain):
    twin = copy.deepcopy(played)
    assert twin is not played and twin.domain is played.domain
    assert _live_state(twin) == _live_state(played)
    twin.step(call("secret_restock_1234", item_id="widget"))
    assert twin.db_digest() != played.db_digest() and played.num_steps == 2  # independent
    blank = copy.deepcopy(TauEnv(domain, max_steps=7))
    assert blank.max_steps == 7 and not hasattr(blank, "task")
    holder = copy.deepcopy({"env": played, "again": played})  # the memo keeps shared references shared
    assert holder["env"] is holder["again"]
    for attempt in (pickle.dumps, copy.copy):
        with pytest.raises(NotPicklableError, match=r"^A TauEnv cannot be pickled or shallow-copied"):
            attempt(played)


def test_non_messages_still_raise_invalid_action_and_count_nothing(played):
    before = _live_state(played)
    for bad in (42, None, [say("x")], {"role": "user", "content": "x"}, 10**5000):
        with pytest.raises(InvalidActionError, match="^Expected"):
            played.step(bad)
    assert _live_state(played) == before
