"""Tool calls that wait for a reviewer's approval before they run.

A tool needs approval when it is marked (``@tool(needs_approval=True)``, or
any ``Tool`` whose ``needs_approval`` attribute is True) or named in the
job's ``approvals.tools``. When the built-in tool action
(``runtime.builtin_actions.tool_call_action``) is about to run a call of
such a tool (after the call was checked: an offered tool, arguments that
fit), it parks the call on a durable callback of the run::

    tool call ──> callback (purpose "approval", details: tool, call id,
                  │          arguments with secrets redacted, model)
                  ├─ resolved  (approve) ──> the tool runs, journaled as any tool call
                  ├─ rejected  (reject)  ──> the tool does not run; the model gets
                  │                          "The call of tool <name> was rejected by a
                  │                          reviewer: <reason>"
                  └─ timed out (approvals.timeout_s) ──> approvals.on_timeout:
                                 reject: the tool does not run; the model is told
                                         no decision came within N s
                                 fail:   the action fails with ApprovalTimedOut

The callback is the same machinery as ``ctx.create_callback``: it is
registered under the creating call's ``CallbackRef`` (the tool call's
branch of the action, its ordinal), so a replayed run (after a failover, a
retry) finds the same callback and its decision and does not ask again; an
approved call whose result was journaled replays that result and does not
run again. The wait holds no thread and no run slot, as any callback wait,
and commits what the run journaled first. A replay keeps the approval's
first deadline even when ``approvals.timeout_s`` changed since.

Reviewers decide with ``flink-agents approvals approve|reject`` or the
inspector, both through ``flink_agents.inspection.approvals.decide``: a
conditional write to the store, the first decision wins.

A framework's own wait for a person (LangGraph's ``interrupt()``) parks on
``await_review`` instead: a callback at a journal step the framework names
by meaning (purpose ``approval``, or ``interrupt`` for other questions),
whose outcome comes back as a value the framework hands to its code.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

from flink_agents.api.callbacks import ApprovalTimedOut, CallbackCancelled, CallbackRejected, CallbackTimeout
from flink_agents.api.configuration import readable
from flink_agents.api.core_options import RuntimeOptions
from flink_agents.api.redaction import redact
from flink_agents.runtime.features import capability_redaction

__all__ = [
    "APPROVAL_PURPOSE",
    "INTERRUPT_PURPOSE",
    "ApprovalTimedOut",
    "approval_details",
    "await_approval",
    "await_review",
    "needs_approval",
    "rejected_result",
]

APPROVAL_PURPOSE = "approval"
INTERRUPT_PURPOSE = "interrupt"  # a framework's question to a person that is not an approval


def needs_approval(tool: Any, name: str, config: Any) -> bool:
    """Whether calls of ``tool`` (registered as ``name``) wait for a
    reviewer: it is marked (``needs_approval`` True) or ``name`` is listed
    in ``approvals.tools``."""
    if getattr(tool, "needs_approval", False) is True:
        return True
    return name in (readable(config).get(RuntimeOptions.APPROVALS_TOOLS) or ())


def approval_details(tool: str, call_id: Any, arguments: Any, model: Optional[str]) -> str:
    """What a reviewer sees, as JSON text: ``{"tool", "tool_call_id",
    "arguments", "model"}``, the arguments with secret-named values
    (``api.redaction``) and callback capabilities
    (``capability_redaction``) redacted."""
    shown = capability_redaction.redact(redact(arguments))
    return json.dumps(
        {"tool": tool, "tool_call_id": str(call_id), "arguments": shown, "model": model},
        sort_keys=True, default=str,
    )


def rejected_result(tool: str, reason: str) -> str:
    """The tool result a model gets for a call a reviewer rejected."""
    return f"The call of tool {tool} was rejected by a reviewer: {reason or 'no reason given'}"


async def await_approval(ctx: Any, tool: str, call_id: Any, arguments: Any, model: Optional[str]) -> Optional[str]:
    """Park the call until a reviewer decides (or the timeout).

    Args:
        ctx: The tool action's runtime context (``ActionContext``).
        tool: The tool's name; ``call_id`` the runtime's id of the call;
            ``arguments`` as parsed; ``model`` the requesting setup.

    Returns:
        None when approved (the caller runs the tool), else the text the
        model gets as the call's result instead (rejected, timed out under
        ``approvals.on_timeout: reject``, or cancelled).

    Raises:
        ApprovalTimedOut: No decision within ``approvals.timeout_s`` under
            ``approvals.on_timeout: fail`` (terminal: a retry replays the
            same timeout).
    """
    config = readable(ctx.config)
    timeout_s = config.get(RuntimeOptions.APPROVALS_TIMEOUT_S)
    callback = await ctx.create_callback(
        APPROVAL_PURPOSE, timeout_s, details=approval_details(tool, call_id, arguments, model),
        keep_stored_timeout=True,  # approvals.timeout_s may change across a restore
    )
    try:
        await callback
    except CallbackRejected as rejected:
        reason = rejected.reason if isinstance(rejected.reason, str) else rejected.reason.decode("utf-8", "replace")
        return rejected_result(tool, reason)
    except CallbackTimeout as timeout:
        if config.get(RuntimeOptions.APPROVALS_ON_TIMEOUT) == "fail":
            raise ApprovalTimedOut(tool, str(call_id), timeout.timeout_s) from None
        return f"The call of tool {tool} was not run: no reviewer's decision within {timeout.timeout_s:g} s"
    except CallbackCancelled:
        return f"The call of tool {tool} was not run: its approval was cancelled"
    return None


def _text(body: Union[str, bytes]) -> str:
    return body if isinstance(body, str) else body.decode("utf-8", "replace")


def _approved(body: Union[str, bytes]) -> Dict[str, Any]:
    """An approval's resolve body as the decision a framework's code reads:
    ``decide`` stores ``{"approved_by", "reason"}``; another body (POSTed
    to the resolve URL) is the reason."""
    text = _text(body)
    try:
        stored = json.loads(text)
    except ValueError:
        stored = None
    if isinstance(stored, dict):
        return {"approved": True, "reason": str(stored.get("reason") or ""), "approved_by": stored.get("approved_by")}
    return {"approved": True, "reason": text, "approved_by": None}


def _answer(body: Union[str, bytes]) -> Any:
    """A resolve body as a value: its JSON when it is JSON, else its text."""
    text = _text(body)
    try:
        return json.loads(text)
    except ValueError:
        return text


async def await_review(ctx: Any, step: str, purpose: str, details: Dict[str, Any], subject: str) -> Any:
    """Park at ``step`` (a journal step under an anchor) until a person answers.

    The callback is created with ``ctx.create_callback_at`` (ordinal 0 of
    ``step``), so a replay finds it, and its outcome, by that step whatever
    ran before it. Its timeout is ``approvals.timeout_s`` (a replay keeps
    the first deadline).

    Args:
        ctx: The action's context.
        step: Where the wait sits, named by meaning.
        purpose: ``approval`` (decided with ``flink-agents approvals``) or
            ``interrupt`` (resolved or rejected through its URLs).
        details: What the person sees (JSON-like; secret-named values and
            callback capabilities are redacted before it is stored).
        subject: Who waits, for ``ApprovalTimedOut`` (a node's name).

    Returns:
        For ``approval``: ``{"approved": True, "reason", "approved_by"}``, or
        ``{"approved": False, "reason"}`` when rejected, cancelled or timed
        out under ``approvals.on_timeout: reject`` (then ``"timed_out":
        True``). Otherwise: the resolve body, decoded when it is JSON.

    Raises:
        ApprovalTimedOut: ``approval``, no decision within
            ``approvals.timeout_s`` under ``approvals.on_timeout: fail``.
        CallbackRejected, CallbackTimeout, CallbackCancelled: Another
            purpose's callback ended without a result.
    """
    config = readable(ctx.config)
    timeout_s = config.get(RuntimeOptions.APPROVALS_TIMEOUT_S)
    shown = json.dumps(capability_redaction.redact(redact(details)), sort_keys=True, default=str)
    callback = await ctx.create_callback_at(step, purpose, timeout_s, details=shown, keep_stored_timeout=True)
    if purpose != APPROVAL_PURPOSE:
        return _answer(await callback)
    try:
        return _approved(await callback)
    except CallbackRejected as rejected:
        return {"approved": False, "reason": _text(rejected.reason)}
    except CallbackTimeout as timeout:
        if config.get(RuntimeOptions.APPROVALS_ON_TIMEOUT) == "fail":
            raise ApprovalTimedOut(subject, step.rpartition("/")[2], timeout.timeout_s) from None
        return {"approved": False, "reason": f"no reviewer's decision within {timeout.timeout_s:g} s",
                "timed_out": True}
    except CallbackCancelled:
        return {"approved": False, "reason": "the approval was cancelled"}
