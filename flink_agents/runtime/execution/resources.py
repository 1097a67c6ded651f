"""Builds an agent's resources from its plan, once per operator instance,
and gives each a ``ResourceContext`` through which it reaches the others;
and ``JournaledEmbeddingModel``, the view of an embedding model setup an
action gets, whose calls are journaled."""

from __future__ import annotations

import inspect
import threading
from typing import Any, Awaitable, Callable, Dict, List, Sequence, Tuple

from pydantic import BaseModel

from flink_agents.api.prompts.prompt import LocalPrompt
from flink_agents.api.redaction import find_redacted, resolve_secrets
from flink_agents.api.resource import Resource, ResourceType
from flink_agents.api.resource_context import ResourceContext
from flink_agents.api.tools.tool import FunctionTool, ToolMetadata
from flink_agents.plan.agent_plan import (
    INJECTED_ARGS_TOOL_KEY, NEEDS_APPROVAL_TOOL_KEY, UNTRUSTED_TOOL_KEY, AgentPlan, ResourceKind, ResourceSpec,
)
from flink_agents.runtime.execution.extensions import EXTENSIONS, Extensions

__all__ = ["JournaledEmbeddingModel", "ResourceCache", "ResourceContextImpl"]


class ResourceContextImpl(ResourceContext):
    """The context of one resource: lookups go to the agent's
    ``ResourceCache``; a missing name is a ``KeyError`` naming the resource
    that asked, so a setup whose connection names nothing fails when (and
    only when) it first uses that connection.
    """

    def __init__(self, cache: "ResourceCache", owner: Tuple[ResourceType, str] | None = None) -> None:
        self._cache = cache
        self._owner = owner

    def get_resource(self, name: str, resource_type: ResourceType) -> Resource:
        """See ``ResourceContext.get_resource``.

        Raises:
            KeyError: No such resource, e.g. "chat_model resource 'my_setup'
                uses chat_model_connection 'gone', which MyAgent does not
                declare (known: [...])".
        """
        try:
            return self._cache.get(name, resource_type)
        except _Missing as missing:
            if self._owner is None:
                raise
            kind, owner = self._owner
            raise KeyError(
                f"{kind.value} resource {owner!r} uses {ResourceType(resource_type).value} {name!r}, "
                f"which {missing.agent} does not declare (known: {missing.known})"
            ) from None

    def generate_available_skills_prompt(self, *skill_names: str) -> str:
        """See ``ResourceContext``; from the agent's skills (the ``skills_prompt``
        hook of ``runtime.execution.extensions``)."""
        return self._cache.extensions.context_hook("skills_prompt")(self._cache.get, skill_names)

    def get_skill_dirs(self, *skill_names: str) -> List[str]:
        """See ``ResourceContext``; from the agent's skills (the ``skill_dirs``
        hook of ``runtime.execution.extensions``)."""
        return self._cache.extensions.context_hook("skill_dirs")(self._cache.get, skill_names)


def _accepted_arguments(cls: type) -> set:
    """The constructor arguments a resource class takes: its pydantic fields
    (and their aliases), the named parameters of every ``__init__`` of its
    classes, and its ``extra_arguments``."""
    accepted = set(getattr(cls, "extra_arguments", ()))
    for name, field in getattr(cls, "model_fields", {}).items():
        accepted.add(name)
        if field.alias:
            accepted.add(field.alias)
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None or klass is object:
            continue
        try:
            parameters = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        accepted.update(p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    return accepted


# Descriptor arguments every model connection takes, whatever its class: the
# runtime's rate limits (runtime.features.rate_limits), not the provider's.
CONNECTION_LIMIT_ARGUMENTS = frozenset({"requests_per_minute", "tokens_per_minute", "max_concurrent_requests"})
_LIMITED_TYPES = (ResourceType.CHAT_MODEL_CONNECTION, ResourceType.EMBEDDING_MODEL_CONNECTION)


def _check_arguments(spec: ResourceSpec, cls: type) -> None:
    """Refuse a descriptor argument the class does not take (pydantic would
    drop it without a word, so a misspelled ``temprature`` or a timeout
    under another provider's name would silently not apply).

    Raises:
        TypeError: Names the resource, the unknown arguments and the accepted ones.
    """
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        return
    accepted = _accepted_arguments(cls)
    if spec.type in _LIMITED_TYPES:
        accepted |= CONNECTION_LIMIT_ARGUMENTS
    unknown = sorted(set(spec.descriptor.arguments) - accepted)
    if unknown:
        known = sorted(a for a in accepted if a not in ("self", "resource_context", "get_resource"))
        raise TypeError(
            f"{spec.type.value} resource {spec.name!r} ({cls.__name__}) got argument(s) it does not take: "
            f"{', '.join(unknown)}; it takes: {', '.join(known)}"
        )


def _secret_arguments(spec: ResourceSpec) -> Dict[str, Any]:
    """The descriptor's arguments with ``secret_from_env`` references read
    from this process's environment (``flink_agents.api.redaction``).

    Raises:
        ValueError: A referenced variable is not set here, or an argument
            holds the ``***`` a plan's JSON writes for a secret (a plan read
            back from JSON has no secrets); both name the resource and the
            argument, never a value.
    """
    where = f"{spec.type.value} resource {spec.name!r}"
    redacted = find_redacted(spec.descriptor.arguments, "arguments")
    if redacted is not None:
        raise ValueError(
            f"{where}: {redacted} is '***', a secret the plan's JSON form does not hold; build the plan "
            "from the agent (its pickled form keeps secrets) or give the secret as secret_from_env('NAME')"
        )
    return resolve_secrets(spec.descriptor.arguments, f"{where}: arguments")


class _Missing(KeyError):
    """A resource the plan does not have (a ``KeyError``, as before)."""

    def __init__(self, message: str, agent: str, known: list) -> None:
        super().__init__(message)
        self.agent = agent
        self.known = known


class ResourceCache:
    """Creates each resource on first use and keeps it until ``close``.

    A name that the plan does not declare is asked of what features
    registered (``runtime.execution.extensions``): the built-in callback
    tools, then the agent's MCP servers' tools and prompts, when it declares
    any (``runtime.features.mcp_resources``: listed at first use, local names
    win, a name two servers offer is refused). A resource of a kind a
    feature builds (``ResourceKind.AGENT``) is built by it.

    Resources are shared by every key of the operator instance, so they must
    be safe to use from concurrent runs (the SDK clients are).

    Args:
        plan: The agent's plan.
        extensions: What features registered.
        on_connection: ``(type, name, descriptor arguments, connection)``,
            called for each chat or embedding model connection built (the
            engine's rate limits wrap its calls there); its descriptor's
            ``requests_per_minute``, ``tokens_per_minute`` and
            ``max_concurrent_requests`` go to it, not to the class (unless
            the class declares them).
    """

    def __init__(
        self, plan: AgentPlan, extensions: Extensions = EXTENSIONS,
        on_connection: Callable[[ResourceType, str, Dict[str, Any], Resource], None] | None = None,
    ) -> None:
        self._plan = plan
        self._on_connection = on_connection
        self.extensions = extensions
        self._built: Dict[Tuple[ResourceType, str], Resource] = {}
        self._lock = threading.RLock()

    def get(self, name: str, type: ResourceType) -> Resource:
        """The resource ``name`` of kind ``type``.

        Raises:
            KeyError: The plan has no such resource.
        """
        type = ResourceType(type)
        found = self._built.get((type, name))
        if found is not None:
            return found
        with self._lock:
            found = self._built.get((type, name))
            if found is None and not self._plan.has_resource(name, type):
                # A built-in tool, or an MCP server's tool or prompt (local names win).
                found = self.extensions.undeclared_resource(name, type, self._plan, self.get)
                if found is not None:
                    self._built[(type, name)] = found
            if found is None:
                if not self._plan.has_resource(name, type):
                    known = sorted(self._plan.resources.get(type, {}))
                    raise _Missing(
                        f"{self._plan.agent} has no {type.value} resource {name!r} (known: {known})",
                        self._plan.agent, known,
                    )
                found = self._build(self._plan.resource_spec(name, type))
                self._built[(type, name)] = found
            return found

    def _build(self, spec: ResourceSpec) -> Resource:
        resource: Any
        build = self.extensions.resource_builder(spec.kind)
        if build is not None:  # a kind a feature builds (ResourceKind.AGENT: a sub-agent handle)
            return build(spec)
        context = ResourceContextImpl(self, (spec.type, spec.name))
        if spec.kind == ResourceKind.PROMPT:
            resource = LocalPrompt.model_validate(spec.value)
        elif spec.kind == ResourceKind.FUNCTION_TOOL:
            assert spec.function is not None and spec.value is not None  # compiler sets both
            described = dict(spec.value)
            untrusted = bool(described.pop(UNTRUSTED_TOOL_KEY, False))
            needs_approval = bool(described.pop(NEEDS_APPROVAL_TOOL_KEY, False))
            injected = described.pop(INJECTED_ARGS_TOOL_KEY, None)
            resource = FunctionTool(
                metadata=ToolMetadata.model_validate(described), func=spec.function.resolve(), untrusted=untrusted,
                needs_approval=needs_approval, injected_args=injected,
            )
        else:
            assert spec.descriptor is not None  # DESCRIPTOR and SERIALIZED carry one
            cls = spec.descriptor.clazz
            _check_arguments(spec, cls)
            # As Flink Agents 0.3.1: the context is a constructor argument, so
            # a resource may use it in its own validators.
            arguments = _secret_arguments(spec)
            if spec.type in _LIMITED_TYPES:
                taken = _accepted_arguments(cls) if isinstance(cls, type) and issubclass(cls, BaseModel) else set()
                for limit in CONNECTION_LIMIT_ARGUMENTS - taken:
                    arguments.pop(limit, None)
            resource = cls(**arguments, resource_context=context)
            if spec.type in _LIMITED_TYPES and self._on_connection is not None:
                self._on_connection(spec.type, spec.name, dict(spec.descriptor.arguments), resource)
        if spec.type == ResourceType.MCP_SERVER and hasattr(resource, "bind_resource_name"):
            resource.bind_resource_name(spec.name)  # for messages and untrusted-data sources
        if isinstance(resource, Resource):
            if resource.resource_context is None:
                resource.resource_context = context
            if resource.get_resource is None:
                resource.get_resource = context.get_resource
        resource.open()
        return resource

    def close(self) -> None:
        """Close every resource built so far (each once)."""
        with self._lock:
            built, self._built = self._built, {}
        errors = []
        for resource in built.values():
            try:
                resource.close()
            except Exception as exc:  # close the rest, then report
                errors.append(exc)
        if errors:
            raise errors[0]


class JournaledEmbeddingModel:
    """An embedding model setup as one action invocation sees it
    (``ctx.get_resource(name, ResourceType.EMBEDDING_MODEL)``): each
    ``embed``/``aembed`` call is one journaled call (function id
    ``embed:<name>``, positioned like the built-in model calls), so a replay
    after a failover or a retry returns the recorded vectors, or re-raises
    the recorded error, without calling the provider. Every other attribute
    is the setup's own (``model``, ``connection``, ``model_kwargs``, ...);
    ``setup`` is the setup itself (not journaled).

    Valid only while its action runs, like the context it came from.

    Args:
        setup: The embedding model setup (shared by every key).
        name: Its resource name.
        call_sync: ``(function_id, digest_args, run) -> result``: the
            journal's synchronous call at the action's next position.
        call_async: The same for an awaitable ``run``.
    """

    def __init__(
        self,
        setup: Any,
        name: str,
        call_sync: Callable[[str, Any, Callable[[], Any]], Any],
        call_async: Callable[[str, Any, Callable[[], Awaitable[Any]]], Awaitable[Any]],
    ) -> None:
        self.setup = setup
        self.name = name
        self._call_sync = call_sync
        self._call_async = call_async

    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Any:
        """Journaled ``setup.embed(text, **kwargs)``: one vector
        (``list[float]``) for a string, one per input for a sequence.

        Raises:
            flink_agents.api.chat_models.errors.ModelCallError: The provider
                failed the call (on a replay: the journaled error).
            NondeterminismError: On replay, the journal recorded another call here.
        """
        return self._call_sync(f"embed:{self.name}", [text, kwargs], lambda: self.setup.embed(text, **kwargs))

    async def aembed(self, text: str | Sequence[str], **kwargs: Any) -> Any:
        """Journaled ``await setup.aembed(text, **kwargs)``; see ``embed``."""
        return await self._call_async(f"embed:{self.name}", [text, kwargs], lambda: self.setup.aembed(text, **kwargs))

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.setup, attribute)

    def __repr__(self) -> str:
        return f"JournaledEmbeddingModel({self.name!r}, {self.setup!r})"
