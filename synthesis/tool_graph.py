"""The tool graph: a domain's tools as nodes, with dependency and conflict edges.

Nodes come from ``domain.toolbox("all")``: each tool's seat, kind, flags and the legal domain of
every argument (type and enum from the schema; the database column it names, with the values in
the seed; the entity-graph constants that decide it). Edges come from three sources, merged in
this order:

- ``declared``: the tools' own metadata (``@tool(requires=..., produces=..., conflicts=...)``) and
  flags (a discoverable tool needs ``unlock_tool``, a hand-over tool ``hand_over_tool``);
- ``mined``: the domain's reference tasks, replayed step by step with each write's database
  effect (see :mod:`tau_env.synthesis.tool_mining`);
- ``override``: a reviewed JSON file that adds and removes edges (and constant links).

Dependency edges point from the earlier call to the later one: ``requires`` (the later call fails
without the earlier one's effect), ``produces`` (the earlier call's output gives an argument of the
later one, named in ``param``), ``follow_up`` (the earlier call leaves a process that the later
one must finish), ``unlock`` / ``handover`` (a meta tool makes the later tool available). A
``conflict`` edge is undirected: the two tools must not both act on the same record in one
conversation (one undoes the other, breaks its precondition, or both write the same cells).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tau_env.tools import hand_over_tool, unlock_tool

from .errors import SynthesisError

#: Edge kinds; all but ``conflict`` are dependencies.
EDGE_KINDS = ("requires", "produces", "follow_up", "unlock", "handover", "conflict")
#: Where an edge comes from.
SOURCES = ("declared", "mined", "override")
#: The meta tools every toolbox with discoverable / hand-over tools has.
UNLOCK, HANDOVER = unlock_tool.name, hand_over_tool.name
#: Most seed values listed in an argument's database domain.
MAX_DOMAIN_VALUES = 200
DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass
class Edge:
    """One edge. ``param`` names the argument of ``dst`` a ``produces`` edge feeds (else None).

    Attributes:
        src: The earlier tool (for a conflict: the first name in sorted order).
        dst: The later tool.
        kind: One of :data:`EDGE_KINDS`.
        why: How it was found (a sentence), for people.
        source: One of :data:`SOURCES`: where it first came from.
        param: The argument a ``produces`` edge feeds.
        support: How many reference tasks showed it (mined edges).
    """

    src: str
    dst: str
    kind: str
    why: str = ""
    source: str = "declared"
    param: str | None = None
    support: int = 0

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        """Identity of the edge: (src, dst, kind, param); a conflict's ends in sorted order."""
        if self.kind == "conflict":
            a, b = sorted((self.src, self.dst))
            return (a, b, "conflict", None)
        return (self.src, self.dst, self.kind, self.param)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Edge:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class ToolNode:
    """One tool.

    Attributes:
        name: The tool's name.
        side: ``"agent"`` or ``"user"``.
        kind: ``"read"`` or ``"write"``.
        discoverable: Needs ``unlock_tool`` first.
        handover: A user tool the agent hands over with ``hand_over_tool``.
        ends_episode: A successful call ends the conversation.
        params: Argument name -> legal domain: ``type``, ``required``, ``enum`` (if any), ``db``
            (``{"table", "column", "values", "n_values"}`` when the name matches a column),
            ``constants`` (entity-graph constant ids that decide the value).
        requires: Preconditions: the tools whose effect this one needs (from the ``requires``
            edges into it).
        produces: The argument names this tool's output provides to later calls.
        conflicts: The tools this one conflicts with.
        description: The tool's description.
        rules: Entity-graph constant ids that decide whether a call is allowed at all (its
            policy preconditions: an age limit, a refund allowance), from the reviewed file.
    """

    name: str
    side: str
    kind: str
    discoverable: bool = False
    handover: bool = False
    ends_episode: bool = False
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    requires: list[str] = field(default_factory=list)
    produces: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    description: str = ""
    rules: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolNode:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class ToolGraph:
    """Tools and their edges (see the module docstring).

    Attributes:
        domain: The domain's name.
        nodes: Tool name -> node.
        edges: The merged edges.
        mined: Every mined edge before declared metadata and overrides were merged (for measuring
            the miner).
        stats: Counts and timings of the build.
    """

    domain: str
    nodes: dict[str, ToolNode] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    mined: list[Edge] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        self._conflicts: set[frozenset[str]] = {frozenset((e.src, e.dst)) for e in self.edges if e.kind == "conflict"}
        self._keys = {e.key for e in self.edges}

    def conflict(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` are joined by a conflict edge (symmetric)."""
        return frozenset((a, b)) in self._conflicts

    def conflicts_of(self, tool: str) -> list[str]:
        """The tools in conflict with ``tool``, sorted."""
        return sorted(
            {e.dst if e.src == tool else e.src for e in self.edges if e.kind == "conflict" and tool in (e.src, e.dst)}
        )

    def dependencies(self, tool: str) -> list[Edge]:
        """The dependency edges (every kind but conflict) into or out of ``tool``."""
        return [e for e in self.edges if e.kind != "conflict" and tool in (e.src, e.dst)]

    def requirements(self, tool: str) -> list[Edge]:
        """The dependency edges into ``tool``: what must come before it."""
        return [e for e in self.edges if e.kind != "conflict" and e.dst == tool]

    def write_tools(self) -> list[str]:
        """The write tools of both seats, in the toolbox's order."""
        return [n for n, node in self.nodes.items() if node.kind == "write"]

    def has(self, src: str, dst: str, kind: str, param: str | None = None) -> bool:
        """Whether the graph holds this edge (a conflict in either direction)."""
        return Edge(src, dst, kind, param=param).key in self._keys

    def edge_keys(self, edges: Iterable[Edge] | None = None) -> set[tuple[str, str, str, str | None]]:
        """Keys of ``edges`` (default: the merged edges)."""
        return {e.key for e in (self.edges if edges is None else edges)}

    # --- serialization ----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "nodes": [n.to_dict() for n in self.nodes.values()],
            "edges": [e.to_dict() for e in self.edges],
            "mined": [e.to_dict() for e in self.mined],
            "stats": self.stats,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolGraph:
        try:
            return cls(
                domain=data["domain"],
                nodes={n["name"]: ToolNode.from_dict(n) for n in data["nodes"]},
                edges=[Edge.from_dict(e) for e in data["edges"]],
                mined=[Edge.from_dict(e) for e in data.get("mined", [])],
                stats=dict(data.get("stats", {})),
            )
        except (KeyError, TypeError) as e:
            raise SynthesisError(
                f"Not a tool graph: {type(e).__name__}: {e}; expected {{'domain', 'nodes', 'edges'}} as "
                "ToolGraph.to_json() writes it. Rebuild it with `tau-env synth graphs`."
            ) from None

    def write(self, folder: str | Path) -> tuple[Path, Path]:
        """Write ``tool_graph.json`` and a picture ``tool_graph.svg`` into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        js, svg = folder / "tool_graph.json", folder / "tool_graph.svg"
        js.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        svg.write_text(render_svg(self), encoding="utf-8")
        return js, svg

    @classmethod
    def read(cls, path: str | Path) -> ToolGraph:
        """Read a ``tool_graph.json`` that :meth:`write` wrote."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise SynthesisError(f"Cannot read the tool graph {path}: {e}.") from None
        return cls.from_json(data)


# --- nodes ----------------------------------------------------------------------------------------
def _db_column(schema: Any, param: str) -> tuple[str, str] | None:
    """The (table, column) an argument's name points at: a primary key of that name, a primary key
    the name ends with (``from_account_id`` -> ``accounts.account_id``), or the one table with a
    column of that name.
    """
    tables = schema.tables
    pks = [(t, info.primary_key[0]) for t, info in tables.items() if len(info.primary_key) == 1]
    for t, pk in pks:
        if param == pk:
            return t, pk
    ends = [(t, pk) for t, pk in pks if param.endswith("_" + pk)]
    if ends:
        return max(ends, key=lambda tp: len(tp[1]))
    for t, pk in pks:  # "user_id" -> users.id style: <singular table>_id
        if pk == "id" and param in (f"{t.rstrip('s')}_id", f"{t}_id"):
            return t, pk
    owners = [t for t, info in tables.items() if param in info.columns]
    if len(owners) == 1:
        return owners[0], param
    return None


def _db_values(db: Any, table: str, column: str) -> tuple[list[Any], int]:
    """Up to :data:`MAX_DOMAIN_VALUES` distinct values of a column in the seed database, and their count."""
    conn = db.conn
    q = f'"{table}"', f'"{column}"'
    n = conn.execute(f"SELECT COUNT(DISTINCT {q[1]}) FROM {q[0]}").fetchone()[0]
    rows = conn.execute(
        f"SELECT DISTINCT {q[1]} FROM {q[0]} WHERE {q[1]} IS NOT NULL ORDER BY {q[1]} LIMIT ?", (MAX_DOMAIN_VALUES,)
    )
    return [r[0] for r in rows], n


def tool_nodes(domain: Any) -> dict[str, ToolNode]:
    """The nodes of ``domain``'s full toolbox, with each argument's legal domain."""
    box = domain.toolbox("all")
    db = domain.start_db(None)
    try:
        return _nodes(domain, box, db)
    finally:
        db.close()


def _nodes(domain: Any, box: Any, db: Any) -> dict[str, ToolNode]:
    nodes = {}
    for name, t in box.tools.items():
        params = {}
        props = t.parameters.get("properties", {})
        for p, s in props.items():
            dom: dict[str, Any] = {"type": s.get("type", "any"), "required": p in t.required}
            if "enum" in s:
                dom["enum"] = list(s["enum"])
            col = None if name in (UNLOCK, HANDOVER) else _db_column(domain.schema, p)
            if col is not None:
                values, n = _db_values(db, *col)
                dom["db"] = {"table": col[0], "column": col[1], "values": values, "n_values": n}
            dom["constants"] = []
            params[p] = dom
        nodes[name] = ToolNode(
            name=name,
            side=t.side,
            kind=t.kind,
            discoverable=t.discoverable,
            handover=t.handover,
            ends_episode=t.ends_episode,
            params=params,
            description=t.description,
        )
    return nodes


def declared_edges(domain: Any) -> list[Edge]:
    """Edges from the tools' metadata and flags."""
    box = domain.toolbox("all")
    tools = box.tools
    out: list[Edge] = []
    for name, t in tools.items():
        if t.discoverable:
            out.append(Edge(UNLOCK, name, "unlock", "discoverable: unlock_tool names it first"))
        if t.handover:
            out.append(Edge(HANDOVER, name, "handover", "hand-over tool: the agent hands it over first"))
        for r in getattr(t, "requires", ()):
            if r not in tools:
                raise SynthesisError(
                    f"Tool {name!r} requires {r!r}, which is not a tool of the domain; use one of {sorted(tools)}."
                )
            out.append(Edge(r, name, "requires", f"@tool(requires=...) of {name}"))
        for p in getattr(t, "produces", ()):
            for other, o in tools.items():
                if o.kind == "write" and p in o.parameters.get("properties", {}):
                    out.append(Edge(name, other, "produces", f"@tool(produces=...) of {name}", param=p))
        for c in getattr(t, "conflicts", ()):
            if c not in tools:
                raise SynthesisError(
                    f"Tool {name!r} conflicts with {c!r}, which is not a tool of the domain; "
                    f"use one of {sorted(tools)}."
                )
            out.append(Edge(name, c, "conflict", f"@tool(conflicts=...) of {name}"))
    return out


# --- overrides ------------------------------------------------------------------------------------
def default_overrides(domain: Any) -> Path | None:
    """The reviewed override file shipped for ``domain`` (``data/<name>_tool_graph.json``), if any."""
    name = re.sub(r"[^a-z0-9]+", "_", str(domain.name).lower()).strip("_")
    path = DATA_DIR / f"{name}_tool_graph.json"
    return path if path.is_file() else None


def load_overrides(overrides: str | Path | dict[str, Any], tools: Iterable[str]) -> tuple[str, dict[str, Any]]:
    """Read and check an override file (or dict); returns (its name for messages, the data).

    Format: ``{"add": [EDGE], "remove": [EDGE], "constants": {"tool.param": [CID]},
    "drop_constants": {"tool.param": [CID]}, "rules": {"tool": [CID]}}``, where EDGE is
    ``{"src", "dst", "kind", "param"?, "why"?}``; ``constants`` links arguments to the constants
    that decide them, ``drop_constants`` removes mined links, ``rules`` names a tool's policy
    preconditions.
    """
    if isinstance(overrides, dict):
        where, data = "the overrides dict", overrides
    else:
        where = str(overrides)
        try:
            data = json.loads(Path(overrides).read_text(encoding="utf-8"))
        except OSError as e:
            raise SynthesisError(f"Cannot read the tool-graph overrides {where}: {e}.") from None
        except ValueError as e:
            raise SynthesisError(f"The tool-graph overrides {where} is not JSON: {e}.") from None
    if not isinstance(data, dict):
        raise SynthesisError(f"The tool-graph overrides {where} must hold a JSON object, got {type(data).__name__}.")
    known = set(tools)
    extra = set(data) - {"add", "remove", "constants", "drop_constants", "rules", "comment", "domain"}
    if extra:
        raise SynthesisError(
            f"The tool-graph overrides {where} has unknown keys {sorted(extra)}; "
            "expected add, remove, constants, drop_constants, rules (and comment, domain)."
        )
    for section in ("add", "remove"):
        entries = data.get(section, [])
        if not isinstance(entries, list):
            raise SynthesisError(f"{where}: '{section}' must be a list of edges, got {type(entries).__name__}.")
        for i, e in enumerate(entries):
            at = f"{where}: {section}[{i}]"
            if not isinstance(e, dict) or not {"src", "dst", "kind"} <= set(e):
                raise SynthesisError(f"{at} must be an object with src, dst and kind, got {json.dumps(e)[:120]}.")
            if e["kind"] not in EDGE_KINDS:
                raise SynthesisError(f"{at}: kind {e['kind']!r} is not one of {EDGE_KINDS}.")
            for end in ("src", "dst"):
                if e[end] not in known:
                    raise SynthesisError(f"{at}: {end} {e[end]!r} is not a tool of the domain.")
            if e["kind"] == "produces" and not isinstance(e.get("param"), str):
                raise SynthesisError(f"{at}: a produces edge names the argument it feeds in 'param'.")
            unknown = set(e) - {"src", "dst", "kind", "param", "why"}
            if unknown:
                raise SynthesisError(f"{at}: unknown fields {sorted(unknown)}; an edge has src, dst, kind, param, why.")
    for section in ("constants", "drop_constants", "rules"):
        consts = data.get(section, {})
        what = "'tool'" if section == "rules" else "'tool.param'"
        if not isinstance(consts, dict):
            raise SynthesisError(f"{where}: '{section}' must map {what} to a list of constant ids.")
        for k, ids in consts.items():
            tool_name, _, param = str(k).partition(".")
            if tool_name not in known or (section == "rules") == bool(param):
                raise SynthesisError(f"{where}: {section}[{k!r}] must be {what} with a tool of the domain.")
            if not isinstance(ids, list) or not all(isinstance(c, str) for c in ids):
                raise SynthesisError(f"{where}: {section}[{k!r}] must be a list of constant ids (strings).")
    return where, data


def apply_overrides(graph: ToolGraph, overrides: str | Path | dict[str, Any]) -> None:
    """Add and remove edges and constant links as the override file says (in place)."""
    where, data = load_overrides(overrides, graph.nodes)
    for i, e in enumerate(data.get("remove", [])):
        key = Edge(e["src"], e["dst"], e["kind"], param=e.get("param")).key
        before = len(graph.edges)
        graph.edges = [x for x in graph.edges if x.key != key]
        if len(graph.edges) == before:
            warnings.warn(f"{where}: remove[{i}] {key} matches no edge of the graph.", stacklevel=2)
    have = {e.key for e in graph.edges}
    for e in data.get("add", []):
        edge = Edge(e["src"], e["dst"], e["kind"], e.get("why", "reviewed"), "override", e.get("param"))
        if edge.key not in have:
            graph.edges.append(edge)
            have.add(edge.key)
    for k, ids in data.get("constants", {}).items():
        tool_name, _, param = k.partition(".")
        node = graph.nodes[tool_name]
        if param not in node.params:
            raise SynthesisError(f"{where}: constants[{k!r}]: {tool_name} has no argument {param!r}.")
        cur = node.params[param].setdefault("constants", [])
        cur.extend(c for c in ids if c not in cur)
    for k, ids in data.get("drop_constants", {}).items():
        tool_name, _, param = k.partition(".")
        dom = graph.nodes[tool_name].params.get(param)
        if dom is None:
            raise SynthesisError(f"{where}: drop_constants[{k!r}]: {tool_name} has no argument {param!r}.")
        dom["constants"] = [c for c in dom.get("constants", []) if c not in ids]
    for tool_name, ids in data.get("rules", {}).items():
        node = graph.nodes[tool_name]
        node.rules.extend(c for c in ids if c not in node.rules)
    graph._index()


# --- building ---------------------------------------------------------------------------------------
def merge_edges(*groups: Iterable[Edge]) -> list[Edge]:
    """Union of edge lists by key; the first occurrence wins, supports add up."""
    out: dict[tuple, Edge] = {}
    for group in groups:
        for e in group:
            if e.key in out:
                out[e.key].support += e.support
            else:
                out[e.key] = Edge(**asdict(e))
    return list(out.values())


def build_tool_graph(
    domain: Any,
    entity_graph: Any = None,
    overrides: str | Path | dict[str, Any] | bool | None = None,
    *,
    mine: bool = True,
    declared: bool = True,
) -> ToolGraph:
    """Build ``domain``'s tool graph.

    Args:
        domain: A :class:`tau_env.Domain`.
        entity_graph: Its entity graph (links arguments to the constants that decide them), or None.
        overrides: A reviewed override file (path or dict); None uses the file shipped for the
            domain (``synthesis/data/<name>_tool_graph.json``) if there is one; False uses none.
        mine: Mine edges from the domain's reference tasks.
        declared: Use the tools' metadata.
    """
    import time

    from .tool_mining import mine_tool_graph

    t0 = time.perf_counter()
    nodes = tool_nodes(domain)
    graph = ToolGraph(domain=str(domain.name), nodes=nodes)
    mined: list[Edge] = []
    links: dict[tuple[str, str], dict[str, int]] = {}
    mstats: dict[str, Any] = {}
    if mine:
        mined, links, mstats = mine_tool_graph(domain, entity_graph)
    graph.mined = mined
    graph.edges = merge_edges(declared_edges(domain) if declared else [], mined)
    for (tool_name, param), ids in links.items():
        if tool_name in nodes and param in nodes[tool_name].params:
            nodes[tool_name].params[param]["constants"] = sorted(ids, key=lambda c: (-ids[c], c))
    if overrides is None:
        overrides = default_overrides(domain) or False
    if overrides is not False:
        if overrides is True:
            raise SynthesisError("overrides takes a path, a dict, None (the shipped file) or False (none), not True.")
        apply_overrides(graph, overrides)
    graph._index()
    finish_nodes(graph)
    graph.stats = {
        "nodes": len(graph.nodes),
        "edges": len(graph.edges),
        "by_kind": {k: sum(e.kind == k for e in graph.edges) for k in EDGE_KINDS},
        "by_source": {s: sum(e.source == s for e in graph.edges) for s in SOURCES},
        "mined": len(mined),
        **mstats,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return graph


def finish_nodes(graph: ToolGraph) -> None:
    """Fill each node's requires / produces / conflicts lists from the edges."""
    for node in graph.nodes.values():
        node.requires = sorted({e.src for e in graph.edges if e.kind == "requires" and e.dst == node.name})
        node.produces = sorted(
            {e.param for e in graph.edges if e.kind == "produces" and e.src == node.name and e.param}
        )
        node.conflicts = graph.conflicts_of(node.name)


def rule_constants(entity_graph: Any, tool_graph: ToolGraph) -> list[str]:
    """The entity-graph constant ids linked to any tool argument or precondition (``rules``): the
    rules synthesized tasks must make decisive. Ids the entity graph lacks are left out.
    """
    ids: dict[str, None] = {}
    for node in tool_graph.nodes.values():
        for c in node.rules:
            ids.setdefault(c, None)
        for dom in node.params.values():
            for c in dom.get("constants", ()):
                ids.setdefault(c, None)
    if entity_graph is None:
        return list(ids)
    out = []
    for c in ids:
        try:
            entity_graph.by_id(c)
        except KeyError:
            continue
        out.append(c)
    return out


# --- picture ------------------------------------------------------------------------------------------
_COLORS = {
    "requires": "#1f77b4",
    "produces": "#2ca02c",
    "follow_up": "#9467bd",
    "unlock": "#8c8c8c",
    "handover": "#ff7f0e",
    "conflict": "#d62728",
}


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def render_svg(graph: ToolGraph) -> str:
    """A self-made SVG: columns of meta / read / agent write / user tools, edges coloured by kind."""
    cols: dict[str, list[str]] = {"meta": [], "read": [], "write": [], "user": []}
    for n, node in graph.nodes.items():
        if n in (UNLOCK, HANDOVER):
            cols["meta"].append(n)
        elif node.side == "user":
            cols["user"].append(n)
        else:
            cols[node.kind if node.kind in cols else "read"].append(n)
    col_x = {"meta": 110, "read": 380, "write": 700, "user": 1000}
    row_h, top = 26, 60
    pos = {}
    for c, names in cols.items():
        for i, n in enumerate(names):
            pos[n] = (col_x[c], top + i * row_h)
    height = top + row_h * max((len(v) for v in cols.values()), default=1) + 60
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="10" y="20" font-size="14">Tool graph of {_esc(graph.domain)}: {len(graph.nodes)} tools, '
        f"{len(graph.edges)} edges</text>",
    ]
    for i, (k, color) in enumerate(_COLORS.items()):
        dash = ' stroke-dasharray="4 3"' if k == "conflict" else ""
        x = 10 + i * 130
        out.append(f'<line x1="{x}" y1="38" x2="{x + 30}" y2="38" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x + 35}" y="42">{k}</text>')
    for e in graph.edges:
        if e.src not in pos or e.dst not in pos:
            continue
        (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
        color = _COLORS.get(e.kind, "#000")
        dash = ' stroke-dasharray="4 3"' if e.kind == "conflict" else ""
        bend = 40 + 15 * (hash(e.key) % 5) if x1 == x2 else 0
        mx, my = (x1 + x2) / 2 + bend, (y1 + y2) / 2
        title = f"{e.src} -> {e.dst} ({e.kind}{', ' + e.param if e.param else ''}; {e.source}): {e.why}"
        out.append(
            f'<path d="M{x1},{y1} Q{mx:.0f},{my:.0f} {x2},{y2}" fill="none" stroke="{color}" '
            f'stroke-opacity="0.55" stroke-width="1.2"{dash}><title>{_esc(title)}</title></path>'
        )
    for n, (x, y) in pos.items():
        node = graph.nodes[n]
        fill = "#fde0dd" if node.kind == "write" else "#e5f5e0"
        w = max(60, 6.2 * len(n) + 10)
        out.append(
            f'<rect x="{x - w / 2:.0f}" y="{y - 9}" width="{w:.0f}" height="18" rx="4" fill="{fill}" stroke="#555">'
            f"<title>{_esc(node.description)}</title></rect>"
        )
        out.append(f'<text x="{x}" y="{y + 4}" text-anchor="middle">{_esc(n)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def precision_recall(found: set, truth: set) -> tuple[float, float]:
    """Precision and recall of ``found`` against ``truth`` (1.0 for an empty denominator)."""
    hit = len(found & truth)
    p = hit / len(found) if found else 1.0
    r = hit / len(truth) if truth else 1.0
    return (round(p, 4) if not math.isnan(p) else 1.0, round(r, 4))
