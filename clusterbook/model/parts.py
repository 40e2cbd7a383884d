"""A cluster file's parts: the sections it keeps in files of their own (`parts:`, relative to it), read beside it and
merged before validation; every problem is reported against the file that holds it."""

from __future__ import annotations

import re
from pathlib import Path as FsPath

from clusterbook.model.problems import InputError
from clusterbook.model.yamlsource import YamlDocument, load_yaml

SECTIONS = ("decisions", "criteria", "rehearsals", "observations", "troubleshooting")  # records, and on call
MAX_PARTS = 8
PART_NAME = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*/){0,3}[A-Za-z0-9_][A-Za-z0-9_.-]*\.yaml$")  # no '..'
SERIES_NAME = re.compile(r"^patches/([A-Za-z0-9_][A-Za-z0-9_.-]*/){0,2}[A-Za-z0-9_][A-Za-z0-9_.-]*\.yaml$")


def with_parts(doc: YamlDocument) -> YamlDocument:
    """The document with its parts' sections merged in (itself where it names none). A part holds only the sections
    above, each section in one file; a part that is missing, unreadable or not such a mapping is an InputError."""
    if not isinstance(doc.data, dict) or "parts" not in doc.data:
        return doc
    names = doc.data["parts"]
    if not isinstance(names, list) or len(names) > MAX_PARTS or not all(isinstance(n, str) for n in names):
        raise InputError([doc.problem(("parts",), f"expected a list of at most {MAX_PARTS} file names")])
    merged, owners, problems = dict(doc.data), {}, []
    for i, name in enumerate(names):
        if not PART_NAME.fullmatch(name):
            problems.append(doc.problem(("parts", i), f"expected a .yaml file beside this one or in a folder below "
                                                      f"it (letters, digits, '_', '.', '-'; no '..'), got {name!r}"))
            continue
        part = load_yaml(_within(FsPath(doc.file).parent, name, doc, ("parts", i)))
        if not isinstance(part.data, dict):
            problems.append(part.problem((), f"expected a mapping of sections ({', '.join(SECTIONS)})"))
            continue
        for key, value in part.data.items():
            if key not in SECTIONS:
                problems.append(part.problem((key,), f"a part holds only {', '.join(SECTIONS)}; {key} belongs in "
                                                     f"{FsPath(doc.file).name}"))
            elif key in merged:
                where = owners[(key,)][0].file if (key,) in owners else doc.file
                problems.append(part.problem((key,), f"{key} is also in {where}: keep each section in one file"))
            else:
                merged[key], owners[(key,)] = value, (part, (key,))
    if problems:
        raise InputError(problems)
    return YamlDocument(doc.file, merged, doc.lines, doc.plain, parts=owners)


def with_series(doc: YamlDocument, root: FsPath) -> YamlDocument:
    """The document with its engine's patch series read from the file `engine.patch_series` names (relative to the
    repository, as each patch's file is): a series written once for every cluster file that uses it."""
    engine = doc.data.get("engine") if isinstance(doc.data, dict) else None
    if not isinstance(engine, dict) or "patch_series" not in engine:
        return doc
    name, where = engine["patch_series"], ("engine", "patch_series")
    if not isinstance(name, str) or not SERIES_NAME.fullmatch(name):
        raise InputError([doc.problem(where, "expected a .yaml file under patches/ (no '..'), got "
                                             f"{name!r}")])
    if "patches" in engine:
        raise InputError([doc.problem(("engine", "patches"), "give the patches or a patch_series, not both")])
    series = load_yaml(_within(root, name, doc, where))
    if not isinstance(series.data, dict) or set(series.data) != {"patches"}:
        raise InputError([series.problem((), "expected a mapping with one key, patches: the series in order")])
    merged = {**doc.data, "engine": {**engine, "patches": series.data["patches"]}}
    return YamlDocument(doc.file, merged, doc.lines, doc.plain,
                        parts={**doc.parts, ("engine", "patches"): (series, ("patches",))})


def _within(folder: FsPath, name: str, doc: YamlDocument, where: tuple) -> FsPath:
    """folder/name, refused where a link takes it out of folder: the cluster file names only files beside it."""
    path = folder / name
    if not path.resolve().is_relative_to(folder.resolve()):
        raise InputError([doc.problem(where, f"{name} leads out of {folder} (a link): name a file in it")])
    return path


def part_files(doc: YamlDocument) -> list[str]:
    """The files of a document's parts, in the order it names them."""
    return list(dict.fromkeys(part.file for part, _ in doc.parts.values()))
