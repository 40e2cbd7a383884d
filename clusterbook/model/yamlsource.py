"""YAML loading that remembers the line of every node, so problems can name file, line and field."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

import yaml

from clusterbook.model.problems import InputError, Path, Problem

# libyaml's C parser when PyYAML was built with it (fast, and it keeps line marks)
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class YamlDocument:
    """Parsed YAML data plus the line (1-based) where each path starts."""

    file: str
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)
    plain: dict[Path, str] = field(default_factory=dict)  # unquoted scalars as written, for type-trap hints
    # a section kept in a file of its own (model/parts.py): its path here -> (that file, the section's path there)
    parts: dict[Path, tuple[YamlDocument, Path]] = field(default_factory=dict)

    def holder(self, path: Path) -> tuple[YamlDocument, Path]:
        """The document that holds `path` and the path there: this one, or the part its section is in."""
        for end in range(len(path), 0, -1):
            if tuple(path[:end]) in self.parts:
                doc, inner = self.parts[tuple(path[:end])]
                return doc, tuple(inner) + tuple(path[end:])
        return self, tuple(path)

    def line_of(self, path: Path) -> int | None:
        """The line of the deepest prefix of `path` that exists in the document (or in the part that holds it)."""
        doc, inner = self.holder(path)
        if doc is not self:
            return doc.line_of(inner)
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
        """A Problem located in this document (in the file of the part that holds it)."""
        return Problem(path=tuple(path), message=message, line=self.line_of(path), file=self.holder(path)[0].file,
                       label=self.label_of(path))


MAX_DEPTH = 64  # nesting levels; a cluster file needs about 8
MAX_ALIAS_VALUES = 100_000  # values that aliases may add once expanded (a cluster file needs a few hundred)
MAX_BYTES = 32 * 2**20


def load_yaml(path: str | FsPath) -> YamlDocument:
    """Read a YAML file; syntax errors, bad encodings, bombs and duplicate keys become InputError with a line."""
    path = FsPath(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError([Problem((), f"cannot read file: {exc.strerror}", file=str(path))]) from None
    if len(raw) > MAX_BYTES:
        raise InputError([Problem((), f"file is larger than {MAX_BYTES // 2**20} MiB; a cluster file is a few "
                                      "hundred lines", line=1, file=str(path))])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError([Problem((), f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {column}; save the "
                                      "file as UTF-8", line=line, file=str(path))]) from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse YAML text (see load_yaml) in the cluster file's strict subset (see check_characters, _check_shape
    and _plain_number)."""
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise InputError([Problem((), "the file is empty: expected a mapping of sections (cluster, access, "
                                      "networks, nodes, …)", line=1, file=file)])
    check_characters(text, file)
    try:
        _check_shape(text, file)
        root = yaml.compose(text, Loader=Loader)
    except yaml.YAMLError as exc:
        raise InputError([_syntax_problem(exc, file, text)]) from None
    doc = YamlDocument(file=file, data=None)
    problems: list[Problem] = []
    doc.data = _build(root, (), doc, problems, file) if root is not None else {}
    if problems:  # relabel now that the data exists, so list items show their names
        raise InputError([Problem(p.path, p.message, p.line, file, doc.label_of(p.path)) for p in problems])
    return doc


def _syntax_problem(exc: yaml.YAMLError, file: str, text: str) -> Problem:
    """A YAML error at the line where the mistake is: a quote left open is reported where it opens, not where
    the parser noticed (often many lines below, at the next quote)."""
    mark = getattr(exc, "problem_mark", None)
    reason = getattr(exc, "problem", None) or str(exc)
    opened = _runaway_quote(text, mark.line if mark else None)
    if opened is not None and mark is not None:
        return Problem((), f"YAML syntax error: a quoted value opens here and runs to line {mark.line + 1}, where "
                           f"the parser stops ({reason}): is its closing quote missing?", line=opened + 1, file=file)
    return Problem((), f"YAML syntax error: {reason}", line=mark.line + 1 if mark else None, file=file)


def _runaway_quote(text: str, error_line: int | None) -> int | None:
    """The line (0-based) of a quoted scalar that spans lines and ends at or before the error, if any."""
    if error_line is None:
        return None
    opened = None
    try:
        for token in yaml.scan(text, Loader=Loader):
            if token.start_mark.line > error_line:
                break
            if isinstance(token, yaml.ScalarToken) and token.style in ("'", '"') \
                    and token.end_mark.line > token.start_mark.line:
                opened = token.start_mark.line
    except yaml.YAMLError as exc:
        # the scanner itself may stop inside the quote: then its context mark is where the quote opens
        context_mark = getattr(exc, "context_mark", None)
        if context_mark is not None and "quoted scalar" in (getattr(exc, "context", None) or ""):
            return context_mark.line
    return opened


# Characters YAML reads as line breaks (every later line number would then differ from the editor's), or that
# no cluster file has a reason to hold: C0 and C1 controls but tab and newline, DEL, a byte-order mark inside.
FORBIDDEN_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]|\r(?!\n)")
CHARACTER_NAMES = {"\x00": "a NUL byte", "\r": "a carriage return without a newline", "\x85": "U+0085 (next line)",
                   "\u2028": "U+2028 (line separator)", "\u2029": "U+2029 (paragraph separator)",
                   "\ufeff": "U+FEFF (byte-order mark)"}


def check_characters(text: str, file: str) -> None:
    """Refuse characters outside the subset, each at its line as an editor counts lines (newlines only)."""
    problems = []
    body = text[1:] if text.startswith("\ufeff") else text  # a byte-order mark may open the file
    offset = len(text) - len(body)
    for m in FORBIDDEN_CHARACTERS.finditer(body):
        at = m.start() + offset
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        name = CHARACTER_NAMES.get(m.group(), f"control character U+{ord(m.group()):04X}")
        why = ("YAML reads it as a line break, so every later line number would be wrong"
               if m.group() in "\r\x85\u2028\u2029" else "not allowed in a cluster file")
        problems.append(Problem((), f"{name} at column {column}: {why}; remove it", line=line, file=file))
        if len(problems) >= 20:
            break
    if problems:
        raise InputError(problems)


def _check_shape(text: str, file: str) -> None:
    """Refuse deep nesting, alias bombs and tags from the event stream, before anything is built (linear time):
    aliases may add at most MAX_ALIAS_VALUES values once expanded; the file's size bounds the rest. Tags
    (`!foo`, `!!python/…`, `!!binary`) are outside the subset: a value is what its field's type says."""
    sizes: dict[str, int] = {}  # anchor -> values it expands to
    stack: list[list] = []  # open collections: [anchor, values so far]
    added = 0  # values that aliases add

    for event in yaml.parse(text, Loader=Loader):
        count = 0
        tag = getattr(event, "tag", None)
        if tag is not None and tag != "!":
            shown = tag.replace("tag:yaml.org,2002:", "!!")
            raise InputError([Problem((), f"YAML tag {shown} refused: tags are not part of the cluster file's "
                                          "YAML subset (a value is what its field's type says; quote text)",
                                      line=event.start_mark.line + 1, file=file)])
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_DEPTH:
                raise InputError([Problem((), f"nesting deeper than {MAX_DEPTH} levels; refused",
                                          line=event.start_mark.line + 1, file=file)])
            continue
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, count = stack.pop()
            if anchor:
                sizes[anchor] = count
        elif isinstance(event, yaml.ScalarEvent):
            count = 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            count = sizes.get(event.anchor, 1)
            added += count
            if added > MAX_ALIAS_VALUES:
                raise InputError([Problem((), f"aliases expand to more than {MAX_ALIAS_VALUES:,} values (an alias "
                                              "bomb?); refused", line=event.start_mark.line + 1, file=file)])
        if stack:
            stack[-1][1] += count


def _build(node: yaml.Node, path: Path, doc: YamlDocument, problems: list[Problem], file: str) -> Any:
    doc.lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == MERGE_TAG:
                problems.append(Problem(path, "merge keys (<<) are not part of the cluster file's YAML subset: "
                                        "write the keys out", line=line, file=file))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                problems.append(Problem(path, "a key must be a plain name, not a list or mapping", line=line,
                                        file=file))
                continue
            key = _scalar(key_node, path, problems, file)
            if key is INVALID:
                continue
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raw = getattr(key_node, "value", "?")
                problems.append(Problem(path + (str(raw),), f"key '{raw}' is read by YAML as {key!r}, not a name; "
                                        f"quote it (\"{raw}\")", line=key_node.start_mark.line + 1, file=file))
                continue
            if key in result:
                first = doc.lines[path + (key,)]
                problems.append(Problem(path + (key,), f"duplicate key '{key}' (first at line {first})",
                                        line=key_node.start_mark.line + 1, file=file))
                continue
            result[key] = _build(value_node, path + (key,), doc, problems, file)
            doc.lines[path + (key,)] = key_node.start_mark.line + 1
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), doc, problems, file) for i, item in enumerate(node.value)]
    if isinstance(node, yaml.ScalarNode) and not node.style:  # plain (None in PyYAML, '' in libyaml)
        doc.plain[path] = node.value
    return _scalar(node, path, problems, file)


_CONSTRUCTOR = yaml.constructor.SafeConstructor()
MERGE_TAG = "tag:yaml.org,2002:merge"
INT_TAG, FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
DECIMAL_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
DECIMAL_FLOAT = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")
INVALID = object()  # a scalar that was refused (its problem is recorded)


def _scalar(node: yaml.Node, path: Path, problems: list[Problem], file: str) -> Any:
    """A scalar's value; YAML 1.1's surprises (octal 026, sexagesimal 1:20, hex, 1_000, .inf, .nan) and values
    the constructor cannot read become problems at their line."""
    line = node.start_mark.line + 1
    try:
        value = _CONSTRUCTOR.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        problems.append(Problem(path, f"YAML cannot read {node.value!r}: {str(exc).splitlines()[0]}; quote it if it "
                                "is text", line=line, file=file))
        return INVALID
    finally:
        _CONSTRUCTOR.constructed_objects.clear()
    if node.tag == INT_TAG and not DECIMAL_INT.fullmatch(node.value):
        problems.append(Problem(path, f"{node.value} is read by YAML 1.1 as the number {value} ({_why(node.value)}); "
                                f"write the number in decimal digits, or quote it if it is text", line=line,
                                file=file))
        return INVALID
    if node.tag == FLOAT_TAG and (not DECIMAL_FLOAT.fullmatch(node.value) or not math.isfinite(value)):
        problems.append(Problem(path, f"{node.value} is not a finite decimal number (YAML reads it as {value}); "
                                "numbers must be finite", line=line, file=file))
        return INVALID
    return value


def _why(written: str) -> str:
    if ":" in written:
        return "base 60"
    if written.lstrip("+-").startswith(("0x", "0X")):
        return "hexadecimal"
    if written.lstrip("+-").startswith(("0b", "0B")):
        return "binary"
    if "_" in written:
        return "underscores are dropped"
    return "a leading 0 means octal"
