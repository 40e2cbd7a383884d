"""The cluster file reference, generated from the schema so it cannot drift: Markdown tables per section."""

from __future__ import annotations

import types
import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from clusterbook.model.measured import MEASURED
from clusterbook.model.pathroles import PATH_ROLES
from clusterbook.model.schema import Cluster

START, END = "<!-- cluster-reference:start -->", "<!-- cluster-reference:end -->"


def type_name(tp: object) -> str:
    """A short human name for a field type."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:  # a value type of valuetypes.py names itself by its title
        titles = [m.title for m in args[1:] if getattr(m, "title", None)]
        return titles[0] if titles else type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" (optional)" if type(None) in args else "")
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"map of {type_name(args[0])} to {type_name(args[1])}"
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return getattr(tp, "__name__", str(tp))


def number_range(field) -> str:
    """A number field's range as the reference shows it (every number of the cluster file has both ends)."""
    bounds: dict[str, object] = {}

    def collect(metadata) -> None:
        for m in metadata:
            collect(getattr(m, "metadata", ()))  # a Field(...) inside Annotated keeps its bounds here
            for name in ("ge", "gt", "le", "lt"):
                if getattr(m, name, None) is not None:
                    bounds[name] = getattr(m, name)

    def walk(tp) -> None:
        if typing.get_origin(tp) is typing.Annotated:
            collect(typing.get_args(tp)[1:])
            walk(typing.get_args(tp)[0])
        elif typing.get_origin(tp) in (typing.Union, types.UnionType, list, dict):
            for arg in typing.get_args(tp):
                walk(arg)

    collect(field.metadata)
    walk(field.annotation)
    if not bounds:
        return ""
    low = f"≥ {bounds['ge']:,}" if "ge" in bounds else f"> {bounds['gt']:,}" if "gt" in bounds else ""
    high = f"≤ {bounds['le']:,}" if "le" in bounds else f"< {bounds['lt']:,}" if "lt" in bounds else ""
    return ", ".join(x for x in (low, high) if x)


def _models(tp: object) -> list[type[BaseModel]]:
    found = []
    for arg in typing.get_args(tp) or ():
        found += _models(arg)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        found.append(tp)
    return found


def _default(field) -> str:
    if field.default is not PydanticUndefined:
        return "" if field.default is None else f"`{field.default}`"
    if field.default_factory is not None:
        value = field.default_factory()
        return f"`{value}`" if not isinstance(value, BaseModel) else "defaults"
    return "**required**"


def reference_markdown(root: type[BaseModel] = Cluster) -> str:
    """Every section reachable from the root model, breadth first, one table each."""
    order, queue = [], [root]
    while queue:
        model = queue.pop(0)
        if model in order:
            continue
        order.append(model)
        for field in model.model_fields.values():
            queue += [m for m in _models(field.annotation) if m not in order]
    parts = []
    for model in order:
        doc = (model.__doc__ or "").strip().splitlines()[0]
        rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            kind = field.title if field.title and field.annotation is str else type_name(field.annotation)
            if span := number_range(field):
                kind += f" ({span})"
            meaning = field.description or ""
            if role := PATH_ROLES.get((model.__name__, name)):
                meaning += f" ({role.text})"
            if measured := MEASURED.get((model.__name__, name)):
                meaning += f" ({measured.text})"
            rows.append(f"| `{name}` | {kind} | {_default(field)} | {meaning.replace('|', '/')} |")
        parts.append(f"#### {model.__name__}\n\n{doc}\n\n" + "\n".join(rows))
    return "\n\n".join(parts) + "\n"


def splice(document: str, block: str) -> str:
    """Replace the text between the reference markers of a document."""
    head, _, rest = document.partition(START)
    _, _, tail = rest.partition(END)
    if not rest:
        raise ValueError(f"no {START} marker in the document")
    return f"{head}{START}\n{block}{END}{tail}"
