"""The verifier rejects hand-made broken tasks of every kind, each with its named check, and
passes a good one (a Harbor Bank task with derivations written for it)."""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tau_env.synthesis.records import COMPONENTS, Problem
from tau_env.synthesis.verify import CHECKS, contains_value, verify, verify_json

import tau_env
from tau_env import Document, Domain, Schema, Task, ToolContext, tool


def fact(key: str) -> dict[str, Any]:
    return {"kind": "fact", "key": key}


@pytest.fixture(scope="module")
def bank() -> Domain:
    return tau_env.make("harbor-bank-v0").domain


@pytest.fixture(scope="module")
def good_task(bank) -> dict[str, Any]:
    return make_good_task(bank)


def make_good_task(bank: Domain) -> dict[str, Any]:
    """lost_card_standard_shipping with a provenance whose derivations trace every argument."""
    t = bank.task("lost_card_standard_shipping").model_dump(mode="json")
    t["id"] = "synth-lost-card"
    t["metadata"]["synthesis"] = {
        "plan": {
            "id": "p-0-0",
            "template": "replace_card",
            "intent": "replace a lost debit card",
            "tools": ["replace_card_5120"],
            "outcome": "success",
        },
        "derivations": [
            {"full_name": fact("full name"), "date_of_birth": fact("date of birth")},
            {
                "customer_id": {"kind": "output", "action": 0},
                "date_of_birth": fact("date of birth"),
                "phone_last4": fact("phone"),
            },  # fmt: skip
            {"customer_id": {"kind": "output", "action": 0}},
            {
                "customer_id": {
                    "kind": "db",
                    "table": "customers",
                    "key": {"full_name": "Maria Lopez"},
                    "column": "customer_id",
                }
            },  # fmt: skip
            {"tool_name": {"kind": "literal", "why": "named in procedure_card_replacement"}},
            {
                "card_id": {"kind": "output", "action": 3},
                "reason": {"kind": "enum"},
                "shipping": {"kind": "enum"},
                "fee_cents": {"kind": "rule", "ids": ["fees/card/lost"], "value": {"kind": "literal"}},
            },
        ],
        "user_facts": ["full name", "date of birth", "phone"],
        "intent_query": "replace lost debit card fee shipping tier",
        "outcome": "success",
    }
    return t


@dataclass
class Const:
    id: str
    value: Any
    name: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


class FakeGraph:
    """The part of an entity graph the verifier reads: ``by_id``."""

    def __init__(self, **values: Any):
        self.constants = {k.replace("__", "/"): Const(k.replace("__", "/"), v) for k, v in values.items()}

    def by_id(self, cid: str) -> Const:
        return self.constants[cid]


GRAPH = FakeGraph(fees__card__lost=0, fees__card__expedited=2500, fees__card__damaged=1000, rates__fx=3.0)
GRAPH.constants["fees/card/lost"] = Const(
    "fees/card/lost", 0, "Lost or stolen card / Standard", {"section": "Debit card replacement", "tier": "standard"}
)


def checks(problems: list[Problem]) -> list[str]:
    assert all(isinstance(p, Problem) and p.component in COMPONENTS and p.message for p in problems)
    return [p.check for p in problems]


def run(task: dict[str, Any], domain: Domain, graph: Any = GRAPH, **kw: Any) -> list[Problem]:
    return verify(task, domain, graph, **kw)


def broken(good: dict[str, Any], edit) -> dict[str, Any]:
    t = copy.deepcopy(good)
    edit(t)
    return t


def derivs(t: dict[str, Any]) -> list[dict[str, Any]]:
    return t["metadata"]["synthesis"]["derivations"]


def test_good_task_verifies_clean(bank, good_task):
    assert run(good_task, bank) == []
    assert verify_json(json.dumps(good_task), bank, GRAPH) == []
    assert verify(Task.model_validate(good_task), bank, GRAPH) == []


def test_good_task_is_not_one_of_the_domains(bank, good_task):
    # the task need not belong to the domain, and the domain's own task of the same content stays untouched
    assert "synth-lost-card" not in bank.task_index


# --- stage 1: the task model and its provenance ----------------------------------------------------
@pytest.mark.parametrize(
    "line", ['{"id": "x", "scenario": ', "[1, 2]", '{"id": "x"}', '{"id": "x", "scenario": {"requests": []}}', "\ud800"]
)
def test_bad_json_or_model_is_a_task_model_problem(bank, line):
    problems = verify_json(line, bank)
    assert checks(problems) == ["task_model"]
    assert problems[0].component == "plan"


def test_bytes_that_are_not_utf8(bank):
    assert checks(verify_json(b"\xff{}", bank)) == ["task_model"]


def test_missing_provenance(bank, good_task):
    t = broken(good_task, lambda t: t["metadata"].pop("synthesis"))
    assert checks(run(t, bank)) == ["provenance"]


def test_derivation_count_must_match_actions(bank, good_task):
    t = broken(good_task, lambda t: derivs(t).pop())
    assert checks(run(t, bank)) == ["missing_derivation"]


def test_argument_without_derivation(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[5].pop("shipping"))
    problems = run(t, bank)
    assert checks(problems) == ["missing_derivation"]
    assert "'shipping'" in problems[0].message


# --- stage 2: static ---------------------------------------------------------------------------------
def test_unknown_tool(bank, good_task):
    t = broken(good_task, lambda t: t["actions"][5].update(name="replace_card_9999"))
    assert checks(run(t, bank)) == ["unknown_tool"]


def test_wrong_side(bank, good_task):
    t = broken(good_task, lambda t: t["actions"][2].update(requestor="user"))
    assert checks(run(t, bank)) == ["wrong_side"]


def test_episode_ending_tool_not_last(bank, good_task):
    def edit(t):
        t["actions"].insert(2, {"name": "transfer_to_human", "arguments": {"summary": "x", "reason": "other"}})
        derivs(t).insert(2, {"summary": {"kind": "literal"}, "reason": {"kind": "enum"}})

    assert checks(run(broken(good_task, edit), bank)) == ["episode_end"]


def test_unlock_of_a_tool_that_does_not_exist(bank, good_task):
    t = broken(good_task, lambda t: t["actions"][4]["arguments"].update(tool_name="replace_card_0000"))
    assert checks(run(t, bank)) == ["named_tool"]


def test_missing_document(bank, good_task):
    t = broken(good_task, lambda t: t["required_documents"].append("no_such_policy"))
    problems = run(t, bank)
    assert checks(problems) == ["missing_document"]
    assert "no_such_policy" in problems[0].message


def test_document_not_found_by_the_intent_query(bank, good_task):
    # a document that exists but that neither the intent query nor a search of the chain's tool finds
    t = broken(good_task, lambda t: t["required_documents"].append("mortgage_products_overview"))
    problems = run(t, bank)
    assert checks(problems) == ["document_not_found"]
    assert "mortgage_products_overview" in problems[0].message


def test_a_composite_finds_each_joined_requests_documents_with_its_own_intent_query(bank, good_task):
    # the mortgage overview is found by no query of the chain, only by the joined request's own query
    t = broken(good_task, lambda t: t["required_documents"].append("mortgage_products_overview"))
    t["metadata"]["synthesis"]["plan"]["intent_queries"] = ["mortgage products overview fixed rate"]
    assert run(t, bank) == []


def test_document_found_by_a_follow_up_search(bank, good_task):
    # the intent query finds the tiers overview only; the search for the tool the chain unlocks finds
    # the procedure, the searches for the decisive fee constant and for the request find the fee schedule
    query = "fee schedule relationship tiers"
    hits = [h.doc_id for h in bank.kb.search(query, k=10)]
    assert "customer_tiers_overview" in hits
    assert "procedure_card_replacement" not in hits and "fee_schedule_2025" not in hits
    t = broken(good_task, lambda t: t["metadata"]["synthesis"].update(intent_query=query))
    assert run(t, bank) == []
    t["metadata"]["synthesis"]["derivations"][5]["fee_cents"] = {"kind": "literal"}  # no decisive constant left
    t["scenario"]["requests"] = ["My card is gone, please send me another one."]  # a request that finds neither
    problems = run(t, bank)
    assert checks(problems) == ["document_not_found"] and "fee_schedule_2025" in problems[0].message


def test_document_not_found_without_any_query(bank, good_task):
    def edit(t):
        t["metadata"]["synthesis"]["intent_query"] = ""
        t["metadata"]["synthesis"]["plan"]["intent"] = ""

    assert checks(run(broken(good_task, edit), bank)) == ["document_not_found"]


def test_missing_user_fact(bank, good_task):
    t = broken(good_task, lambda t: t["metadata"]["synthesis"]["user_facts"].append("mother's maiden name"))
    problems = run(t, bank)
    assert checks(problems) == ["missing_user_fact"]
    assert problems[0].component == "scenario"


# --- untraceable arguments, one per derivation kind ---------------------------------------------------
def _untraceable(bank, t, kind: str, component: str) -> None:
    problems = run(t, bank)
    assert checks(problems) == ["untraceable_argument"], problems
    assert f"by its {kind} derivation" in problems[0].message
    assert problems[0].component == component


def test_untraceable_fact(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[1].update(phone_last4=fact("full name")))
    _untraceable(bank, t, "fact", "scenario")


def test_untraceable_fact_of_a_missing_key(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[1].update(phone_last4=fact("card number")))
    _untraceable(bank, t, "fact", "scenario")


def test_fact_in_a_request_is_traceable(bank, good_task):
    def edit(t):
        t["scenario"]["requests"][0] += " My phone ends in 4417."
        derivs(t)[1]["phone_last4"] = fact("last digits")

    assert run(broken(good_task, edit), bank) == []


def test_untraceable_db_cell(bank, good_task):
    def edit(t):
        derivs(t)[3]["customer_id"]["key"] = {"full_name": "Daniel Reyes"}

    _untraceable(bank, broken(good_task, edit), "db", "initial_state")


def test_db_key_matching_no_row(bank, good_task):
    def edit(t):
        derivs(t)[3]["customer_id"]["key"] = {"full_name": "Nobody"}

    _untraceable(bank, broken(good_task, edit), "db", "initial_state")


def test_db_cell_from_the_initial_state_patch(bank, good_task):
    def edit(t):
        t["initial_state"]["customers"] = [{**bank.seed["customers"][0], "email": "new@example.com"}]
        derivs(t)[3]["customer_id"] = {
            "kind": "db",
            "table": "customers",
            "key": {"email": "new@example.com"},
            "column": "customer_id",
        }

    assert bank.seed["customers"][0]["customer_id"] == "C-1001"
    assert run(broken(good_task, edit), bank) == []


def test_untraceable_output(bank, good_task):
    # card_id from find_customer's output, which names no card: only the replay can tell
    t = broken(good_task, lambda t: derivs(t)[5].update(card_id={"kind": "output", "action": 0}))
    _untraceable(bank, t, "output", "actions")


def test_output_of_a_later_action(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[2].update(customer_id={"kind": "output", "action": 3}))
    _untraceable(bank, t, "output", "actions")


def test_untraceable_constant(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[5].update(fee_cents={"kind": "constant", "ids": ["fees/card/damaged"]}))
    _untraceable(bank, t, "constant", "actions")


def test_constant_of_an_unknown_id(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[5].update(fee_cents={"kind": "constant", "ids": ["fees/nope"]}))
    _untraceable(bank, t, "constant", "actions")


def test_constant_ops(bank, good_task):
    ok = {"kind": "constant", "ids": ["fees/card/lost"], "op": "value"}
    assert run(broken(good_task, lambda t: derivs(t)[5].update(fee_cents=ok)), bank) == []
    total = {"kind": "constant", "ids": ["fees/card/lost", "fees/card/expedited"], "op": "sum"}

    def wire(value: int, d: dict[str, Any]):
        def edit(t):
            t["actions"][5]["arguments"]["fee_cents"] = value
            derivs(t)[5]["fee_cents"] = d

        return edit

    # sum: 0 + 2500 (the replay then charges it: still a valid task)
    assert run(broken(good_task, wire(2500, total)), bank) == []
    assert checks(run(broken(good_task, wire(2400, total)), bank)) == ["untraceable_argument"]
    # percent_of: 3 % of a balance in the initial database
    cell = {"kind": "db", "table": "accounts", "key": {"account_id": "CHK-2001"}, "column": "balance_cents"}
    balance = next(r["balance_cents"] for r in bank.seed["accounts"] if r["account_id"] == "CHK-2001")
    pct = {"kind": "constant", "ids": ["rates/fx"], "op": "percent_of", "inputs": cell}
    assert run(broken(good_task, wire(balance * 3 // 100, pct)), bank, play=False) == []
    assert checks(run(broken(good_task, wire(balance * 3 // 100 + 7, pct)), bank)) == ["untraceable_argument"]
    bad_op = {"kind": "constant", "ids": ["fees/card/lost"], "op": "product"}
    assert checks(run(broken(good_task, wire(0, bad_op)), bank)) == ["untraceable_argument"]


def test_untraceable_rule(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[5]["fee_cents"].update(ids=["fees/unknown"]))
    _untraceable(bank, t, "rule", "actions")


def test_rule_whose_value_is_untraceable(bank, good_task):
    inner = {"kind": "constant", "ids": ["fees/card/expedited"]}
    t = broken(good_task, lambda t: derivs(t)[5]["fee_cents"].update(value=inner))
    assert checks(run(t, bank)) == ["untraceable_argument"]


def test_untraceable_literal(bank, good_task):
    # 'overnight' is no shipping speed: the literal check sees it before any replay
    def edit(t):
        t["actions"][5]["arguments"]["shipping"] = "overnight"
        derivs(t)[5]["shipping"] = {"kind": "literal"}

    _untraceable(bank, broken(good_task, edit), "literal", "actions")


def test_literal_of_the_wrong_type(bank, good_task):
    def edit(t):
        t["actions"][5]["arguments"]["fee_cents"] = "zero"
        derivs(t)[5]["fee_cents"] = {"kind": "literal"}

    _untraceable(bank, broken(good_task, edit), "literal", "actions")


def test_literal_record_id(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[5].update(card_id={"kind": "literal"}))
    _untraceable(bank, t, "literal", "actions")


def test_untraceable_enum(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[5].update(card_id={"kind": "enum"}))
    _untraceable(bank, t, "enum", "actions")


def test_unknown_derivation_kind(bank, good_task):
    t = broken(good_task, lambda t: derivs(t)[5].update(card_id={"kind": "guess"}))
    assert checks(run(t, bank)) == ["untraceable_argument"]


# --- stage 3: replay -----------------------------------------------------------------------------
def test_wrong_argument_errors_on_replay(bank, good_task):
    t = broken(good_task, lambda t: t["actions"][5]["arguments"].update(card_id="CARD-9999"))
    problems = run(t, bank)
    assert "replay_error" in checks(problems)
    assert set(checks(problems)) <= {"replay_error", "noop_passes"}


def test_noop_task_that_is_not_a_refusal(bank, good_task):
    def edit(t):
        t["actions"] = t["actions"][:1]
        derivs(t)[1:] = []
        t["expect_no_change"] = True

    problems = run(broken(good_task, edit), bank)
    assert checks(problems) == ["noop_passes"]


def test_read_only_chain_without_expect_no_change(bank, good_task):
    def edit(t):
        t["actions"] = t["actions"][:1]
        derivs(t)[1:] = []

    assert checks(run(broken(good_task, edit), bank)) == ["noop_passes"]


def test_refusal_that_changes_state(bank, good_task):
    def edit(t):
        t["actions"] = t["actions"][:2]
        derivs(t)[2:] = []
        t["expect_no_change"] = True
        t["metadata"]["synthesis"]["outcome"] = "refusal"

    problems = run(broken(good_task, edit), bank)
    assert checks(problems) == ["refusal_changes_state"]


def test_refusal_that_changes_nothing_is_fine(bank, good_task):
    def edit(t):
        t["actions"] = t["actions"][:1]
        derivs(t)[1:] = []
        t["expect_no_change"] = True
        t["metadata"]["synthesis"]["outcome"] = "refusal"

    assert run(broken(good_task, edit), bank) == []


def test_refusal_after_verification_may_write_the_verification(bank, good_task):
    def edit(t):
        t["actions"] = t["actions"][:4]
        derivs(t)[4:] = []
        t["metadata"]["synthesis"]["outcome"] = "refusal"

    assert run(broken(good_task, edit), bank) == []


# A tiny domain with a nondeterministic tool: each call writes the next number of a process-wide counter.
_COUNTER = itertools.count()


@tool(kind="write")
def stamp(ctx: ToolContext, note: str) -> str:
    """Stamp a note with a serial number.

    Args:
        note: The note.
    """
    n = next(_COUNTER)
    ctx.conn.execute("INSERT INTO log VALUES (?, ?)", (f"L-{n}", note))
    return f"stamped {n}"


@pytest.fixture(scope="module")
def flaky() -> Domain:
    return Domain(
        name="flaky",
        schema=Schema.from_ddl("CREATE TABLE log (entry_id TEXT PRIMARY KEY, text TEXT NOT NULL) STRICT;"),
        seed={},
        tools=[stamp],
        documents=[Document("stamping", "Stamping notes", "Every note gets a stamp with a serial number.")],
        policy="Stamp notes. {retrieval_instructions}",
        tasks=[],
        clock=datetime(2025, 1, 1),
    )


def test_nondeterministic_tool(flaky):
    task = {
        "id": "stamp-1",
        "scenario": {"requests": ["Please stamp my note 'hello'."]},
        "actions": [{"name": "stamp", "arguments": {"note": "hello"}}],
        "required_documents": ["stamping"],
        "metadata": {
            "synthesis": {
                "plan": {"id": "p", "template": "stamp", "intent": "stamp a note"},
                "derivations": [{"note": {"kind": "fact", "key": "note"}}],
                "intent_query": "stamp a note serial number",
            }
        },
    }
    problems = verify(task, flaky)
    assert checks(problems) == ["nondeterministic"]
    assert problems[0].component == "actions"


# --- stage 4: play ----------------------------------------------------------------------------------
def test_oracle_with_scripted_user_fails(bank, good_task):
    # the scripted user says the stop token in its first request: the episode ends before any write
    t = broken(good_task, lambda t: t["scenario"]["requests"].__setitem__(0, "I lost my card. ###STOP###"))
    problems = run(t, bank)
    assert checks(problems) == ["oracle_play"]
    assert problems[0].component == "scenario"
    assert run(t, bank, play=False) == []


def test_every_check_names_a_component():
    assert set(CHECKS.values()) <= set(COMPONENTS)


@pytest.mark.parametrize(
    "text,value,hit",
    [
        ("a fee of $25 applies", 2500, True),
        ("a fee of 25.00", 2500, True),
        ("id C-10011", "C-1001", False),
        ("customer c-1001 here", "C-1001", True),
        ("no money", 2500, False),
    ],
)
def test_contains_value(text, value, hit):
    assert contains_value(text, value) is hit


# --- property: random argument mutations are verified or rejected with a named problem --------------
VALUES = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.sampled_from(["C-1001", "CARD-4001", "lost", "stolen", "expedited", "standard", "", "4417", "1986-04-12"]),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_argument_mutations_never_raise(bank, good_task, data):
    t = copy.deepcopy(good_task)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(t["actions"]) - 1))
        args = t["actions"][i]["arguments"]
        if args and data.draw(st.booleans()):
            key = data.draw(st.sampled_from(sorted(args)))
        else:
            key = data.draw(st.sampled_from(["extra", "card_id", "tool_name", "customer_id"]))
        args[key] = data.draw(VALUES)
        if data.draw(st.booleans()):
            derivs(t)[i][key] = data.draw(
                st.sampled_from(
                    [
                        {"kind": "literal"},
                        {"kind": "enum"},
                        {"kind": "output", "action": 0},
                        {"kind": "fact", "key": "phone"},
                        {"kind": "constant", "ids": ["fees/card/lost"]},
                        {"kind": "db", "table": "cards", "key": {"card_id": "CARD-4001"}, "column": "card_id"},
                        {"kind": 3},
                        {},
                    ]
                )
            )
    problems = run(t, bank)
    assert all(p.check in CHECKS for p in problems)
    assert all(p.component in COMPONENTS for p in problems)
    if not problems:  # verified: the oracle reaches reward 1 on it, as verify said
        assert run(t, bank, play=True) == []


# --- a JSON-text argument (a dispatcher's arguments) and records kept as JSON (tau3's layout) -------
@tool(kind="write")
def save_note(ctx: ToolContext, payload: str) -> str:
    """Save a note given as JSON text {"ref", "text"}.

    Args:
        payload: The note as JSON text.
    """
    note = json.loads(payload)
    ctx.conn.execute("INSERT INTO log VALUES (?, ?)", (note["ref"], note["text"]))
    return "saved"


@pytest.fixture(scope="module")
def notes() -> Domain:
    return Domain(
        name="notes",
        schema=Schema.from_ddl(
            "CREATE TABLE log (entry_id TEXT PRIMARY KEY, text TEXT NOT NULL) STRICT;\n"
            "CREATE TABLE records (id TEXT PRIMARY KEY, _data TEXT NOT NULL) STRICT;"
        ),
        seed={"records": [{"id": "r1", "_data": json.dumps({"ref": "REF-77", "owner": "Ann"})}]},
        tools=[save_note],
        documents=[Document("notes", "Saving notes", "Save a note with its record reference.")],
        policy="Save notes. {retrieval_instructions}",
        tasks=[],
        clock=datetime(2025, 1, 1),
    )


def note_task(payload: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "note-1",
        "scenario": {"requests": ["Please save the note 'call back' on my record."], "facts": {"note": "call back"}},
        "actions": [{"name": "save_note", "arguments": {"payload": json.dumps(payload)}}],
        "required_documents": ["notes"],
        "metadata": {
            "synthesis": {
                "plan": {"id": "p", "template": "note", "intent": "save a note"},
                "derivations": [{"payload": {"kind": "json", "fields": fields}}],
                "intent_query": "save a note record reference",
            }
        },
    }


def test_json_argument_fields_are_traced(notes):
    ref = {"kind": "db", "table": "records", "key": {"id": "r1"}, "column": "ref"}
    good = note_task({"ref": "REF-77", "text": "call back"}, {"ref": ref, "text": fact("note")})
    assert verify(good, notes) == []
    wrong = note_task({"ref": "REF-78", "text": "call back"}, {"ref": ref, "text": fact("note")})
    problems = verify(wrong, notes)
    assert checks(problems) == ["untraceable_argument"] and "field 'ref'" in problems[0].message
    unexplained = note_task({"ref": "REF-77", "text": "call back"}, {"ref": ref})
    problems = verify(unexplained, notes)
    assert checks(problems) == ["untraceable_argument"] and "'text' has no derivation" in problems[0].message


def test_a_call_answered_with_an_error_text_is_a_replay_error():
    # a domain may answer a failed call with an ordinary "Error: ..." output (tau3-banking does)
    from tau_env import Document, Domain, Schema, Task, tool

    @tool(kind="write")
    def put(ctx: ToolContext, key: str) -> str:
        """Store a key.

        Args:
            key: The key.
        """
        if key == "bad":
            return "Error: no such key"
        ctx.conn.execute("INSERT INTO kv VALUES (?)", (key,))
        return "ok"

    domain = Domain(
        name="errtext",
        schema=Schema.from_ddl("CREATE TABLE kv (k TEXT PRIMARY KEY) STRICT;"),
        seed={},
        tools=[put],
        documents=[Document("d", "Doc", "Keys are stored with put.")],
        policy="p",
        tasks=[],
    )

    def task(key: str) -> Task:
        return Task.model_validate(
            {
                "id": f"t-{key}",
                "scenario": {"requests": [f"store {key} and then ok"]},
                "actions": [{"name": "put", "arguments": {"key": key}}, {"name": "put", "arguments": {"key": "ok"}}],
                "metadata": {
                    "synthesis": {
                        "plan": {"id": "p", "template": "t", "intent": "store keys"},
                        "derivations": [{"key": {"kind": "fact", "key": "k"}}, {"key": {"kind": "fact", "key": "k"}}],
                        "intent_query": "store keys put",
                    }
                },
            }
        )

    found = verify(task("bad"), domain, play=False)
    assert [p.check for p in found] == ["replay_error"]
    assert "no such key" in found[0].message
