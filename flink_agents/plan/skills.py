"""Compile an agent's skills: merge its ``Skills`` resources into one and
register the built-in ``load_skill`` tool, as Flink Agents 0.3.1's plan does.

After ``add_skills`` the plan holds at most one SKILLS resource,
``SKILLS_CONFIG``, whose sources are those of every ``Skills`` the agent
declared (decorator first, then ``add_resource``, in order, repeats dropped),
and a TOOL resource ``load_skill`` built by the runtime
(``flink_agents.runtime.features.skills.LoadSkillTool``, named, not imported:
the plan does not depend on the runtime). Chat model setups that list
``skills`` are checked here; whether each listed name exists is known only
where the skills are read (a worker), and fails there with the known names.
"""

from __future__ import annotations

import logging
from typing import Dict, List

from pydantic import ValidationError

from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.skills import BASH_TOOL, LOAD_SKILL_TOOL, Skills, SkillSourceSpec
from flink_agents.plan.agent_plan import ResourceKind, ResourceSpec
from flink_agents.plan.errors import PlanError

__all__ = ["LOAD_SKILL_TOOL_CLASS", "SKILLS_CONFIG", "add_skills"]

log = logging.getLogger(__name__)

SKILLS_CONFIG = "_skills_config"  # Flink Agents 0.3.1's name for the merged resource
LOAD_SKILL_TOOL_CLASS = "flink_agents.runtime.features.skills.tools.LoadSkillTool"
# Settings of Flink Agents 0.3.1's bash tool, which this runtime does not offer.
_BASH_SETTINGS = ("allowed_commands", "allowed_script_dirs")


def add_skills(resources: Dict[ResourceType, Dict[str, ResourceSpec]], agent_name: str) -> None:
    """Merge the SKILLS resources of ``resources`` in place and add the
    ``load_skill`` tool; check the chat model setups' ``skills``.

    Raises:
        PlanError: A SKILLS resource is not a valid ``Skills``; the agent
            registers its own tool named ``load_skill`` next to skills; a
            setup's ``skills`` is not a list of names, or lists skills while
            the agent declares none.
    """
    declared = resources.pop(ResourceType.SKILLS, {})
    sources: List[SkillSourceSpec] = []
    for name, spec in declared.items():
        arguments = dict(spec.descriptor.arguments) if spec.descriptor is not None else {}
        try:
            sources.extend(Skills.model_validate(arguments).sources)
        except ValidationError as exc:
            raise PlanError(f"skills resource {name!r} of {agent_name} is not a valid Skills: {exc.errors()[0]['msg']}") from None
    _check_setups(resources, agent_name, has_skills=bool(declared))
    if not declared:
        return
    merged = Skills(sources=list(dict.fromkeys(sources)))
    resources[ResourceType.SKILLS] = {
        SKILLS_CONFIG: ResourceSpec(
            name=SKILLS_CONFIG, type=ResourceType.SKILLS, kind=ResourceKind.SERIALIZED,
            descriptor=ResourceDescriptor(clazz=Skills, arguments=merged.model_dump(mode="json", exclude={"get_resource"})),
        )
    }
    tools = resources.setdefault(ResourceType.TOOL, {})
    if LOAD_SKILL_TOOL in tools:
        raise PlanError(
            f"tool resource {LOAD_SKILL_TOOL!r} of {agent_name} clashes with the built-in skill tool "
            "of that name (the agent declares skills): rename the tool"
        )
    tools[LOAD_SKILL_TOOL] = ResourceSpec(
        name=LOAD_SKILL_TOOL, type=ResourceType.TOOL, kind=ResourceKind.DESCRIPTOR,
        descriptor=ResourceDescriptor(clazz=LOAD_SKILL_TOOL_CLASS),
    )


def _check_setups(resources: Dict[ResourceType, Dict[str, ResourceSpec]], agent_name: str, has_skills: bool) -> None:
    for name, spec in resources.get(ResourceType.CHAT_MODEL, {}).items():
        if spec.descriptor is None:
            continue
        arguments = spec.descriptor.arguments
        listed = arguments.get("skills")
        where = f"chat model setup {name!r} of {agent_name}"
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(s, str) and s for s in listed):
                raise PlanError(f"{where}: skills must be a list of skill names, got {listed!r}")
            if listed and not has_skills:
                raise PlanError(
                    f"{where} lists skills {listed}, but {agent_name} declares no skills "
                    "(an @skills function returning Skills, or add_resource(name, ResourceType.SKILLS, Skills...))"
                )
        bash = [key for key in _BASH_SETTINGS if arguments.get(key)]
        if bash:
            log.warning(
                "%s: this runtime does not offer Flink Agents' %r tool (shell commands from skills); "
                "%s ignored (see docs/skills.md)", where, BASH_TOOL, ", ".join(bash),
            )
