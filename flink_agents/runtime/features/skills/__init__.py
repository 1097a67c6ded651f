"""SKILL.md skills: loading them from their sources (``sources``), parsing
SKILL.md (``skill_file``), the agent's catalog with safe file reads
(``catalog``), and the built-in ``load_skill`` tool (``tools``).
See docs/skills.md."""

from flink_agents.runtime.features.skills.catalog import (
    LoadedSkill,
    SkillCatalog,
    SkillFileError,
    SkillNotFound,
    SkillPathError,
)
from flink_agents.runtime.features.skills.skill_file import SkillDocument, SkillFormatError
from flink_agents.runtime.features.skills.sources import SkillSourceError
from flink_agents.runtime.features.skills.tools import LoadSkillTool

__all__ = [
    "LoadSkillTool",
    "LoadedSkill",
    "SkillCatalog",
    "SkillDocument",
    "SkillFileError",
    "SkillFormatError",
    "SkillNotFound",
    "SkillPathError",
    "SkillSourceError",
]
