"""Walking the raw data alongside the models' field annotations: nested models, ``list[Model]`` items, and
the unions whose member a tag picks (the topology by its ``name``, a loss model by its ``model``)."""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from testbed.scenario.errors import DataPath
from testbed.scenario.schema import Scenario


def _strip(annotation: Any) -> Any:
    """``Annotated[X, ...]`` -> ``X``; ``X | None`` -> ``X``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
            continue
        if origin in (Union, types.UnionType):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_collection(annotation: Any) -> bool:
    collections = (list, tuple, set, frozenset, dict)
    return get_origin(annotation) in collections or annotation in collections


def _model_union(annotation: Any) -> list[type[BaseModel]]:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [_strip(arg) for arg in get_args(annotation)]
        if members and all(_is_model(member) for member in members):
            return members
    return []


#: the fields that pick a member of a union: ``topology.name``, ``loss.model``, ``queue.discipline``
_TAG_KEYS = ("name", "model", "discipline")


def _tag_of(model: type[BaseModel]) -> str | None:
    """The ``name`` (or ``model``) a union member answers to (its ``Literal`` value)."""
    for key in _TAG_KEYS:
        tag_field = model.model_fields.get(key)
        if tag_field is not None and get_origin(tag_field.annotation) is Literal:
            return get_args(tag_field.annotation)[0]
    return None


def _pick_model(annotation: Any, raw: Any) -> type[BaseModel] | None:
    if _is_model(annotation):
        return annotation
    members = _model_union(annotation)
    if not members:
        return None
    if isinstance(raw, BaseModel):
        return type(raw)
    tag = next((raw[key] for key in _TAG_KEYS if key in raw), None) if isinstance(raw, dict) else None
    if isinstance(tag, list) and tag:
        tag = tag[0]  # a sweep over the name itself: walk the first member's fields
    return next((member for member in members if _tag_of(member) == tag), None)


def _resolve(loc: tuple, data: Any, root: type[BaseModel] = Scenario) -> tuple[DataPath, Any, FieldInfo | None]:
    """Map a pydantic ``loc`` onto a data path (dropping union tags).

    Also returns the annotation expected at that path and, when the path ends at a model
    field, that field's ``FieldInfo`` (its constraints and description feed the messages).
    """
    path: list = []
    annotation: Any = root
    info: FieldInfo | None = None
    raw = data
    for step in loc:
        annotation = _strip(annotation)
        model = _pick_model(annotation, raw)
        members = _model_union(annotation) or ([annotation] if _is_model(annotation) else [])
        if step in {_tag_of(m) for m in members} and (model is None or step not in model.model_fields):
            continue  # pydantic names the union member it tried (even a one-member union); the file does not
        if model is not None and isinstance(step, str):
            info = model.model_fields.get(step)
            annotation = info.annotation if info is not None else None
        elif isinstance(step, int) and get_origin(annotation) in (list, tuple):
            items = get_args(annotation)
            annotation = items[0] if get_origin(annotation) is list else items[min(step, len(items) - 1)]
            info = None
        else:
            annotation, info = None, None
        path.append(step)
        raw = _child(raw, step)
    return tuple(path), annotation, info


def _model_at(path: DataPath, data: Any, root: type[BaseModel]) -> type[BaseModel] | None:
    """The model that the mapping at ``path`` is validated as."""
    _, annotation, _ = _resolve(path, data, root)
    return _pick_model(_strip(annotation), _get_or_none(data, path))


def _child(raw: Any, step: Any) -> Any:
    if isinstance(raw, dict):
        return raw.get(step)
    if isinstance(raw, list) and isinstance(step, int) and 0 <= step < len(raw):
        return raw[step]
    return None


def _get_or_none(data: Any, path: DataPath) -> Any:
    for step in path:
        data = _child(data, step)
    return data
