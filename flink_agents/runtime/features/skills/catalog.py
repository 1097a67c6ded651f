"""The skills of one agent, loaded from its sources: what the model is told
about them, and safe reads of their files.

Loading follows Flink Agents 0.3.1: sources are read in order; in each, every
immediate subdirectory holding a ``SKILL.md`` is a skill (sorted by directory
name); a skill name found again in a later source replaces the earlier one,
with a warning. Files are read from disk when asked for, never outside the
skill's own directory: a link leading out of it is refused, the SKILL.md
itself included.
"""

from __future__ import annotations

import base64
import logging
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Dict, Iterable, List, Sequence

from flink_agents.api.skills import LOAD_SKILL_TOOL, SkillSourceSpec
from flink_agents.runtime.features.skills.skill_file import SKILL_FILE, SkillDocument, parse_skill_file
from flink_agents.runtime.features.skills.sources import SkillRoot, open_source

__all__ = ["MAX_FILE_BYTES", "LoadedSkill", "SkillCatalog", "SkillFileError", "SkillNotFound", "SkillPathError"]

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 1024 * 1024


class SkillNotFound(LookupError):
    """A chat model setup lists a skill that no source of the agent holds."""


class SkillFileError(ValueError):
    """A skill file cannot be given to the model (not a file, too large)."""


class SkillPathError(SkillFileError):
    """A path that leaves the skill's directory (``..``, an absolute path, a
    link pointing outside): refused."""


@dataclass(frozen=True)
class LoadedSkill:
    """A skill and where it lives.

    Attributes:
        document: The parsed SKILL.md.
        directory: The skill's directory (absolute, resolved).
        origin: The source it came from (``scheme:location``).
    """

    document: SkillDocument
    directory: Path
    origin: str

    @property
    def name(self) -> str:
        return self.document.name


class SkillCatalog:
    """The skills of an agent, by name. Close it to delete the temporary
    directories of zip, package and URL sources.

    Safe to read from several threads once built (it is not changed after).
    """

    def __init__(self, skills: Dict[str, LoadedSkill], roots: List[SkillRoot]) -> None:
        self._skills = skills
        self._roots = roots

    @classmethod
    def load(cls, sources: Iterable[SkillSourceSpec]) -> "SkillCatalog":
        """Open every source and parse its skills.

        Raises:
            SkillSourceError: A source cannot be opened.
            SkillFormatError: A SKILL.md is invalid (names the file).
            SkillPathError: A SKILL.md is a link leading outside its skill's
                directory (names the file and where it leads).
        """
        roots: List[SkillRoot] = []
        skills: Dict[str, LoadedSkill] = {}
        try:
            for spec in sources:
                root = open_source(spec)
                roots.append(root)
                for skill in _skills_under(root):
                    earlier = skills.get(skill.name)
                    if earlier is not None:
                        log.warning("skill %r from %s replaces the one from %s", skill.name, skill.origin, earlier.origin)
                    skills[skill.name] = skill
        except BaseException:
            for root in roots:
                root.close()
            raise
        return cls(skills, roots)

    @property
    def names(self) -> List[str]:
        """The skill names, in load order."""
        return list(self._skills)

    def get(self, name: str) -> LoadedSkill:
        """The skill called ``name``.

        Raises:
            SkillNotFound: No such skill (the message lists the known ones).
        """
        skill = self._skills.get(name)
        if skill is None:
            raise SkillNotFound(f"no skill is called {name!r}; the agent's skills are {self.names}")
        return skill

    def discovery_prompt(self, names: Sequence[str]) -> str:
        """The system-prompt text that tells the model about the skills
        ``names`` (their names and descriptions) and how to load one, in
        Flink Agents 0.3.1's layout (``<available_skills>`` of ``<skill>``
        entries). Empty when ``names`` is empty.

        Raises:
            SkillNotFound: A name is not a skill of the agent.
        """
        if not names:
            return ""
        entries = "".join(
            f"<skill>\n<name>{skill.name}</name>\n<description>{skill.document.description}</description>\n</skill>\n"
            for skill in (self.get(name) for name in names)
        )
        return (
            "## Available Skills\n\n"
            "<usage>\n"
            "A skill is a set of instructions, and sometimes reference files, for one kind of task. "
            "When a skill below fits the task, read its instructions first with "
            f'`{LOAD_SKILL_TOOL}(name="<skill name>")` and follow them. '
            f'Read a file the instructions refer to with `{LOAD_SKILL_TOOL}(name="<skill name>", path="<relative path>")`.\n'
            "</usage>\n\n"
            f"<available_skills>\n{entries}</available_skills>\n"
        )

    def files(self, name: str) -> List[str]:
        """The files of skill ``name`` other than its SKILL.md, as paths
        relative to its directory (``/``-separated, sorted). Links that lead
        outside the directory are left out."""
        skill = self.get(name)
        found: List[str] = []
        for folder, _dirs, files in os.walk(skill.directory):
            for file_name in files:
                path = Path(folder, file_name)
                relative = path.relative_to(skill.directory).as_posix()
                if relative == SKILL_FILE or not path.resolve().is_relative_to(skill.directory):
                    continue
                found.append(relative)
        return sorted(found)

    def resolve(self, name: str, path: str) -> Path:
        """The file ``path`` (relative to skill ``name``'s directory) on disk.

        Raises:
            SkillNotFound: No skill ``name``.
            SkillPathError: ``path`` is empty or absolute, or it (or a link
                on the way) leads outside the skill's directory.
        """
        skill = self.get(name)
        if not path or PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute() or PureWindowsPath(path).drive:
            raise SkillPathError(f"path {path!r} of skill {name!r} must be relative to the skill's directory")
        resolved = (skill.directory / path).resolve()
        if not resolved.is_relative_to(skill.directory):
            raise SkillPathError(f"path {path!r} leads outside the directory of skill {name!r}; only the skill's own files can be read")
        return resolved

    def read(self, name: str, path: str) -> str:
        """The content of file ``path`` of skill ``name``: its text if UTF-8,
        else ``"base64: <data>"`` (as Flink Agents 0.3.1 gives binary files).

        Raises:
            SkillNotFound, SkillPathError: See ``resolve``.
            FileNotFoundError: No such file in the skill.
            SkillFileError: Not a regular file, or larger than
                ``MAX_FILE_BYTES``.
        """
        resolved = self.resolve(name, path)
        if not resolved.exists():
            raise FileNotFoundError(f"skill {name!r} has no file {path!r}")
        if not resolved.is_file():
            raise SkillFileError(f"{path!r} of skill {name!r} is not a file")
        size = resolved.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SkillFileError(f"{path!r} of skill {name!r} is {size} bytes; at most {MAX_FILE_BYTES} are given to a model")
        data = resolved.read_bytes()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "base64: " + base64.b64encode(data).decode("ascii")

    def close(self) -> None:
        """Delete the sources' temporary directories. Idempotent."""
        for root in self._roots:
            root.close()


def _skills_under(root: SkillRoot) -> List[LoadedSkill]:
    directories = sorted(p for p in root.directory.iterdir() if p.is_dir() and (p / SKILL_FILE).is_file())
    if not directories:
        hint = (
            f" ({root.directory} holds a SKILL.md itself: give its parent directory)"
            if (root.directory / SKILL_FILE).is_file() else ""
        )
        log.warning("skill source %s holds no skill directory (a subdirectory with a %s)%s", root.origin, SKILL_FILE, hint)
    loaded = []
    for directory in directories:
        skill_file = directory / SKILL_FILE
        target = skill_file.resolve()
        if not target.is_relative_to(directory.resolve()):
            raise SkillPathError(
                f"{skill_file} of {root.origin} is a link to {target}, outside the skill's directory: refused, "
                "only the skill's own files can be read (copy the file into the directory instead)"
            )
        document = parse_skill_file(skill_file)
        if document.name != directory.name:
            log.warning("skill %r lives in directory %r of %s; the Agent Skills format expects the same name",
                        document.name, directory.name, root.origin)
        loaded.append(LoadedSkill(document=document, directory=directory.resolve(), origin=root.origin))
    return loaded
