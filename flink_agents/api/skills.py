"""Skills: where an agent finds its SKILL.md skills.

A skill is a directory holding a ``SKILL.md`` file (YAML front matter with
``name`` and ``description``, then markdown instructions) and optionally more
files, per the Agent Skills SKILL.md format. A ``Skills`` resource lists the
sources that hold such skill directories; the agent declares it with the
``@skills`` decorator or ``add_resource(name, ResourceType.SKILLS, skills)``,
and a chat model setup lists the skills it offers by name
(``ResourceDescriptor(..., skills=["math-calculator"])``), as Flink Agents
0.3.1 does::

    class MathAgent(Agent):
        @skills
        @staticmethod
        def my_skills() -> Skills:
            return Skills.from_local_dir("/path/to/skills")

A setup that lists skills gets, with every model call, a system message
naming each listed skill with its description, and the built-in
``load_skill`` tool (``LOAD_SKILL_TOOL``), through which the model reads a
skill's instructions and its files. Flink Agents 0.3.1 also adds a ``bash``
tool (``BASH_TOOL``) that runs shell commands; this runtime does not offer it
(see docs/skills.md).

Only the description of where skills live is in this module (it travels in
the plan); reading them is the runtime's work
(``flink_agents.runtime.features.skills``).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from flink_agents.api.resource import ResourceType, SerializableResource

__all__ = ["BASH_TOOL", "LOAD_SKILL_TOOL", "SkillSourceSpec", "Skills"]

# Names of the built-in skill tools (Flink Agents 0.3.1's names).
LOAD_SKILL_TOOL = "load_skill"
BASH_TOOL = "bash"


class SkillSourceSpec(BaseModel):
    """One place skills come from.

    Attributes:
        scheme: ``"local"`` (``params["path"]``: a directory or ``.zip``),
            ``"package"`` (``params["package"]``, ``params["resource"]``) or
            ``"url"`` (``params["url"]``: an http(s) ``.zip``). Lowercased.
            An unknown scheme is accepted here (a plan may come from
            elsewhere) and refused, naming the known ones, when the skills are
            loaded, as in Flink Agents 0.3.1.
        params: The scheme's settings, strings.
    """

    model_config = ConfigDict(frozen=True)

    scheme: str
    params: Dict[str, str] = Field(default_factory=dict)

    @field_validator("scheme")
    @classmethod
    def _lowercase(cls, value: str) -> str:
        return value.lower()

    def __hash__(self) -> int:
        return hash((self.scheme, tuple(sorted(self.params.items()))))


class Skills(SerializableResource):
    """Where to load an agent's skills from: an ordered list of sources.

    Build it with ``from_local_dir``, ``from_package`` or ``from_url``. An
    agent may declare several; the plan merges their sources in order and
    drops repeated ones. A skill name found in two sources is taken from the
    later one (with a warning), as in Flink Agents 0.3.1.

    Attributes:
        sources: The sources, in the order they are read.
    """

    sources: List[SkillSourceSpec] = Field(default_factory=list)

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.SKILLS

    @classmethod
    def from_local_dir(cls, *paths: str) -> "Skills":
        """Skills from local paths, each a directory whose subdirectories
        each hold a ``SKILL.md``, or a ``.zip`` file of that layout.

        A relative path is resolved where the agent runs (a Flink worker's
        working directory): give an absolute path for jobs on a cluster.
        """
        return cls(sources=[SkillSourceSpec(scheme="local", params={"path": str(p)}) for p in paths])

    @classmethod
    def from_package(cls, *pairs: Tuple[str, str]) -> "Skills":
        """Skills shipped inside installed Python packages.

        Args:
            *pairs: ``(package, resource)``: a dotted package name and a path
                inside it (a directory of skill directories, or a ``.zip``).
        """
        return cls(sources=[
            SkillSourceSpec(scheme="package", params={"package": package, "resource": resource})
            for package, resource in pairs
        ])

    @classmethod
    def from_url(cls, *urls: str) -> "Skills":
        """Skills from http(s) URLs, each a ``.zip`` whose top level holds the
        skill directories. Downloaded once per operator instance, when the
        skills are first used."""
        return cls(sources=[SkillSourceSpec(scheme="url", params={"url": url}) for url in urls])
