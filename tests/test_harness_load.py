"""What keeps a thousand episodes in flight cheap: a new connection's schema read on demand
(``EpisodeDB.read_schema``), lazily built samplers, the harness's idle-time work and paced start,
and a scripted server that holds no requests.
"""

import asyncio
import contextlib
import sqlite3
import sys

import pytest
from gymnasium import spaces as gym_spaces
from hypothesis import given
from hypothesis import strategies as st

from tau_env import OracleAgent, ScriptedUser, TauEnv, aevaluate, evaluate
from tau_env.db import EpisodeDB, Schema, build_image
from tau_env.error import ClosedEnvError
from tau_env.harness.run import _IdleWork
from tau_env.spaces import MessageSpace

DDL = "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT) STRICT;"


@pytest.fixture
def base():
    schema = Schema.from_ddl(DDL)
    return schema, build_image(schema, {"t": [{"k": 1, "v": "a"}]})


def test_a_new_connection_reads_its_schema_once_and_changes_nothing(base):
    schema, image = base
    db = EpisodeDB(schema)
    db.start(image)
    assert db.schema_pending  # a fresh connection: nothing has asked for the schema yet
    digests = db.table_digests()
    db.read_schema()
    assert not db.schema_pending
    db.read_schema()  # a second call does nothing
    assert db.table_digests() == digests == db.recompute_digests()
    with db.savepoint(keep=False):  # writes and rollbacks work as before
        db.conn.execute("INSERT INTO t VALUES (2, 'b')")
    assert db.table_digests() == digests
    db.conn.execute("INSERT INTO t VALUES (2, 'b')")
    assert db.table_digests() == db.recompute_digests() != digests
    db.start(image)  # the same base: rolled back on the same connection, schema kept
    assert not db.schema_pending and db.table_digests() == digests
    db.restore(image)  # a new connection
    assert db.schema_pending


def test_a_task_with_an_initial_state_has_read_its_schema(base):
    schema, image = base
    db = EpisodeDB(schema)
    db.start(image, lambda conn: conn.execute("UPDATE t SET v = 'z'"))
    assert not db.schema_pending
    assert db.dump()["t"] == [{"k": 1, "v": "z"}]


def test_a_closed_database_refuses_use_until_restored(base):
    schema, image = base
    db = EpisodeDB(schema, image)
    db.close()
    db.close()  # twice is fine
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        db.conn  # noqa: B018
    with pytest.raises(sqlite3.ProgrammingError):
        db.table_digests()
    db.restore(image)
    assert db.dump()["t"] == [{"k": 1, "v": "a"}]


def test_a_database_without_a_state_opens_an_empty_connection(base):
    schema, _ = base
    db = EpisodeDB(schema)
    assert db.conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


@given(st.integers(0, 2**32 - 1))
def test_a_lazily_seeded_space_samples_as_gymnasium_seeds_it(seed):
    lazy, eager = MessageSpace(("a", "b")), MessageSpace(("a", "b"))
    assert lazy.seed(seed) == seed
    gym_spaces.Space.seed(eager, seed)  # Gymnasium's own seeding, generator built at once
    assert [lazy.sample() for _ in range(3)] == [eager.sample() for _ in range(3)]
    lazy.seed(seed)  # reseeding starts the sequence again
    gym_spaces.Space.seed(eager, seed)
    assert lazy.sample() == eager.sample()
    assert lazy == eager


def test_seeded_resets_sample_alike_and_unseeded_spaces_still_sample(domain):
    a, b = TauEnv(domain), TauEnv(domain)
    a.reset(seed=7)
    b.reset(seed=7)
    assert [a.action_space("agent").sample() for _ in range(4)] == [b.action_space("agent").sample() for _ in range(4)]
    assert a.task.id == b.task.id
    assert MessageSpace().sample()["role"] == "assistant"
    with pytest.raises(Exception, match="Seed must be"):
        MessageSpace().seed(-1)


def test_idle_work_runs_when_the_loop_is_idle_and_not_while_held():
    async def main():
        idle, done = _IdleWork(), []
        worker = asyncio.ensure_future(idle.run())
        idle.hold = True
        idle.add(lambda: done.append(1))
        await asyncio.sleep(0.05)
        held = list(done)
        idle.hold = False

        def fails():
            raise ClosedEnvError("closed meanwhile")

        idle.add(fails)  # a tau_env error (an env closed meanwhile) is no reason to stop
        idle.add(lambda: done.append(2))
        for _ in range(500):
            if len(done) == 2:
                break
            await asyncio.sleep(0.01)
        worker.cancel()
        return held, done

    held, done = asyncio.run(main())
    assert held == [] and done == [1, 2]


def test_a_run_closes_its_envs_and_plays_as_a_run_one_at_a_time(domain):
    made = []

    def make():
        made.append(TauEnv(domain))
        return made[-1]

    class SlowOracle(OracleAgent):
        async def aact(self, obs):
            await asyncio.sleep(0.002)
            return self(obs)

    sync = evaluate(lambda: TauEnv(domain), OracleAgent, ScriptedUser, trials=3, seed=1)
    run = asyncio.run(aevaluate(make, SlowOracle, ScriptedUser, trials=3, seed=1, concurrency=4))
    assert [(r.task_id, r.trial, r.reward, r.events) for r in run.results] == [
        (r.task_id, r.trial, r.reward, r.events) for r in sync.results
    ]
    assert len(made) == 4
    for e in made:
        with pytest.raises(ClosedEnvError):
            e.reset()


def test_cancelling_a_run_cancels_its_episodes(domain):
    class Stuck(OracleAgent):
        async def aact(self, obs):
            await asyncio.sleep(3600)

    async def main():
        run = asyncio.ensure_future(aevaluate(lambda: TauEnv(domain), Stuck, ScriptedUser, trials=20, concurrency=50))
        await asyncio.sleep(0)  # the run is launching its episodes
        await asyncio.sleep(0)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        for _ in range(5):
            await asyncio.sleep(0)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(main()) == []


def test_the_scripted_server_can_keep_no_requests():
    from tau_env.llm import ChatClient
    from tau_env.testing import FakeOpenAI, text

    async def ask(url):
        client = ChatClient("m", url, retries=0)
        return await client.complete([{"role": "user", "content": "hi"}])

    with FakeOpenAI(lambda req: text(f"{len(req['messages'])} messages", delay=0.01), keep_requests=False) as server:
        assert asyncio.run(ask(server.url))["content"] == "1 messages"
        assert server.requests == []
    with FakeOpenAI(lambda req: text("kept")) as server:
        asyncio.run(ask(server.url))
        assert [r["messages"] for r in server.requests] == [[{"role": "user", "content": "hi"}]]


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("frozen_before", [False, True])
def test_a_run_leaves_the_cycle_collector_as_it_found_it(domain, enabled, frozen_before, monkeypatch):
    import gc

    import tau_env.harness.run as harness_run

    seen = []
    calls = []  # the harness's own freezes and unfreezes (the process-wide count can move under other threads)
    monkeypatch.setattr(harness_run.gc, "freeze", lambda f=gc.freeze: (calls.append("freeze"), f())[1])
    monkeypatch.setattr(harness_run.gc, "unfreeze", lambda f=gc.unfreeze: (calls.append("unfreeze"), f())[1])

    started = asyncio.Event()  # set when the harness says every episode has started (no guess from a sleep)
    quiet = harness_run._quiet_collector

    @contextlib.contextmanager
    def watched():
        with quiet() as launched:
            yield lambda: (launched(), started.set())

    monkeypatch.setattr(harness_run, "_quiet_collector", watched)

    class Watching(OracleAgent):  # what the collector looks like while episodes play
        async def aact(self, obs):
            await asyncio.wait_for(started.wait(), 60)  # never called: a failure, not a hang
            seen.append((gc.isenabled(), gc.get_freeze_count() > 0))
            return self(obs)

    was_enabled = gc.isenabled()
    try:
        if frozen_before:
            gc.freeze()
        frozen = gc.get_freeze_count()
        if not enabled:
            gc.disable()
        calls.clear()  # the test's own freeze above is not the harness's
        run = asyncio.run(aevaluate(lambda: TauEnv(domain), Watching, ScriptedUser, trials=2, concurrency=6))
        assert gc.isenabled() is enabled
        # ours undone, the caller's left alone
        assert calls == ([] if frozen_before else ["freeze", "unfreeze"])
        assert gc.get_freeze_count() == frozen or frozen_before
        assert len(run.results) == 6
        assert seen and all(on == enabled for on, _ in seen)  # on again once the episodes have started
        assert all(is_frozen for _, is_frozen in seen)
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the listen queue's behaviour is Linux's")
def test_the_scripted_server_queues_a_thousand_connects_while_busy():
    """With the listen backlog at asyncio's default of 100, connects beyond it get no answer (their
    SYN is dropped, and retried a second later) while the server's loop is busy."""
    import select
    import socket
    import threading
    import time
    from urllib.parse import urlsplit

    from tau_env.testing import FakeOpenAI, text

    busy = threading.Event()

    def script(req):
        busy.set()
        time.sleep(1.0)  # blocks the server's loop: nothing is accepted meanwhile
        return text("done")

    with FakeOpenAI(script) as server:
        port = urlsplit(server.url).port
        first = socket.create_connection(("127.0.0.1", port))
        body = b'{"messages": []}'
        first.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert busy.wait(5)
        socks = []
        try:
            for _ in range(300):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                socks.append(s)
            _, writable, _ = select.select([], socks, [], 0.5)
            connected = [s for s in writable if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0]
            assert len(connected) == len(socks)
        finally:
            for s in socks:
                s.close()
            first.close()
