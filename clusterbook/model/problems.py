"""Problems found in an input file, each tied to a field path and a line, and the error that carries them."""

from __future__ import annotations

from dataclasses import dataclass

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file: where it is and what was expected."""

    path: Path
    message: str
    line: int | None = None
    file: str = ""
    label: str = ""  # the path as shown to a person, e.g. nodes[vasp-02].addresses.fabric

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = self.label or format_path(self.path)
        message = cut(self.message, MAX_MESSAGE)
        return f"{where}: {field}: {message}" if field else f"{where}: {message}"


MAX_MESSAGE = 900  # characters of one problem's message: a value echoed in it is cut long before (shown)
MAX_SHOWN = 120  # characters of a value a message repeats


def cut(text: str, limit: int) -> str:
    """Text as a message shows it: at most limit characters, the rest counted."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def shown(value: object) -> str:
    """A value a message repeats, as Python writes it, cut to MAX_SHOWN characters."""
    return cut(repr(value), MAX_SHOWN)


class InputError(Exception):
    """Bad input: one or more problems, all reported at once (exit status 2, no traceback)."""

    exit_code = 2

    def __init__(self, problems: list[Problem]):
        unique = {str(p): p for p in problems}  # one line per distinct problem (e.g. the same template, many hosts)
        self.problems = sorted(unique.values(), key=lambda p: (p.file, p.line or 0, p.label))
        super().__init__("\n".join(str(p) for p in self.problems))


def format_path(path: Path) -> str:
    """Dotted field path with list indices in brackets: nodes[1].gpus[0].memory_mib."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


class Refused(ValueError):
    """clusterbook refused to write something unsafe (a value a file's language cannot hold, a path outside its
    folder): bad input that got past the schema, reported like bad input (exit status 2)."""
