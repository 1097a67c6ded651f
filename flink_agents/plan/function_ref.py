"""A reference to a Python function that survives JSON (module + qualname)."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from pydantic import BaseModel, PrivateAttr

from flink_agents.api.function import resolve_function
from flink_agents.plan.errors import PlanError

__all__ = ["FunctionRef"]


class FunctionRef(BaseModel):
    """Names a function by ``module`` and ``qualname``.

    The referenced function is kept alongside (not in the JSON), so a plan
    built in-process (or shipped to Flink workers by cloudpickle) can call
    functions that are not importable by name, such as ones defined in
    ``__main__`` or inside a function. A plan read back from JSON resolves the
    name on first use.
    """

    module: str
    qualname: str
    is_async: bool = False

    _fn: Callable[..., Any] | None = PrivateAttr(default=None)

    @staticmethod
    def of(fn: Callable[..., Any]) -> "FunctionRef":
        if isinstance(fn, staticmethod):
            fn = fn.__func__
        ref = FunctionRef(
            module=fn.__module__,
            qualname=fn.__qualname__,
            is_async=inspect.iscoroutinefunction(fn),
        )
        ref._fn = fn
        return ref

    def __eq__(self, other: object) -> bool:
        # The name is the identity; the kept function is a cache (pydantic's
        # default equality would compare it, so a plan read back from JSON
        # would differ from the plan it was written from).
        if not isinstance(other, FunctionRef):
            return NotImplemented
        return (self.module, self.qualname, self.is_async) == (
            other.module,
            other.qualname,
            other.is_async,
        )

    @property
    def name(self) -> str:
        return f"{self.module}:{self.qualname}"

    @property
    def loaded(self) -> Callable[..., Any] | None:
        """The function if it is at hand (kept, or resolved before), else None."""
        return self._fn

    def resolve(self) -> Callable[..., Any]:
        """The function.

        Raises:
            PlanError: It cannot be imported by name.
        """
        # Read the private slot directly: ``self._fn`` goes through
        # pydantic's ``__getattr__`` (a few us, and this runs per step).
        private = self.__pydantic_private__
        fn = private.get("_fn") if private is not None else None
        if fn is None:
            try:
                fn = self._fn = resolve_function(self.module, self.qualname)
            except (ImportError, AttributeError, TypeError) as exc:
                raise PlanError(f"cannot import function {self.name}: {exc}") from exc
        return fn
