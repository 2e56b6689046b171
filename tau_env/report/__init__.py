r"""A self-contained HTML report of a run: browse episodes turn by turn, with failed grades' diffs.

Any text shows as it is: the data travels as JSON inside the page with every ``<`` escaped (so no
model text can end the script element), lone surrogates as ``\uXXXX`` escapes, and numbers that
JSON lacks (NaN, infinities) as strings.
"""

from __future__ import annotations

import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any

_SLOTS = re.compile("__TITLE__|__DATA__")


def _finite(x: Any) -> Any:
    """``x`` with every NaN or infinity replaced by its name (``JSON.parse`` rejects them)."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _payload(data: Any) -> str:
    try:
        text = json.dumps(data, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: rare, so the walk is only paid then
        text = json.dumps(_finite(data), ensure_ascii=False, default=str)
    # "<" only occurs inside JSON strings, where \u003c means the same: nothing can close the <script>
    return text.replace("<", "\\u003c")


def render(episodes: list[dict[str, Any]], metrics: dict[str, Any], title: str) -> str:
    """The report as one HTML page (no external files)."""
    template = resources.files("tau_env.report").joinpath("template.html").read_text(encoding="utf-8")
    keep = ("task_id", "trial", "reward", "termination_reason", "steps", "events", "grade", "error")
    payload = _payload({"metrics": metrics, "episodes": [{k: ep.get(k) for k in keep} for ep in episodes]})
    safe_title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    slots = {"__TITLE__": safe_title, "__DATA__": payload}
    return _SLOTS.sub(lambda m: slots[m.group()], template)  # one pass: no slot is filled inside another


def write(path: str | Path, episodes: list[dict[str, Any]], metrics: dict[str, Any], title: str) -> Path:
    r"""Write the report; text UTF-8 cannot hold (lone surrogates) is written as ``\uXXXX`` escapes."""
    p = Path(path)
    p.write_bytes(render(episodes, metrics, title).encode("utf-8", "backslashreplace"))
    return p
