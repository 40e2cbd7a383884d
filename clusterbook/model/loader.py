"""Load and validate a cluster file: YAML -> schema -> cross-field rules, every problem with its line."""

from __future__ import annotations

import datetime as dt
import hashlib
import types
import typing
from pathlib import Path as FsPath

from pydantic import BaseModel, ValidationError

from clusterbook import DATA_ROOT
from clusterbook.model.crosscheck import check_cluster
from clusterbook.model.parts import part_files, with_parts, with_series
from clusterbook.model.problems import InputError, Path, Problem, shown
from clusterbook.model.schema import Cluster
from clusterbook.model.yamlsource import YamlDocument, load_yaml

M = typing.TypeVar("M", bound=BaseModel)


def load_cluster(path: str | FsPath) -> Cluster:
    """The validated cluster, or InputError listing every problem as FILE:LINE: field: message."""
    return load_cluster_document(path)[0]


def load_cluster_document(path: str | FsPath) -> tuple[Cluster, YamlDocument]:
    """The validated cluster and its YAML document (for locating later findings, such as the plan's). Loaded once
    per process and file version: the model is frozen, so every caller may share it."""
    try:
        stat = FsPath(path).stat()
        key = (str(FsPath(path).resolve()), stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = None  # load_yaml reports the missing file
    if key is not None and key in _LOADED and _LOADED[key][1] == _stats(part_files(_LOADED[key][0][1])):
        return _LOADED[key][0]
    loaded = _load_cluster_document(path)
    if key is not None:
        _LOADED[key] = (loaded, _stats(part_files(loaded[1])))
    return loaded


_LOADED: dict[tuple, tuple[tuple[Cluster, YamlDocument], tuple]] = {}


def _stats(files: list[str]) -> tuple:
    """Each file's modification time and size (a part edited since: the file is loaded again)."""
    out = []
    for f in files:
        try:
            stat = FsPath(f).stat()
            out.append((f, stat.st_mtime_ns, stat.st_size))
        except OSError:
            out.append((f, None, None))
    return tuple(out)


# engine.patches[].file and engine.patch_series are relative to the folder that holds clusterbook's patches/: the
# checkout's top, or the installed package (clusterbook/__init__.py finds it)
REPOSITORY = DATA_ROOT


def read_patches(cluster: Cluster) -> list[tuple[Path, str]]:
    """Read each engine patch from the repository and check its sha256; what is missing or differs, by field."""
    out: list[tuple[Path, str]] = []
    for i, patch in enumerate(cluster.engine.patches):
        where = REPOSITORY / patch.file
        try:
            data = where.read_bytes()
        except OSError as exc:
            out.append((("engine", "patches", i, "file"), f"{patch.file}: cannot read it ({exc.strerror})"))
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != patch.sha256:
            out.append((("engine", "patches", i, "sha256"), f"{patch.file} has sha256 {digest}, the cluster file "
                                                            "pins another: review the patch, then pin its new sum"))
            continue
        try:
            patch._text = data.decode()
        except UnicodeDecodeError:
            out.append((("engine", "patches", i, "file"), f"{patch.file} is not UTF-8 text"))
    return out


def _load_cluster_document(path: str | FsPath) -> tuple[Cluster, YamlDocument]:
    doc = with_series(with_parts(load_yaml(path)), REPOSITORY)
    cluster = validate_document(doc, Cluster)
    problems = [doc.problem(p, msg) for p, msg in check_cluster(cluster) + read_patches(cluster)]
    if problems:
        raise InputError(problems)
    return cluster, doc


def validate_document(doc: YamlDocument, model: type[M]) -> M:
    """Validate parsed YAML against a schema model; errors are mapped back to YAML lines."""
    if not isinstance(doc.data, dict):
        raise InputError([doc.problem((), f"expected a mapping at the top level, got {type(doc.data).__name__}")])
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        raise InputError([_to_problem(doc, model, err) for err in exc.errors()]) from None


def _to_problem(doc: YamlDocument, model: type[BaseModel], err: dict) -> Problem:
    path = _data_path(doc.data, err["loc"])
    kind, msg = err["type"], err["msg"]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        path += (err["ctx"]["discriminator"].strip("'"),)
    if kind == "extra_forbidden":
        allowed = _fields_at(model, err["loc"][:-1])
        msg = "unknown key" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")
    elif kind == "missing":
        msg = "required field is missing"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind not in ("missing", "extra_forbidden") and "input" in err and not isinstance(err["input"], (dict, list)):
        msg += f" (got {shown(err['input'])})" + _type_trap(kind, err["input"], _written(doc, path))
    return doc.problem(path, msg)


def _written(doc: YamlDocument, path: Path) -> str | None:
    """A scalar as written, in the file that holds it."""
    holder, inner = doc.holder(path)
    return holder.plain.get(inner)


def _type_trap(kind: str, value: object, written: str | None) -> str:
    """Why YAML turned what was written into the wrong type, and how to write it instead."""
    if kind in ("string_type", "literal_error", "string_pattern_mismatch") and written is not None \
            and not isinstance(value, str):
        what = ("a boolean" if isinstance(value, bool) else "a date" if isinstance(value, (dt.date, dt.datetime))
                else "a number" if isinstance(value, (int, float)) else None)
        if what:
            return f"; YAML reads {written} as {what}: quote it (\"{written}\")"
    if kind in ("int_type", "float_type", "bool_type") and isinstance(value, str):
        return "; values are not converted: write it without quotes"
    return ""


def _data_path(data: object, loc: tuple) -> Path:
    """Drop the parts pydantic adds that are not in the YAML (union tags, '[key]' markers)."""
    path: list = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if part == "[key]":
            continue
        if isinstance(node, dict):
            if part in node:
                path.append(part)
                node = node[part]
            elif last:
                path.append(part)
            # else: a discriminated-union tag such as 'rpc' in tiers.0.rpc.port: not in the data
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        else:
            path.append(part)
            node = None
    return tuple(path)


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the model found at a pydantic error location (for 'expected one of')."""
    current: object = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    models = [m for m in _candidates(current) if isinstance(m, type) and issubclass(m, BaseModel)]
    return sorted(models[0].model_fields) if len(models) == 1 else []


def _candidates(tp: object) -> list:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _candidates(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [c for arg in typing.get_args(tp) for c in _candidates(arg)]
    return [tp]


def _step(tp: object, part: object) -> object:
    for cand in _candidates(tp):
        origin = typing.get_origin(cand)
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            if part in cand.model_fields:
                return cand.model_fields[part].annotation
            # a discriminated-union tag names the member class by its `kind` literal
            kind = cand.model_fields.get("kind")
            if kind and part in typing.get_args(kind.annotation):
                return cand
        elif origin is list and isinstance(part, int):
            return typing.get_args(cand)[0]
        elif origin is dict and isinstance(part, str):
            return typing.get_args(cand)[1]
    return None
