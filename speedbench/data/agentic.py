"""Agentic trajectories (SPEED-Bench style): one record is a trajectory of turns with tool outputs,
cut before each assistant turn into one request whose prompt is the trajectory so far.

A record::

    {"trajectory_id": "t1", "category": "agentic", "messages": [
        {"role": "system", "content": "..."}, {"role": "user", "content": "..."},
        {"role": "assistant", "content": "..."}, {"role": "tool", "name": "read_file", "content": "..."}, ...]}

Roles: ``system``, ``user``, ``assistant``, ``tool`` (``name`` optional). Cut k (1-based) ends just
before the k-th assistant message: its request ``<trajectory_id>@turn<k>`` holds the messages before
it rendered as one transcript (``render``), so the context grows turn by turn and the engine writes
that assistant turn. The recorded assistant turns stay in later cuts (the trajectory as it ran, not
the engine's reply). Every cut is a single-turn request through the ordinary conversation loop.
"""
from __future__ import annotations

import re
from typing import Any

from .errors import Issue

ROLES = ("system", "user", "assistant", "tool")
CATEGORY = "agentic"
TURN_ID = re.compile(r"@turn(\d+)$")  # a cut's request id ends in @turn<k>
HEADERS = {"system": "[system]", "user": "[user]", "assistant": "[assistant]", "tool": "[tool result{name}]"}


def turn_of(request_id: str) -> int:
    """The cut (1-based assistant turn) a request id names; -1 for a request that is not a cut."""
    m = TURN_ID.search(str(request_id))
    return int(m.group(1)) if m else -1


def render(messages: list[dict[str, Any]]) -> str:
    """The trajectory so far as one prompt: each message under its role header, then the ask."""
    parts = []
    for m in messages:
        name = f": {m['name']}" if m.get("name") else ""
        parts.append(HEADERS[m["role"]].format(name=name) + "\n" + str(m["content"]))
    return "\n\n".join(parts) + "\n\n[assistant]\n(write the assistant's next turn)"


def _problems(record: Any) -> tuple[str, str] | None:
    """(field, message) of the first fault in a trajectory record, or None."""
    if not isinstance(record, dict):
        return "", f"must be a JSON object (a trajectory), got {type(record).__name__}"
    tid = record.get("trajectory_id")
    if not isinstance(tid, str) or not tid or "@" in tid:
        return "trajectory_id", "must be a non-empty string without '@'"
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages", "must be a non-empty list of {role, content} objects"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"messages[{i}]", f"must have a role in {', '.join(ROLES)}, got {m.get('role') if isinstance(m, dict) else m!r}"
        if not isinstance(m.get("content"), str) or not m["content"].strip():
            return f"messages[{i}].content", "must be a non-empty string"
    roles = [m["role"] for m in messages]
    if "assistant" not in roles[1:]:
        return "messages", "has no assistant turn after the first message: nothing to cut before"
    return None


def cuts(record: Any, path: str, line: int) -> tuple[list[dict[str, Any]], list[Issue]]:
    """The SPEED-Bench records of one trajectory (one per assistant turn), or the issue that stops it."""
    fault = _problems(record)
    if fault is not None:
        return [], [Issue(path, line, fault[0], fault[1])]
    messages, out, k = record["messages"], [], 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant" or i == 0:
            continue
        k += 1
        out.append({"question_id": f"{record['trajectory_id']}@turn{k}", "category": record.get("category") or CATEGORY,
                    "sub_category": f"turn{k}", "turns": [render(messages[:i])], "source": "agentic",
                    "src_id": str(record.get("src_id") or record["trajectory_id"])})
    return out, []
