"""One run (``runs.show_run``) as the web inspector draws it: a timeline of
bars and its conversation.

A bar: ``{"kind", "label", "step", "offset_ms", "duration_ms", "tokens",
"error"}``, ``kind`` one of ``run``, ``step``, ``model``, ``tool``,
``call`` (a durable call) and ``agent`` (a sub-agent); ``offset_ms`` from
the run's start. Times are those the journal holds (``"t"`` of each call,
step completion and run end, millisecond start): a replayed run shows the
first run's times. A record without times gets no bar.

The conversation: the run's model requests, model replies (with the tool
calls they asked), tool results and outputs, in step order, each
``{"role", "step", ...}``: ``request`` (``model``, ``messages``,
``last_user_message``, ``tool_calls_asked``), ``assistant`` (``model``,
``content``, ``tool_calls``, ``tokens``), ``tool`` (``tool``, ``result`` or
``error``) and ``output`` (``output``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Dict, List, Optional

__all__ = ["conversation", "timeline"]

_CALL_KINDS = {"model_reply": "model", "tool_result": "tool", "call_result": "call", "sub_agent_result": "agent"}


def _seconds(iso: Optional[str]) -> Optional[float]:
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _tokens(record: Dict[str, Any]) -> Optional[int]:
    usage = record.get("usage")
    if not isinstance(usage, dict):
        return None
    return int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)


def _label(record: Dict[str, Any], kind: str) -> str:
    if kind == "model":
        return f"chat {record.get('model')}"
    if kind == "tool":
        return f"tool {record.get('tool')}"
    if kind == "agent":
        return f"agent {record.get('agent')}"
    return f"call {str(record.get('function', '')).rpartition(':')[2]}"


def _bar(kind: str, label: str, step: str, record: Dict[str, Any], origin: float) -> Optional[Dict[str, Any]]:
    start = _seconds(record.get("start"))
    if start is None or not isinstance(record.get("duration_ms"), (int, float)):
        return None
    return {"kind": kind, "label": label, "step": step, "offset_ms": round((start - origin) * 1000, 3),
            "duration_ms": record["duration_ms"], "tokens": _tokens(record),
            "error": record.get("error") or (f"{record['error_type']}: {record.get('error_message')}"
                                             if "error_type" in record else None)}


def timeline(run: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The bars of ``run`` (module docstring): the run first, then each
    step (its completion's times) followed by its calls, in step order."""
    origin = _seconds(run.get("start"))
    if origin is None:
        return []
    bars: List[Dict[str, Any]] = []
    for step in run.get("steps", []):
        name = step["step"] if "/" not in step.get("journal_id", "") else f"{step['journal_id']} {step['step']}"
        first = len(bars)
        for record in step.get("records", []):
            kind = record.get("kind")
            if kind == "run_finished":
                bar = _bar("run", f"run ({record.get('outcome')})", name, record, origin)
                bar = bar and {**bar, "tokens": run.get("tokens")}
            elif kind == "step_completed":
                bar = _bar("step", name, name, record, origin)
            elif kind in _CALL_KINDS:
                bar = _bar(_CALL_KINDS[kind], _label(record, _CALL_KINDS[kind]), name, record, origin)
            else:
                bar = None
            if bar is not None:
                # the step's own bar above its calls (the journal lists the calls first)
                bars.insert(first, bar) if bar["kind"] == "step" else bars.append(bar)
    runs = [bar for bar in bars if bar["kind"] == "run"]
    return runs + [bar for bar in bars if bar["kind"] != "run"]


def conversation(run: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The run's conversation (module docstring), in step order."""
    said: List[Dict[str, Any]] = []
    for step in run.get("steps", []):
        for record in step.get("records", []):
            kind = record.get("kind")
            if kind == "model_request":
                said.append({"role": "request", "step": step["step"], "model": record.get("model"),
                             "messages": record.get("messages"), "last_user_message": record.get("last_user_message"),
                             "tool_calls_asked": record.get("tool_calls_asked") or []})
            elif kind == "model_reply":
                said.append({"role": "assistant", "step": step["step"], "model": record.get("model"),
                             "content": record.get("content"), "tool_calls": record.get("tool_calls") or [],
                             "tokens": _tokens(record)})
            elif kind == "tool_result":
                said.append({"role": "tool", "step": step["step"], "tool": record.get("tool"),
                             **{k: record[k] for k in ("result", "error") if k in record}})
            elif kind == "output":
                said.append({"role": "output", "step": step["step"], "output": record.get("output")})
    return said
