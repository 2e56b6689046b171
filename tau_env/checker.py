"""Checks for domain authors: run them on your own domain before training on it.

``check_task`` verifies one task; ``check_domain`` verifies the domain and all its tasks:

- every reference action names a tool that exists on the requestor's side, every tool it names
  in an argument exists (see :func:`named_tool_problems`), and every required document exists;
- the reference replay runs without a tool error;
- it changes the database, unless the task says it should not (``expect_no_change``), in
  which case it must not;
- two replays give the same outputs and the same state;
- an episode-ending tool (a transfer) comes last;
- optionally, the oracle agent with the scripted user reaches reward 1 through the env;
- every discoverable or hand-over tool is named in at least one document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tau_env.error import CheckError, did_you_mean

if TYPE_CHECKING:
    from tau_env.db import EpisodeDB
    from tau_env.domain import Domain
    from tau_env.tasks import Action, Task
    from tau_env.tools import Toolbox


def named_tool_problems(box: Toolbox, i: int, action: Action) -> list[str]:
    """Problems with the tools an action names in its arguments.

    An argument called ``tool_name`` or ``*_tool_name`` names a tool reached by name: the meta
    tools' ``tool_name`` (``unlock_tool``, ``hand_over_tool``), tau3-banking's ``agent_tool_name``
    and ``discoverable_tool_name``. It must be a string naming a discoverable, hidden or hand-over
    tool of the domain, of the side that the argument's or the called tool's name says (``agent``
    or ``user`` among its words, e.g. ``give_discoverable_user_tool``), if it says one. A call
    through such a tool to a tool that does not exist may not fail loudly (tau3-banking answers
    ``Error: Unknown agent tool ...`` as an ordinary output, as the benchmark does), so the name
    is checked here.
    """
    problems = []
    for key, value in action.arguments.items():
        if key != "tool_name" and not key.endswith("_tool_name"):
            continue
        words = {*key.split("_"), *action.name.split("_")}
        side = "agent" if "agent" in words else "user" if "user" in words else None
        names = [
            n for n, t in box.tools.items() if (t.discoverable or t.hidden or t.handover) and side in (None, t.side)
        ]
        if not isinstance(value, str):
            problems.append(f"action {i} ({action.name}): {key} must be a tool name, got {value!r:.60}.")
        elif value not in names:
            what = f"no discoverable {side} tool" if side else "no discoverable or hand-over tool"
            problems.append(
                f"action {i} ({action.name}): {key} {value[:80]!r} names {what}.{did_you_mean(value, names)}"
            )
    return problems


def static_task_problems(domain: Domain, task: Task, db: EpisodeDB | None = None) -> list[str]:
    """What ``task`` breaks that is seen without running an episode: reference actions naming a tool
    the domain lacks, a tool of the other seat, an episode-ending tool before the end, or an id its
    tool does not know; required documents the knowledge base lacks; an ``initial_state`` the
    database refuses (a column it lacks, a value its constraints refuse), found by applying it to
    the seed in ``db`` (an :class:`~tau_env.db.EpisodeDB` to reuse across tasks; None: a new one),
    then rolled back. A task file loaded by path is refused on these (:meth:`Domain.with_tasks`):
    its targets would be computed from actions that cannot run, and its episodes could not start.
    """
    problems: list[str] = []
    init = domain.initializer(task)
    if init is not None:
        from tau_env.db import EpisodeDB

        scratch = db if db is not None else EpisodeDB(domain.schema)
        try:
            scratch.start(domain.seed_image, init)
        except Exception as e:  # noqa: BLE001 - a domain's own apply_initial_state may raise anything
            problems.append(f"its initial_state does not fit the database: {e}")
        finally:
            if db is None:
                scratch.close()
    box = domain.toolbox("all")
    for i, a in enumerate(task.actions):
        t = box.tools.get(a.name)
        if t is None:
            problems.append(f"action {i}: no tool named {a.name[:80]!r}.{did_you_mean(a.name, box.tools)}")
        elif t.side != a.requestor:
            problems.append(f"action {i}: {a.name!r} is a {t.side} tool but the requestor is {a.requestor!r}.")
        elif t.ends_episode and i != len(task.actions) - 1:
            problems.append(f"action {i}: {a.name!r} ends the episode, so it must be the last action.")
        else:
            problems += named_tool_problems(box, i, a)
    for doc in task.required_documents:
        if domain.kb.get(doc) is None:
            problems.append(f"required document {doc!r} does not exist.")
    return problems


def first_problem(problems: Sequence[str]) -> str:
    """The first of ``problems`` and how many more there are, for a one-line refusal."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}"


def task_problems(domain: Domain, task: Task, play: bool = True) -> list[str]:
    """Every contract ``task`` breaks, as readable sentences (empty when it passes)."""
    problems = static_task_problems(domain, task)
    if problems:
        return problems
    db1 = domain.start_db(task)
    initial_digest = db1.digest()
    steps1 = domain.run_actions(db1, task)
    for i, s in enumerate(steps1):
        if s.error:
            problems.append(f"action {i} ({s.name}) failed in the reference replay: {s.output[:300]}")
    changed = db1.digest() != initial_digest
    if task.expect_no_change and changed:
        problems.append("expect_no_change is set but the reference actions change the database.")
    if not task.expect_no_change and not changed:
        problems.append(
            "the reference actions leave the database unchanged; set expect_no_change if that is the point."
        )
    db2, steps2 = domain.replay(task)
    if [(s.output, s.error) for s in steps1] != [(s.output, s.error) for s in steps2] or db1.digest() != db2.digest():
        problems.append("two replays of the reference actions differ: a tool is not deterministic.")
    db1.close()
    db2.close()
    if play and not problems:
        problems += _play_problems(domain, task)
    return problems


def _play_problems(domain: Domain, task: Task) -> list[str]:
    from tau_env.agents import OracleAgent
    from tau_env.env import TauEnv
    from tau_env.harness import run_episode
    from tau_env.users import ScriptedUser

    env = TauEnv(domain, max_steps=max(domain.max_steps, 4 * len(task.actions) + 20))
    r = run_episode(env, OracleAgent(), ScriptedUser(), task.id)
    env.close()
    if r.reward != 1.0:
        return [
            f"the oracle agent with the scripted user scored {r.reward} (ended by {r.termination_reason}); "
            f"differing tables: {r.grade.get('differing_tables')}."
        ]
    return []


def check_task(domain: Domain, task: Task | str, play: bool = True) -> None:
    """Raise :class:`CheckError` listing every contract ``task`` breaks."""
    t = domain.task(task) if isinstance(task, str) else task
    problems = task_problems(domain, t, play)
    if problems:
        raise CheckError(f"Task {t.id!r} of domain {domain.name!r} fails its checks:\n- " + "\n- ".join(problems))


def domain_problems(domain: Domain, task_ids: Sequence[str] | None = None, play: bool = True) -> dict[str, list[str]]:
    """Problems by task id (``"<domain>"`` for domain-level ones); only failing entries appear."""
    out: dict[str, list[str]] = {}
    texts = "\n".join(d.text for d in domain.documents)
    dom = []
    for t in domain.toolbox("all").tools.values():
        if (t.discoverable or t.handover) and t.name not in texts:
            dom.append(
                f"{'discoverable' if t.discoverable else 'hand-over'} tool {t.name!r} is not named in any "
                "document, so an agent cannot find it."
            )
    if not domain.tasks:
        dom.append("the domain has no tasks.")
    if dom:
        out["<domain>"] = dom
    for task in (domain.task(i) for i in task_ids) if task_ids else domain.tasks:
        p = task_problems(domain, task, play)
        if p:
            out[task.id] = p
    return out


def check_domain(domain: Domain, task_ids: Sequence[str] | None = None, play: bool = True) -> None:
    """Raise :class:`CheckError` listing every problem of the domain and its tasks."""
    problems = domain_problems(domain, task_ids, play)
    if problems:
        lines = [f"Domain {domain.name!r} fails its checks ({len(problems)} entries):"]
        for key, ps in problems.items():
            lines.append(f"{key}:")
            lines += [f"  - {p}" for p in ps]
        raise CheckError("\n".join(lines))
