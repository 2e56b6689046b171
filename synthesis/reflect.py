"""Pipeline-level reflection: after each batch, turn its failures into a versioned update of the
generator prompts and the plan weights, and roll the update back if the next batch does worse.

A :class:`Reflector` keeps its versions as files in a folder (a run folder's ``reflection/``)::

    v0000.json     the base: no prompt additions, no weights
    v0001.json     {"number", "parent", "changes", "why", "prompts", "weights", "status", "source",
                    "batch", "before", "after"}
    current.json   {"current": N}: the version the next batch uses
    history.jsonl  one line per event: propose, keep, rollback

Each batch's statistics (``batch_stats``) are
``{"planned", "accepted", "by_template": {t: {"planned", "accepted"}}, "problems": [{"template",
"check", "component", "message"}]}``. :meth:`Reflector.propose` aggregates the problems into
patterns (by template, check and component) and proposes: prompt additions per role (text the
``wording`` and ``review`` prompts append) for frequent patterns, and plan weights (templates with
low yield weighted down, under-covered templates with good yield weighted up). With a model (role
``"reflection"``) the proposal comes from the model, validated, with the rule-based one as the
fallback. The caller measures the next batch and calls :meth:`Reflector.decide` with the yield and
validity before and after: an update that lowers either is rolled back (``current.json`` points at
its parent again) and never proposed again.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import SynthesisError

#: The roles whose prompts a reflection may extend.
PROMPT_ROLES = ("wording", "review", "composition")
#: Bounds of a plan weight.
MIN_WEIGHT, MAX_WEIGHT = 0.05, 10.0
#: A pattern needs this many problems (and this share of the batch's problems) to change a prompt.
MIN_PATTERN, MIN_SHARE = 2, 0.1
#: A template needs this many plans in a batch before its yield counts.
MIN_PLANNED = 3
#: Characters of one prompt addition.
MAX_ADDITION = 600

#: Advice for frequent patterns: check -> (role, text). ``review:*`` checks are a judge's critiques.
ADVICE: dict[str, tuple[str, str]] = {
    "missing_user_fact": (
        "wording",
        "Put every fact the agent must ask for into the scenario's facts, under the exact key the plan names.",
    ),
    "untraceable_argument": (
        "wording",
        "Keep every value the customer gives (names, dates, amounts, last digits) verbatim in the facts or requests.",
    ),
    "oracle_play": (
        "wording",
        "Write requests the customer can say in order, one goal each; never write control tokens such as ###STOP###.",
    ),
    "review:ambiguous_instruction": (
        "wording",
        "When the customer holds several cards or accounts, make them name the one they mean "
        "(its last four digits or its type).",
    ),
    "review:missing_fallback": (
        "wording",
        "For a refusal, tell the simulated customer how to react when refused "
        "(accept the explanation, or ask for the allowed alternative) and when to end the chat.",
    ),
    "review:impossible_constraint": (
        "wording",
        "Ask only for what the bank's tools and policy can do, and only with facts the customer knows.",
    ),
    "review:malformed": (
        "review",
        "Answer with exactly one JSON object; component is one of scenario, actions, initial_state, plan.",
    ),
}


@dataclass
class Version:
    """One reflection version (a file ``vNNNN.json``)."""

    number: int
    parent: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    changes: list[dict[str, Any]] = field(default_factory=list)
    why: str = ""
    status: str = "proposed"  # base | proposed | kept | rolled_back
    source: str = "rules"  # rules | model | base
    batch: dict[str, Any] = field(default_factory=dict)  # the statistics it was proposed from (summary)
    before: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"v{self.number:04d}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Version:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def batch_yield(stats: dict[str, Any]) -> float:
    """Accepted over planned (0 for an empty batch)."""
    planned = stats.get("planned") or 0
    return (stats.get("accepted") or 0) / planned if planned else 0.0


def patterns(batch_stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The batch's problems grouped by (template, check, component), most frequent first, each with
    its count, its share of all problems and one example message.
    """
    problems = [p for p in batch_stats.get("problems", []) if isinstance(p, dict)]
    counts = Counter((str(p.get("template")), str(p.get("check")), str(p.get("component"))) for p in problems)
    example = {}
    for p in problems:
        example.setdefault((str(p.get("template")), str(p.get("check")), str(p.get("component"))), p.get("message"))
    total = len(problems) or 1
    return [
        {"template": t, "check": c, "component": comp, "count": n, "share": n / total, "example": example[(t, c, comp)]}
        for (t, c, comp), n in counts.most_common()
    ]


class Reflector:
    """Versioned prompt additions and plan weights in ``folder`` (see the module docstring)."""

    def __init__(self, folder: str | Path, *, tolerance: float = 0.0):
        self.folder = Path(folder)
        self.tolerance = tolerance
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self._path(0).exists():
            self._write(Version(0, None, status="base", source="base", why="the starting point: no changes"))
        if not (self.folder / "current.json").exists():
            self._set_current(0)

    # --- files ------------------------------------------------------------------------------------
    def _path(self, n: int) -> Path:
        return self.folder / f"v{n:04d}.json"

    def _write(self, v: Version) -> None:
        _atomic_json(self._path(v.number), v.to_dict())

    def _set_current(self, n: int) -> None:
        _atomic_json(self.folder / "current.json", {"current": n, "file": f"v{n:04d}.json"})

    def _log(self, event: dict[str, Any]) -> None:
        with open(self.folder / "history.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(event, ensure_ascii=False, sort_keys=True) + "\n")

    def version(self, n: int) -> Version:
        """Version ``n`` from its file."""
        path = self._path(n)
        try:
            return Version.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as e:
            raise SynthesisError(
                f"Reflection version {path} is unreadable ({e}); expected a version file this folder wrote. "
                "Restore it or start a new reflection folder."
            ) from e

    def versions(self) -> list[Version]:
        """Every version, oldest first."""
        return [self.version(int(p.stem[1:])) for p in sorted(self.folder.glob("v[0-9][0-9][0-9][0-9].json"))]

    def current(self) -> Version:
        """The version the next batch uses."""
        try:
            n = json.loads((self.folder / "current.json").read_text(encoding="utf-8"))["current"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SynthesisError(
                f'{self.folder / "current.json"} is unreadable ({e}); expected {{"current": N}}.'
            ) from e
        return self.version(n)

    def history(self) -> list[dict[str, Any]]:
        """Every event (propose, keep, rollback), oldest first."""
        path = self.folder / "history.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").split("\n"):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a torn last line of a killed run
        return out

    # --- proposing ------------------------------------------------------------------------------------
    def propose(self, batch_stats: dict[str, Any], llm: Any = None, *, seed: int = 0) -> Version:
        """A new version from ``batch_stats`` (it becomes current); the current one if nothing changes."""
        proposal = None
        if llm is not None:
            from .llm import run_sync

            proposal = run_sync(self._model_proposal(batch_stats, llm, seed))
        return self._adopt(batch_stats, proposal)

    async def apropose(self, batch_stats: dict[str, Any], llm: Any = None, *, seed: int = 0) -> Version:
        """:meth:`propose` from async code."""
        proposal = await self._model_proposal(batch_stats, llm, seed) if llm is not None else None
        return self._adopt(batch_stats, proposal)

    def _adopt(self, batch_stats: dict[str, Any], proposal: tuple[dict, dict, str] | None) -> Version:
        cur = self.current()
        source = "model"
        if proposal is None:
            source = "rules"
            proposal = self.rule_proposal(batch_stats, cur)
        prompts, weights, why = proposal
        banned = self._rolled_back_changes()
        changes = [c for c in _diff(cur, prompts, weights) if _change_key(c) not in banned]
        if not changes:
            return cur
        new_prompts, new_weights = dict(cur.prompts), dict(cur.weights)
        for c in changes:
            if c["kind"] == "prompt":
                new_prompts[c["role"]] = c["to"]
            else:
                new_weights[c["key"]] = c["to"]
        number = max(v.number for v in self.versions()) + 1
        summary = {k: batch_stats.get(k) for k in ("planned", "accepted")}
        summary["yield"] = round(batch_yield(batch_stats), 4)
        v = Version(number, cur.number, new_prompts, new_weights, changes, why, "proposed", source, summary)
        self._write(v)
        self._set_current(number)
        self._log({"event": "propose", "version": number, "parent": cur.number, "changes": changes, "why": why})
        return v

    def rule_proposal(self, batch_stats: dict[str, Any], cur: Version) -> tuple[dict, dict, str]:
        """The rule-based proposal: prompts and weights as they should be, and why."""
        prompts, weights, reasons = dict(cur.prompts), dict(cur.weights), []
        total = len(batch_stats.get("problems", []))
        by_check: Counter[str] = Counter()
        for p in patterns(batch_stats):
            by_check[p["check"]] += p["count"]
        for check, n in by_check.most_common():
            if n < MIN_PATTERN or n / max(total, 1) < MIN_SHARE:
                continue
            advice = ADVICE.get(check)
            if advice is None:
                continue
            role, text = advice
            if text not in prompts.get(role, ""):
                prompts[role] = (prompts.get(role, "") + "\n" + text).strip()
                reasons.append(f"{check} in {n} of {total} problems")
        overall = batch_yield(batch_stats)
        by_t = {t: s for t, s in batch_stats.get("by_template", {}).items() if isinstance(s, dict)}
        sizes = [s.get("planned") or 0 for s in by_t.values()]
        mean = sum(sizes) / len(sizes) if sizes else 0
        for t, s in sorted(by_t.items()):
            planned, y = s.get("planned") or 0, batch_yield(s)
            w = weights.get(t, 1.0)
            if planned >= MIN_PLANNED and y < min(0.5 * overall, 0.5):
                weights[t] = _clip(w * 0.5)
                reasons.append(f"{t}: yield {y:.2f} against {overall:.2f} overall")
            elif planned < 0.5 * mean and (planned == 0 or y >= overall):
                weights[t] = _clip(w * 1.5)
                reasons.append(f"{t}: under-covered ({planned} plans against {mean:.1f} on average)")
        return prompts, weights, "; ".join(reasons) or "no pattern above the thresholds"

    async def _model_proposal(self, batch_stats: dict[str, Any], llm: Any, seed: int) -> tuple[dict, dict, str] | None:
        cur = self.current()
        stats = {
            "planned": batch_stats.get("planned"),
            "accepted": batch_stats.get("accepted"),
            "by_template": batch_stats.get("by_template", {}),
            "patterns": patterns(batch_stats)[:20],
        }
        messages = [
            {
                "role": "system",
                "content": "You improve a task-synthesis pipeline between batches. Given the last batch's yield per "
                "template and its most frequent verification and review failures, propose prompt additions per "
                f"role ({', '.join(PROMPT_ROLES)}): short instructions appended to that role's prompt; and plan "
                f"weights per template (numbers in [{MIN_WEIGHT}, {MAX_WEIGHT}], 1 is neutral). Answer with one "
                'JSON object: {"prompts": {role: text}, "weights": {template: number}, "why": text}.',
            },
            {
                "role": "user",
                "content": json.dumps(
                    {"batch": stats, "current": {"prompts": cur.prompts, "weights": cur.weights}}, ensure_ascii=False
                ),
            },
        ]
        try:
            reply = await llm.ajson("reflection", messages, seed=seed)
        except SynthesisError:
            return None
        return validate_proposal(reply, cur, set(batch_stats.get("by_template", {})) | set(cur.weights))

    # --- deciding -------------------------------------------------------------------------------------
    def decide(self, version: Version | int, before: dict[str, Any], after: dict[str, Any]) -> str:
        """``"keep"`` or ``"rollback"`` ``version`` by the batches before and after it.

        ``before``/``after``: ``{"yield": ..., "validity": ...}`` (or batch stats, whose yield is
        accepted/planned). A drop of either beyond the tolerance rolls back: the parent becomes
        current again, the version's changes are never proposed again, and both are recorded.
        """
        v = self.version(version if isinstance(version, int) else version.number)
        if v.status != "proposed":
            return "rollback" if v.status == "rolled_back" else "keep"
        b, a = _measures(before), _measures(after)
        worse = [k for k in ("yield", "validity") if k in a and k in b and a[k] < b[k] - self.tolerance]
        decision = "rollback" if worse else "keep"
        v.status = "rolled_back" if worse else "kept"
        v.before, v.after = b, a
        self._write(v)
        if worse and self.current().number == v.number:
            self._set_current(v.parent if v.parent is not None else 0)
        why = f"{', '.join(worse)} dropped" if worse else "no measure dropped"
        self._log({"event": decision, "version": v.number, "parent": v.parent, "before": b, "after": a, "why": why})
        return decision

    def _rolled_back_changes(self) -> set[str]:
        return {_change_key(c) for v in self.versions() if v.status == "rolled_back" for c in v.changes}


def validate_proposal(reply: Any, cur: Version, templates: set[str]) -> tuple[dict, dict, str] | None:
    """A model's proposal as (prompts, weights, why) over ``cur``, or None if it is not a valid one."""
    if not isinstance(reply, dict):
        return None
    add, ws = reply.get("prompts", {}), reply.get("weights", {})
    if not isinstance(add, dict) or not isinstance(ws, dict):
        return None
    prompts, weights = dict(cur.prompts), dict(cur.weights)
    for role, text in add.items():
        if role not in PROMPT_ROLES or not isinstance(text, str) or len(text) > MAX_ADDITION:
            return None
        if text.strip() and text.strip() not in prompts.get(role, ""):
            prompts[role] = (prompts.get(role, "") + "\n" + text.strip()).strip()
    for t, w in ws.items():
        if t not in templates or isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
            return None
        if not MIN_WEIGHT <= w <= MAX_WEIGHT:
            return None
        weights[t] = float(w)
    why = reply.get("why")
    return prompts, weights, (why if isinstance(why, str) else "")[:500] or "the model's proposal"


def _diff(cur: Version, prompts: dict[str, str], weights: dict[str, float]) -> list[dict[str, Any]]:
    changes = []
    for role in sorted(prompts):
        if prompts[role] != cur.prompts.get(role, ""):
            changes.append({"kind": "prompt", "role": role, "from": cur.prompts.get(role, ""), "to": prompts[role]})
    for key in sorted(weights):
        old = cur.weights.get(key, 1.0)
        if not math.isclose(weights[key], old):
            changes.append({"kind": "weight", "key": key, "from": old, "to": weights[key]})
    return changes


def _change_key(c: dict[str, Any]) -> str:
    if c.get("kind") == "prompt":
        return f"prompt/{c.get('role')}/{c.get('to')}"
    return f"weight/{c.get('key')}/{c.get('from')}->{c.get('to')}"


def _clip(w: float) -> float:
    return round(min(MAX_WEIGHT, max(MIN_WEIGHT, w)), 4)


def _measures(d: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k in ("yield", "validity"):
        if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool):
            out[k] = float(d[k])
    if "yield" not in out and "planned" in d:
        out["yield"] = batch_yield(d)
    return out


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
