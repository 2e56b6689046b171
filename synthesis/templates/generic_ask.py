"""What the customer of a generic task says, and the values the documents decide.

- :func:`customer_goal`: a tool's description in the customer's words ("Order a new debit card for
  a customer's checking account" -> "order a new debit card for my checking account").
- :func:`describe_record`: the attributes that tell a record from the customer's other records of
  its table (the account's level and class, the card's last digits, the transaction's merchant,
  date and amount), as the customer names it.
- :func:`detail`: one value the customer chooses, named by its argument's meaning
  ("expedited delivery", "the new PIN should be 4821").
- :func:`looked_up`: arguments the agent must look up or the documents decide (fees, rates, limits).
- :func:`rule_value`: such an argument's value from the entity graph's constants of the tool's
  documents, narrowed by the call's other choices and the record's tier; LookupError when the
  documents do not decide it.
- :func:`nonsense`: argument combinations no customer asks for (an expected value equal to the actual).
"""

from __future__ import annotations

import re
from typing import Any

from .generic_db import identity_kind, words

#: Words of an argument whose value the agent looks up or the documents decide.
LOOKED_UP = frozenset(
    {"fee", "fees", "charge", "charges", "rate", "apy", "apr", "liability", "due", "penalty", "limit", "difference"}
)
_CHOSEN = re.compile(r"\b(requested|chosen by the customer|the customer wants|customer's requested)\b", re.I)
_PAIRS = (("expected", "actual"), ("old", "new"), ("current", "new"), ("source", "destination"), ("from", "to"))
_DATE = re.compile(r"^\d{1,4}[/-]\d{1,2}[/-]\d{1,4}$")
_AMOUNT = frozenset({"amount", "balance", "holdings"})
_SECRET = frozenset({"cvv", "pin", "password", "ssn"})
_HEADING = re.compile(r"^\s*(?:#+\s*)?([A-Za-z][A-Za-z &/-]{1,48}?)\s*:?\s*$")


def looked_up(param: str, spec: dict[str, Any]) -> bool:
    """Whether the agent must look up ``param`` (a fee, a rate, a limit), not the customer state it."""
    desc = spec.get("description") or ""
    if spec.get("enum") or _CHOSEN.search(desc) or spec.get("type", "number") == "string":
        return False  # a category (limit_type 'atm'), not an amount
    return bool(words(param) & LOOKED_UP)


def customer_goal(description: str) -> str:
    """The first sentence of a tool's description, as the customer would put it."""
    s = re.split(r"(?<=[.!?])\s|\n", (description or "").strip(), maxsplit=1)[0].rstrip(".").strip()
    s = re.sub(r"\b(?:a|the)\s+(?:customer|user|cardholder)'s\b", "my", s, flags=re.I)
    s = re.sub(r"\b(?:customer|user)'s\b", "my", s, flags=re.I)
    for verb, mine in (("has", "I have"), ("knows", "I know"), ("is", "I am"), ("wants", "I want")):
        s = re.sub(rf"\b(?:the|a)\s+(?:customer|user)\s+{verb}\b", mine, s, flags=re.I)
    s = re.sub(r"\btheir\b", "my", s, flags=re.I)
    s, n = re.subn(r"\s+for\s+(?:a|the)\s+(?:customer|user)\b", "", s, flags=re.I)
    if n:
        s = re.sub(r"^(\w+(?:\s+\w+)?)\s+the\b", r"\1 my", s, count=1)
    s = re.sub(r"\b(?:the|a)\s+(?:customer|user)\b", "me", s, flags=re.I)
    s = re.sub(r"\b[A-Z]{2,}\b", lambda m: m.group(0).lower(), s)
    return (s[:1].lower() + s[1:]) if s else "get some help with my account"


def noun_of(table: str) -> str:
    """What a table's records are called (``credit_card_transaction_history`` -> ``credit card transaction``)."""
    ws = [w for w in re.split(r"[^a-z0-9]+", table.lower()) if w and w not in ("history", "records", "data")]
    if ws and ws[-1].endswith("s") and not ws[-1].endswith("ss"):
        ws[-1] = ws[-1][:-1]
    return " ".join(ws) or table


def _money(v: Any) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return f"${abs(v):,.2f}"
    if isinstance(v, str) and re.fullmatch(r"-?\$?-?[\d,]+(\.\d+)?", v.strip()):
        try:
            return f"${abs(float(v.strip().replace('$', '').replace(',', ''))):,.2f}"
        except ValueError:
            return None
    return None


def describe_record(table: str, rid: str, rows: dict[str, dict], skip: set[str]) -> str | None:
    """The customer's words for record ``rid`` of ``table`` that tell it from their other records of
    the table (None when nothing does). ``skip``: values that are ids (never said).
    """
    mine = rows.get(table, {})
    row = mine.get(rid)
    if row is None:
        return None
    others = [r for k, r in mine.items() if k != rid]
    kinds, ending, text, date, amount, status = [], None, None, None, None, None
    for col, v in row.items():
        cw = words(col)
        if v in (None, "") or (isinstance(v, str) and v in skip) or identity_kind(col) or cw & _SECRET:
            continue
        if "name" in cw and "merchant" not in cw:
            continue
        if isinstance(v, str) and ("last" in cw or "number" in cw) and re.search(r"\d{4}", v):
            ending = ending or (col, re.sub(r"\D", "", v)[-4:])
        elif isinstance(v, str) and _DATE.match(v):
            date = date or (col, v) if "expir" not in col else date
        elif cw & _AMOUNT and _money(v):
            amount = amount or (col, _money(v))
        elif isinstance(v, str) and cw & {"merchant", "description", "memo", "payee"}:
            text = text or (col, v)
        elif cw & {"status"} and isinstance(v, str):
            status = (col, v)
        elif isinstance(v, str) and not re.search(r"\d", v) and len(v) <= 40 and not cw & {"reason", "category"}:
            kinds.append((col, v))
    event = bool(date and amount and text)
    order = [*kinds[:2], ending, text, date, amount, status] if not event else [text, date, amount, *kinds[:1], ending]
    chosen: list[tuple[str, Any]] = []
    for item in order:
        if item is None:
            continue
        rest = [o for o in others if all(_same(o.get(c), row.get(c)) for c, _ in chosen)]
        if chosen and not rest and not event:
            break
        if event or not chosen or any(not _same(o.get(item[0]), row.get(item[0])) for o in rest):
            chosen.append(item)
    if [o for o in others if all(_same(o.get(c), row.get(c)) for c, _ in chosen)]:
        return None
    return _render(noun_of(table), chosen, event)


def _same(a: Any, b: Any) -> bool:
    return a == b or str(a).strip().lower() == str(b).strip().lower()


def _render(noun: str, chosen: list[tuple[str, Any]], event: bool) -> str:
    head, tail = noun, []
    kinds = []
    for col, v in chosen:
        cw = words(col)
        if "last" in cw or "number" in cw:
            tail.append(f"ending in {v}")
        elif _DATE.match(str(v)):
            tail.append(f"on {v}" if event else f"opened on {v}" if "open" in cw else f"from {v}")
        elif cw & _AMOUNT:
            tail.append(f"for {v}" if event else f"with a balance of {v}")
        elif cw & {"merchant", "description", "memo", "payee"}:
            tail.insert(0, f"at {v}" if "merchant" in cw else f"'{v}'")
        elif "status" in cw:
            kinds.insert(0, str(v).lower())
        else:
            kinds.append(str(v))
    if event:
        on = f" on my {kinds[0]}" if kinds else ""
        return " ".join([f"the {noun}", *tail]) + on
    nw = set(noun.lower().split())
    full = [k for k in kinds if set(k.lower().split()) & nw or k[:1].isupper()]
    if full:
        rest = [k for k in kinds if k not in full]
        head = full[0] + (f" ({', '.join(rest)})" if rest else "")
    elif kinds:
        head = f"{' '.join(kinds)} {noun}"
    return " ".join([f"{'the' if event else 'my'} {head}", *tail])


def detail(param: str, spec: dict[str, Any], value: Any) -> str:
    """How the customer states a value they choose, named by the argument's meaning."""
    pw = [w for w in re.split(r"[^a-z0-9]+", param.lower()) if w]
    noun = " ".join(w for w in pw if w not in ("id", "type", "option", "speed", "new", "current", "old")) or param
    desc = spec.get("description") or ""
    if isinstance(value, bool):
        said = re.search(rf"\b{value}\s+to\s+([^,.;]+)", desc)
        if said:
            return f"please {said.group(1).strip()}"
        clause = re.sub(r"^\s*(whether|true to|if)\s+", "", desc.split(".")[0], flags=re.I).strip()
        clause = customer_goal(clause) if clause else noun
        return f"{'yes' if value else 'no'}, {clause}" if clause else f"{noun}: {'yes' if value else 'no'}"
    if spec.get("enum") or (isinstance(value, str) and re.fullmatch(r"[A-Za-z][\w-]*", value) and "_" in value):
        gloss = _gloss(desc, str(value))
        said = str(value).replace("_", " ").lower()
        if "reason" in pw:
            return f"the reason is {gloss or said}"
        return gloss or f"{said} {noun}"
    if isinstance(value, str) and value.isupper() and len(value) > 2:
        return f"{value.lower()} {noun}"
    money = _money(value) if spec.get("type") in ("number", "integer") else None
    if "new" in pw:
        return f"the new {noun} should be {money or value}"
    if pw[:1] == ["current"] or "old" in pw:
        return f"my current {noun} is {value}"
    if "reason" in pw:
        return f"the reason is {str(value).replace('_', ' ')}"
    return f"the {noun} is {money or value}"


def _gloss(desc: str, value: str) -> str:
    m = re.search(rf"['\"]{re.escape(value)}['\"]\s*(?:\(([^)]*)\)|for ([^,;'\"]+))", desc)
    return ((m.group(1) or m.group(2) or "").strip().rstrip(".")) if m else ""


def nonsense(params: dict[str, dict], args: dict[str, Any]) -> bool:
    """Two arguments that name the same thing on two sides (expected / actual APY, source / destination
    account, current / new PIN) with one value: no customer asks for that.
    """
    names = [p for p in args if p in params]
    for a in names:
        for b in names:
            if a >= b:
                continue
            wa, wb = words(a), words(b)
            for x, y in _PAIRS:
                if (x in wa and y in wb) or (y in wa and x in wb):
                    if wa - {x, y} == wb - {x, y} and _same(args[a], args[b]):
                        return True
    return False


def _headings(text: str) -> list[str | None]:
    """For each line of ``text``, the nearest heading-like line above it (``MID TIER:``)."""
    out, cur = [], None
    for line in text.splitlines():
        out.append(cur)
        s = line.strip()
        m = _HEADING.match(s)
        if m and s and (s.endswith(":") or s.startswith("#")) and not s.startswith(("-", "*")):
            cur = m.group(1).strip()
    return out


def _options_of(text: str, options: list[str], start: int) -> set[str]:
    """The options (enum members) a constant at ``start`` of ``text`` is stated for: those named right
    after it (``$0 for both STANDARD and EXPEDITED``), else the nearest one before it (not negated).
    """
    low = text.lower()
    end = low.find(")", start)
    after = low[start : end if end > 0 else len(low)]
    hits = {o for o in options if re.search(rf"\b{re.escape(o.lower())}\b", after)}
    if hits:
        return hits
    best, pos = None, -1
    for o in options:
        for m in re.finditer(rf"\b{re.escape(o.lower())}\b", low[:start]):
            if re.search(r"\b(no|not|without)\s+$", low[max(0, m.start() - 8) : m.start()]):
                continue
            if m.start() > pos:
                best, pos = o, m.start()
    return {best} if best else set()


def rule_value(
    graph: Any,
    domain: Any,
    docs: list[str],
    param: str,
    args: dict[str, Any],
    options: dict[str, list[str]],
    record_values: list[str],
) -> tuple[Any, list[str]]:
    """The value the documents give ``param`` for this call: constants of ``docs`` that name the
    argument (by name, else all its words), stated for the call's chosen options (``options``: other
    argument -> its listed values) and, when the documents state it per tier or class (headings), for
    the heading a document links to one of ``record_values`` (``MID TIER (Blue Account, Green Account)``).

    Returns:
        The value (dollars for money, as the tool takes it) and the constant ids that decide it.

    Raises:
        LookupError: No constant, or several values the records cannot choose between.
    """
    if graph is None or not docs:
        raise LookupError(f"no document decides {param}")
    money = [
        c
        for c in graph.constants
        if c.doc in docs and c.unit in ("cents", "percent") and not re.search(r"\be\.g\.|\bexample\b", c.text, re.I)
    ]
    named = [c for c in money if param in c.text]
    if not named:
        pw = words(param) - {"new", "amount"}
        named = [c for c in money if pw and pw <= words(c.text)]
    if not named:
        raise LookupError(f"no constant of {docs} names {param}")
    by_doc = {d.id: d for d in domain.documents}
    kept = []
    for c in named:
        ok = True
        for q, opts in options.items():
            if q == param or q not in args or not isinstance(args[q], str):
                continue
            quote = str(c.attributes.get("quote", ""))
            at = c.text.find(quote) if quote else -1
            said = _options_of(c.text, opts, max(at, 0))
            if said and args[q].lower() not in {o.lower() for o in said}:
                ok = False
        if ok:
            kept.append(c)
    heads = {}
    for c in named:
        text = (by_doc[c.doc].text or "") if c.doc in by_doc else ""
        hs = _headings(text)
        heads[c.id] = hs[c.line - 1] if 0 < c.line <= len(hs) else None
    cases = {heads[c.id] for c in named}
    if len(cases) > 1:  # stated per tier / class: the most specific record value a document places in one
        pick = None
        for v in sorted(dict.fromkeys(record_values), key=lambda x: -len(x)):
            linked = {h for h in cases if h and _linked(domain, h, [v])}
            if len(linked) == 1:
                pick = linked.pop()
                break
        if pick is None:
            raise LookupError(f"the records do not say which of the documents' cases decides {param}")
        kept = [c for c in kept if heads[c.id] == pick]
    if not kept:
        raise LookupError(f"no constant of {param} for the chosen {sorted(options)}")
    values = {(c.value, c.unit) for c in kept}
    if len(values) != 1:
        raise LookupError(f"the documents give {param} several values: {sorted(map(str, values))}")
    c = kept[0]
    value = c.value / 100 if c.unit == "cents" else float(c.value)
    return value, [c.id]


def _linked(domain: Any, heading: str, values: list[str]) -> bool:
    """Whether a document line names ``heading`` (``MID TIER``) together with one of ``values`` as a
    list item of it (``(Blue Account, Green Account (checking))``, not ``Light Green Account``).
    """
    hw = re.sub(r"[^a-z0-9]+", " ", heading.lower()).strip()
    if not hw:
        return False
    vals = [v for v in values if isinstance(v, str) and len(v) >= 4 and not re.search(r"\d{3}", v)]
    for d in domain.documents:
        for line in (d.text or "").splitlines():
            norm = re.sub(r"[^a-z0-9]+", " ", line.lower())
            if f" {hw} " not in f" {norm} " or line.strip().rstrip(":").strip().lower() == heading.lower():
                continue
            for v in vals:
                if re.search(rf"(?:^|[(,:;]\s*|\band\s+){re.escape(v)}(?![\w-])", line, flags=re.I):
                    return True
    return False
