"""Where a journaled call sits in an action's program, independent of timing.

A call's journal position is ``(step, ordinal)``. Taking the ordinal from one
counter per action breaks under concurrency: in ``asyncio.gather`` the
branches' second calls start in *completion* order on the first run and in
*program* order on a replay, so the replay finds another call at a position
(``NondeterminismError``) or, worse, a call of the same function receives a
sibling's result.

So positions follow program structure, as deterministic-replay runtimes do:

- each asyncio task running an action's code has a ``TaskScope``; the
  action's own task has the root scope (path ``""``);
- a task created inside an action (``gather``, ``create_task``,
  ``TaskGroup``) gets a child scope whose path is its creator's path plus the
  creator's count of tasks created so far: ``"0"``, ``"1"``, ``"1.0"`` ...
  (task creation is synchronous, so this count follows program order);
- each scope numbers its own calls (and, separately, its callbacks and
  sub-agent submits) from 0.

A journaled call's body runs outside the action's scopes (``call_body``): a
task it creates (an SDK client's lazy start, say) takes no child index from
the calling task. On a replay the body does not run and would not create
it, so the calling task's later branches would shift by one and replay
other calls' results (or fail with ``NondeterminismError``).

A call's step is the action's step for the root scope (``"<action>@<n>"``,
unchanged for sequential code) and ``"<action>@<n>/<path>"`` for a branch.
The scope travels in a context variable; a task factory installed on the
running loop gives new tasks their child scope. What stays out of reach:
code that creates tasks in an order that depends on timing (a worker pool
refilled as tasks finish) has timing-dependent positions, and a replay of
it can fail with ``NondeterminismError``; calls from several threads of one
task share its counters (``docs/durability.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import weakref
from typing import Any, Callable, Dict, Iterator, Tuple

__all__ = [
    "TaskScope", "branch_step", "call_body", "current_scope", "enter_action", "exit_action", "is_under", "position",
]

_SCOPE: contextvars.ContextVar["TaskScope | None"] = contextvars.ContextVar("flink_agents_task_scope", default=None)


class TaskScope:
    """One task's place in an action: its path and its own counters.

    Attributes:
        path: ``""`` for the action's own task, else dotted child indexes.
    """

    __slots__ = ("_owner", "path", "_counters", "_children")

    def __init__(self, owner: "weakref.ref[Any]", path: str = "") -> None:
        """
        Args:
            owner: A weak reference to the action invocation
                (``ActionContext``) the scope belongs to. Weak: the owner
                holds its root scope, and a strong reference back would make
                every action invocation a cycle that only the garbage
                collector frees, with the run, journal and events it holds.
            path: See the class.
        """
        self._owner = owner
        self.path = path
        self._counters: Dict[str, int] = {}
        self._children = 0

    def next(self, kind: str) -> int:
        """The next ordinal of ``kind`` (``"call"``, ``"callback"``,
        ``"sub_agent"``) in this scope, from 0."""
        n = self._counters.get(kind, 0)
        self._counters[kind] = n + 1
        return n

    def child(self) -> "TaskScope":
        """The scope of the next task this scope's task creates."""
        index = self._children
        self._children += 1
        return TaskScope(self._owner, f"{self.path}.{index}" if self.path else str(index))

    def belongs_to(self, owner: Any) -> bool:
        """Whether ``owner`` is the action invocation of this scope."""
        return self._owner() is owner


def branch_step(step: str, path: str) -> str:
    """The journal step of calls made at ``path`` of ``step``."""
    return f"{step}/{path}" if path else step


def is_under(entry_step: str, step: str) -> bool:
    """Whether ``entry_step`` is ``step`` or one of its branches."""
    return entry_step == step or entry_step.startswith(f"{step}/")


def current_scope(owner: Any) -> TaskScope:
    """The scope of the running task within ``owner``'s action.

    A call made outside any scope of ``owner`` (a thread or task the runtime
    did not see created) counts in ``owner``'s root scope.
    """
    scope = _SCOPE.get()
    if scope is None or not scope.belongs_to(owner):
        return owner.root_scope
    return scope


def enter_action(owner: Any) -> contextvars.Token:
    """Make ``owner.root_scope`` the running task's scope (the action starts)
    and make sure tasks created on this loop get child scopes."""
    try:
        _install_task_factory(asyncio.get_running_loop())
    except RuntimeError:
        pass  # no running loop: a sync action on a host without one creates no tasks
    return _SCOPE.set(owner.root_scope)


def exit_action(token: contextvars.Token) -> None:
    """Undo ``enter_action`` (the action returned or raised)."""
    _SCOPE.reset(token)


@contextlib.contextmanager
def call_body() -> Iterator[None]:
    """Run a journaled call's body (on its first run only) in no scope: the
    tasks it creates get none, and the calling task's count of created
    tasks stays what a replay, which skips the body, will see."""
    token = _SCOPE.set(None)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _install_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    previous = loop.get_task_factory()
    if getattr(previous, "_flink_agents_scoped", False):
        return
    loop.set_task_factory(_scoped_factory(previous))


def _scoped_factory(previous: Callable[..., Any] | None) -> Callable[..., Any]:
    """A task factory giving each task created inside an action a child
    scope; delegates creation to ``previous`` (or ``asyncio.Task``)."""

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, *, context: contextvars.Context | None = None) -> Any:
        context = contextvars.copy_context() if context is None else context.copy()
        parent = context.get(_SCOPE)
        if parent is not None:
            context.run(_SCOPE.set, parent.child())
        if previous is not None:
            return previous(loop, coro, context=context)
        return asyncio.Task(coro, loop=loop, context=context)

    def factory_310(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
        # Python 3.10: no context argument (to the factory or to Task); a task
        # copies the context it is created in, so the child scope is set in the
        # creator's context just for the creation.
        parent = _SCOPE.get(None)
        token = _SCOPE.set(parent.child()) if parent is not None else None
        try:
            return previous(loop, coro) if previous is not None else asyncio.Task(coro, loop=loop)
        finally:
            if token is not None:
                _SCOPE.reset(token)

    made = factory if sys.version_info >= (3, 11) else factory_310
    made._flink_agents_scoped = True  # type: ignore[attr-defined]
    return made


def position(owner: Any, step: str, kind: str) -> Tuple[str, int]:
    """``(journal step, ordinal)`` of the next ``kind`` in the running task."""
    scope = current_scope(owner)
    return branch_step(step, scope.path), scope.next(kind)
