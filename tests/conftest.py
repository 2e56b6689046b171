"""Shared fixtures: a tiny domain built in code, independent of the shipped bank's content; and the
rule for tests that read the tau3-banking data beside the repository.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import settings

from tau_env import Document, Domain, Schema, Task, ToolContext, ToolError, tool

# Property tests assert behaviour, not speed: hypothesis's default 200 ms deadline per example
# failed them whenever the machine was loaded (speed is measured in benchmarks/). A test that sets
# its own deadline keeps it.
settings.register_profile("tau_env", deadline=None)
settings.load_profile("tau_env")

DDL = """
CREATE TABLE items (item_id TEXT PRIMARY KEY, qty INTEGER NOT NULL, price REAL) STRICT;
CREATE TABLE log (entry_id TEXT PRIMARY KEY, text TEXT NOT NULL) STRICT;
"""


@tool
def get_item(ctx: ToolContext, item_id: str) -> str:
    """Show an item.

    Args:
        item_id: The item's id.
    """
    row = ctx.conn.execute("SELECT item_id, qty FROM items WHERE item_id = ?", (item_id,)).fetchone()
    if row is None:
        raise ToolError(f"Item '{item_id}' not found.")
    return f"{row[0]}: {row[1]}"


@tool
def sneaky_read(ctx: ToolContext, item_id: str) -> str:
    """A buggy read tool that writes; the toolbox must roll it back.

    Args:
        item_id: The item's id.
    """
    ctx.conn.execute("UPDATE items SET qty = qty + 1000 WHERE item_id = ?", (item_id,))
    return "read"


@tool(kind="write")
def add_stock(ctx: ToolContext, item_id: str, qty: int) -> str:
    """Add stock to an item.

    Args:
        item_id: The item's id.
        qty: How many to add; positive.
    """
    if qty <= 0:
        raise ToolError("qty must be positive.")
    cur = ctx.conn.execute("UPDATE items SET qty = qty + ? WHERE item_id = ?", (qty, item_id))
    if cur.rowcount == 0:
        raise ToolError(f"Item '{item_id}' not found.")
    return "ok"


@tool(kind="write")
def half_write(ctx: ToolContext, item_id: str) -> str:
    """Writes, then fails: the savepoint must undo the write.

    Args:
        item_id: The item's id.
    """
    ctx.conn.execute("UPDATE items SET qty = 0 WHERE item_id = ?", (item_id,))
    raise ToolError("failed after writing")


@tool(kind="write")
def buggy_write(ctx: ToolContext, item_id: str) -> str:
    """Writes, then crashes with a bug.

    Args:
        item_id: The item's id.
    """
    ctx.conn.execute("UPDATE items SET qty = -1 WHERE item_id = ?", (item_id,))
    return {"x": 1}["missing"]


@tool(kind="write", discoverable=True, name="secret_restock_1234")
def secret_restock(ctx: ToolContext, item_id: str) -> str:
    """Restock an item to 100 (discoverable).

    Args:
        item_id: The item's id.
    """
    ctx.conn.execute("UPDATE items SET qty = 100 WHERE item_id = ?", (item_id,))
    ctx.conn.execute("INSERT OR IGNORE INTO log VALUES (?, ?)", (ctx.make_id("L-", item_id), f"restock {item_id}"))
    return "restocked"


@tool(kind="write", side="user", handover=True)
def confirm_in_app(ctx: ToolContext, code: str) -> str:
    """The user confirms in their app.

    Args:
        code: The confirmation code.
    """
    ctx.conn.execute("INSERT INTO log VALUES (?, ?)", (ctx.make_id("C-", code), f"confirmed {code}"))
    return "confirmed"


@tool(ends_episode=True)
def transfer_to_human(ctx: ToolContext, summary: str) -> str:
    """Transfer to a human.

    Args:
        summary: Why.
    """
    return "transferred"


TOOLS = [get_item, sneaky_read, add_stock, half_write, buggy_write, secret_restock, confirm_in_app, transfer_to_human]

TASKS = [
    Task.model_validate(
        {
            "id": "restock",
            "scenario": {"requests": ["Please restock the widget."], "facts": {"item id": "widget"}},
            "actions": [
                {"name": "unlock_tool", "arguments": {"tool_name": "secret_restock_1234"}},
                {"name": "secret_restock_1234", "arguments": {"item_id": "widget"}},
            ],
        }
    ),
    Task.model_validate(
        {
            "id": "confirm",
            "scenario": {"requests": ["Add 5 gadgets, I will confirm."]},
            "initial_state": {"items": [{"item_id": "gadget", "qty": 7, "price": 2.0}]},
            "actions": [
                {"name": "add_stock", "arguments": {"item_id": "gadget", "qty": 5}},
                {"name": "hand_over_tool", "arguments": {"tool_name": "confirm_in_app"}},
                {"name": "confirm_in_app", "arguments": {"code": "X1"}, "requestor": "user"},
            ],
        }
    ),
    Task.model_validate({"id": "nothing", "scenario": {"requests": ["Just looking."]}, "expect_no_change": True}),
]

DOCS = [
    Document("restock_policy", "Restocking", "Use secret_restock_1234 to restock an item to 100 units."),
    Document("app_confirm", "Confirmations", "Customers confirm with confirm_in_app after hand-over."),
    Document("returns", "Returns policy", "Returns are accepted within 30 days with a receipt."),
]


def make_domain(**overrides) -> Domain:
    kw = dict(
        name="tiny",
        schema=Schema.from_ddl(DDL),
        seed={"items": [{"item_id": "widget", "qty": 3, "price": 9.5}]},
        tools=TOOLS,
        documents=DOCS,
        policy="You are a shop assistant. {retrieval_instructions}",
        tasks=TASKS,
        clock=datetime(2025, 1, 1, 12, 0),
        max_steps=30,
    )
    kw.update(overrides)
    return Domain(**kw)


@pytest.fixture
def domain() -> Domain:
    return make_domain()


@pytest.fixture
def env(domain):
    from tau_env import TauEnv

    e = TauEnv(domain)
    yield e
    e.close()


# --- the shared tau3-banking data ------------------------------------------------------------------
#: The read-only reference folder beside the repository (``../shared``). ``TAU_ENV_SHARED_DIR``
#: points the tests elsewhere (e.g. at an empty folder, to check the rule below).
SHARED = Path(os.environ.get("TAU_ENV_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")
TAU3_DATA = SHARED / "data" / "tau3_banking"
TAU3_GOLDEN = SHARED / "data" / "tau3_banking_golden"


def shared_missing(*paths: Path) -> str | None:
    """Why the shared data is unusable (None if every path exists). Under ``CI`` it FAILS the test
    instead: a CI layout without the data must not pass the tau3 suites by skipping them all.
    """
    missing = [str(p) for p in paths if not p.exists()]
    if not missing:
        return None
    why = f"needs the shared tau3-banking data: {', '.join(missing)} missing"
    if os.environ.get("CI"):
        pytest.fail(f"{why}; CI is set, and CI must run the tau3 suites on the real data", pytrace=False)
    return why


def require_shared(*paths: Path) -> None:
    """Skip the calling test (fail it under ``CI``) when one of ``paths`` is missing."""
    why = shared_missing(*paths)
    if why:
        pytest.skip(why)


def needs_shared(*paths: Path) -> pytest.MarkDecorator:
    """A mark (for a test or ``pytestmark``) applying :func:`require_shared` before the test runs."""
    return pytest.mark.needs_shared(*paths)


#: The mark of tests that read the tau3-banking data folder.
needs_tau3_data = needs_shared(TAU3_DATA)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_shared(*paths): skip without these shared files, fail under CI")


@pytest.hookimpl(tryfirst=True)  # before the skip marks, so an empty parametrization fails under CI too
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs_shared"):
        require_shared(*mark.args)


@pytest.fixture
def mixed_group_rewards(monkeypatch):
    """The CPU GRPO trainer's rollouts with rewards 1, 0, 1, 0... in each step: a small untrained
    model scores 0 everywhere, and a group of equal rewards makes no update; for tests of what an
    update does (weight sync, checkpoints), not of rewards.
    """
    from tau_env.reference_trainers import grpo

    real = grpo.rollouts

    async def rollouts(policy, cfg, task_ids, seed):
        trajs, failed = await real(policy, cfg, task_ids, seed)
        for i, t in enumerate(trajs):
            t.reward = float(i % 2 == 0)
        return trajs, failed

    monkeypatch.setattr(grpo, "rollouts", rollouts)
