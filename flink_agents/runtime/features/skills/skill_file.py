"""Parse a SKILL.md file: YAML front matter, then the skill's instructions.

The format is the Agent Skills SKILL.md format, with the checks Flink Agents
0.3.1 makes: ``name`` (1 to 64 characters) and ``description`` (1 to 1024
characters) are required strings, ``license`` and ``compatibility`` (at most
500 characters) optional strings, ``metadata`` an optional mapping of strings,
and the markdown body after the front matter must not be empty. Other keys
(``allowed-tools`` ...) are accepted and ignored. Every error names the file
and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

import yaml

__all__ = ["SKILL_FILE", "SkillFormatError", "SkillDocument", "parse_skill_file", "parse_skill_text"]

SKILL_FILE = "SKILL.md"
_DELIMITER = "---"
_LIMITS = {"name": 64, "description": 1024, "compatibility": 500}


class SkillFormatError(ValueError):
    """A SKILL.md file is not a valid skill.

    Attributes:
        path: The file, as given to the parser.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


@dataclass(frozen=True)
class SkillDocument:
    """The parsed content of one SKILL.md.

    Attributes:
        name: The skill's name (stripped).
        description: What the skill does and when to use it (stripped).
        body: The markdown after the front matter (the instructions).
        license: The ``license`` field, if any.
        compatibility: The ``compatibility`` field, if any.
        metadata: The ``metadata`` mapping (empty if absent).
    """

    name: str
    description: str
    body: str
    license: Optional[str] = None
    compatibility: Optional[str] = None
    metadata: Dict[str, str] = field(default_factory=dict)


def parse_skill_file(path: Path) -> SkillDocument:
    """Read and parse ``path`` (a SKILL.md, UTF-8).

    Raises:
        SkillFormatError: The file cannot be read as UTF-8 text, or is not a
            valid skill (message names the file and the field).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SkillFormatError(str(path), f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise SkillFormatError(str(path), f"cannot be read ({exc.strerror or exc})") from None
    return parse_skill_text(text, str(path))


def _split(text: str, where: str) -> tuple[str, str]:
    """The front matter's text and the body after its closing delimiter."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != _DELIMITER:
        raise SkillFormatError(
            where,
            "has no YAML front matter: the file must start with a '---' line, then 'name:' and "
            "'description:', then a closing '---' line, then the instructions",
        )
    for index in range(1, len(lines)):
        if lines[index].strip() == _DELIMITER:
            return "".join(lines[1:index]), "".join(lines[index + 1:])
    raise SkillFormatError(where, "front matter is not closed: no '---' line after the opening one")


def _text_field(front: Dict[str, Any], key: str, where: str, required: bool) -> Optional[str]:
    value = front.get(key)
    if value is None:
        if required:
            raise SkillFormatError(where, f"front matter has no '{key}' (a required, non-empty string)")
        return None
    if not isinstance(value, str):
        raise SkillFormatError(where, f"front matter field '{key}' must be a string, got {type(value).__name__}")
    value = value.strip()
    if required and not value:
        raise SkillFormatError(where, f"front matter field '{key}' is empty")
    limit = _LIMITS.get(key)
    if limit is not None and len(value) > limit:
        raise SkillFormatError(where, f"front matter field '{key}' is {len(value)} characters long; at most {limit} are allowed")
    return value


def parse_skill_text(text: str, where: str = SKILL_FILE) -> SkillDocument:
    """Parse the text of a SKILL.md; ``where`` names it in errors.

    Raises:
        SkillFormatError: No front matter, invalid YAML (with its line in the
            file), a missing or ill-typed field, or an empty body.
    """
    front_text, body = _split(text, where)
    try:
        front = yaml.safe_load(front_text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" on line {mark.line + 2}" if mark is not None else ""  # +1: 0-based, +1: the '---' line
        problem = getattr(exc, "problem", None) or str(exc)
        raise SkillFormatError(where, f"front matter is not valid YAML{line}: {problem}") from None
    if not isinstance(front, dict):
        raise SkillFormatError(
            where, f"front matter must be a YAML mapping (name: ..., description: ...), got {type(front).__name__}"
        )
    name = _text_field(front, "name", where, required=True)
    description = _text_field(front, "description", where, required=True)
    metadata = front.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) for k in metadata):
        raise SkillFormatError(where, "front matter field 'metadata' must be a mapping with string keys")
    if not body.strip():
        raise SkillFormatError(where, "has no instructions: the markdown body after the front matter is empty")
    assert name is not None and description is not None  # required above
    return SkillDocument(
        name=name,
        description=description,
        body=body,
        license=_text_field(front, "license", where, required=False),
        compatibility=_text_field(front, "compatibility", where, required=False),
        metadata={k: str(v) for k, v in metadata.items()},
    )
