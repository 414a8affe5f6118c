"""The machinery of typed configs, shared by run configs (config.py) and study files (study/config.py): what a field
means beyond its value (`setting`, `section`, `meaning_of`), reading YAML (a key given twice is an error), the one
merge loop of defaults ← YAML layers ← dotted overrides (`load_structured`, OmegaConf), the checks every number
passes before any range check (`check_numbers`), and the help text read from the fields' attribute docstrings
(`field_docs`, `describe_fields`). Every problem is a one-line ConfigError naming its source and key.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import fnmatch
import functools
import inspect
import math
import textwrap
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from normgrow import registry
from normgrow.errors import ConfigError

# ----------------------------------------------------------------------------- field meanings
#
# Beside its value and help line, a field declares what it means to the rest of the package, once, here:
# whether it enters the default teacher's content key (pipeline.default_teacher_key: the default teacher is trained
# once per recipe and cached under a hash of its resolved config), whether a resumed run may change it
# (rundir.check_same_run), and when it or its default arrived after teachers were first keyed. `setting(...)`
# declares it with the field, `@section(...)` for every field of a section that does not declare its own;
# tests/config/test_config.py checks that every field has both decisions:
#
#     d_model: int = setting(256, key=True)                      # shapes the teacher: in its key
#     device: str = setting("auto", key=False, resume=True)      # where it runs: not in the key, may change on resume
#     mixln_ratio: float = setting(0.25, key=True, before=0.25)  # added later: left out of the key while at 0.25


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # a meaning entry not given (None is a value)


@dataclass(frozen=True)
class Meaning:
    """What a config field means beyond its value (`setting` / `section` declare it; `meaning_of` reads it)."""

    key: bool | None = None
    """Enters the default teacher's key. False for what cannot change the teacher's weights: where it runs, how often
    it logs, evaluates and checkpoints, diagnostics, the distillation settings (the teacher trains on next-token CE;
    the loss chunk changes only the order of float sums). The key then holds the field's default whatever the run
    sets, so changing it does not retrain the teacher; the full config is still saved with the teacher."""
    resume: bool | None = None
    """May differ when a run directory is resumed: where it runs and how a step is laid out in memory (micro-batches,
    sharding, recomputation), none of which changes what is computed beyond summation order (tests/train/test_train.py:
    split invariance; a DDP run resumed sharded). config.yaml keeps the first values."""
    before: Any = UNSET
    """The field was added after default teachers were first keyed: while it holds this value (the behaviour from
    before it existed, which an older key implies) it is left out of the key, so adding it orphans no cached
    teacher."""
    old_default: Any = UNSET
    """The field's default changed after teachers were keyed: while it holds the new default, the key records this old
    one (teacher.dtype became `auto`, resolved per run), so the change orphaned no cached teacher."""


_MEANING = "normgrow.meaning"  # the dataclasses.field metadata entry `setting` fills


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    key: bool | None = None,
    resume: bool | None = None,
    before: Any = UNSET,
    old_default: Any = UNSET,
) -> Any:
    """A config field with its `Meaning` (unset entries come from its section's): `default`, or `factory` for a
    mutable one, as in dataclasses.field."""
    meaning = Meaning(key, resume, before, old_default)
    return field(default=default, default_factory=factory, metadata={_MEANING: meaning})


def section(*, key: bool | None = None, resume: bool | None = None):
    """Class decorator: the meaning of every field of a config section that does not declare its own."""

    def declare(cls: type) -> type:
        cls._meaning = Meaning(key, resume)  # type: ignore[attr-defined]  # decorator sets a class attribute
        return cls

    return declare


# ----------------------------------------------------------------------------- reading and merging


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (YAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key '{key}' given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> dict:
    """A YAML mapping from a file; one-line errors naming the file (and line) otherwise."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text (UTF-8) file; expected a YAML config") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {getattr(e, 'problem', e)}") from None
    if data is None:  # empty, or comments only: more likely a cut or wrong file than a wish for the defaults
        raise ConfigError(
            f"{path}: is empty (no config keys); write `{{}}` in it for the built-in defaults, or give no config"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level")
    return data


def omegaconf_message(e: OmegaConfBaseException, source: str) -> str:
    key = getattr(e, "full_key", None) or "?"
    msg = str(e).splitlines()[0]
    return f"{source}: {key}: {msg}"


def shown(item: str, most: int = 120) -> str:
    """An override as an error quotes it: whole up to `most` characters, else its start and its length."""
    return item if len(item) <= most else f"{item[: most - 20]}… ({len(item):,} characters)"


def load_structured(schema: type, layers: list[tuple[str, dict]], overrides: list[str] | tuple[str, ...] = ()):
    """The one merge loop: `schema`'s defaults ← each (source, mapping) layer in order ← dotted
    `key=value` overrides, type-checked by OmegaConf. Every error is one line naming its source and key."""
    merged = OmegaConf.structured(schema)
    for source, data in layers:
        try:
            merged = OmegaConf.merge(merged, OmegaConf.create(data))
        except OmegaConfBaseException as e:
            raise ConfigError(omegaconf_message(e, source)) from None
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{shown(item)}': expected key=value (e.g. model.norm=post)")
        key, _, raw = item.partition("=")
        try:
            if any(part.isdigit() for part in key.split(".")):  # into a list's entry: curriculum.stages.1.tokens=…
                OmegaConf.update(merged, key, OmegaConf.from_dotlist([f"value={raw}"]).value, merge=True)
            else:
                merged = OmegaConf.merge(merged, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as e:
            raise ConfigError(omegaconf_message(e, f"override '{shown(item)}'")) from None
        except yaml.YAMLError as e:  # a YAML tag (never executed) or broken flow syntax in the value
            raise ConfigError(
                f"override '{shown(item)}': {key}: the value is not plain YAML ({str(e).splitlines()[0]})"
            ) from None
    try:
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(omegaconf_message(e, "config")) from None


# ----------------------------------------------------------------------------- numbers


def need(ok: bool, key: str, msg: str) -> None:
    """Raise a one-line ConfigError naming `key` unless `ok`."""
    if not ok:
        raise ConfigError(f"{key}: {msg}")


def positive(section: Any, prefix: str, *keys: str) -> None:
    """need(value > 0) for each named field of a section; an optional field left unset (None) passes."""
    for key in keys:
        value = getattr(section, key)
        need(value is None or value > 0, f"{prefix}.{key}", f"must be positive, got {value}")


def non_negative(section: Any, prefix: str, *keys: str) -> None:
    """need(value >= 0) for each named field of a section."""
    for key in keys:
        value = getattr(section, key)
        need(value >= 0, f"{prefix}.{key}", f"must be non-negative, got {value}")


INT_LIMIT = 2**53  # integers beyond it are not exact as floats, and token counts are multiplied by rates
FLOAT_LIMIT = 1e15  # no float setting means anything beyond it; larger ones overflow float32 arithmetic


def number_fields(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any, type]]:
    """(dotted key, value, int or float) of every number of a config section, walked into sections, lists (key
    curriculum.stages.<i>.<field>, seeds.<i>) and maps of sections (arms.<name>.…); None values left out."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        yield from _numbers(f"{prefix}{f.name}", getattr(obj, f.name), hints[f.name])


def _numbers(key: str, value: Any, hint: Any) -> Iterator[tuple[str, Any, type]]:
    if dataclasses.is_dataclass(value):
        yield from number_fields(value, key + ".")
    elif isinstance(value, dict):
        for name, v in value.items():
            yield from _numbers(f"{key}.{name}", v, (typing.get_args(hint) or (str, Any))[-1])
    elif isinstance(value, (list, tuple)):
        inner = [a for t in (typing.get_args(hint) or (Any,)) for a in (typing.get_args(t) or (t,))]
        for i, v in enumerate(value):
            yield from _numbers(f"{key}.{i}", v, inner[0] if inner else Any)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        kinds = [t for t in typing.get_args(hint) or (hint,) if t in (int, float)]
        yield key, value, kinds[0] if kinds else type(value)


def check_numbers(obj: Any, upper: dict[str, float], prefix: str = "") -> None:
    """Every number of a config finite and representable (ints within ±2^53, floats within ±1e15, narrower where
    `upper` says, by key pattern: `*` for a list index or a map's name), before any range check compares it:
    NaN, ±inf and 1e300 are one line naming the field."""
    for key, value, kind in number_fields(obj, prefix):
        if kind is float and not math.isfinite(value):
            raise ConfigError(f"{key}: must be a finite number, got {value}")
        limit = next(
            (v for pattern, v in upper.items() if fnmatch.fnmatchcase(key, pattern)),
            INT_LIMIT if kind is int else FLOAT_LIMIT,
        )
        need(abs(value) <= limit, key, f"{value:g} is out of range (at most {limit:g} in magnitude)")


# ----------------------------------------------------------------------------- help text


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """{field: docstring} for a config dataclass, read from the attribute docstrings in its source."""
    own = cls.__dict__.get("__field_docs__")
    if own is not None:  # a schema built at run time (study.config.study_schema): its bases' docs and its own
        return {
            k: v for b in reversed(cls.__mro__[1:]) if dataclasses.is_dataclass(b) for k, v in field_docs(b).items()
        } | own
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = typing.cast(ast.ClassDef, tree.body[0]).body
    docs = {}
    for node, nxt in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[typing.cast(ast.Name, node.target).id] = str(nxt.value.value)
    return docs


def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default value (a fresh one for a default factory)."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def is_section_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and dataclasses.is_dataclass(value[0])


def leaf_fields(cls: type, prefix: str = "") -> Iterator[tuple[str, type, dataclasses.Field]]:
    """(dotted key, section class, field) for every field that holds a value, depth first. Sections are walked
    into; a list of sections (curriculum.stages) is a field, followed by its entries' fields as `key[].name`."""
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        default = field_default(f)
        if dataclasses.is_dataclass(default):
            yield from leaf_fields(type(default), key + ".")
            continue
        yield key, cls, f
        if is_section_list(default):
            yield from leaf_fields(type(default[0]), key + "[].")


def describe_fields(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, default, help) for every leaf field, depth first; a field chosen from a registry (and
    model.block_norms, a list of placements) lists the names registered now, extensions' included."""
    rows = []
    for key, owner, f in leaf_fields(cls, prefix):
        default = field_default(f)
        shown = f"[{len(default)} entries]" if is_section_list(default) else repr(default)
        doc = field_docs(owner).get(f.name, "")
        reg = registry.BY_FIELD.get("model.norm" if key == "model.block_norms" else key)
        if reg is not None:
            doc += f" [registered {reg.kind}s: {', '.join(reg.names())}]"
        rows.append((key, shown, doc))
    return rows


def meaning_of(cls: type, f: dataclasses.Field) -> Meaning:
    """Field `f` of config section `cls`: its own `setting(...)` entries, the unset ones from `@section(...)`."""
    own = f.metadata.get(_MEANING, Meaning())
    sec = getattr(cls, "_meaning", Meaning())
    return dataclasses.replace(
        own, key=sec.key if own.key is None else own.key, resume=sec.resume if own.resume is None else own.resume
    )


def teacher_key_view(cfg: Any) -> dict:
    """The config (a RunConfig or one of its sections) as the default teacher's key sees it, which
    pipeline.default_teacher_key hashes: `to_dict(cfg)` with key-free fields at their defaults, fields added later
    left out while they hold their `before` value, and changed defaults written as the old ones."""
    fresh = type(cfg)()
    view = {}
    for f in dataclasses.fields(cfg):
        m = meaning_of(type(cfg), f)
        value = getattr(fresh if m.key is False else cfg, f.name)  # a section (key None) is walked into
        if dataclasses.is_dataclass(value):
            value = teacher_key_view(value)
        elif is_section_list(value):
            value = [teacher_key_view(v) for v in value]
        else:
            value = copy.deepcopy(value)
        if m.before is not UNSET and value == m.before:
            continue
        if m.old_default is not UNSET and value == getattr(fresh, f.name):
            value = m.old_default
        view[f.name] = value
    return view


def parse_train_blocks(spec: str, n_layer: int, new_blocks: Sequence[int]) -> list[int]:
    """Block indices a stage trains: 'all', 'new' (`new_blocks`: the blocks its growth event inserted,
    which the growth operator decides; every block in the first stage) or explicit indices '0,3,4'."""
    if spec == "all":
        return list(range(n_layer))
    if spec == "new":
        return sorted(new_blocks)
    try:
        idx = sorted({int(s) for s in spec.split(",") if s.strip()})
    except ValueError:
        raise ValueError(f"'{spec}' is not 'all', 'new' or comma-separated block indices") from None
    bad = [i for i in idx if not 0 <= i < n_layer]
    if bad:
        raise ValueError(f"block index {bad[0]} outside 0..{n_layer - 1}")
    return idx
