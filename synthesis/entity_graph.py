"""The entity graph: every numeric or categorical constant a domain's documents state.

Rule-based extraction needs no model: markdown tables (one constant per value in a cell, keyed by
section, row label and column header), list items and prose lines (money, percents, counts and
durations, times, dates, phone numbers, back-quoted codes). Each constant cites its document and
1-based line (of ``Document.text``: the title is line 1) and carries that line's text. With a model,
:func:`build_entity_graph` also asks it per document chunk and keeps only what the cited line says.

Ids (templates rely on them): slugs are lower-case, runs of non-alphanumerics become ``_``. A table
cell is ``doc/section/row/column``; a list item or prose line ``doc/section/label``; clashes get
``~2``, ``~3``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Determining attributes: what makes two constants with one name different rules.
DETERMINING = ("tier", "product", "channel", "reason", "delivery", "segment", "subject")

TIER_WORDS = ("standard", "preferred", "private", "gold", "silver", "platinum", "bronze", "premium", "elite")
CHANNELS = {
    "chat": r"\b(?:in|by|through|via) (?:the )?chat\b",
    "branch": r"\b(?:at|in) (?:a |the |any )?branch(?:es)?\b|\bbranch-only\b",
    "app": r"\b(?:in|through|via|with) the (?:harbor bank |mobile )?app\b|\bmobile\b",
    "phone": r"\bby (?:tele)?phone\b|\bover the phone\b",
}
REASONS = ("lost", "stolen", "damaged", "unauthorized", "duplicate", "not_received", "wrong_amount", "fraud", "expired")
MONTHS = "january february march april may june july august september october november december".split()
_MONTH_RE = "|".join(m.capitalize() for m in MONTHS)
_UNIT_WORDS = {
    "business day": "business_days",
    "calendar day": "days",
    "day": "days",
    "month": "months",
    "year": "years",
    "week": "weeks",
    "hour": "hours",
    "minute": "minutes",
}
_STOP = set(
    "a an the of for to in on at by with and or is are be been was it its this that these those per any all "
    "from as can may must not no than up into each every their there your our you we they if when which "
    "who what also only most at least more less".split()
)
_SYNONYMS = {"cost": "fee", "charge": "fee", "price": "fee", "fees": "fee", "costs": "fee", "charges": "fee"}

_VALUE_WORDS = {"none", "free", "included", "no", "yes", "unlimited", "not available", "variable", "fixed", "required"}
_PRODUCT_NOUNS = r"\b(?:account|card|loan|checking|savings|plan|cd|certificate|mortgage|line of credit)\b"
_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()
_TOKEN = re.compile(
    r"(?P<money>(?<![\w$])\$\s?(?P<dollars>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<cents>\d{1,2}))?(?![\d,]*\d)"
    r"(?:\s?(?P<mult>k|K|million|billion)\b)?)"
    r"|(?P<phone>(?<![\w-])(?:1-)?(?:\d{3}-)?\d{3}-\d{4}(?![\w-]))"
    r"|(?P<time>(?<![\w:.])(?P<h>\d{1,2})(?::(?P<mi>\d{2}))?\s?(?P<ampm>a\.m\.|p\.m\.|am\b|pm\b))"
    rf"|(?P<date>\b(?P<mon>{_MONTH_RE}) (?P<day>\d{{1,2}})\b(?:,? (?P<yr>\d{{4}}))?"
    rf"|\b(?P<day2>\d{{1,2}}) (?P<mon2>{_MONTH_RE})(?: (?P<yr2>\d{{4}}))?)"
    r"|(?P<range>(?<![\w.$/-])(?P<lo>\d+(?:\.\d+)?)\s?[-–]\s?(?P<hi>\d+(?:\.\d+)?)(?P<rpct>%)?(?![\w.]*\d)"
    r"(?P<runit>\s?-?\s?(?:business |calendar )?(?:day|month|year|week|hour|minute)s?\b)?)"
    r"|(?P<num>(?<![\w.$/:-])(?P<n>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?(?![\w:]|[.,/]\d|-\d)"
    r"(?P<pct>\s?%|\s?percent\b)?"
    r"(?P<unit>\s?-?\s?(?:business |calendar )?(?:day|month|year|week|hour|minute)s?\b)?)"
    r"|(?P<code>`(?P<ctext>[^`\n]{1,60})`)"
    r"|(?P<ord>(?<![\w.$/:-])(?P<on>\d{1,3})(?:st|nd|rd|th)\b)"
    rf"|(?P<word>\b(?P<wn>(?<!the )(?<!new )(?<!out )one|{'|'.join(_WORDS[:1] + _WORDS[2:])})\b(?= [a-z])"
    r"(?! (?:of|or|another|first|by|at|and|to|in|can|is|may|will|must|that|which|who|replaces)\b)"
    r"(?P<wunit>\s?-?\s?(?:business |calendar )?(?:day|month|year|week|hour|minute)s?\b)?)"
    r"|(?P<swift>(?-i:\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z]{3})[A-Z][A-Z0-9]{5,15}\b))"
    r"|(?P<unlimited>\b(?:no limit|unlimited)\b)"
    r'|(?P<quoted>\("(?P<qtext>[^"\n]{1,60})"\))',
    re.I,
)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_LIST = re.compile(r"^\s*(?:[-*+]|\d{1,2}[.)])\s+")
_LABEL = re.compile(r"^\s*(?:\*\*)?([^:*|]{2,60}?)(?:\*\*)?\s*:(?:\*\*)?\s+(?=\S)")


def slug(text: str) -> str:
    """Lower-case, runs of non-alphanumerics -> ``_``, stripped."""
    return re.sub(r"[^0-9a-z]+", "_", str(text).lower()).strip("_")


def plain(text: str) -> str:
    """Markdown emphasis removed (code marks kept), spaces collapsed."""
    return " ".join(re.sub(r"\*\*|(?<!\w)__|__(?!\w)", "", text).split())


def bare(text: str) -> str:
    """:func:`plain` without code marks."""
    return plain(text).replace("`", "")


@dataclass
class Constant:
    """One constant a document states.

    Attributes:
        id: ``doc/section/row/column`` (table cell) or ``doc/section/label`` (line); ``~N`` on clashes.
        name: What it is, in words (``"Outgoing domestic wire / Standard"``, ``"Overdraft fee"``).
        value: int cents (unit ``cents``), float (``percent``), int/float (``days``, ``count``, ...),
            or str (``category``, ``time`` ``HH:MM``, ``date`` ``MM-DD`` / ``YYYY-MM-DD``, ``phone``, ``code``).
        unit: See ``value``.
        attributes: section, row, column / label, and the determining attributes recognised.
        doc: The document id.
        line: 1-based line of ``Document.text``.
        text: That line.
    """

    id: str
    name: str
    value: Any
    unit: str
    attributes: dict[str, str]
    doc: str
    line: int
    text: str

    @property
    def key(self) -> tuple:
        """What two documents must agree on: topic words, unit and the determining attributes."""
        return (self.unit, topic(self), tuple((k, self.attributes[k]) for k in DETERMINING if k in self.attributes))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def topic(c: Constant) -> str:
    """The constant's topic words (no tier/product/channel/reason words, synonyms merged), sorted."""
    a = c.attributes
    words = a.get("label", "") or f"{a.get('row', '')} {a.get('column', '')}"
    noise = {w for k in DETERMINING for w in slug(a.get(k, "")).split("_")} | set(TIER_WORDS) | {"tier"}
    out = set()
    for w in slug(words).split("_"):
        w = _SYNONYMS.get(w, w)
        w = w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
        if w and not w.isdigit() and w not in _STOP and w not in noise:
            out.add(w)
    if len(out) < 2 and a.get("section"):
        out |= {_SYNONYMS.get(w, w).rstrip("s") for w in slug(a["section"]).split("_") if w and w not in _STOP}
    return " ".join(sorted(out))


@dataclass
class EntityGraph:
    """Constants, the products / features / tool names they belong to, and cross-document conflicts.

    Attributes:
        constants: Every constant, in document and line order.
        nodes: ``{"id", "kind": product|feature|tool_name, "name", "docs": [...], "constants": [ids]}``.
        conflicts: ``{"key", "values": {doc: value}, "constants": [ids]}`` for documents that disagree.
        stats: Counts (``constants``, ``rule``, ``llm_kept``, ``llm_dropped``, ``restatements``).
    """

    constants: list[Constant] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_id = {c.id: c for c in self.constants}

    def by_id(self, cid: str) -> Constant:
        """The constant with this id (KeyError naming near ids otherwise)."""
        try:
            return self._by_id[cid]
        except KeyError:
            doc = cid.split("/", 1)[0]
            near = [c.id for c in self.constants if c.doc == doc][:20]
            raise KeyError(f"no constant {cid!r}; constants of {doc!r}: {near}") from None

    def get(
        self,
        doc: str,
        *,
        section: str | None = None,
        row: str | None = None,
        column: str | None = None,
        label: str | None = None,
        **attributes: str,
    ) -> Constant:
        """The one constant of ``doc`` matching every given part (compared as slugs; ``attributes``
        such as ``tier="standard"`` compare too). KeyError listing the candidates unless exactly one.

        Several values after one label on one line with the same determining attributes: the first.
        A ``label`` that names no constant exactly (a prose line has no ``Label:``; its label is the
        words before the value) matches the constants whose section, label and line hold all of the
        label's words (plural ``s`` ignored); several that state one value count as one.
        """
        want = {"section": section, "row": row, "column": column, "label": label, **attributes}
        want = {k: slug(v) for k, v in want.items() if v is not None}
        mine = [c for c in self.constants if c.doc == doc]
        hits = [c for c in mine if all(slug(c.attributes.get(k, "")) == v for k, v in want.items())]
        if not hits and label is not None:
            rest = {k: v for k, v in want.items() if k != "label"}
            words = _stems(label)
            hits = [
                c
                for c in mine
                if all(slug(c.attributes.get(k, "")) == v for k, v in rest.items())
                and words <= _stems(f"{c.attributes.get('section', '')} {c.attributes.get('label', '')} {c.text}")
            ]
            # "refunds per 12 months": the 12 months is the label's own value, not the one asked for
            hits = [c for c in hits if not _stems(c.attributes.get("quote", "")) <= words] or hits
            if hits and len({(json.dumps(c.value), c.unit) for c in hits}) == 1:
                hits = hits[:1]
        if len(hits) > 1 and len({(c.line, *_determining(c)) for c in hits}) == 1:
            hits = hits[:1]  # "Fee: $8, waived above $1,500": a label's first value is its value
        if len(hits) != 1:
            cands = [c.id for c in mine]
            what = "no constant" if not hits else f"{len(hits)} constants ({[c.id for c in hits]})"
            raise KeyError(f"{what} in {doc!r} matches {want}; the document's constants: {cands}")
        return hits[0]

    def find_value(self, value: Any, docs: list[str] | set[str] | None = None) -> list[Constant]:
        """Constants with this value (``1250`` finds the cents constant $12.50), optionally only in ``docs``."""
        out = []
        for c in self.constants:
            if (docs is None or c.doc in docs) and type(c.value) is not bool and _same(c.value, value):
                out.append(c)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "constants": [c.to_dict() for c in self.constants],
            "nodes": self.nodes,
            "conflicts": self.conflicts,
            "stats": self.stats,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EntityGraph:
        return cls(
            constants=[Constant(**c) for c in data.get("constants", [])],
            nodes=list(data.get("nodes", [])),
            conflicts=list(data.get("conflicts", [])),
            stats=dict(data.get("stats", {})),
        )

    def write(self, folder: str | Path) -> tuple[Path, Path]:
        """``entity_graph.json`` and ``entity_graph.svg`` (products and features with their constants) in ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        j = folder / "entity_graph.json"
        j.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False), encoding="utf-8")
        s = folder / "entity_graph.svg"
        s.write_text(_svg(self), encoding="utf-8")
        return j, s


def _determining(c: Constant) -> tuple[str, ...]:
    return tuple(c.attributes.get(k, "") for k in DETERMINING)


def _stems(text: str) -> set[str]:
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in slug(text).split("_") if w and w not in _STOP}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a.strip().lower() == b.strip().lower()
    try:
        return abs(float(a) - float(b)) < 1e-9
    except (TypeError, ValueError):
        return False


# --- rule-based extraction ------------------------------------------------------------------------


def _tokens(text: str, skip_spans: list[tuple[int, int]] = ()) -> list[tuple[Any, str, int, int]]:
    """(value, unit, start, end) of every value in ``text``, ``skip_spans`` (product names) excepted."""
    out: list[tuple[Any, str, int, int]] = []
    cents_seen: set[int] = set()
    for m in _TOKEN.finditer(text):
        s, e = m.span()
        if any(a <= s < b for a, b in skip_spans):
            continue
        g = m.groupdict()
        if g["money"]:
            cents = int(g["dollars"].replace(",", "")) * 100 + int((g["cents"] or "0").ljust(2, "0"))
            mult = {"k": 1000, "K": 1000, "million": 10**6, "billion": 10**9}.get(g["mult"] or "", 1)
            cents_seen.add(cents * mult)
            out.append((cents * mult, "cents", s, e))
        elif g["phone"]:
            out.append((g["phone"], "phone", s, e))
        elif g["time"]:
            h = int(g["h"]) % 12 + (12 if g["ampm"].startswith("p") else 0)
            if h < 24 and int(g["mi"] or 0) < 60:
                out.append((f"{h:02d}:{int(g['mi'] or 0):02d}", "time", s, e))
        elif g["date"]:
            mon, day, yr = (g["mon"], g["day"], g["yr"]) if g["mon"] else (g["mon2"], g["day2"], g["yr2"])
            if 1 <= int(day) <= 31:
                md = f"{MONTHS.index(mon.lower()) + 1:02d}-{int(day):02d}"
                out.append((f"{yr}-{md}" if yr else md, "date", s, e))
        elif g["range"]:
            unit = _unit(g["runit"]) if g["runit"] else ("percent" if g["rpct"] else "count")
            for part in (g["lo"], g["hi"]):
                out.append((_number(part, unit), unit, s, e))
        elif g["num"]:
            raw = g["n"].replace(",", "")
            if g["pct"]:
                out.append((float(raw + (g["frac"] or "")), "percent", s, e))
                continue
            if (
                not g["unit"]
                and not g["frac"]
                and (
                    (len(raw) == 4 and raw[:2] in ("19", "20")) or len(raw) >= 7 or (raw.startswith("0") and raw != "0")
                )
            ):
                if len(raw) >= 7 or (raw.startswith("0") and raw != "0"):
                    out.append((raw, "code", s, e))
                continue  # a year
            unit = _unit(g["unit"]) if g["unit"] else "count"
            value = _number(raw + (g["frac"] or ""), unit)
            if unit == "count" and isinstance(value, int) and value in cents_seen and value >= 100:
                continue  # "$12.50 = 1250": the cents of a money amount just given
            if unit == "count" and re.match(r"\s+[A-Z][a-z]", text[e:]) and not re.match(r"\s+[A-Z]+s?\b", text[e:]):
                continue  # "1 Market Square", "12 State Street": an address or a name
            out.append((value, unit, s, e))
        elif g["code"]:
            c = g["ctext"].strip()
            if c and not re.search(r"\s(?:field|column|argument)\b", text[e : e + 12]) and not _is_tool_like(c):
                out.append((c, "category", s, e))
        elif g["ord"]:
            out.append((int(g["on"]), "count", s, e))
        elif g["word"]:
            unit = _unit(g["wunit"]) if g["wunit"] else "count"
            out.append((_WORDS.index(g["wn"].lower()), unit, s, e))
        elif g["swift"]:
            out.append((g["swift"], "code", s, e))
        elif g["unlimited"]:
            out.append(("unlimited", "category", s, e))
        elif g["quoted"]:
            out.append((g["qtext"].strip(), "category", s + 2, e - 2))
    return out


def _is_tool_like(code: str) -> bool:
    return bool(re.fullmatch(r"[a-z]+(?:_[a-z0-9]+)+_\d{3,}", code))


def _unit(word: str) -> str:
    w = word.strip(" -").lower().rstrip("s")
    for k, v in _UNIT_WORDS.items():
        if w == k or w.endswith(k):
            return v
    return "count"


def _number(raw: str, unit: str) -> int | float:
    f = float(raw.replace(",", ""))
    return f if unit == "percent" or not f.is_integer() else int(f)


def _label_before(text: str, start: int) -> str:
    """A label for a value on a line without ``Label:``: the last content words before it."""
    before = re.split(r"[.;:!?(]\s", text[:start])[-1]
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z'-]*", before) if w.lower() not in _STOP]
    if not words:
        after = [w for w in re.findall(r"[A-Za-z][A-Za-z'-]*", text[start:]) if w.lower() not in _STOP]
        words = after[:3]
    return " ".join(words[-4:]) or "value"


@lru_cache(maxsize=8)
def _names_re(names: tuple[str, ...]) -> re.Pattern | None:
    """One pattern finding any of ``names`` (longest first) as whole words."""
    return re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b") if names else None


class _Doc:
    """Per-document state: products, tiers, id allocation."""

    def __init__(self, doc: Any, products: dict[str, str], tiers: tuple[str, ...], family: bool = False):
        self.doc = doc
        self.products = products
        self.product_re = _names_re(tuple(sorted(products, key=len, reverse=True)))
        self.tiers = tiers
        self.ids: Counter[str] = Counter()
        title = doc.title or ""
        self.doc_attrs: dict[str, str] = {}
        p = self.find_products(title)
        if len(p) == 1:
            self.doc_attrs["product"] = p[0]
        t = self.find_tiers(title, capital=True)
        if len(t) == 1:
            self.doc_attrs["tier"] = t[0]
        if re.search(r"\bbusiness\b", f"{doc.id.replace('_', ' ')} {title}", re.I):
            self.doc_attrs["segment"] = "business"
        if family:  # one of a numbered series of documents about one subject (doc_x_001, doc_x_002, ...)
            self.doc_attrs["subject"] = re.sub(r"_\d+$", "", doc.id)

    def find_products(self, text: str) -> list[str]:
        if self.product_re is None:
            return []
        return sorted({self.products[m.group(0)] for m in self.product_re.finditer(text.lower())})

    def product_spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self.product_re.finditer(text.lower())] if self.product_re else []

    def find_tiers(self, text: str, capital: bool = False) -> list[str]:
        found = set()
        for t in self.tiers:
            pat = t.capitalize() if capital else t
            if re.search(rf"\b{pat}\b(?![- ](?:delivery|shipping|rate|checking|savings|time))", text):
                found.add(t)
        return sorted(found)

    def new_id(self, parts: list[str]) -> str:
        base = "/".join([self.doc.id, *[slug(p) or "_" for p in parts]])
        self.ids[base] += 1
        return base if self.ids[base] == 1 else f"{base}~{self.ids[base]}"

    def attrs(self, line: str, base: dict[str, str], value_end: int) -> dict[str, str]:
        """Determining attributes of a value on ``line``: base (table headers) first, then the text."""
        a = dict(base)
        if "tier" not in a:
            m = re.match(r"\s*\((\w+)\)", line[value_end:])
            t = self.find_tiers(m.group(1), capital=True) if m else []
            t = t or self.find_tiers(line, capital=True)
            if len(t) == 1:
                a["tier"] = t[0]
            elif "tier" in self.doc_attrs:
                a["tier"] = self.doc_attrs["tier"]
        if "product" not in a:
            p = self.find_products(line)
            if len(p) == 1:
                a["product"] = p[0]
            elif "product" in self.doc_attrs and not p:
                a["product"] = self.doc_attrs["product"]
        if "channel" not in a:
            ch = [c for c, pat in CHANNELS.items() if re.search(pat, line, re.I)]
            if len(ch) == 1:
                a["channel"] = ch[0]
        for k in ("segment", "subject"):
            if k in self.doc_attrs:
                a.setdefault(k, self.doc_attrs[k])
        if "reason" not in a:
            r = [r for r in REASONS if re.search(rf"\b{r.replace('_', '[ _]')}\b", a.get("label", ""), re.I)]
            if r:
                a["reason"] = "|".join(r)
        return a


def _table_cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _is_separator(cells: list[str]) -> bool:
    return bool(cells) and all(re.fullmatch(r":?-{1,}:?", c.replace(" ", "")) for c in cells if c) and any(cells)


def rule_extract(
    doc: Any,
    products: dict[str, str],
    tiers: tuple[str, ...] = TIER_WORDS,
    *,
    family: bool = False,
    tool_names: frozenset[str] = frozenset(),
) -> list[Constant]:
    """The constants of one document (``products``: lower-case name -> product code; ``family``: the
    document is one of a numbered series, whose constants carry the series as ``subject``; a
    back-quoted name in ``tool_names`` names a tool, not a value).
    """
    st = _Doc(doc, products, tiers, family)
    lines = (doc.text or "").splitlines()
    section = doc.title or doc.id
    header: list[str] | None = None
    out: list[Constant] = []
    for i, raw in enumerate(lines, start=1):
        line = raw.rstrip()
        if i == 1 and line.strip() == (doc.title or "").strip():
            continue
        h = _HEADING.match(line)
        if h:
            section, header = bare(h.group(2)), None
            continue
        if line.lstrip().startswith("|"):
            cells = _table_cells(line)
            if header is None:
                header = cells
                if not any(t for c in cells for t in _tokens(c)):
                    continue  # a header row of words: the column names
                header = [""] * len(cells)
            if _is_separator(cells):
                continue
            out += _row_constants(st, section, header, cells, raw, i)
            continue
        header = None
        if not line.strip():
            continue
        out += _line_constants(st, section, raw, i)
    return [c for c in out if not (c.unit == "category" and c.value in tool_names)]


def _row_constants(st: _Doc, section: str, header: list[str], cells: list[str], line: str, i: int) -> list[Constant]:
    out = []
    row = bare(cells[0]) if cells else ""
    row_attrs = _header_attrs(st, row)
    for j, cell in enumerate(cells):
        col = bare(header[j]) if j < len(header) and header[j].strip() else (f"col{j + 1}" if j else "label")
        if j == 0 and not col.strip():
            col = "label"
        base = {"section": section, "row": row or f"row{i}", "column": col}
        base.update({k: v for k, v in _header_attrs(st, col).items()})
        base.update({k: v for k, v in row_attrs.items() if k not in base})
        text = plain(cell)
        toks = _tokens(text, st.product_spans(text))
        name = f"{row} / {col}" if j else row
        if not toks and j and text and text not in ("-", "—", "–", "n/a", "N/A") and not st.find_products(text):
            toks = [(bare(text), "category", 0, len(text))]
        for value, unit, s, e in toks:
            base["quote"] = text[s:e]
            out.append(_make(st, [section, row or f"row{i}", col], name, value, unit, st.attrs(text, base, e), i, line))
    return out


def _header_attrs(st: _Doc, label: str) -> dict[str, str]:
    a: dict[str, str] = {}
    t = st.find_tiers(label, capital=False) + st.find_tiers(label.lower())
    if len(set(t)) == 1 and not re.search(r"delivery|shipping", label, re.I):
        a["tier"] = t[0]
    p = st.find_products(label)
    if len(p) == 1:
        a["product"] = p[0]
    r = [r for r in REASONS if re.search(rf"\b{r.replace('_', '[ _]')}\b", label, re.I)]
    if r:
        a["reason"] = "|".join(r)
    d = re.match(r"\s*(standard|expedited|express|overnight)\s+(?:delivery|shipping)", label, re.I)
    if d:
        a["delivery"] = d.group(1).lower()
    return a


def _line_constants(st: _Doc, section: str, line: str, i: int) -> list[Constant]:
    body = _LIST.sub("", line, count=1)
    lab = _LABEL.match(body)
    label = bare(lab.group(1)) if lab else None
    rest_at = lab.end() if lab else 0
    text = plain(body)
    offset_text = plain(body[rest_at:]) if lab else text
    prefix = len(text) - len(offset_text)
    out = []
    name, last_end = None, 0
    toks = _tokens(text, st.product_spans(text))
    if lab and not any(s >= prefix for _v, _u, s, _e in toks):
        first = re.split(r"[,;(.]", text[prefix:], maxsplit=1)[0].strip()
        if first.lower() in _VALUE_WORDS:
            toks = [(bare(first), "category", prefix, prefix + len(first))]
    for value, unit, s, e in toks:
        if label:
            name = label
        elif name is None or re.search(r"[.;!?]\s", text[last_end:s]):
            name = _label_before(text, s)  # the first value of a sentence names the rest
        last_end = e
        base = {"section": section, "label": name, "quote": text[s:e]}
        out.append(_make(st, [section, name], name, value, unit, st.attrs(text, base, e), i, line))
    return out


def _make(st: _Doc, parts: list[str], name: str, value: Any, unit: str, attrs: dict, i: int, line: str) -> Constant:
    return Constant(st.new_id(parts), name, value, unit, attrs, st.doc.id, i, line)


# --- LLM extraction -------------------------------------------------------------------------------

CHUNK_LINES = 80
PROMPT = (
    "You extract every numeric or categorical constant a policy document states: fees, rates, limits, "
    "time windows, counts, eligibility values, tiers, codes. The document's lines are numbered. Reply with "
    'one JSON object: {"constants": [{"name": "...", "value": ..., "unit": "...", "attributes": {...}, '
    '"line": N, "quote": "..."}]}. value: money as integer cents (unit "cents"), percents as numbers '
    '(unit "percent"), other numbers with their unit ("days", "count", ...), words as strings (unit '
    '"category"). attributes: what the value depends on (tier, product, channel, reason). quote: the exact '
    "text of line N that states the value. Only constants the line really states; never compute or guess."
)


def _chunks(doc: Any) -> list[tuple[int, list[str]]]:
    lines = (doc.text or "").splitlines()
    return [(start + 1, lines[start : start + CHUNK_LINES]) for start in range(0, len(lines), CHUNK_LINES)]


def _supported(item: Any, lines: list[str]) -> tuple[int, Any, str, str] | None:
    """(line, value, unit, quote) when the item's quote is on its cited line and states its value."""
    if not isinstance(item, dict):
        return None
    line, quote, value = item.get("line"), item.get("quote"), item.get("value")
    if isinstance(line, bool) or not isinstance(line, int) or not 1 <= line <= len(lines):
        return None
    if not isinstance(quote, str) or not quote.strip() or isinstance(value, (dict, list, bool)) or value is None:
        return None
    text = bare(lines[line - 1]).lower()
    q = bare(quote).lower()
    if q not in text:
        return None
    unit = str(item.get("unit") or ("category" if isinstance(value, str) else "count"))
    if isinstance(value, str):
        v = bare(value).lower()
        return (line, bare(value), unit, quote) if v and v in q else None
    toks = _tokens(bare(quote))
    if any(_same(t[0], value) for t in toks) or (
        unit == "cents" and any(_same(t[0] * 100, value) for t in toks if t[1] == "count")
    ):
        return line, value, unit, quote
    return None


async def allm_extract(domain: Any, llm: Any, *, seed: int = 0, stats: dict[str, int] | None = None) -> list[dict]:
    """What the model finds in each document chunk and its cited line supports; counts
    ``llm_kept`` / ``llm_dropped`` (hallucinated: quote or value not at the cited line) in ``stats``.
    """
    stats = stats if stats is not None else {}
    jobs = []
    for d in getattr(domain, "documents", None) or []:
        for first, chunk in _chunks(d):
            numbered = "\n".join(f"{first + k}: {t}" for k, t in enumerate(chunk))
            messages = [
                {"role": "system", "content": PROMPT},
                {"role": "user", "content": f"Document {d.id} ({d.title}):\n{numbered}"},
            ]
            jobs.append((d, llm.ajson("entity_extraction", messages, seed=seed)))
    replies = await asyncio.gather(*(j for _, j in jobs))
    found = []
    for (d, _), reply in zip(jobs, replies):
        lines = (d.text or "").splitlines()
        items = reply.get("constants", []) if isinstance(reply, dict) else []
        for item in items if isinstance(items, list) else []:
            ok = _supported(item, lines)
            if ok is None:
                stats["llm_dropped"] = stats.get("llm_dropped", 0) + 1
                continue
            line, value, unit, quote = ok
            attrs = item.get("attributes") if isinstance(item.get("attributes"), dict) else {}
            name = str(item.get("name") or "value")[:80]
            found.append(
                {
                    "doc": d,
                    "line": line,
                    "value": value,
                    "unit": unit,
                    "name": name,
                    "quote": quote,
                    "attributes": {str(k): str(v) for k, v in attrs.items() if v is not None},
                }
            )
    return found


def _section_at(doc: Any, line: int) -> str:
    section = doc.title or doc.id
    for i, t in enumerate((doc.text or "").splitlines()[: line - 1], start=1):
        h = _HEADING.match(t)
        if h and i > 1:
            section = bare(h.group(2))
    return section


def _merge(constants: list[Constant], found: list[dict], stats: dict[str, int]) -> list[Constant]:
    """The rule constants plus the model's that no rule constant states (same doc, line and value)."""
    seen = {(c.doc, c.line, json.dumps(c.value)) for c in constants}
    seen |= {(c.doc, c.line, json.dumps(c.value.lower())) for c in constants if isinstance(c.value, str)}
    ids = Counter(c.id.split("~")[0] for c in constants)
    out = list(constants)
    for f in found:
        d = f["doc"]
        v = f["value"].lower() if isinstance(f["value"], str) else f["value"]
        key = (d.id, f["line"], json.dumps(v))
        if key in seen or (d.id, f["line"], json.dumps(f["value"])) in seen:
            stats["llm_duplicate"] = stats.get("llm_duplicate", 0) + 1
            continue
        seen.add(key)
        section = _section_at(d, f["line"])
        base = f"{d.id}/{slug(section) or '_'}/{slug(f['name']) or 'value'}"
        ids[base] += 1
        cid = base if ids[base] == 1 else f"{base}~{ids[base]}"
        attrs = {
            **{k: v for k, v in f["attributes"].items() if k not in ("section", "label")},
            "section": section,
            "label": f["name"],
            "quote": f["quote"],
            "source": "llm",
        }
        line_text = (d.text or "").splitlines()[f["line"] - 1]
        out.append(Constant(cid, f["name"], f["value"], f["unit"], attrs, d.id, f["line"], line_text))
        stats["llm_kept"] = stats.get("llm_kept", 0) + 1
    return out


# --- the graph ------------------------------------------------------------------------------------


def domain_products(domain: Any) -> dict[str, str]:
    """Lower-case product name -> product code, from product documents, product tables and the seed."""
    codes: set[str] = set()
    for rows in (getattr(domain, "seed", None) or {}).values():
        for r in rows[:5000]:
            for k, v in r.items():
                if isinstance(v, str) and k.lower() in ("product", "product_code", "product_id", "account_type"):
                    codes.add(v)
    names: dict[str, str] = {}
    prefixes: Counter[str] = Counter()
    for d in getattr(domain, "documents", None) or []:
        if d.id.startswith("product_") and d.title:
            names[bare(d.title).lower()] = d.id[len("product_") :]
        head = bare(d.title or "").split(":", 1)
        if len(head) == 2 and len(head[0].split()) <= 5 and re.search(_PRODUCT_NOUNS, head[0], re.I):
            prefixes[head[0].strip().lower()] += 1
        header = None
        for line in (d.text or "").splitlines():
            if not line.lstrip().startswith("|"):
                header = None
                continue
            cells = _table_cells(line)
            if header is None:
                header = cells
            elif not _is_separator(cells) and header and re.fullmatch(r"(?i)product|account( type)?", header[0]):
                name = bare(cells[0]).lower()
                if name and len(name) < 40 and len(name.split()) >= 2:
                    names.setdefault(name, slug(name))

    for prefix, n in prefixes.items():
        if n >= 2:  # "Silver Rewards Card: ..." titles several documents: a product
            names.setdefault(prefix, slug(prefix))

    def words(s: str) -> frozenset[str]:
        return frozenset(slug(s).split("_"))

    by_words = {words(c): c for c in codes}
    out: dict[str, str] = {}
    for name, code in names.items():
        out[name] = by_words.get(words(code)) or by_words.get(words(name)) or code
    for code in codes:
        if len(code) > 2:
            out.setdefault(code.replace("_", " ").lower(), code)
    return out


def _tiers(domain: Any) -> tuple[str, ...]:
    found = set()
    for rows in (getattr(domain, "seed", None) or {}).values():
        for r in rows[:5000]:
            for k, v in r.items():
                if isinstance(v, str) and (k.lower() == "tier" or k.lower().endswith("_tier")) and v.isalpha():
                    found.add(v.lower())
    return tuple(sorted(found | set(TIER_WORDS)))


def _nodes(domain: Any, constants: list[Constant], products: dict[str, str]) -> list[dict[str, Any]]:
    docs = list(getattr(domain, "documents", None) or [])
    by_doc: dict[str, list[str]] = defaultdict(list)
    by_product: dict[str, list[str]] = defaultdict(list)
    for c in constants:
        by_doc[c.doc].append(c.id)
        if c.attributes.get("product"):
            by_product[c.attributes["product"]].append(c.id)
    nodes = []
    pnames: dict[str, str] = {}
    for name, code in products.items():
        pnames.setdefault(code, name)
    for code, name in sorted(pnames.items()):
        pat = re.compile("|".join(rf"\b{re.escape(n)}\b" for n, c in products.items() if c == code), re.I)
        where = [d.id for d in docs if pat.search(d.text or "")]
        shown = next((m.group(0) for d in docs for m in [pat.search(d.title or "")] if m), None)
        name = shown or next((m.group(0) for d in docs for m in [pat.search(d.text or "")] if m), name)
        nodes.append(
            {
                "id": f"product:{code}",
                "kind": "product",
                "name": name,
                "docs": where,
                "constants": by_product.get(code, []),
            }
        )
    for d in docs:
        if by_doc.get(d.id) and not d.id.startswith("product_"):
            nodes.append(
                {"id": f"feature:{d.id}", "kind": "feature", "name": d.title, "docs": [d.id], "constants": by_doc[d.id]}
            )
    tools = [getattr(t, "name", None) for t in (getattr(domain, "tools", None) or [])]
    for name in sorted(t for t in tools if t):
        pat = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")
        where = [d.id for d in docs if pat.search(d.text or "")]
        if where:
            nodes.append({"id": f"tool:{name}", "kind": "tool_name", "name": name, "docs": where, "constants": []})
    return nodes


def find_conflicts(constants: list[Constant]) -> tuple[list[dict[str, Any]], int]:
    """Keys two or more documents state with different values; and how many keys they restate alike."""
    groups: dict[tuple, list[Constant]] = defaultdict(list)
    for c in constants:
        if c.unit in ("category", "phone", "code") or len(topic(c).split()) < 2:
            continue
        groups[c.key].append(c)
    conflicts, agree = [], 0
    for key, cs in groups.items():
        per_doc: dict[str, set] = defaultdict(set)
        for c in cs:
            per_doc[c.doc].add(json.dumps(c.value))
        if len(per_doc) < 2:
            continue
        # a document may state several values under one key (a fee and its waiver threshold): documents
        # disagree when no value is common to all of them
        if set.intersection(*per_doc.values()):
            agree += 1
            continue
        conflicts.append(
            {
                "key": {"unit": key[0], "topic": key[1], **dict(key[2])},
                "values": {d: sorted(json.loads(v) for v in vs) for d, vs in sorted(per_doc.items())},
                "constants": [c.id for c in cs],
            }
        )
    return conflicts, agree


def build_entity_graph(domain: Any, llm: Any = None, *, seed: int = 0) -> EntityGraph:
    """The entity graph of ``domain``'s documents: rule-based; with ``llm`` (a SynthLLM), merged with
    what the model finds that its cited line really says.
    """
    products = domain_products(domain)
    tiers = _tiers(domain)
    constants: list[Constant] = []
    docs = list(getattr(domain, "documents", None) or [])
    tools = frozenset(n for t in getattr(domain, "tools", None) or [] if (n := getattr(t, "name", None)))
    series = Counter(re.sub(r"_\d+$", "", d.id) for d in docs if re.search(r"_\d+$", d.id))
    for d in docs:
        family = series[re.sub(r"_\d+$", "", d.id)] > 1
        constants += rule_extract(d, products, tiers, family=family, tool_names=tools)
    stats = {"rule": len(constants), "llm_kept": 0, "llm_dropped": 0, "llm_duplicate": 0}
    if llm is not None:
        from tau_env.synthesis.llm import run_sync

        constants = _merge(constants, run_sync(allm_extract(domain, llm, seed=seed, stats=stats)), stats)
    graph = EntityGraph(constants=constants)
    graph.nodes = _nodes(domain, constants, products)
    graph.conflicts, stats["restatements"] = find_conflicts(constants)
    stats["constants"] = len(constants)
    graph.stats = stats
    return graph


def _svg(g: EntityGraph) -> str:
    """Products and features as boxes (with their constant counts), tool names as ellipses."""
    from html import escape

    kinds = [("product", "#dbeafe"), ("feature", "#dcfce7"), ("tool_name", "#fef3c7")]
    cols = {k: [n for n in g.nodes if n["kind"] == k] for k, _ in kinds}
    h = 60 + 28 * max([len(v) for v in cols.values()] + [1])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="1080" height="{h}" font-family="sans-serif" font-size="11">',
        f'<text x="10" y="20" font-size="14">Entity graph: {len(g.constants)} constants, '
        f"{len(g.conflicts)} conflicts</text>",
    ]
    for x, (kind, color) in enumerate(kinds):
        parts.append(f'<text x="{10 + 360 * x}" y="44" font-weight="bold">{kind}s ({len(cols[kind])})</text>')
        for y, n in enumerate(cols[kind]):
            top = 52 + 28 * y
            label = escape(f"{n['name']}  [{len(n['constants'])}]" if kind != "tool_name" else n["name"])[:60]
            rx = 10 if kind == "tool_name" else 2
            parts.append(
                f'<rect x="{10 + 360 * x}" y="{top}" width="340" height="22" rx="{rx}" fill="{color}" '
                f'stroke="#555"/><text x="{16 + 360 * x}" y="{top + 15}">{label}</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts)
