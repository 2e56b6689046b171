"""Task templates: what a plan becomes before any wording exists.

A :class:`Template` turns a :class:`~tau_env.synthesis.records.Plan` into a :class:`Draft`: an
initial-state patch (a fresh customer with run-unique ids), the reference chain with one derivation
per argument (see ``records.py``), the facts the user knows, and structured request hints that
``wording.py`` turns into text. Rule values come from the entity graph (:meth:`SynthContext.const`),
record ids from the plan id (:class:`IdAllocator`), and values a tool computes (a wire id) from a
replay of the chain so far (:meth:`SynthContext.outputs`): nothing is guessed.

``templates_for(domain)`` gives the templates of a domain: Harbor Bank's hand-written ones, or the
generic ones (``generic.py``) for any other domain.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from tau_env import Action, Scenario, Task
from tau_env.error import InvalidOptionError

from ..errors import SynthesisError

if TYPE_CHECKING:
    from tau_env import Domain

    from ..records import Plan

__all__ = [
    "BaseTemplate",
    "Chain",
    "Const",
    "Customer",
    "Draft",
    "ID_STYLES",
    "IdAllocator",
    "IdError",
    "PlanIds",
    "SynthContext",
    "Template",
    "hand_over",
    "identity_prefix",
    "new_customer",
    "date_speaker",
    "slug",
    "spoken_date",
    "templates_for",
    "unlock",
]


def slug(text: str) -> str:
    """The entity graph's slug: lower case, runs of non-alphanumerics -> ``_``, stripped."""
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def spoken_date(d: date, today: date, rng: random.Random) -> str:
    """``d`` as a customer says it: ``June 20, 2025``, ``June 20th``, ``20 June``, ``the 20th of
    June``... The year is left out only when it is ``today``'s (the bank's clock), so the date
    stays unambiguous; an agent must then fill it in, as it must for the shipped tasks' dates.
    """
    month, day = d.strftime("%B"), d.day
    forms = [f"{month} {day}, {d.year}", f"{day} {month} {d.year}"]
    if d.year == today.year:
        forms += [f"{month} {_ordinal(day)}", f"{month} {day}", f"{day} {month}", f"the {_ordinal(day)} of {month}"]
    return rng.choice(forms)


def date_speaker(plan: Any) -> Callable[[date, date], str]:
    """``spoken_date`` with the plan's own generator (the plan's other draws stay as they were)."""
    rng = random.Random(f"dates:{plan.id}:{plan.seed}")
    return lambda d, today: spoken_date(d, today, rng)


@dataclass
class Draft:
    """A template's output before wording.

    Attributes:
        initial_state: Patch over the seed ``{table: [rows]}``.
        actions: The reference chain.
        derivations: One dict per action: argument -> derivation (``records.py``).
        facts: What the user knows, keyed as an agent asks ("full name", "date of birth", "phone").
        asks: Request hints in order: ``{"intent": I, "say": {...}, "claims": {...}}``; ``say``
            holds what the user states in the request itself, ``claims`` what they claim that the
            records contradict (or that the task must mention).
        persona: Persona attributes (name, occupation, temperament, verbosity, tier).
        expect_no_change: The chain writes nothing.
        required_documents: Documents whose rules decide the task.
        intent_query: Search query that finds the required documents.
        decisive: Entity-graph constant ids that decide the chain.
        clock: Task clock, or None for the domain's.
        unknown: What the user does not know.
        instructions_hint: Extra guidance for an LLM user (how to react).
        lookups: Values the agent must look up (fees, ids): the wording must never state them.
        tags: Extra task tags.
        description: For authors: what the task tests.
        metadata: Task metadata the domain needs to play the task (e.g. tau3-banking's
            ``agent_data``, its initial state, and ``user_tools``); copied into ``Task.metadata``.
    """

    initial_state: dict[str, list[dict[str, Any]]]
    actions: list[Action]
    derivations: list[dict[str, Any]]
    facts: dict[str, str]
    asks: list[dict[str, Any]]
    persona: dict[str, Any]
    expect_no_change: bool
    required_documents: list[str]
    intent_query: str
    decisive: list[str]
    clock: str | None = None
    unknown: list[str] = field(default_factory=list)
    instructions_hint: str = ""
    lookups: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


class Template(Protocol):
    """Turns plans of one kind into drafts."""

    name: str
    intent: str
    tools: tuple[str, ...]
    outcomes: tuple[str, ...]
    failure_modes: tuple[str | None, ...]
    rule_keys: tuple[str, ...]

    def cells(self) -> list[tuple[str, str | None]]:
        """The (outcome, failure mode) pairs this template supports."""
        ...

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft: ...


@dataclass(frozen=True)
class Const:
    """A rule constant as a template uses it: its entity-graph id, its value, its document."""

    id: str
    value: Any
    doc: str
    found: bool = True  # False: the entity graph has no such constant; the value is the template's reading


#: Id styles of :class:`IdAllocator`: ``plan`` (``CHK-P017-1``: the plan id inside, readable) or
#: ``domain`` (``CHK-482913``: the prefix, then digits only, shaped as Harbor Bank's own ``CHK-2001``).
ID_STYLES = ("plan", "domain")
#: ``domain`` ids: six digits while a plan's key and count fit (``key * 100 + n`` < 900,000), longer beyond.
_SPAN = 900_000
#: A multiplier prime to ``_SPAN`` (2^5 3^2 5^5), near its golden section: ``x -> x * _MIX mod _SPAN`` is a
#: permutation that scatters consecutive counts.
_MIX = 556_237


class IdError(SynthesisError, ValueError):
    """A plan whose record ids cannot be made in the run's style: that plan is refused (with this
    reason in its verdict), the run goes on.
    """


class IdAllocator:
    """Run-unique record ids derived from plan ids, so tasks' initial states never collide.

    ``style="plan"`` writes the plan id into each id (``CHK-P017-1``); ``style="domain"`` writes
    digits only (``CHK-482913``), the shape of a seeded domain's ids (``CHK-2001``), so a model trained on
    synthesized tasks copies ids of the shape it meets on the domain's own tasks. Its numbers are
    a permutation of ``key * 100 + n`` (the plan's key from its id ``p-ROUND-N``, ``n`` the plan's
    count of ids so far): unique in a run, scattered (an account's number says nothing about its
    customer's), and 100,000 or more, beyond the seeds' 4-digit numbers.
    """

    def __init__(self, run_tag: str = "", style: str = "plan") -> None:
        if style not in ID_STYLES:
            raise InvalidOptionError(f"id style {style!r}: one of {', '.join(ID_STYLES)}")
        self.run_tag = slug(run_tag).upper().replace("_", "")
        self.style = style

    def token(self, plan_id: str) -> str:
        """A short id-safe token of ``plan_id`` (plan ids are unique within a run)."""
        return self.run_tag + re.sub(r"[^A-Za-z0-9]+", "", plan_id).upper()

    def for_plan(self, plan_id: str) -> PlanIds:
        if self.style == "plan":
            return PlanIds(self.token(plan_id))
        # no leading zeros and N < 10^6: one plan id, one key
        m = re.fullmatch(r"p-(0|[1-9]\d*)-(0|[1-9]\d{0,5})", plan_id)
        if m is None:
            raise IdError(f"plan id {plan_id!r}: domain-style ids need the planner's p-ROUND-N plan ids (N < 10^6)")
        return PlanIds(self.token(plan_id), key=int(m.group(1)) * 1_000_000 + int(m.group(2)))


class PlanIds:
    """The ids of one plan: ``next("CHK-")`` -> ``CHK-P017-1``, ``CHK-P017-2``, ...; with a ``key``
    (domain-style ids, see :class:`IdAllocator`) ``CHK-`` and six or more digits.
    """

    def __init__(self, token: str, key: int | None = None) -> None:
        self.token = token
        self.key = key
        self.n = 0

    def next(self, prefix: str) -> str:
        self.n += 1
        if self.key is None:
            return f"{prefix}{self.token}-{self.n}"
        if self.n >= 100:
            raise IdError(f"plan {self.token}: more than 99 record ids in one plan")
        x = self.key * 100 + self.n
        number = 100_000 + (x * _MIX) % _SPAN if x < _SPAN else 1_000_000 + x
        return f"{prefix}{number}"


@dataclass
class SynthContext:
    """What templates read: the domain, its graphs, the id allocator and a run-level rng."""

    domain: Domain
    entity_graph: Any = None
    tool_graph: Any = None
    ids: IdAllocator = field(default_factory=IdAllocator)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    #: The templates to use (None: ``templates_for(domain)``, built on first use).
    templates: dict[str, Any] | None = None
    #: Constant lookups the entity graph could not answer: id -> reason (for the run report).
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def graph(self) -> Any:
        """The entity graph: the one given, else the domain's, built (rule-based, no model) on first use."""
        if self.entity_graph is None and self.domain is not None:
            from ..entity_graph import build_entity_graph

            self.entity_graph = build_entity_graph(self.domain)
        return self.entity_graph

    @property
    def today(self) -> date:
        return self.domain.clock.date()

    @property
    def now(self) -> datetime:
        return self.domain.clock

    def const(
        self,
        doc: str,
        fallback: Any,
        *,
        section: str | None = None,
        row: str | None = None,
        column: str | None = None,
        label: str | None = None,
        heading: str | None = None,
    ) -> Const:
        """A rule constant from the entity graph (``EntityGraph.get``).

        ``fallback`` is the value the template's author read in the document; it is used (and the
        lookup recorded in :attr:`missing`) only when the graph is absent or lacks the constant.
        ``heading`` is the section used to build the fallback id when ``section`` is not given
        (tables before the first ``##`` heading belong to the document's title).
        """
        sec = section or heading or ""
        if label is not None:
            cid = f"{doc}/{slug(sec)}/{slug(label)}"
        else:
            cid = f"{doc}/{slug(sec)}/{slug(row or '')}/{slug(column or '')}"
        g = self.graph
        if g is not None:
            kwargs = {k: v for k, v in (("section", section), ("row", row), ("column", column), ("label", label)) if v}
            try:
                c = g.get(doc, **kwargs)
                return Const(c.id, c.value, doc)
            except (KeyError, LookupError) as e:
                self.missing[cid] = str(e)[:200]
        else:
            self.missing.setdefault(cid, "no entity graph")
        return Const(cid, fallback, doc, found=False)

    def find(self, doc: str, value: Any, *, section: str | None = None, words: str = "") -> Const:
        """The constant of ``doc`` (in ``section`` when given) whose value is ``value``.

        Ids follow the entity graph's wording of each line, which a template cannot know; the value
        a document states (and its section) is what the template's author read, so it finds the
        constant whatever its id. Among several, the one whose id holds the most of ``words``, then
        the first. Not found (or no graph): the value with a ``found=False`` id, recorded in
        :attr:`missing`, which rule derivations and decisive lists then leave out.
        """
        sec = slug(section) if section else ""
        cid = f"{doc}/{sec}/{slug(words) or slug(str(value))}"
        g = self.graph
        if g is None:
            self.missing.setdefault(cid, "no entity graph")
            return Const(cid, value, doc, found=False)
        want = slug(str(value))
        hits = []
        for c in getattr(g, "constants", ()):
            if c.doc != doc or (sec and c.id.split("/")[1] != sec):
                continue
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if (c.value == value) if numeric else slug(str(c.value)) == want:
                hits.append(c)
        if not hits:
            self.missing[cid] = f"no constant of {doc!r} (section {section!r}) has the value {value!r}"
            return Const(cid, value, doc, found=False)
        ws = [w for w in slug(words).split("_") if w]
        best = max(hits, key=lambda c: (sum(w in c.id for w in ws), "~" not in c.id))
        return Const(best.id, best.value, doc)

    def outputs(self, initial_state: dict[str, list[dict[str, Any]]], actions: list[Action]) -> list[str]:
        """Replay ``actions`` on s0 and return their outputs (raises ValueError on a tool error)."""
        task = Task(
            id="__synth_probe__", scenario=Scenario(requests=["-"]), initial_state=initial_state, actions=actions
        )
        db, steps = self.domain.replay(task)
        db.close()
        for i, s in enumerate(steps):
            if s.error:
                raise ValueError(f"action {i} ({s.name}) fails in the probe replay: {s.output[:200]}")
        return [s.output for s in steps]


class Chain:
    """A reference chain under construction: actions with their derivations."""

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.derivations: list[dict[str, Any]] = []

    def add(
        self, name: str, arguments: dict[str, Any], derivations: dict[str, Any] | None = None, requestor: str = "agent"
    ) -> int:
        """Append an action; returns its index."""
        self.actions.append(Action(name=name, arguments=dict(arguments), requestor=requestor))
        self.derivations.append(dict(derivations or {}))
        return len(self.actions) - 1

    def __len__(self) -> int:
        return len(self.actions)

    def writes(self, domain: Domain) -> bool:
        """Whether any action calls a write tool (verify_identity counts: it records a verification)."""
        box = domain.toolbox("all")
        return any(getattr(box.tools.get(a.name), "kind", "read") == "write" for a in self.actions)


class BaseTemplate:
    """Shared defaults: a template lists the (outcome, failure mode) cells it supports in ``supported``."""

    name: str = ""
    intent: str = ""
    tools: tuple[str, ...] = ()
    rule_keys: tuple[str, ...] = ()
    supported: tuple[tuple[str, str | None], ...] = (("success", None),)

    @property
    def outcomes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o for o, _ in self.supported))

    @property
    def failure_modes(self) -> tuple[str | None, ...]:
        return tuple(dict.fromkeys(f for _, f in self.supported))

    def cells(self) -> list[tuple[str, str | None]]:
        return list(self.supported)

    #: The write tools a cell's chain calls, where they differ from :meth:`cell_tools`'s default.
    calls: dict[tuple[str, str | None], tuple[str, ...]] = {}

    def cell_tools(self, outcome: str, mode: str | None) -> tuple[str, ...]:
        """The write tools a plan of this cell calls (the plan's ``tools``): :attr:`calls` if it names
        the cell, else for a transfer the hand-off, for a refusal none, and otherwise every tool but
        the hand-off.
        """
        if (outcome, mode) in self.calls:
            return tuple(self.calls[(outcome, mode)])
        if outcome == "transfer":
            return tuple(t for t in self.tools if t == "transfer_to_human")
        if outcome == "refusal":
            return ()
        return tuple(t for t in self.tools if t != "transfer_to_human")

    def covers(self, rule_id: str) -> bool:
        """Whether a plan of this template can make ``rule_id`` decisive (it is one of :attr:`rule_keys`)."""
        return rule_id in self.rule_keys

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:  # pragma: no cover - abstract
        raise NotImplementedError


# --- a fresh customer --------------------------------------------------------------------------------
FIRST = (
    "Amara Maya Noah Liam Sofia Elena Hiro Priya Tomas Ingrid Kwame Aisha Mateo Leila Oskar Nia Ravi Chloe Diego "
    "Yuki Farah Jonas Zara Emil Ana Felix Hana Idris Mira Pavel Rosa Sami Tara Viktor Wen Yara Bruno Celia Dev Esme"
).split()
LAST = (
    "Okoye Lindqvist Moreau Tanaka Haddad Novak Castillo Brennan Achebe Kowalski Ferreira Nakamura Osei Petrov "
    "Quinn Rahman Silva Thornton Ueda Varga Whitfield Xu Yilmaz Zeller Abara Bianchi Carvalho Dubois Eriksen "
    "Fontaine Garcia Hoang Iyer Jansen Kaur Larsen Mbeki Nair Olsen Park"
).split()
JOBS = (
    "nurse",
    "ferry mechanic",
    "graphic designer",
    "retired teacher",
    "harbour pilot",
    "software tester",
    "bakery owner",
    "graduate student",
    "paramedic",
    "accountant",
    "marine biologist",
    "bus driver",
    "architect",
    "pharmacist",
    "carpenter",
)
TOWNS = (
    ("Portsmouth", "NH", "03801"),
    ("Dover", "NH", "03820"),
    ("Kittery", "ME", "03904"),
    ("Hampton", "NH", "03842"),
    ("Exeter", "NH", "03833"),
    ("Rye", "NH", "03870"),
)
STREETS = ("Pier Road", "Market Street", "Harbor View", "Elm Lane", "Ship Street", "Bow Street", "Cedar Court")


@dataclass
class Customer:
    """A customer created for one plan, with the rows it adds and what the user knows."""

    row: dict[str, Any]
    ids: PlanIds
    rng: random.Random
    today: date
    accounts: list[dict[str, Any]] = field(default_factory=list)
    cards: list[dict[str, Any]] = field(default_factory=list)
    transactions: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.row["customer_id"]

    @property
    def name(self) -> str:
        return self.row["full_name"]

    @property
    def dob(self) -> str:
        return self.row["date_of_birth"]

    @property
    def last4(self) -> str:
        return self.row["phone"][-4:]

    @property
    def tier(self) -> str:
        return self.row["tier"]

    def facts(self) -> dict[str, str]:
        """The identity facts the user gives when asked."""
        return {"full name": self.name, "date of birth": self.dob, "phone": self.last4}

    def day(self, days_ago: int) -> str:
        return (self.today - timedelta(days=days_ago)).isoformat()

    def account(
        self, product: str, balance: int, *, opened_days_ago: int | None = None, status: str = "open"
    ) -> dict[str, Any]:
        prefix = "CHK-" if product.endswith("_checking") else ("CD-" if product == "cd_12_month" else "SAV-")
        ago = opened_days_ago if opened_days_ago is not None else self.rng.randint(400, 3000)
        row = {
            "account_id": self.ids.next(prefix),
            "customer_id": self.id,
            "product": product,
            "status": status,
            "balance_cents": balance,
            "opened_on": self.day(ago),
            "overdraft_link": None,
            "closed_reason": None,
        }
        self.accounts.append(row)
        return row

    def card(self, account: dict[str, Any], *, status: str = "active", limit: int = 100_000) -> dict[str, Any]:
        row = {
            "card_id": self.ids.next("CARD-"),
            "account_id": account["account_id"],
            "customer_id": self.id,
            "last4": f"{self.rng.randint(0, 9999):04d}",
            "status": status,
            "daily_limit_cents": limit,
            "issued_on": self.day(self.rng.randint(100, 900)),
            "replaces": None,
        }
        self.cards.append(row)
        return row

    def txn(
        self,
        account: dict[str, Any],
        description: str,
        amount: int,
        category: str,
        *,
        days_ago: int = 5,
        status: str = "posted",
    ) -> dict[str, Any]:
        """A transaction row (does not change the account's balance: set it yourself)."""
        row = {
            "txn_id": self.ids.next("T-"),
            "account_id": account["account_id"],
            "posted_on": self.day(days_ago),
            "description": description,
            "amount_cents": amount,
            "category": category,
            "status": status,
        }
        self.transactions.append(row)
        return row

    def add_row(self, table: str, row: dict[str, Any]) -> None:
        self.extra.setdefault(table, []).append(row)

    def state(self) -> dict[str, list[dict[str, Any]]]:
        """The initial-state patch: the customer and every row added for it."""
        out: dict[str, list[dict[str, Any]]] = {"customers": [dict(self.row)]}
        for table, rows in (("accounts", self.accounts), ("cards", self.cards), ("transactions", self.transactions)):
            if rows:
                out[table] = [dict(r) for r in rows]
        for table, rows in self.extra.items():
            out.setdefault(table, []).extend(dict(r) for r in rows)
        return out


def new_customer(
    plan: Plan,
    ctx: SynthContext,
    rng: random.Random,
    *,
    tier: str = "standard",
    age: int | None = None,
    birthday_in_days: int | None = None,
    since_days_ago: int | None = None,
) -> Customer:
    """A fresh customer for ``plan``: run-unique ids, a name and birth date no seed customer shares.

    Args:
        plan: The plan (its id gives the ids).
        ctx: The synthesis context.
        rng: The plan's random generator.
        tier: standard, preferred or private.
        age: Age in whole years today (random 26-70 if None).
        birthday_in_days: Days until the next birthday (random if None); with ``age`` this pins
            boundary ages (e.g. 24 turning 25 tomorrow).
        since_days_ago: Days since the customer joined (random if None).
    """
    ids = ctx.ids.for_plan(plan.id)
    today = ctx.today
    seed_people = {(c["full_name"], c["date_of_birth"]) for c in ctx.domain.seed.get("customers", [])}
    while True:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        a = age if age is not None else rng.randint(26, 70)
        nxt = birthday_in_days if birthday_in_days is not None else rng.randint(1, 364)
        bday = today + timedelta(days=nxt)  # the next birthday, when the customer turns a + 1
        try:
            dob = bday.replace(year=bday.year - a - 1)
        except ValueError:  # 29 February
            dob = (bday - timedelta(days=1)).replace(year=bday.year - a - 1)
        if (name, dob.isoformat()) not in seed_people:
            break
    phone = f"555-{rng.randint(200, 989)}-{rng.randint(0, 9999):04d}"
    town, state, zip_ = rng.choice(TOWNS)
    first, last = name.lower().split()
    row = {
        "customer_id": ids.next("C-"),
        "full_name": name,
        "date_of_birth": dob.isoformat(),
        "email": f"{first}.{last}{rng.randint(1, 99)}@example.com",
        "phone": phone,
        "address": f"{rng.randint(1, 240)} {rng.choice(STREETS)}, {town}, {state} {zip_}",
        "tier": tier,
        "customer_since": (today - timedelta(days=since_days_ago or rng.randint(800, 5000))).isoformat(),
    }
    return Customer(row=row, ids=ids, rng=rng, today=today)


def identity_prefix(chain: Chain, cust: Customer, *, get_customer: bool = True) -> None:
    """The standard opening: find_customer, verify_identity, and (optionally) get_customer."""
    i = chain.add(
        "find_customer",
        {"full_name": cust.name, "date_of_birth": cust.dob},
        {"full_name": {"kind": "fact", "key": "full name"}, "date_of_birth": {"kind": "fact", "key": "date of birth"}},
    )
    chain.add(
        "verify_identity",
        {"customer_id": cust.id, "date_of_birth": cust.dob, "phone_last4": cust.last4},
        {
            "customer_id": {"kind": "output", "action": i},
            "date_of_birth": {"kind": "fact", "key": "date of birth"},
            "phone_last4": {"kind": "fact", "key": "phone"},
        },
    )
    if get_customer:
        chain.add("get_customer", {"customer_id": cust.id}, {"customer_id": {"kind": "output", "action": i}})


def unlock(chain: Chain, tool: str, doc: str) -> int:
    """``unlock_tool(tool_name=tool)``: the name is written in ``doc``."""
    return chain.add(
        "unlock_tool",
        {"tool_name": tool},
        {"tool_name": {"kind": "literal", "why": f"tool name found in document {doc}"}},
    )


def hand_over(chain: Chain, tool: str, doc: str) -> int:
    """``hand_over_tool(tool_name=tool)``: a user tool named in ``doc``."""
    return chain.add(
        "hand_over_tool",
        {"tool_name": tool},
        {"tool_name": {"kind": "literal", "why": f"user tool named in document {doc}"}},
    )


def templates_for(domain: Domain, entity_graph: Any = None, tool_graph: Any = None) -> dict[str, Template]:
    """The templates of ``domain``: Harbor Bank's own, or the generic ones for any other domain."""
    if domain.name in ("harbor-bank", "harbor-bank-v0"):
        from . import harbor_bank

        out: dict[str, Template] = dict(harbor_bank.TEMPLATES)
        try:
            from . import harbor_bank_cards
        except ImportError:
            harbor_bank_cards = None
        if harbor_bank_cards is not None:
            out.update(harbor_bank_cards.TEMPLATES)
        return out
    from . import generic

    return dict(generic.templates(domain, entity_graph, tool_graph))
