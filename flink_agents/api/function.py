"""Descriptors of user functions, at Flink Agents 0.3.1's module path.

A ``PythonFunction`` names a Python callable by ``module`` and ``qualname``
(``ClassName.method`` for a method), so it survives JSON, and resolves it by
importing. Unlike 0.3.1's, one made by ``from_callable`` also keeps the
callable itself (not in the JSON), so a function that cannot be imported by
name (defined in ``__main__``, or inside a function) still resolves in the
process that built it; ``flink_agents.plan.FunctionRef`` resolves its
functions through ``resolve_function`` below.

A ``JavaFunction`` names a Java method (0.3.1's descriptor, same fields
and JSON form). It is accepted where 0.3.1 accepts one (``Agent.add_action``,
``@action(target=...)``, a YAML ``type: java`` action or tool), but this
runtime is pure Python, with no JVM to run it in: compiling a plan that
uses one fails naming the action or tool (``flink_agents.plan.compiler``;
``docs/compatibility.md``).
"""

from __future__ import annotations

import importlib
import inspect
from abc import ABC
from typing import Any, Callable, Dict, List, Tuple

from pydantic import BaseModel, PrivateAttr, model_serializer

__all__ = ["ACTION_PARAMETER_TYPES", "Function", "JavaFunction", "PythonFunction", "resolve_function"]

#: The Java parameter types of an action method, ``(Event, RunnerContext)``,
#: which 0.3.1's ``JavaFunction.for_action`` fills in.
ACTION_PARAMETER_TYPES: Tuple[str, ...] = (
    "org.apache.flink.agents.api.Event",
    "org.apache.flink.agents.api.context.RunnerContext",
)


def resolve_function(module: str, qualname: str) -> Callable[..., Any]:
    """The object named ``qualname`` in ``module``, imported by name.

    Nested names (``Outer.Inner.method``) are followed attribute by
    attribute; a ``staticmethod`` or ``classmethod`` found in a class's
    namespace is unwrapped to its function.

    Raises:
        ImportError: ``module`` cannot be imported.
        AttributeError: ``module`` has no ``qualname``.
        TypeError: What is found is not callable.
    """
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        owner = obj
        obj = getattr(owner, part)
        if isinstance(owner, type):
            raw = inspect.getattr_static(owner, part, None)
            if isinstance(raw, staticmethod):
                obj = raw.__func__
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if not callable(obj):
        raise TypeError(f"{module}:{qualname} is a {type(obj).__name__}, not a callable")
    return obj


class Function(BaseModel, ABC):
    """Base class of function descriptors (0.3.1's marker class): pure data."""


class PythonFunction(Function):
    """Names a Python callable: ``module`` + ``qualname``, as in 0.3.1.

    Serialized (``model_dump``) as ``{"func_type": "PythonFunction",
    "module": ..., "qualname": ...}``, 0.3.1's form.

    Attributes:
        module: The module the callable is defined in.
        qualname: Its qualified name in that module (``Class.method`` for a
            method).
    """

    module: str
    qualname: str

    _fn: Callable[..., Any] | None = PrivateAttr(default=None)

    @model_serializer
    def _serialize(self) -> Dict[str, Any]:
        return {"func_type": type(self).__qualname__, "module": self.module, "qualname": self.qualname}

    @staticmethod
    def from_callable(func: Callable[..., Any]) -> "PythonFunction":
        """The descriptor of ``func`` (a function, or a ``staticmethod``),
        keeping ``func`` at hand for ``as_callable``.

        Raises:
            TypeError: ``func`` is not callable or has no ``__qualname__``
                (a ``functools.partial``, an instance with ``__call__``).
        """
        if isinstance(func, (staticmethod, classmethod)):
            func = func.__func__
        if not callable(func):
            raise TypeError(f"PythonFunction.from_callable: func must be callable, got a {type(func).__name__}")
        qualname = getattr(func, "__qualname__", None)
        module = getattr(func, "__module__", None)
        if not isinstance(qualname, str) or not isinstance(module, str):
            raise TypeError(
                f"PythonFunction.from_callable: {func!r} has no __module__/__qualname__ to be named by; "
                "pass a function defined with def"
            )
        described = PythonFunction(module=module, qualname=qualname)
        described._fn = func
        return described

    def as_callable(self) -> Callable[..., Any]:
        """The callable: the one ``from_callable`` kept, else imported by
        name (``resolve_function``) and kept.

        Raises:
            ImportError, AttributeError: It cannot be found by its name.
            TypeError: The name is not of a callable.
        """
        if self._fn is None:
            self._fn = resolve_function(self.module, self.qualname)
        return self._fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function (as 0.3.1's plan-side ``PythonFunction`` does)."""
        return self.as_callable()(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        # The name is the identity; the kept callable is a cache (pydantic's
        # equality would compare it too).
        if not isinstance(other, PythonFunction):
            return NotImplemented
        return (self.module, self.qualname) == (other.module, other.qualname)

    __hash__ = None  # type: ignore[assignment]  # mutable model, as pydantic's


class JavaFunction(Function):
    """Names a Java method, as 0.3.1's descriptor does: pure data, nothing
    here can run it (a plan using one does not compile; see the module
    docstring).

    Serialized (``model_dump``) as ``{"func_type": "JavaFunction",
    "qualname": ..., "method_name": ..., "parameter_types": [...]}``, 0.3.1's
    form.

    Attributes:
        qualname: Fully qualified name of the declaring Java class
            (``com.example.Outer$Inner`` for a nested class).
        method_name: The method's name.
        parameter_types: Fully qualified Java types of its parameters, in
            declaration order.
    """

    qualname: str
    method_name: str
    parameter_types: List[str]

    @classmethod
    def for_action(cls, qualname: str, method_name: str) -> "JavaFunction":
        """The descriptor of a Java action method: its parameters are always
        ``(Event, RunnerContext)`` (``ACTION_PARAMETER_TYPES``)."""
        return cls(qualname=qualname, method_name=method_name, parameter_types=list(ACTION_PARAMETER_TYPES))

    @model_serializer
    def _serialize(self) -> Dict[str, Any]:
        return {
            "func_type": type(self).__qualname__,
            "qualname": self.qualname,
            "method_name": self.method_name,
            "parameter_types": list(self.parameter_types),
        }

    def describe(self) -> str:
        """``qualname#method_name(parameter types)``, for messages."""
        return f"{self.qualname}#{self.method_name}({', '.join(self.parameter_types)})"
