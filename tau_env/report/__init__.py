"""A self-contained HTML report of a run: browse episodes turn by turn, with failed grades' diffs."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any


def render(episodes: list[dict[str, Any]], metrics: dict[str, Any], title: str) -> str:
    """The report as one HTML page (no external files)."""
    template = resources.files("tau_env.report").joinpath("template.html").read_text(encoding="utf-8")
    keep = ("task_id", "trial", "reward", "termination_reason", "steps", "events", "grade", "error")
    data = {"metrics": metrics, "episodes": [{k: ep.get(k) for k in keep} for ep in episodes]}
    # "</" inside the JSON would end the <script> element early
    payload = json.dumps(data, ensure_ascii=False, default=str).replace("</", "<\\/")
    safe_title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return template.replace("__TITLE__", safe_title).replace("__DATA__", payload)


def write(path: str | Path, episodes: list[dict[str, Any]], metrics: dict[str, Any], title: str) -> Path:
    p = Path(path)
    p.write_text(render(episodes, metrics, title), encoding="utf-8")
    return p
