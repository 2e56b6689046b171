"""A synthesis run's report: ``report.txt`` and a self-contained ``report.html`` (inline SVG plots).

Built from the run folder's files alone, each section present only when its data is there:

- the yield of each stage (``stages.jsonl``: ``tasks`` rounds and ``compose`` records) and the
  verification and review problems by check;
- reflection rounds (``stages.jsonl`` records of stage ``reflection``) and their effect on yield;
- LLM calls and tokens, in all and per verified task (``llm_usage.json``);
- coverage of write tools, tool pairs and rule constants (``tasks.jsonl``, ``composite.jsonl``,
  ``graphs/tool_graph.json``, ``graphs/rule_constants.json``), outcomes and failure modes;
- duplicate rate (reference chains, :func:`~tau_env.synthesis.records.chain_signature`) and
  contamination (``decontamination.json``);
- difficulty: actions and documents per task, and RL pass rates (``rl/stats.jsonl``).

Every string read from the files is escaped in the HTML (and control characters shown as escapes),
and the page is well-formed XML, so a hostile task text cannot inject markup or script.
"""

from __future__ import annotations

import html
import json
import math
import unicodedata
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

from tau_env.synthesis.run import RunFolder, task_row

FUNNEL = ("planned", "synthesized", "verified", "accepted")


# ---------------------------------------------------------------- the numbers


def _num(x: Any) -> float:
    return x if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else 0


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _prov(rec: dict[str, Any]) -> dict[str, Any]:
    p = (rec.get("metadata") or {}).get("synthesis") if isinstance(rec.get("metadata"), dict) else None
    return p if isinstance(p, dict) else {}


def _funnel(stages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Totals and per-round numbers of the ``tasks`` rounds; a count no round records is None."""
    rounds = [s for s in stages if s.get("stage") == "tasks"]
    if not rounds:
        return None
    keys = (*FUNNEL, "regenerated")
    present = {k for k in keys if any(k in r for r in rounds)}
    total = {k: int(sum(_num(r.get(k)) for r in rounds)) if k in present else None for k in keys}
    problems: Counter[str] = Counter()
    per_round = []
    for i, r in enumerate(rounds):
        for check, n in (r.get("problems") or {}).items():
            problems[str(check)] += int(_num(n))
        row = {"round": r.get("round", i), **{k: int(_num(r.get(k))) if k in present else None for k in keys}}
        row["yield"] = _ratio(row["accepted"] or 0, row["planned"] or 0)
        row["prompt_version"] = r.get("prompt_version")
        per_round.append(row)
    return {
        **total,
        "yield": _ratio(total["accepted"] or 0, total["planned"] or 0),
        "verified_rate": _ratio(total["verified"] or 0, total["synthesized"] or 0),
        "rounds": per_round,
        "problems": dict(problems.most_common()),
    }


def _compose(stages: list[dict[str, Any]]) -> dict[str, Any] | None:
    recs = [s for s in stages if s.get("stage") == "compose"]
    if not recs:
        return None
    numeric = sorted({k for r in recs for k, v in r.items() if isinstance(v, int | float) and not isinstance(v, bool)})
    numeric = [k for k in numeric if k != "round"]
    total = {k: sum(_num(r.get(k)) for r in recs) for k in numeric}
    return {**total, "runs": len(recs), "yield": _ratio(total.get("accepted", 0), total.get("planned", 0))}


def _change(c: Any) -> str:
    """A reflection change as a person reads it: ``weight wire: 1 -> 0.5``, ``wording prompt + "..."``."""
    if isinstance(c, str) or not isinstance(c, dict):
        return str(c)
    if c.get("kind") == "weight":
        return f"weight {c.get('key')}: {_f(c.get('from'))} -> {_f(c.get('to'))}"
    if c.get("kind") == "prompt":
        return f"{c.get('role')} prompt + {json.dumps(str(c.get('to', '')), ensure_ascii=False)}"
    return ", ".join(f"{k}={v}" for k, v in c.items())


def _setting(key: str, value: Any) -> str:
    """A run setting as text: the loader's keywords, the backend's model and server."""
    if key == "loader" and isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    if key == "backend" and isinstance(value, dict):
        return f"{value.get('model')} at {value.get('base_url') or 'the default server'}"
    return _f(value)


def _reflection(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for s in stages:
        if s.get("stage") != "reflection":
            continue
        changes = s.get("changes") or []
        out.append(
            {
                "round": s.get("round"),
                "version": s.get("version"),
                "changes": [_change(c) for c in changes],
                "decision": s.get("decision"),
                "yield_before": s.get("yield_before"),
                "yield_after": s.get("yield_after"),
            }
        )
    return out


def _other_stages(stages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The latest record of each other stage (graphs, sft, rl, decontaminate, ...), nested values flattened once."""
    out: dict[str, dict[str, Any]] = {}
    for s in stages:
        name = str(s.get("stage"))
        if name in ("tasks", "compose", "reflection"):
            continue
        flat: dict[str, Any] = {}
        for k, v in s.items():
            if k in ("stage", "time"):
                continue
            if isinstance(v, dict):
                flat.update({f"{k}.{k2}": v2 for k2, v2 in v.items() if not isinstance(v2, dict | list)})
            elif not isinstance(v, list):
                flat[k] = v
        out[name] = flat
    return out


def _hist(values: list[int]) -> dict[int, int]:
    return dict(sorted(Counter(values).items()))


def _reason(x: Any) -> str:
    """A decontamination reason as text: ``detector`` (``against_id``, score), or the value as given."""
    if isinstance(x, dict) and "detector" in x:
        score = x.get("score")
        extra = f", {score:.2f}" if isinstance(score, int | float) and not isinstance(score, bool) else ""
        return f"{x['detector']} ({x.get('against_id', '?')}{extra})"
    return str(x)


def summary(run: RunFolder) -> dict[str, Any]:
    """The report's numbers (see the module docstring); sections without data are None or empty."""
    stages = run.stages()
    singles = [r for r in run.read("tasks.jsonl") if isinstance(r.get("id"), str)]
    composites = [r for r in run.read("composite.jsonl") if isinstance(r.get("id"), str)]
    graph_writes = run.write_tool_names()
    every = [(r, "single") for r in singles] + [(r, "composite") for r in composites]
    rows = [(rec, task_row(rec, kind, graph_writes, accepted=True)) for rec, kind in every]
    rows = [(rec, row) for rec, row in rows if row is not None]

    funnel = _funnel(stages)
    compose = _compose(stages)
    out: dict[str, Any] = {
        "run": {k: run.settings.get(k) for k in ("domain", "loader", "seed", "backend", "tau_env_version")},
        "tasks": {"single": len(singles), "composite": len(composites)},
        "funnel": funnel,
        "compose": compose,
        "reflection": _reflection(stages),
        "other_stages": _other_stages(stages),
    }

    # LLM use
    usage = run.read_json("llm_usage.json", None)
    if isinstance(usage, dict) and isinstance(usage.get("roles"), dict):
        roles = {
            str(r): {k: int(_num(v)) for k, v in u.items()} for r, u in usage["roles"].items() if isinstance(u, dict)
        }
        totals: Counter[str] = Counter()
        for u in roles.values():
            totals.update(u)
        f, c = funnel or {}, compose or {}
        verified = (f.get("verified") or f.get("accepted") or 0) + (c.get("verified") or c.get("accepted") or 0)
        verified = verified or len(rows)
        tokens = totals["prompt_tokens"] + totals["completion_tokens"]
        out["llm"] = {
            "model": usage.get("model"),
            "roles": roles,
            "totals": dict(totals),
            "verified": verified,
            "calls_per_verified": _ratio(totals["calls"] + totals["cached"], verified),
            "tokens_per_verified": _ratio(tokens, verified),
        }
    else:
        out["llm"] = None

    # coverage
    tool_counts: Counter[str] = Counter()
    pair_counts: Counter[str] = Counter()
    decisive: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    modes: Counter[str] = Counter()
    templates: Counter[str] = Counter()
    for rec, row in rows:
        if row["kind"] != "single":  # coverage is the singles'; composites join them
            continue
        writes = json.loads(row["write_tools"])
        tool_counts.update(writes)
        pair_counts.update(" + ".join(p) for p in combinations(sorted(writes), 2))
        prov = _prov(rec)
        decisive.update(str(c) for c in dict.fromkeys(prov.get("decisive") or []))
        if row["kind"] == "single":
            outcomes[row["outcome"] or "?"] += 1
            modes[row["failure_mode"] or "none"] += 1
            templates[row["template"] or "?"] += 1
    write_names = sorted(graph_writes) if graph_writes is not None else sorted(tool_counts)
    constants = run.read_json("graphs/rule_constants.json", None)
    constants = [str(c) for c in constants] if isinstance(constants, list) else None
    out["coverage"] = (
        {
            "write_tools": {t: tool_counts.get(t, 0) for t in write_names},
            "write_tools_known": graph_writes is not None,
            "write_tools_uncovered": [t for t in write_names if not tool_counts.get(t)],
            "min_tasks_per_write_tool": min((tool_counts.get(t, 0) for t in write_names), default=0),
            "tool_pairs": dict(pair_counts.most_common()),
            "rule_constants_total": len(constants) if constants is not None else None,
            "rule_constants_decisive": len(set(decisive) & set(constants)) if constants is not None else len(decisive),
            "rule_constants_uncovered": [c for c in constants if c not in decisive] if constants is not None else [],
            "decisive": dict(decisive.most_common()),
            "outcomes": dict(outcomes.most_common()),
            "failure_modes": dict(modes.most_common()),
            "templates": dict(templates.most_common()),
        }
        if rows
        else None
    )

    # duplicates
    dup = {}
    for kind in ("single", "composite"):
        sigs = [row["chain_signature"] for _, row in rows if row["kind"] == kind]
        if sigs:
            distinct = len(set(sigs))
            dup[kind] = {"tasks": len(sigs), "distinct": distinct, "rate": 1 - distinct / len(sigs)}
    out["duplicates"] = dup or None

    # contamination
    dec = run.read_json("decontamination.json", None)
    if isinstance(dec, dict):
        removed = [r for r in dec.get("removed") or [] if isinstance(r, dict)]
        reasons: Counter[str] = Counter()
        for r in removed:
            reasons.update(_reason(x) for x in r.get("reasons") or [])
        checked = int(_num(dec.get("checked"))) or len(removed) + int(_num(dec.get("kept")))
        out["contamination"] = {
            "checked": checked,
            "removed": len(removed),
            "kept": int(_num(dec.get("kept"))),
            "rate": _ratio(len(removed), checked),
            "by_detector": {str(k): v for k, v in (dec.get("by_detector") or {}).items()},
            "reasons": dict(reasons.most_common()),
            "examples": [
                {"id": str(r.get("id")), "reasons": [_reason(x) for x in r.get("reasons") or []]} for r in removed[:20]
            ],
        }
    else:
        out["contamination"] = None

    # difficulty
    diff: dict[str, Any] = {}
    if rows:
        diff["actions"] = _hist([row["n_actions"] for _, row in rows])
        diff["documents"] = _hist([len(rec.get("required_documents") or []) for rec, _ in rows])
        diff["requests"] = _hist([len((rec.get("scenario") or {}).get("requests") or []) for rec, _ in rows])
    rates = []
    for r in run.read("rl/stats.jsonl"):
        p = r.get("pass_rate")
        if not isinstance(p, int | float) and _num(r.get("rollouts")):
            p = _num(r.get("passes")) / _num(r.get("rollouts"))
        if isinstance(p, int | float) and 0 <= p <= 1:
            rates.append(float(p))
    if rates:
        bins = Counter(min(int(p * 10), 9) for p in rates)
        diff["pass_rates"] = {f"{b / 10:.1f}-{(b + 1) / 10:.1f}": bins.get(b, 0) for b in range(10)}
        diff["rl_tasks"] = len(rates)
        diff["mean_pass_rate"] = sum(rates) / len(rates)
    out["difficulty"] = diff or None
    return out


# ---------------------------------------------------------------- text


def _f(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _kv(k: Any, v: Any) -> tuple[str, str]:
    """A (name, value) row; a rate or yield in [0, 1] as a percentage."""
    rate = isinstance(v, float) and 0 <= v <= 1 and any(w in str(k) for w in ("yield", "rate", "share"))
    return str(k), _pct(v) if rate else _f(v)


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:.1%}"


def _text_table(rows: list[tuple[Any, ...]], head: tuple[str, ...] | None = None) -> list[str]:
    cells = [tuple(_clean(str(c)) for c in r) for r in ([head] if head else []) + rows]
    if not cells:
        return []
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def _sections(s: dict[str, Any]) -> list[tuple[str, list[tuple[Any, ...]], tuple[str, ...] | None, str]]:
    """(title, rows, head, chart kind) of each section that has data, shared by the text and HTML pages."""
    out = []
    run = s["run"]
    out.append(
        (
            "Run",
            [(k, _setting(k, v)) for k, v in run.items()],
            None,
            "",
        )
    )
    out.append(("Tasks", [("single-request", s["tasks"]["single"]), ("composite", s["tasks"]["composite"])], None, ""))
    for name, rec in s["other_stages"].items():
        if name == "graphs":
            out.append(("Graphs", [_kv(k, v) for k, v in rec.items()], None, ""))
    if f := s["funnel"]:
        rows = [(k, _f(f[k])) for k in (*FUNNEL, "regenerated")] + [("yield", _pct(f["yield"]))]
        out.append(("Stage yield (single-request tasks)", rows, None, "funnel"))
        rounds = [
            (r["round"], *(_f(r[k]) for k in FUNNEL), _pct(r["yield"]), _f(r.get("prompt_version")))
            for r in f["rounds"]
        ]
        out.append(("Rounds", rounds, ("round", *FUNNEL, "yield", "prompts"), "rounds"))
        if f["problems"]:
            out.append(("Problems by check", list(f["problems"].items()), ("check", "candidates"), "bars"))
    if c := s["compose"]:
        out.append(("Composition", [_kv(k, v) for k, v in c.items()], None, ""))
    if s["reflection"]:
        rows = [
            (
                r["round"],
                r["version"],
                r["decision"],
                _pct(r["yield_before"]),
                _pct(r["yield_after"]),
                "; ".join(r["changes"]),
            )
            for r in s["reflection"]
        ]
        out.append(
            (
                "Reflection rounds",
                rows,
                ("round", "version", "decision", "yield before", "after", "changes"),
                "reflection",
            )
        )
    if llm := s["llm"]:
        keys = ("calls", "cached", "failures", "prompt_tokens", "completion_tokens")
        rows = [(role, *(u.get(k, 0) for k in keys)) for role, u in llm["roles"].items()]
        rows.append(("total", *(llm["totals"].get(k, 0) for k in keys)))
        out.append(("LLM calls and tokens", rows, ("role", *keys), "llm"))
        out.append(
            (
                "Per verified task",
                [
                    ("verified tasks", llm["verified"]),
                    ("calls (incl. cached)", _f(llm["calls_per_verified"])),
                    ("tokens", _f(llm["tokens_per_verified"])),
                ],
                None,
                "",
            )
        )
    if cov := s["coverage"]:
        out.append(("Write tools (tasks calling each)", list(cov["write_tools"].items()), ("tool", "tasks"), "bars"))
        summary_rows = [
            (
                "write tools covered",
                f"{len(cov['write_tools']) - len(cov['write_tools_uncovered'])} of {len(cov['write_tools'])}",
            ),
            ("fewest tasks per write tool", cov["min_tasks_per_write_tool"]),
            ("uncovered write tools", ", ".join(cov["write_tools_uncovered"]) or "none"),
            ("tool pairs in one task", len(cov["tool_pairs"])),
        ]
        if cov["rule_constants_total"] is not None:
            summary_rows.append(
                ("rule constants decisive", f"{cov['rule_constants_decisive']} of {cov['rule_constants_total']}")
            )
        else:
            summary_rows.append(("decisive constants", cov["rule_constants_decisive"]))
        out.append(("Coverage", summary_rows, None, ""))
        if undecided := cov["rule_constants_uncovered"]:
            rows = [(c,) for c in undecided[:50]] + (
                [(f"... and {len(undecided) - 50} more",)] if len(undecided) > 50 else []
            )
            out.append(("Rule constants decisive in no task", rows, ("constant",), ""))
        if cov["tool_pairs"]:
            out.append(("Tool pairs (top 20)", list(cov["tool_pairs"].items())[:20], ("pair", "tasks"), "bars"))
        for key, title in (("outcomes", "Outcomes"), ("failure_modes", "Failure modes"), ("templates", "Templates")):
            if cov[key]:
                out.append((title, list(cov[key].items()), (key.rstrip("s").replace("_", " "), "tasks"), "bars"))
    if d := s["duplicates"]:
        rows = [(k, v["tasks"], v["distinct"], _pct(v["rate"])) for k, v in d.items()]
        out.append(
            ("Duplicates (same reference chain)", rows, ("kind", "tasks", "distinct chains", "duplicate rate"), "")
        )
    if con := s["contamination"]:
        rows = [
            ("checked", con["checked"]),
            ("removed", con["removed"]),
            ("kept", con["kept"]),
            ("rate", _pct(con["rate"])),
        ]
        rows += [(f"by {k}", _f(v)) for k, v in con["by_detector"].items()]
        out.append(("Contamination", rows, None, ""))
        if con["examples"]:
            out.append(
                (
                    "Removed (first 20)",
                    [(e["id"], "; ".join(e["reasons"])) for e in con["examples"]],
                    ("task", "why"),
                    "",
                )
            )
    for name, rec in s["other_stages"].items():
        if name != "graphs":
            out.append((f"Stage {name}", [_kv(k, v) for k, v in rec.items()], None, ""))
    if diff := s["difficulty"]:
        for key, title in (
            ("actions", "Actions per task"),
            ("documents", "Documents per task"),
            ("requests", "Requests per task"),
        ):
            if diff.get(key):
                out.append((title, list(diff[key].items()), (key, "tasks"), "hist"))
        if diff.get("pass_rates"):
            out.append(("RL pass rates", list(diff["pass_rates"].items()), ("pass rate", "tasks"), "hist"))
    return out


def render_text(s: dict[str, Any]) -> str:
    """The report as plain text."""
    lines = [f"Synthesis report: {s['run'].get('domain')}", ""]
    for title, rows, head, _ in _sections(s):
        lines += [title, *_text_table(rows, head), ""]
    return _clean("\n".join(lines))


# ---------------------------------------------------------------- HTML


def _clean(text: str) -> str:
    """Control characters (but newlines and tabs) and lone surrogates shown as escapes."""
    return "".join(
        c if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cs") else f"\\u{ord(c):04x}" for c in text
    )


def _e(x: Any) -> str:
    return html.escape(_clean(str(x)), quote=True)


def _bars(items: list[tuple[Any, Any]], *, width: int = 640) -> str:
    """A horizontal bar chart (inline SVG) of (label, number) pairs."""
    items = [(str(k), _num(v)) for k, v in items if isinstance(_num(v), int | float)][:40]
    if not items:
        return ""
    top = max(v for _, v in items) or 1
    label_w, row_h = 240, 18
    bar_w = width - label_w - 60
    h = row_h * len(items) + 4
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img">']
    for i, (label, v) in enumerate(items):
        y = i * row_h + 2
        w = max(1.0, bar_w * v / top) if v else 0
        short = label if len(label) <= 38 else label[:36] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end" font-size="11">{_e(short)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{row_h - 4}" fill="#4c78a8"/>')
        parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 12}" font-size="11">{_e(_f(v))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _columns(items: list[tuple[Any, Any]], *, height: int = 160, fmt: Any = _f) -> str:
    """A histogram (inline SVG columns) of (bin label, count) pairs."""
    items = [(str(k), _num(v)) for k, v in items][:60]
    if not items:
        return ""
    top = max(v for _, v in items) or 1
    col_w = max(14, min(48, 600 // len(items)))
    width = col_w * len(items) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 34}" role="img">']
    for i, (label, v) in enumerate(items):
        x = 10 + i * col_w
        h = height * v / top
        cx = x + col_w / 2
        parts.append(
            f'<rect x="{x + 1}" y="{height - h + 14:.1f}" width="{col_w - 2}" height="{h:.1f}" fill="#f58518"/>'
        )
        parts.append(
            f'<text x="{cx:.1f}" y="{height - h + 11:.1f}" text-anchor="middle" font-size="10">{_e(fmt(v))}</text>'
        )
        parts.append(f'<text x="{cx:.1f}" y="{height + 28}" text-anchor="middle" font-size="10">{_e(label[:8])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _chart(kind: str, rows: list[tuple[Any, ...]], s: dict[str, Any]) -> str:
    if kind == "funnel" and s["funnel"]:
        return _bars([(k, s["funnel"][k]) for k in FUNNEL if s["funnel"][k] is not None])
    if kind == "rounds" and s["funnel"]:
        return _columns([(f"r{r['round']}", r["yield"] or 0) for r in s["funnel"]["rounds"]], fmt=_pct)
    if kind == "reflection":
        return _columns(
            [(f"v{r['version']} {r['decision'] or ''}", r["yield_after"] or 0) for r in s["reflection"]], fmt=_pct
        )
    if kind == "llm" and s["llm"]:
        return _bars([(role, u.get("calls", 0) + u.get("cached", 0)) for role, u in s["llm"]["roles"].items()])
    if kind == "bars":
        return _bars([(r[0], r[1]) for r in rows])
    if kind == "hist":
        return _columns([(r[0], r[1]) for r in rows])
    return ""


def _html_table(rows: list[tuple[Any, ...]], head: tuple[str, ...] | None) -> str:
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>")
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>")
    out.append("</table>")
    return "".join(out)


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1000px;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;"
    "font-size:13px;vertical-align:top}th{background:#f3f3f3}section{margin-bottom:1.5em}h2{font-size:1.1em}"
)


def render_html(s: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (no script, inline SVG), well-formed XML."""
    title = f"Synthesis report: {s['run'].get('domain')}"
    body = [f"<h1>{_e(title)}</h1>"]
    for name, rows, head, kind in _sections(s):
        slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
        chart = _chart(kind, rows, s)
        body.append(f'<section id="{_e(slug)}"><h2>{_e(name)}</h2>{_html_table(rows, head)}{chart}</section>')
    return (
        '<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )


def write_report(run: RunFolder) -> tuple[Path, Path]:
    """Write ``report.txt`` and ``report.html`` into the run folder; returns their paths."""
    s = summary(run)
    return run.write_text("report.txt", render_text(s)), run.write_text("report.html", render_html(s))
