"""The learning-rate choice as frozen typed records: what lr_choice.json holds, read and written field by field.

    RateChoice        the file: the pilot's settings, each arm's choice, and what was added after — the ladder's
                      check (or why it was skipped), the confirmation, the envelope's brackets per budget
    Pilot             how the pilot ran (or `dir` None: no pilot, the envelope anchored at each arm's train.lr)
    ArmChoice         one arm's chosen rate, where it came from, its pilot scores and failed runs, the shared
                      rate's regret, the edge of the grid it sits at; its check's outcome when a check ran
    CheckInfo, Checked            the ladder's check of the pilot's choice at another budget, per arm
    Confirm, ConfirmArm           the confirmation at the study's budget (lr/2, lr, 2·lr on the confirm seeds)
    BudgetEnvelope, ArmEnvelope   one budget's brackets (envelope.py): per arm its rates, choice, closure, vertex
    RatesAt, ArmAt                the choice as one budget's study reads it (pilot.rates_at; never written): each
                                  arm's rate there, that budget's envelope and confirmation

The choice is these records in memory too: the pilot, the check, the confirmation and the envelope build them
(pilot.py, envelope.py), the runner passes them on, the report reads them (report/rates.py, summary.py).

`RateChoice.from_json(d).to_json() == d` for every file the pilot, the check, the confirmation and the envelope
write (key order included): a key absent from the file is UNSET, never None, and written back absent. Numbers are
kept as read. tests/study/test_choice.py checks the round trip on files written by real studies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


class _Unset:
    """A key absent from the file (not the same as a key holding null)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def _plain(value: Any) -> Any:
    """A record's value as JSON: records by their own to_json, tuples as lists, mappings as dicts."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class _Record:
    """Fields in the file's key order; JSON names where a field's differs (`source` is "from")."""

    def to_json(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not UNSET:
                out[f.metadata.get("json", f.name)] = _plain(value)
        return out


def _json_name(cls: type, name: str) -> str:
    return next(f.metadata.get("json", f.name) for f in fields(cls) if f.name == name)


def _read(cls, d: Mapping, **parse) -> Any:
    """A record from a JSON object: each field from its key (UNSET when absent), through parse[field] if given;
    a key the record does not know is an error (the file is not lr_choice.json's)."""
    names = {_json_name(cls, f.name): f.name for f in fields(cls)}
    unknown = set(d) - set(names)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown key(s) {', '.join(sorted(unknown))}")
    values = {}
    for key, name in names.items():
        if key not in d:
            values[name] = UNSET
        elif name in parse and d[key] is not None:
            values[name] = parse[name](d[key])
        else:
            values[name] = d[key]
    return cls(**values)


def _tuple(of=None):
    return lambda xs: tuple(of(x) if of else x for x in xs)


def _map(of):
    return lambda d: {k: of(v) for k, v in d.items()}


@dataclass(frozen=True)
class Score(_Record):
    lr: float | None  # None: a shared rate the brackets do not have
    select_ce: float | None


@dataclass(frozen=True)
class PilotScore(_Record):
    lr: float
    select_ce: float | None
    seeds: int


@dataclass(frozen=True)
class FailedRun(_Record):
    lr: float
    seed: int
    status: str
    error: str


@dataclass(frozen=True)
class Checked(_Record):
    rates: tuple[Score, ...]
    chosen: float | None
    held: bool | None

    @classmethod
    def from_json(cls, d: Mapping) -> Checked:
        return _read(cls, d, rates=_tuple(lambda x: _read(Score, x)))


@dataclass(frozen=True)
class ArmChoice(_Record):
    chosen: float | None
    source: str = field(metadata={"json": "from"})  # pilot, twin or lr_from
    via: tuple[str, ...]
    piloted_as: str
    rates: tuple[PilotScore, ...]
    failed: tuple[FailedRun, ...]
    shared: float | None
    regret: float | None
    regret_note: str | None
    edge: str | None
    check: Checked | None  # UNSET: no check ran; None: the check has no score of this arm

    @classmethod
    def from_json(cls, d: Mapping) -> ArmChoice:
        return _read(
            cls,
            d,
            via=_tuple(),
            rates=_tuple(lambda x: _read(PilotScore, x)),
            failed=_tuple(lambda x: _read(FailedRun, x)),
            check=Checked.from_json,
        )


@dataclass(frozen=True)
class Pilot(_Record):
    dir: str | None
    lrs: tuple[float, ...]
    seeds: tuple[int, ...]
    fraction: float | None
    extend: int
    extended: Mapping[str, tuple[float, ...]]
    budget_scale: float | None
    select_tokens: int
    envelope_seeds: tuple[int, ...]  # UNSET but without a pilot (anchor_choice)
    measure: str

    @classmethod
    def from_json(cls, d: Mapping) -> Pilot:
        return _read(cls, d, lrs=_tuple(), seeds=_tuple(), extended=_map(_tuple()), envelope_seeds=_tuple())


@dataclass(frozen=True)
class CheckInfo(_Record):
    dir: str
    budget_scale: float
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class ConfirmArm(_Record):
    rates: tuple[Score, ...]
    chosen: float
    edge: str | None
    holds: bool | None


@dataclass(frozen=True)
class Confirm(_Record):
    dir: str
    seeds: tuple[int, ...]
    margin: float
    arms: Mapping[str, ConfirmArm]
    budget_scale: float

    @classmethod
    def from_json(cls, d: Mapping) -> Confirm:
        arm = lambda x: _read(ConfirmArm, x, rates=_tuple(lambda r: _read(Score, r)))  # noqa: E731
        return _read(cls, d, seeds=_tuple(), arms=_map(arm))


@dataclass(frozen=True)
class EnvelopeScore(_Record):
    lr: float
    select_ce: float | None
    n: int
    failed: bool


@dataclass(frozen=True)
class ArmEnvelope(_Record):
    anchor: float | None
    rates: tuple[EnvelopeScore, ...]
    chosen: float | None
    edge: str | None
    closed: bool
    vertex: float | None
    rounds: int


@dataclass(frozen=True)
class BudgetEnvelope(_Record):
    budget_scale: float
    seeds: tuple[int, ...]
    widen: int
    arms: Mapping[str, ArmEnvelope]
    shared: Score

    @classmethod
    def from_json(cls, d: Mapping) -> BudgetEnvelope:
        arm = lambda x: _read(ArmEnvelope, x, rates=_tuple(lambda r: _read(EnvelopeScore, r)))  # noqa: E731
        return _read(cls, d, seeds=_tuple(), arms=_map(arm), shared=lambda x: _read(Score, x))


@dataclass(frozen=True)
class RateChoice(_Record):
    """lr_choice.json. `check` and `check_skipped` (a ladder's check, or why it was skipped), `confirm` and
    `envelope` (per budget label) are UNSET where the study did not do them."""

    pilot: Pilot
    arms: Mapping[str, ArmChoice]
    check: CheckInfo
    check_skipped: str
    confirm: Confirm
    envelope: Mapping[str, BudgetEnvelope]

    @classmethod
    def from_json(cls, d: Mapping) -> RateChoice:
        return _read(
            cls,
            d,
            pilot=Pilot.from_json,
            arms=_map(ArmChoice.from_json),
            check=lambda x: _read(CheckInfo, x, seeds=_tuple()),
            confirm=Confirm.from_json,
            envelope=_map(BudgetEnvelope.from_json),
        )


def given(value: Any) -> Any:
    """A field's value, None where the file has no such key (UNSET)."""
    return None if value is UNSET else value


# ----------------------------------------------------------------------------- the choice as one budget reads it


@dataclass(frozen=True)
class ArmAt:
    """One arm's rate where one budget's study reads it: `chosen` the rate it trains at there (the envelope's at that
    budget, or the check's where the choice moved and the check is nearer), `edge` the edge of its pilot's grid that
    rate sits at (None under the envelope, or where it moved), `record` the arm's entry in the file."""

    chosen: float | None
    edge: str | None
    record: ArmChoice


@dataclass(frozen=True)
class RatesAt:
    """The choice as the study of one budget reads it (pilot.rates_at; never written): every arm's rate there, that
    budget's envelope (None: none yet, or no envelope: `enveloped` says which) and its confirmation (None: none
    there; a ladder confirms at its largest budget only)."""

    choice: RateChoice
    arms: Mapping[str, ArmAt]
    envelope: BudgetEnvelope | None
    enveloped: bool
    confirm: Confirm | None

    @property
    def pilot(self) -> Pilot:
        return self.choice.pilot
