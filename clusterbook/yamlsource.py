"""YAML loading that remembers the line of every node, so problems can name file, line and field."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

import yaml

from .problems import InputError, Path, Problem


@dataclass
class YamlDocument:
    """Parsed YAML data plus the line (1-based) where each path starts."""

    file: str
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of the deepest prefix of `path` that exists in the document."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def label_of(self, path: Path) -> str:
        """Readable path: list items that have a `name` or `id` are shown by it, e.g. nodes[vasp-02].gpus[0]."""
        text, node = "", self.data
        for part in path:
            if isinstance(part, int):
                key = part
                if isinstance(node, list) and 0 <= part < len(node) and isinstance(node[part], dict):
                    key = node[part].get("name", node[part].get("id", part))
                text += f"[{key}]"
                node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            else:
                text += f".{part}" if text else str(part)
                node = node.get(part) if isinstance(node, dict) else None
        return text

    def problem(self, path: Path, message: str) -> Problem:
        """A Problem located in this document."""
        return Problem(path=tuple(path), message=message, line=self.line_of(path), file=self.file,
                       label=self.label_of(path))


def load_yaml(path: str | FsPath) -> YamlDocument:
    """Read a YAML file; syntax errors and duplicate keys become InputError with their line."""
    path = FsPath(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError([Problem((), f"cannot read file: {exc.strerror}", file=str(path))]) from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse YAML text (see load_yaml)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise InputError([Problem((), f"YAML syntax error: {reason}", line=line, file=file)]) from None
    doc = YamlDocument(file=file, data=None)
    problems: list[Problem] = []
    doc.data = _build(root, (), doc.lines, problems, file) if root is not None else {}
    if problems:  # relabel now that the data exists, so list items show their names
        raise InputError([Problem(p.path, p.message, p.line, file, doc.label_of(p.path)) for p in problems])
    return doc


def _build(node: yaml.Node, path: Path, lines: dict[Path, int], problems: list[Problem], file: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raw = getattr(key_node, "value", "?")
                problems.append(Problem(path + (str(raw),), f"key '{raw}' is read by YAML as {key!r}, not a name; "
                                        f"quote it (\"{raw}\")", line=key_node.start_mark.line + 1, file=file))
                continue
            if key in result:
                problems.append(Problem(path + (key,), f"duplicate key '{key}' (first at line {lines[path + (key,)]})",
                                        line=key_node.start_mark.line + 1, file=file))
                continue
            lines[path + (key,)] = key_node.start_mark.line + 1
            result[key] = _build(value_node, path + (key,), lines, problems, file)
            lines[path + (key,)] = key_node.start_mark.line + 1
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), lines, problems, file) for i, item in enumerate(node.value)]
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    return loader.construct_object(node, deep=True)
