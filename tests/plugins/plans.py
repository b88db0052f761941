"""Plans of the statements pgrag's functions run, for plan tests.

:func:`run_with_plans` calls a query with auto_explain logging every nested statement's plan as
a notice; :func:`marked_plan` finds the one of a statement by its ``/* pgrag:name */`` marker
(sql/idempotent/README.md, "Plans").
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pgrag.db import set_request_tenant


@dataclass
class Plan:
    """One statement a call ran (nested ones included) and the nodes of its plan."""

    query: str
    nodes: list[dict[str, Any]]

    def scans(self, relation: str) -> list[dict[str, Any]]:
        return [n for n in self.nodes if n.get("Relation Name") == relation]

    def rows_read(self, relation: str) -> int:
        """Rows the scans of relation read (an ``ANALYZED`` plan): those they returned and those
        their conditions then discarded, over all their loops."""
        return sum(rows_read(n) for n in self.scans(relation))


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def run_with_plans(
    conn: psycopg.Connection[Any],
    query: str,
    params: Sequence[Any] = (),
    *,
    tenant: str | None = None,
    role: str | None = None,
    settings: dict[str, str] | None = None,
) -> tuple[list[Any], list[Plan]]:
    """Rows of query, and the plan of every statement it ran inside pgrag's functions
    (auto_explain, JSON format, as notices). Sequential scans are off: on tables this small the
    planner would otherwise read every row whatever indexes apply."""
    notices: list[str] = []
    with conn.transaction():
        conn.execute("load 'auto_explain'")
        for name, value in {
            "auto_explain.log_nested_statements": "on",
            "auto_explain.log_level": "notice",
            "auto_explain.log_format": "json",
            "enable_seqscan": "off",
            **(settings or {}),
        }.items():
            conn.execute("select set_config(%s, %s, true)", (name, value))
        if tenant is not None:
            set_request_tenant(conn, tenant)
        conn.execute("set local auto_explain.log_min_duration = 0")
        if role is not None:
            conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        rows = conn.execute(query, params).fetchall()
        conn.execute("reset role")
        conn.execute("set local auto_explain.log_min_duration = -1")
    plans = []
    for notice in notices:
        if "plan:" in notice:
            explained = json.loads(notice.split("plan:", 1)[1])
            plans.append(Plan(explained["Query Text"], list(_plan_nodes(explained["Plan"]))))
    return rows, plans


def rows_read(node: dict[str, Any]) -> int:
    """Rows one scan node of an ``ANALYZED`` plan read: returned, or discarded by its filter or
    recheck (EXPLAIN gives each per loop), times its loops."""
    per_loop = sum(
        node.get(key, 0)
        for key in ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck")
    )
    return round(per_loop * node.get("Actual Loops", 0))


# auto_explain with the rows each node returned and how often it ran (not its time).
ANALYZED = {"auto_explain.log_analyze": "on", "auto_explain.log_timing": "off"}


def walked_chunk_scans(plan: Plan) -> list[dict[str, Any]]:
    """The scans of pgrag.chunks in plan that ran (a branch a condition turned off did not)."""
    return [n for n in plan.scans("chunks") if n["Actual Loops"]]


def arm_plan(plans: list[Plan], marker: str) -> Plan:
    """The one plan whose statement contains marker."""
    found = [p for p in plans if marker in p.query]
    assert len(found) == 1, [p.query for p in plans]
    return found[0]


def marked_plan(plans: list[Plan], name: str) -> Plan:
    """The one plan of the statement marked ``/* pgrag:name */`` (sql/idempotent/README.md)."""
    return arm_plan(plans, f"/* pgrag:{name} */")
