"""One parsed YAML agent file: its data, the line of every key and list
item, and errors that name the file, the line and the key
(``YamlAgentError``). Schema errors from pydantic are mapped back onto the
document here."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

import yaml
from pydantic import BaseModel, ValidationError

from flink_agents._suggest import did_you_mean
from flink_agents.api.yaml.specs import (
    ACTION_MAP_TAG,
    ACTION_REF_TAG,
    DESCRIPTOR_SECTIONS,
    ActionSpec,
    AgentSpec,
    DescriptorSpec,
    PackageSkillSpec,
    PromptMessage,
    PromptSpec,
    SkillsSpec,
    ToolSpec,
    YamlAgentsDocument,
)

__all__ = ["Loc", "Source", "YamlAgentError", "parse", "validate"]

Loc = Tuple[str | int, ...]

_UNION_TAGS = {ACTION_MAP_TAG, ACTION_REF_TAG}
# A list-valued key of the document -> the model of its items.
_NESTED: Dict[str, type[BaseModel]] = {
    "agents": AgentSpec,
    "prompts": PromptSpec,
    "messages": PromptMessage,
    "tools": ToolSpec,
    "skills": SkillsSpec,
    "package": PackageSkillSpec,
    "actions": ActionSpec,
    **{section: DescriptorSpec for section in DESCRIPTOR_SECTIONS},
}


class YamlAgentError(ValueError):
    """A YAML agent file that cannot be loaded.

    Attributes:
        file: The file's path as given.
        line: 1-based line of the offending key (of its mapping when the key
            is missing), or None when the file could not be read.
        key: The key's path in the document (``agents[0].tools[1].function``),
            or "" for the whole file.
    """

    def __init__(self, file: str, line: int | None, key: str, problem: str) -> None:
        self.file, self.line, self.key, self.problem = file, line, key, problem
        where = file if line is None else f"{file}:{line}"
        super().__init__(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")


def _key_text(loc: Loc) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


@dataclass
class Source:
    """One parsed file: its data and the line of every key and list item."""

    file: str
    data: Any
    lines: Dict[Loc, int] = field(default_factory=dict)

    def line(self, loc: Loc) -> int:
        """The line of ``loc``, else of its nearest enclosing key or item."""
        while loc not in self.lines and loc:
            loc = loc[:-1]
        return self.lines.get(loc, 1)

    def error(self, loc: Loc, problem: str) -> YamlAgentError:
        return YamlAgentError(self.file, self.line(loc), _key_text(loc), problem)


def parse(path: str | os.PathLike) -> Source:
    """Read and parse ``path`` (PyYAML's safe loader), recording the line of
    every mapping key and sequence item; a key repeated in one mapping is an
    error (PyYAML would silently keep the last)."""
    file = os.fspath(path)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlAgentError(file, None, "", f"cannot read the file: {exc}") from None
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise YamlAgentError(file, 1, "", "the file is empty; expected a mapping with 'agents:' and resources")
        source = Source(file, None, {(): root.start_mark.line + 1})
        _record_lines(source, root, ())
        source.data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise YamlAgentError(file, line, "", f"not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise YamlAgentError(file, None, "", f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if not isinstance(source.data, dict):
        raise source.error((), f"the document must be a mapping (agents:, prompts:, ...), not a {_type_name(source.data)}")
    return source


def _record_lines(source: Source, node: yaml.Node, loc: Loc) -> None:
    if isinstance(node, yaml.MappingNode):
        first: Dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            line = key_node.start_mark.line + 1
            if key is None:
                continue  # a complex key: refused by the schema (keys are names)
            if key in first:
                raise YamlAgentError(
                    source.file, line, _key_text(loc + (key,)), f"duplicate key (first at line {first[key]})"
                )
            first[key] = line
            source.lines[loc + (key,)] = line
            _record_lines(source, value_node, loc + (key,))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            source.lines[loc + (index,)] = item.start_mark.line + 1
            _record_lines(source, item, loc + (index,))


def _type_name(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", type(None): "null"}.get(type(value), type(value).__name__)


def validate(source: Source) -> YamlAgentsDocument:
    """The document as specs; the first schema error names its line and key."""
    try:
        return YamlAgentsDocument.model_validate(source.data)
    except ValidationError as exc:
        raise _schema_error(source, exc.errors()[0]) from None


def _schema_error(source: Source, error: Dict[str, Any]) -> YamlAgentError:
    """Map one pydantic error (its ``loc``) back onto the document."""
    loc: List[str | int] = []
    node: Any = source.data
    for part in error["loc"]:
        if part in _UNION_TAGS:
            continue
        loc.append(part)
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            node = None
    kind, where = error["type"], tuple(loc)
    if kind == "missing":
        return source.error(where, "missing required key")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(where[:-1])
        hint = did_you_mean(str(where[-1]), allowed) if where else ""
        return source.error(where, f"unknown key (allowed: {', '.join(allowed)}){hint}")
    message = error["msg"].removeprefix("Value error, ")
    if kind.endswith("_type") or kind in ("literal_error", "enum", "model_attributes_type"):
        message += f", got {_type_name(error.get('input'))} {error.get('input')!r}"
    return source.error(where, message)


def _allowed_keys(loc: Loc) -> List[str]:
    """The keys the schema allows in the mapping at ``loc``, in schema order."""
    model: type[BaseModel] = YamlAgentsDocument
    for part in loc:
        if isinstance(part, str):
            model = _NESTED.get(part, model)
    return list(model.model_fields)
