"""Lay out a workflow's DAG for a server-side SVG: columns by depth (longest path from a
root), rows in id order within a column, edges as cubic curves from parent to child."""

from __future__ import annotations

import graphlib
from dataclasses import dataclass
from typing import Any, Final

NODE_W: Final = 190
NODE_H: Final = 46
GAP_X: Final = 70
GAP_Y: Final = 18
PAD: Final = 12


@dataclass(frozen=True)
class Placed:
    node: dict[str, Any]
    x: int
    y: int


@dataclass(frozen=True)
class Edge:
    path: str
    run_anyway: bool


@dataclass(frozen=True)
class Layout:
    nodes: list[Placed]
    edges: list[Edge]
    width: int
    height: int


def layout(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> Layout:
    """Positions for `nodes` (dicts with `id`) joined by `edges` (job_id waits for
    depends_on_job_id). The input is acyclic (enqueue refuses cycles)."""
    ids = {n["id"] for n in nodes}
    parents: dict[int, list[int]] = {i: [] for i in ids}
    for e in edges:
        if e["job_id"] in ids and e["depends_on_job_id"] in ids:
            parents[e["job_id"]].append(e["depends_on_job_id"])
    depth: dict[int, int] = {}
    for i in graphlib.TopologicalSorter(parents).static_order():
        depth[i] = 1 + max((depth[p] for p in parents[i]), default=-1)
    columns: dict[int, list[dict[str, Any]]] = {}
    for n in sorted(nodes, key=lambda n: n["id"]):
        columns.setdefault(depth[n["id"]], []).append(n)
    where: dict[int, tuple[int, int]] = {}
    placed: list[Placed] = []
    for col, members in sorted(columns.items()):
        for row, n in enumerate(members):
            x = PAD + col * (NODE_W + GAP_X)
            y = PAD + row * (NODE_H + GAP_Y)
            where[n["id"]] = (x, y)
            placed.append(Placed(n, x, y))
    lines: list[Edge] = []
    for e in edges:
        if e["job_id"] not in where or e["depends_on_job_id"] not in where:
            continue
        px, py = where[e["depends_on_job_id"]]
        cx, cy = where[e["job_id"]]
        x1, y1 = px + NODE_W, py + NODE_H // 2
        x2, y2 = cx - 6, cy + NODE_H // 2
        mid = (x1 + x2) // 2
        lines.append(Edge(f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}", bool(e["run_anyway"])))
    width = PAD * 2 + (max(columns, default=0) + 1) * (NODE_W + GAP_X) - GAP_X
    tallest = max((len(m) for m in columns.values()), default=1)
    height = PAD * 2 + tallest * (NODE_H + GAP_Y) - GAP_Y
    return Layout(placed, lines, width, height)
