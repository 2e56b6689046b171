"""The wording of a synthesized task: persona, requests and instructions for the simulated user.

Only the wording comes from here; the chain, the facts and the initial state come from the
template. Two backends:

- the template backend (``llm=None``): requests from several phrasings per intent, picked by the
  plan's seed and the variant number (a regeneration takes the next phrasing);
- an LLM (a ``SynthLLM``, role ``"wording"``): asked for JSON ``{persona, requests, instructions}``,
  then validated: as many requests as the draft asks, in order; no value the agent must look up
  (fees, limits, ids) in what the user says; every claim the plan needs is present. A reply that
  fails raises :class:`WordingError`, whose ``problems`` the caller feeds back into the prompt.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from tau_env import Scenario

from .errors import SynthesisError
from .records import Plan, Problem
from .templates import Draft

#: Phrasings per intent; ``{name}`` fields come from the ask's ``say``. A phrasing is used only when
#: every field it names is given (not None).
PATTERNS: dict[str, list[str]] = {
    "open_account": [
        "I'd like to open a {product} account with {amount} from {funding}.",
        "Could you open a {product} for me? I want to put {amount} in it, taken from {funding}.",
        "Hi, I want a new {product}. Please fund it with {amount} from {funding}.",
        "I'd like to open a {product} account, funded from {funding}.",
        "Can you set up a {product} for me, with the money coming from {funding}?",
        "I'm looking for {need}. Could you open one for me with {amount} from {funding}?",
        "I want {need}; can you open it with {amount} from {funding}?",
    ],
    "close_account": [
        "Please close my {account}. {reason_text}",
        "I'd like to close my {account}. {reason_text}",
        "Can you shut down my {account} for me? {reason_text}",
        "Please close my {account}.",
        "I want to close my {account}; I don't need it any more.",
    ],
    "transfer": [
        "Please move {amount} from my {src} to my {dst}.",
        "Could you transfer {amount} from {src} to {dst}?",
        "I need {amount} moved from my {src} into my {dst}, please.",
        "I'd like to move money from my {src} to my {dst}.",
        "Can you transfer {all_text} from my {src} to my {dst}?",
    ],
    "update_contact": [
        "I'd like to update my {fields} on file.",
        "Could you change my {fields}? {new_text}",
        "My {fields} changed; please update it. {new_text}",
        "Please update my {fields}. {new_text}",
    ],
    "link_overdraft": [
        "Can you link my {savings} to my {checking} as overdraft protection?",
        "I'd like my {savings} to cover overdrafts on my {checking}.",
        "Please set up overdraft protection on my {checking} using my {savings}.",
        "I'd like overdraft protection on my {checking}. Can you set that up?",
        "Is there a way to stop my {checking} from being overdrawn? Please set it up.",
    ],
    "wire": [
        "I need to wire {amount} to {beneficiary}, account number {beneficiary_account}.",
        "Please send a wire of {amount} to {beneficiary}; their account number is {beneficiary_account}.",
        "Could you help me wire {amount} to {beneficiary} (account {beneficiary_account})?",
        "I'd like to send {amount} by wire to {beneficiary}.",
        "I need to wire {amount} to {beneficiary} from {source}. Their account number is {beneficiary_account}.",
    ],
    "deposit_check": [
        "I have a {amount} check{from_text}. Can I deposit it with the app?",
        "Can I deposit a check for {amount} in the mobile app, or do I need a branch?",
        "I've got a {amount} check{from_text}; is the app OK for that?",
        "I have two checks, {amount} and {amount2}. Can I deposit both in the app?",
        "Two checks to deposit: one for {amount} and one for {amount2}. Can the app take them?",
    ],
    "refund_fee": [
        "I was charged {fee_text}{when_text}. Could you refund it?",
        "Can you reverse {fee_text}{when_text}, please?",
        "I'd like {fee_text}{when_text} refunded.",
        "There's a fee on my account that I'd like taken off. Can you look?",
        "I think I was charged some fee recently. Can you refund it?",
    ],
    "human": [
        "That's not acceptable. I want to talk to a real person.",
        "I'd like to speak to a human colleague, please.",
        "Please put me through to a person.",
    ],
}
GENERIC = ["I'd like help: {intent_text}.", "Could you help me {intent_text}?", "Hi, I need to {intent_text}."]
CLAIMS: dict[str, list[str]] = {
    "tier": ["I'm a {tier} customer, by the way.", "As a {tier} client, that should be fine.", "I'm {tier}, remember."],
    "promise": ["{promise}", "By the way, {promise}"],
    "text": ["{text}"],
}
TEMPERAMENTS = {
    "polite": "Be polite and patient.",
    "impatient": "You are in a hurry; keep answers short.",
    "anxious": "You are a little worried; ask the agent to confirm what happens.",
    "confident": "You are sure of what you want.",
    "chatty": "You like to chat, but answer what you are asked.",
}


class WordingError(SynthesisError):
    """A model's wording broke a rule; ``problems`` say which (component ``scenario``)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("The wording was rejected: " + "; ".join(p.message for p in problems))


def _fill(pattern: str, say: dict[str, Any]) -> str | None:
    fields = re.findall(r"{(\w+)}", pattern)
    if any(say.get(f) in (None, "") for f in fields):
        return None
    return re.sub(r"\s+", " ", pattern.format(**{f: say[f] for f in fields})).strip()


def phrase(ask: dict[str, Any], rng: random.Random, variant: int = 0) -> str:
    """One request from an ask, chosen by ``rng`` and ``variant`` among the phrasings that state
    exactly the ask's given ``say`` fields (those in ``optional`` may be left out).
    """
    say = {k: v for k, v in (ask.get("say") or {}).items() if v not in (None, "")}
    say.setdefault("intent_text", ask.get("intent", "get help").replace("_", " "))
    optional = {"intent_text", *ask.get("optional", ())}
    pats = list(ask.get("patterns") or PATTERNS.get(ask.get("intent", ""), GENERIC))
    need = set(say) - optional
    options = [p for p in pats if set(re.findall(r"{(\w+)}", p)) <= set(say) and need <= set(re.findall(r"{(\w+)}", p))]
    if not options:  # the closest phrasings, the missing fields appended
        fits = [p for p in pats + GENERIC if set(re.findall(r"{(\w+)}", p)) <= set(say)]
        best = max(len(set(re.findall(r"{(\w+)}", p)) & need) for p in fits)
        options = [p for p in fits if len(set(re.findall(r"{(\w+)}", p)) & need) == best]
    pick = options[(rng.randrange(len(options)) + variant) % len(options)]
    text = _fill(pick, say) or ""
    missing = [str(say[k]) for k in sorted(need - set(re.findall(r"{(\w+)}", pick)))]
    if missing:
        text += " (" + "; ".join(missing) + ")"
    for key, value in (ask.get("claims") or {}).items():
        pats = CLAIMS.get(key, ["{" + key + "}"])
        claim = _fill(pats[(rng.randrange(len(pats)) + variant) % len(pats)], {key: value})
        if claim:
            text = f"{claim} {text}" if rng.random() < 0.5 else f"{text} {claim}"
    return text


def _persona_text(p: dict[str, Any]) -> str:
    who = p.get("name", "A customer")
    job = str(p.get("occupation") or "")
    bits = [f"{who}, {'an' if job[:1].lower() in 'aeiou' else 'a'} {job}" if job else who]
    if p.get("temperament"):
        bits.append(p["temperament"])
    return "; ".join(bits) + "."


def template_scenario(draft: Draft, plan: Plan, variant: int = 0) -> Scenario:
    """The template backend's scenario."""
    rng = random.Random(f"wording:{plan.id}:{plan.seed}")
    requests = [phrase(a, rng, variant) for a in draft.asks]
    temper = TEMPERAMENTS.get(str(draft.persona.get("temperament")), "")
    parts = [draft.instructions_hint, temper, "Share a detail only when the agent asks for it."]
    if draft.persona.get("verbosity") == "terse":
        parts.append("Answer in as few words as you can.")
    return Scenario(
        persona=_persona_text(draft.persona),
        requests=requests,
        facts=dict(draft.facts),
        unknown=list(draft.unknown),
        instructions=" ".join(p for p in parts if p),
    )


def _money_forms(text: str) -> list[str]:
    """Ways a looked-up value may be written (``$1,200`` -> ``$1,200``, ``$1200``, ``1200.00``)."""
    forms = {text}
    m = re.fullmatch(r"\$([\d,]+)(?:\.(\d\d))?", text)
    if m:
        whole = m.group(1).replace(",", "")
        forms |= {f"${whole}", f"${int(whole):,}.{m.group(2) or '00'}", f"{whole}.{m.group(2) or '00'}"}
    return sorted(forms)


def problems_of(scenario: Scenario, draft: Draft) -> list[Problem]:
    """What is wrong with a scenario for ``draft`` (empty when it is acceptable)."""
    out: list[Problem] = []
    if not scenario.requests or any(not r.strip() for r in scenario.requests):
        out.append(Problem("wording_requests", "scenario", "requests must be a non-empty list of non-empty texts."))
        return out
    if len(scenario.requests) != len(draft.asks):
        out.append(
            Problem(
                "wording_requests",
                "scenario",
                f"expected {len(draft.asks)} request(s), one per ask in order, got {len(scenario.requests)}.",
            )
        )
    said = " ".join([*scenario.requests, scenario.persona, scenario.instructions])
    said_l = said.lower()
    for value in draft.lookups:
        for form in _money_forms(value):
            if re.search(r"(?<![\w$.,])" + re.escape(form.lower()) + r"(?![\w]|[.,]\d)", said_l):
                out.append(
                    Problem(
                        "wording_leak",
                        "scenario",
                        f"the user states {form!r}, a value the agent must look up; remove it from the wording.",
                    )
                )
                break
    for i, ask in enumerate(draft.asks):
        for key, value in (ask.get("claims") or {}).items():
            words = [w for w in re.findall(r"[a-z0-9]+", str(value).lower()) if len(w) > 3][:4] or [str(value).lower()]
            if not all(w in said_l for w in words):
                out.append(
                    Problem(
                        "wording_claim",
                        "scenario",
                        f"request {i + 1} must make the user's claim ({key}: {value!r}); it is missing.",
                    )
                )
    return out


def _messages(draft: Draft, plan: Plan, prompts: dict[str, str] | None, critique: str | None) -> list[dict]:
    system = (
        "You write the customer's side of a support-chat task. Reply with one JSON object: "
        '{"persona": str, "requests": [str, ...], "instructions": str}. '
        "Write one request per ask, in the given order, in the customer's voice. The customer states only "
        "what the ask's 'say' fields give and makes every claim in 'claims'; never mention fees, limits, "
        "ids or any value listed under 'never_say': the agent must look those up. Personal details in "
        "'facts' are shared only when asked, so leave them out of the requests. 'instructions' tell an "
        "LLM playing the customer how to react (use 'hint')."
    )
    extra = (prompts or {}).get("wording")
    if extra:
        system += "\n" + extra
    body = {
        "persona": draft.persona,
        "asks": draft.asks,
        "facts": sorted(draft.facts),
        "never_say": draft.lookups,
        "hint": draft.instructions_hint,
        "outcome": plan.outcome,
        "failure_mode": plan.failure_mode,
    }
    user = json.dumps(body, ensure_ascii=False, default=str)
    if critique:
        user += f"\nA previous version was rejected: {critique}\nFix exactly that."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


async def write_scenario(
    draft: Draft,
    plan: Plan,
    llm: Any = None,
    prompts: dict[str, str] | None = None,
    *,
    variant: int = 0,
    critique: str | None = None,
) -> Scenario:
    """The scenario of ``draft``: by the template backend (``llm=None``) or by a model.

    Raises:
        WordingError: The model's reply breaks a rule (its ``problems`` name each one).
    """
    if llm is None:
        return template_scenario(draft, plan, variant)
    reply = await llm.ajson("wording", _messages(draft, plan, prompts, critique), seed=plan.seed + variant)
    requests = reply.get("requests") if isinstance(reply, dict) else None
    if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
        raise WordingError([Problem("wording_requests", "scenario", "the reply has no list of request texts.")])
    if not requests:
        raise WordingError([Problem("wording_requests", "scenario", "requests must be a non-empty list.")])
    persona = reply.get("persona")
    instructions = reply.get("instructions") if isinstance(reply.get("instructions"), str) else ""
    if draft.instructions_hint and draft.instructions_hint not in instructions:
        instructions = f"{instructions} {draft.instructions_hint}".strip()
    scenario = Scenario(
        persona=persona if isinstance(persona, str) and persona.strip() else _persona_text(draft.persona),
        requests=[r.strip() for r in requests],
        facts=dict(draft.facts),
        unknown=list(draft.unknown),
        instructions=instructions,
    )
    problems = problems_of(scenario, draft)
    if problems:
        raise WordingError(problems)
    return scenario
