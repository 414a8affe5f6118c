"""Extension points as plain registries: a dict from a config name to a small class or function.

normgrow has seven: placements (`model.norm`, nn/model.py), norm kinds (`model.norm_kind`, nn/model.py), growth operators (`curriculum.growth`,
train/growth.py), diagnostics (`diagnostics.include`, train/diagnostics.py), launchers (`launcher.kind`,
study/launch.py), corpus sources (`data.format`, data/sources.py) and claims (every study's
claims, study/engine/verdicts.py; the paper's in study/paper/claims.py). Each module fills its registry with explicit `register(...)` calls
for the built-in entries; user code makes the same calls, before the config is loaded:

    import normgrow
    from normgrow.nn.model import Block, register_placement

    class Residual2(Block): ...
    register_placement("residual2", Residual2)     # now model.norm=residual2 is valid

For the command line (and the processes a study launches) a package can declare its
registrations as an entry point in the group `normgrow.extensions`; `load_extensions()` imports
them at start-up (`[project.entry-points."normgrow.extensions"] mine = "my_pkg.normgrow_ext"`).

Config validation checks a registry-backed field against its registry (`check`), so an unknown
name is a one-line error naming the field and listing what is registered.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from normgrow.errors import ConfigError

T = TypeVar("T")

ENTRY_POINT_GROUP = "normgrow.extensions"

# config field → the registry holding its valid names (filled as registries are created)
BY_FIELD: dict[str, Registry] = {}

# The config fields a registry backs, fixed here rather than by which modules happen to be imported: a check of one
# of them before its registry exists is an import-order bug, raised as such, never a silent pass.
BACKED = frozenset(
    {"model.norm", "model.norm_kind", "curriculum.growth", "diagnostics.include", "data.format", "launcher.kind"}
)


class Registry(Generic[T]):
    """Names → entries of one extension point; `field` is the config key that selects an entry."""

    def __init__(self, kind: str, field: str):
        self.kind: str = kind
        self.field: str = field
        if field in BY_FIELD:  # two registries on one field: a check would read whichever was created last
            raise ValueError(f"{kind} registry: the field '{field}' already has the {BY_FIELD[field].kind} registry")
        self._entries: dict[str, T] = {}
        BY_FIELD[field] = self

    def register(self, name: str, entry: T, replace: bool = False) -> T:
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"{self.kind} name '{name}': use letters, digits, - and _")
        if name in self._entries and not replace and self._entries[name] is not entry:
            raise ValueError(f"{self.kind} '{name}' is already registered (pass replace=True to replace it)")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove an entry (user code undoing its own registration, e.g. in tests)."""
        self._entries.pop(name, None)

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            raise ConfigError(f"{self.field}: unknown {self.kind} '{name}' (registered: {', '.join(self.names())})")
        return self._entries[name]

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)


def check(field: str, name: str, key: str | None = None) -> None:
    """Raise a one-line ConfigError if `name` is not registered for `field` (reported as `key`)."""
    registry = BY_FIELD.get(field)
    if registry is None and field in BACKED:
        raise RuntimeError(f"{field}: checked before the module that creates its registry was imported")
    if registry is not None and name not in registry:
        raise ConfigError(
            f"{key or field}: unknown {registry.kind} '{name}' (registered: {', '.join(registry.names())})"
        )


_loaded = False


def load_extensions() -> None:
    """Import every module declared in the `normgrow.extensions` entry-point group (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as e:  # noqa: BLE001 - a broken extension is the user's input: one line, named
            raise ConfigError(
                f"extension '{ep.name}' ({ep.value}): cannot be imported: "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            ) from None
