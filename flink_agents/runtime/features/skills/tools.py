"""The built-in ``load_skill`` tool (Flink Agents 0.3.1's name and arguments).

The compiler registers it as a TOOL resource of every agent that declares
skills (``flink_agents.plan.skills``); a chat model setup that lists
``skills`` offers it to its model. Its calls go through the built-in tool
action like any tool call, so each result is journaled and a replay gets the
journaled text without reading the file again.

The tool holds the agent's ``SkillCatalog``, loaded once per operator
instance (subtask) when first needed, from the plan's merged ``Skills``
resource.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Sequence

from pydantic import Field, PrivateAttr

from flink_agents.api.resource import ResourceType
from flink_agents.api.skills import LOAD_SKILL_TOOL, Skills
from flink_agents.api.tools.tool import Tool, ToolMetadata, ToolType
from flink_agents.plan.skills import SKILLS_CONFIG
from flink_agents.runtime.features.skills.catalog import SkillCatalog, SkillNotFound
from flink_agents.runtime.features.skills.skill_file import SKILL_FILE

__all__ = ["LoadSkillTool", "available_skills_prompt", "skill_dirs"]

_METADATA = ToolMetadata(
    name=LOAD_SKILL_TOOL,
    description=(
        "Load a skill's instructions, or one of its files. "
        "Call it with the skill's name to read its instructions before following them; "
        "add a path (relative to the skill's directory) to read a file the instructions refer to."
    ),
    args_schema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The skill's name, e.g. 'pdf-processing'."},
            "path": {
                "type": "string",
                "description": f"A file of the skill, relative to its directory. Leave it out for the instructions ({SKILL_FILE}).",
                "default": SKILL_FILE,
            },
        },
        "required": ["name"],
    },
)


class LoadSkillTool(Tool):
    """``load_skill(name, path="SKILL.md")``.

    Returns (as Flink Agents 0.3.1 does): for ``SKILL.md``, the skill's
    instructions wrapped in ``<skill_content name="...">`` with the list of
    its other files; for another path, that file's text (``"base64: ..."``
    for a binary file); for an unknown skill or a missing file, a message
    listing what exists, so the model can correct itself.

    Raises (the tool action turns each into an error result for the model):
        SkillPathError: ``path`` is absolute or leaves the skill's directory.
        SkillFileError: ``path`` is not a regular file, or is too large.
    """

    metadata: ToolMetadata = Field(default_factory=lambda: _METADATA.model_copy(deep=True))

    _catalog: Optional[SkillCatalog] = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def tool_type(cls) -> ToolType:
        return ToolType.FUNCTION

    def catalog(self) -> SkillCatalog:
        """The agent's skills, loaded on first use.

        Raises:
            RuntimeError: The tool was built outside a runtime.
            SkillSourceError, SkillFormatError: A source or a SKILL.md is bad.
        """
        with self._lock:
            if self._catalog is None:
                if self.get_resource is None:
                    raise RuntimeError(f"{LOAD_SKILL_TOOL} was created outside a runtime")
                config = self.get_resource(SKILLS_CONFIG, ResourceType.SKILLS)
                if not isinstance(config, Skills):
                    raise TypeError(f"resource {SKILLS_CONFIG!r} is a {type(config).__name__}, not Skills")
                self._catalog = SkillCatalog.load(config.sources)
            return self._catalog

    def discovery_prompt(self, names: Sequence[str]) -> str:
        """The system-prompt text about skills ``names`` (see
        ``SkillCatalog.discovery_prompt``).

        Raises:
            SkillNotFound: A name is not a skill of the agent.
        """
        return self.catalog().discovery_prompt(list(names))

    def call(self, name: Any = None, path: Any = SKILL_FILE, **unexpected: Any) -> str:
        if unexpected:
            raise TypeError(f"{LOAD_SKILL_TOOL} takes 'name' and 'path', not {sorted(unexpected)}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"{LOAD_SKILL_TOOL} needs 'name', the skill's name as a string; got {name!r}")
        if path is None or path == "":
            path = SKILL_FILE
        if not isinstance(path, str):
            raise TypeError(f"{LOAD_SKILL_TOOL}: 'path' must be a string, got {type(path).__name__}")
        catalog = self.catalog()
        try:
            skill = catalog.get(name)
        except SkillNotFound:
            return f"Skill {name!r} not found. Available skills: {', '.join(catalog.names) or 'none'}"
        if catalog.resolve(name, path) == skill.directory / SKILL_FILE:
            return _instructions(name, skill.document.body, catalog.files(name))
        try:
            return catalog.read(name, path)
        except FileNotFoundError:
            return f"File {path!r} not found in skill {name!r}. Its files: {catalog.files(name)}"

    def close(self) -> None:
        with self._lock:
            catalog, self._catalog = self._catalog, None
        if catalog is not None:
            catalog.close()


def _instructions(name: str, body: str, files: List[str]) -> str:
    listed = "".join(f"<file>{path}</file>\n" for path in files)
    return (
        f'<skill_content name="{name}">\n'
        f"# Skill: {name}\n\n"
        f"{body.strip()}\n\n"
        f'Files of this skill (read one with {LOAD_SKILL_TOOL}(name="{name}", path="<file>"); paths are relative '
        "to the skill's directory):\n"
        f"<skill_files>\n{listed}</skill_files>\n"
        "</skill_content>"
    )


def _skill_tool(get_resource: Callable[[str, ResourceType], Any]) -> Optional[LoadSkillTool]:
    """The agent's ``load_skill`` tool, or None when the agent has no skills."""
    try:
        tool = get_resource(LOAD_SKILL_TOOL, ResourceType.TOOL)
    except KeyError:
        return None
    return tool if isinstance(tool, LoadSkillTool) else None


def available_skills_prompt(get_resource: Callable[[str, ResourceType], Any], names: Sequence[str]) -> str:
    """``ResourceContext.generate_available_skills_prompt``: the skill list
    text for ``names`` (every skill of the agent when empty); ``""`` for an
    agent without skills.

    Raises:
        SkillNotFound: A name is not a skill of the agent.
    """
    tool = _skill_tool(get_resource)
    if tool is None:
        return ""
    return tool.discovery_prompt(list(names) or tool.catalog().names)


def skill_dirs(get_resource: Callable[[str, ResourceType], Any], names: Sequence[str]) -> List[str]:
    """``ResourceContext.get_skill_dirs``: the absolute directories of skills
    ``names`` (every skill of the agent when empty); ``[]`` for an agent
    without skills.

    Raises:
        SkillNotFound: A name is not a skill of the agent.
    """
    tool = _skill_tool(get_resource)
    if tool is None:
        return []
    catalog = tool.catalog()
    return [str(catalog.get(name).directory) for name in (list(names) or catalog.names)]
