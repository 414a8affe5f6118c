"""The learning-rate pilot (study section `lr_pilot`): a short sub-study, run before the study's own runs, that
chooses every arm's learning rate on the model-selection set, never on the validation set the report uses.

    study dir/
        pilot/          a plain study (study.yaml, configs, runs, logs, results.csv, report.md; `normgrow report
                        DIR/pilot` works): the piloted arms (config.piloted_arms), match dropped, each
                        sweeping lr_pilot.lrs (ArmConfig.lrs) at seeds lr_pilot.seeds and budget scale
                        study.budget_scale × lr_pilot.budget_scale
        lr_choice.json  per arm: the chosen rate, where it came from, every rate's mean select/ce, the rate the arm
                        would train at without the pilot and that rate's regret
        runs/…          the study's own runs, each arm with `train.lr=<its rate>` after its overrides

The measure is `select/ce` (§3.2: `val/ce` on the model-selection set, study.select_tokens tokens of validation-split
documents after those of the validation set), at the end of each pilot run, averaged over the pilot's seeds; the
chosen rate is the lowest mean. A rate is scored only when every pilot seed finished at it (results.select_lrs): a
rate with a failed run is excluded and the report says so. An arm whose pilot finished no run at any rate is not
launched. A matched arm (ArmConfig.match) takes the rate of its *unmatched twin*, the arm with the same preset and
overrides and no match; without one it is piloted on its own, without the match.

The pilot's scope can be narrowed: `lr_pilot.arms` names the arms it runs (empty: every arm that takes no other arm's
rate), and an arm that is not piloted names the arm whose chosen rate it trains at (`arms.<arm>.lr_from`), which may
itself take another's (config.rate_path follows the path to a piloted arm; a cycle or an arm without a source is
refused when the study loads), so control arms (single-block, freeze, shallow) can take the rate of their placement's
core arm without pilot runs of their own. lr_choice.json records each arm's source: `from` (pilot, twin or lr_from),
`via` (the arms passed through) and `piloted_as` (the piloted arm at the end).

The **regret at the shared rate** = mean select/ce at the rate the arm would use without a pilot (its train.lr,
resolved from the base preset, the study's overrides and its own, as jobs resolve it) − mean select/ce at the chosen
rate: ≥ 0, in nats/token, at the pilot's budget; null when that rate is not in lr_pilot.lrs or did not finish. A
chosen rate at an edge of the grid (its highest or lowest) is flagged: the best rate may lie beyond it.

An extending pilot (`lr_pilot.extend: k`) adds rounds: after each, every piloted arm whose choice is an edge of the
rates it tried gets the next rate beyond it (`beyond_edges`), run as the sub-study pilot/extend-<i>/
(`extension_study`); the choice is over every rate tried. Each round follows from the finished runs of the rounds
before it, so a rerun re-derives the same rounds.

The pilot runs are ordinary runs: a rerun skips the finished ones and re-derives the same choice. `with_rates` turns a
study and a choice into the study whose arms carry their rates (what a budget ladder's rungs would each run).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from normgrow import atomic
from normgrow.config import load_config
from normgrow.errors import ConfigError
from normgrow.study.choice import (
    UNSET,
    ArmAt,
    ArmChoice,
    Checked,
    CheckInfo,
    Confirm,
    ConfirmArm,
    FailedRun,
    Pilot,
    PilotScore,
    RateChoice,
    RatesAt,
    Score,
    given,
)
from normgrow.study.config import LrPilotConfig, StudyConfig, complete, piloted_arms, rate_path
from normgrow.study.engine.verdicts import NOT_TESTED, claim_arms
from normgrow.study.envelope import not_closed
from normgrow.study.jobs import Job, plan_jobs
from normgrow.study.record import RunRecord, select_lrs
from normgrow.study.sections import SECTIONS, budget_label

PILOT_DIR = "pilot"
CHOICE_FILE = "lr_choice.json"
NOT_LAUNCHED = "not launched: "  # how the error of a run the pilot kept from launching begins (results.csv)


def piloted_as(study: StudyConfig, arm: str) -> str:
    """The pilot arm whose rate `arm` takes: the end of its rate path (its lr_from, a matched arm's twin), or itself."""
    return ([arm] + rate_path(study, arm))[-1]


def rate_from(study: StudyConfig, arm: str) -> tuple[str, list[str]]:
    """Where `arm`'s rate comes from: ("pilot", []) for a piloted arm, else the first step ("lr_from" or "twin") and
    the arms passed through, ending at the piloted one."""
    path = rate_path(study, arm)
    if not path:
        return "pilot", []
    return ("lr_from" if study.arms[arm].lr_from is not None else "twin"), path


def pilot_study(study: StudyConfig) -> StudyConfig:
    """The pilot sub-study: the piloted arms (lr_pilot.arms, or every arm that takes no other's rate), unmatched, each
    sweeping lr_pilot.lrs; the pilot's seeds and budget; no contrasts, claims, rivals, ladder or regime checks (it
    chooses rates, it does not compare arms)."""
    p = study.lr_pilot
    arms = {
        name: dataclasses.replace(study.arms[name], match=None, lrs=list(p.lrs), lr_from=None, budgets=[])
        for name in piloted_arms(study)
    }
    empty = {name: sec.default() for name, sec in SECTIONS.items() if not sec.pilot}
    return dataclasses.replace(
        complete(study),
        name=f"{study.name}-pilot",
        budget_scale=study.budget_scale * p.budget_scale,
        overrides=[*study.overrides, *p.overrides],
        budgets=[],
        holdout=None,
        ladder="rungs",  # the pilot is a plain study: its budget scales every stage
        ladder_base=None,
        seeds=list(p.seeds),
        arms=arms,
        contrasts={},
        gap_ratio=[],
        phase=[],
        diagnostics_pair=[],
        claims={},
        lr_pilot=LrPilotConfig(),
        **empty,
    )


def extension_study(study: StudyConfig, k: int, rates: dict[str, list[float]]) -> StudyConfig:
    """Round k ≥ 1 of an extending pilot: the piloted arms given rates beyond their edges, each sweeping only those."""
    base = pilot_study(study)
    arms = {arm: dataclasses.replace(base.arms[arm], lrs=list(lrs)) for arm, lrs in rates.items()}
    return dataclasses.replace(base, name=f"{base.name}-extend-{k}", arms=arms)


def round_dir(k: int) -> str:
    """Where round k of the pilot runs, relative to the study directory (round 0: pilot/)."""
    return PILOT_DIR if k == 0 else f"{PILOT_DIR}/extend-{k}"


def beyond_edges(study: StudyConfig, choice: RateChoice) -> dict[str, float]:
    """The next round's rate of every piloted arm whose choice sits at an edge of the rates it tried: the edge rate
    times (highest) or over (lowest) the grid's step at that edge (lr_pilot.lrs' two outermost rates there), to six
    significant digits (run names and configs carry the rate)."""
    grid = sorted(study.lr_pilot.lrs)
    step = {"highest": grid[-1] / grid[-2], "lowest": grid[0] / grid[1]}
    return {
        arm: float(f"{c.chosen * step[c.edge]:.6g}")
        for arm, c in choice.arms.items()  # 3e-4·3: 9e-4
        if c.source == "pilot" and c.edge is not None and c.chosen is not None
    }


def shared_rate(study: StudyConfig, arm: str) -> float:
    """The rate `arm` trains at without a pilot: train.lr of its preset after the study's and its own overrides."""
    a = study.arms[arm]
    try:
        return load_config(a.preset or study.base, [*study.overrides, *a.overrides]).train.lr
    except ConfigError as e:
        raise ConfigError(f"arms.{arm}: {e}") from None


def _arm_choice(study: StudyConfig, arm: str, selection: dict, records: list[RunRecord]) -> ArmChoice:
    src = piloted_as(study, arm)
    sel = selection[src]
    chosen, shared = sel["chosen"], shared_rate(study, arm)
    rates = tuple(PilotScore(lr, v["mean"], v["n"]) for lr, v in sel["lrs"].items())
    failed = tuple(FailedRun(r.lr, r.seed, r.status, r.error) for r in records if r.arm == src and not r.ok)
    at_shared = next((r for r in rates if math.isclose(r.lr, shared, rel_tol=1e-9)), None)
    best = next((r.select_ce for r in rates if r.lr == chosen), None)
    regret, note = None, None
    if at_shared is None:
        note = f"the shared rate {shared:g} is not among the pilot's rates: its regret is not measured"
    elif at_shared.select_ce is None or best is None:
        note = f"the shared rate {shared:g} has no pilot score (a pilot run at it failed or is missing)"
    else:
        regret = at_shared.select_ce - best
    lrs = sorted(sel["lrs"])
    edge = None if chosen is None else "highest" if chosen == lrs[-1] else "lowest" if chosen == lrs[0] else None
    how, via = rate_from(study, arm)
    return ArmChoice(chosen, how, tuple(via), src, rates, failed, shared, regret, note, edge, check=UNSET)


def choose_rates(
    study: StudyConfig, pilot_records: list[RunRecord], extra: dict[str, list[float]] | None = None
) -> RateChoice:
    """The choice (what lr_choice.json holds) from the pilot's results.csv rows (every round's): per arm of `study` its
    rate (null when its pilot arm finished no rate on every seed), every rate's mean select/ce, the shared rate and its
    regret. `extra`: the rates extension rounds added, per piloted arm."""
    pilot = pilot_study(study)
    extra = extra or {}
    pilot = dataclasses.replace(
        pilot, arms={arm: dataclasses.replace(a, lrs=[*a.lrs, *extra.get(arm, [])]) for arm, a in pilot.arms.items()}
    )
    records, selection = select_lrs(pilot, pilot_records)
    p = study.lr_pilot
    return RateChoice(
        Pilot(
            dir=PILOT_DIR,
            lrs=tuple(p.lrs),
            seeds=tuple(p.seeds),
            fraction=p.budget_scale,
            extend=p.extend,
            extended={arm: tuple(r) for arm, r in extra.items()},
            budget_scale=pilot.budget_scale,
            select_tokens=study.select_tokens,
            envelope_seeds=UNSET,
            measure="select/ce: mean over the pilot's seeds of val/ce on the model-selection set; "
            "the lowest is chosen; regret = select/ce(shared) − select/ce(chosen)",
        ),
        {arm: _arm_choice(study, arm, selection, records) for arm in study.arms},
        check=UNSET,
        check_skipped=UNSET,
        confirm=UNSET,
        envelope=UNSET,
    )


def anchor_choice(study: StudyConfig) -> RateChoice:
    """The choice of an envelope without a pilot (lr_pilot.lrs empty, envelope seeds given): every arm anchored at
    its rate source's own train.lr (shared_rate), no pilot rate tried; the envelope then chooses at every budget."""
    arms = {}
    for arm in study.arms:
        how, via = rate_from(study, arm)
        src = piloted_as(study, arm)
        shared = shared_rate(study, src)
        note = "no pilot: the envelope anchors at the arm's own train.lr"
        arms[arm] = ArmChoice(shared, how, tuple(via), src, (), (), shared, None, note, None, check=UNSET)
    pilot = Pilot(
        dir=None,
        lrs=(),
        seeds=(),
        fraction=None,
        extend=0,
        extended={},
        budget_scale=None,
        select_tokens=study.select_tokens,
        envelope_seeds=tuple(study.lr_pilot.envelope_seeds),
        measure="no pilot: the first budget's brackets anchor at each arm's own train.lr",
    )
    return RateChoice(pilot, arms, check=UNSET, check_skipped=UNSET, confirm=UNSET, envelope=UNSET)


def write_choice(out: Path, choice: RateChoice) -> None:
    """lr_choice.json, written from its typed records (choice.RateChoice)."""
    atomic.write_text(Path(out) / CHOICE_FILE, json.dumps(choice.to_json(), indent=2) + "\n")


def read_choice(out: Path) -> RateChoice:
    return RateChoice.from_json(json.loads((Path(out) / CHOICE_FILE).read_text()))


def with_rates(study: StudyConfig, rates: RatesAt) -> StudyConfig:
    """`study` with every arm that has a chosen rate training at it (`train.lr=<rate>` after its overrides) and no
    pilot of its own: the study a pilot feeds (the main study, or each rung of a budget ladder). A study that confirms
    its rates also scores its runs on the model-selection set (data.select_tokens, which changes no training), the
    measure the confirmation compares at half and twice the rate."""
    arms = {}
    select = [f"data.select_tokens={study.select_tokens}"] if study.lr_pilot.confirm_seeds else []
    for name, a in study.arms.items():
        rate = rates.arms[name].chosen
        a = dataclasses.replace(a, lr_from=None)  # the rate is now its own
        arms[name] = (
            a if rate is None else dataclasses.replace(a, overrides=[*a.overrides, f"train.lr={rate!r}", *select])
        )
    return dataclasses.replace(study, arms=arms, lr_pilot=LrPilotConfig())


def piloted_jobs(study: StudyConfig, out: Path, rates: RatesAt) -> tuple[list[Job], dict[str, str]]:
    """The study's jobs at their chosen rates, and {job name: why} for those not launched (no pilot rate)."""
    jobs = plan_jobs(with_rates(study, rates), out)
    blocked = {}
    for job in jobs:
        c = rates.arms[job.arm]
        if c.chosen is None:
            blocked[job.name] = (
                f"{NOT_LAUNCHED}the learning-rate pilot of {c.record.piloted_as} finished no rate on every "
                f"pilot seed ({PILOT_DIR}/results.csv)"
            )
    return jobs, blocked


# ----------------------------------------------------------------------------- the ladder's check


CHECK_DIR = f"{PILOT_DIR}/check"


def check_budget(study: StudyConfig) -> float:
    """Where a ladder's choice is checked: its middle fitted budget (the held-out one left out)."""
    fitted = [b for b in study.budgets if b != study.holdout]
    return fitted[len(fitted) // 2]


def neighbours(study: StudyConfig, c: ArmChoice) -> list[float]:
    """The chosen rate and the rate next to it on either side among those its pilot tried (every round's), or beyond
    an edge a grid step further (as `beyond_edges` steps)."""
    tried, chosen = sorted(r.lr for r in c.rates), c.chosen
    if chosen is None:
        raise ValueError(f"{c.piloted_as}: no chosen rate to check")  # check_study checks arms with a rate only
    grid = sorted(study.lr_pilot.lrs)
    i = tried.index(chosen)
    lo = tried[i - 1] if i > 0 else float(f"{chosen * grid[0] / grid[1]:.6g}")
    hi = tried[i + 1] if i + 1 < len(tried) else float(f"{chosen * grid[-1] / grid[-2]:.6g}")
    return [lo, chosen, hi]


def check_skipped(study: StudyConfig) -> str | None:
    """Why a ladder's check is not run where it would only repeat the pilot (None: it runs): at the pilot's own budget
    it would re-run the pilot's point — same budget, seed and recipe — and hold by construction."""
    if not study.budgets:
        return None
    pilot_budget = study.budget_scale * study.lr_pilot.budget_scale
    if math.isclose(check_budget(study), pilot_budget, rel_tol=1e-9) and study.ladder == "rungs":
        return (
            f"skipped: its budget {check_budget(study):g} is the pilot's own ({pilot_budget:g}), where it would re-run "
            "the pilot's point (same budget, seed and recipe) and hold by construction"
        )
    return None


def check_study(study: StudyConfig, choice: RateChoice) -> StudyConfig:
    """The second pilot point: every piloted arm that has a rate, at its chosen rate and its two neighbours, at the
    ladder's middle budget under the ladder's own recipe, on the pilot's first seed."""
    rates = {arm: neighbours(study, c) for arm, c in choice.arms.items() if c.chosen is not None}
    return check_round(study, rates)


def check_round(study: StudyConfig, rates: dict[str, list[float]]) -> StudyConfig:
    """The check's study with each piloted arm at the given rates (check_study's; plan prices it at any three)."""
    base = pilot_study(study)
    arms = {arm: dataclasses.replace(a, lrs=list(rates[arm])) for arm, a in base.arms.items() if arm in rates}
    return dataclasses.replace(
        base,
        name=f"{study.name}-pilot-check",
        budget_scale=check_budget(study),
        seeds=[study.lr_pilot.seeds[0]],
        arms=arms,
        ladder_base=study.budgets[0] if study.ladder != "rungs" else None,
    )


def with_check(study: StudyConfig, choice: RateChoice, sub: StudyConfig, records: list[RunRecord]) -> RateChoice:
    """The choice with the check's outcome: per piloted arm its select/ce at the three rates, the best of them and
    whether it is the pilot's choice (None: a check run did not finish); every arm reads its piloted arm's."""
    _, selection = select_lrs(sub, records)
    arms = {}
    for arm, c in choice.arms.items():
        sel = selection.get(c.piloted_as)
        if sel is None:
            arms[arm] = dataclasses.replace(c, check=None)
            continue
        rates = tuple(Score(lr, v["mean"]) for lr, v in sorted(sel["lrs"].items()))
        complete = all(r.select_ce is not None for r in rates)
        best = sel["chosen"] if complete else None
        arms[arm] = dataclasses.replace(c, check=Checked(rates, best, None if best is None else best == c.chosen))
    info = CheckInfo(CHECK_DIR, sub.budget_scale, tuple(sub.seeds))
    return dataclasses.replace(choice, arms=arms, check=info)


def rates_at(choice: RateChoice, budget: float | None = None) -> RatesAt:
    """The rates the study at `budget` (None: the study's own) trains at. Under the envelope, every arm's rate is its
    source's envelope choice at that budget (None where the budget has none yet). Otherwise, the pilot's choice; in a
    ladder whose check moved an arm's choice, the check's where the check's budget is nearer in log budget; the
    confirmation only at the budget it was made at."""
    if choice.envelope is not UNSET:
        env = None if budget is None else choice.envelope.get(budget_label(budget))
        arms = {
            arm: ArmAt(None if env is None else given(getattr(env.arms.get(c.piloted_as), "chosen", None)), None, c)
            for arm, c in choice.arms.items()
        }
        return RatesAt(choice, arms, env, True, given(choice.confirm))
    confirm, check = given(choice.confirm), given(choice.check)
    if confirm is not None and budget is not None and not math.isclose(budget, given(confirm.budget_scale) or budget):
        confirm = None  # a ladder confirms its rates at its largest budget only
    p1 = given(choice.pilot.budget_scale) if check is not None else None  # a check needs a pilot
    near = (
        check is not None
        and budget is not None
        and p1 is not None
        and abs(math.log(budget / check.budget_scale)) < abs(math.log(budget / p1))
    )
    arms = {}
    for arm, c in choice.arms.items():
        k = given(c.check)
        moved_here = near and k is not None and k.held is False
        arms[arm] = ArmAt(k.chosen, None, c) if moved_here else ArmAt(given(c.chosen), given(c.edge), c)
    return RatesAt(choice, arms, None, False, confirm)


def moved(choice: RateChoice) -> list[str]:
    """The arms whose choice moved at the check."""
    return [arm for arm, c in choice.arms.items() if (k := given(c.check)) is not None and k.held is False]


CONFIRM_DIR = f"{PILOT_DIR}/confirm"
CORE_ROLES = ("pre_joint", "post_joint", "pre_grow", "post_grow")
RATE_UNDETERMINED = "undetermined (learning rate)"


def core_arms(study: StudyConfig) -> list[str]:
    """The arms the claims' four core roles name (each once, in role order)."""
    arms = [study.claims.get(role) for role in CORE_ROLES]
    return list(dict.fromkeys(a for a in arms if isinstance(a, str) and a in study.arms))


def confirm_budget(study: StudyConfig) -> float:
    """Where the rates are confirmed: a plain study's budget, a ladder's largest (its held-out one, if any)."""
    return study.budgets[-1] if study.budgets else study.budget_scale


def confirm_study(study: StudyConfig, rates: RatesAt) -> StudyConfig:
    """The confirmation runs: each core arm with a chosen rate at half and twice it, on lr_pilot.confirm_seeds, at the
    confirmation budget under the study's own recipe (the pilot's overrides, which change no training, added);
    nothing compared. `rates`: the rates trained at that budget (rates_at it)."""
    return confirm_round(study, {arm: lr for arm in core_arms(study) if (lr := rates.arms[arm].chosen) is not None})


def confirm_round(study: StudyConfig, chosen: dict[str, float]) -> StudyConfig:
    """The confirmation's study with each core arm in `chosen` at half and twice its rate (confirm_study's; plan
    prices it at any rate)."""
    base = pilot_study(study)
    arms = {}
    for arm, lr in chosen.items():
        two = [float(f"{lr / 2:.6g}"), float(f"{lr * 2:.6g}")]
        arms[arm] = dataclasses.replace(study.arms[arm], match=None, lr_from=None, budgets=[], lrs=two)
    return dataclasses.replace(
        base, name=f"{study.name}-confirm", budget_scale=confirm_budget(study), seeds=list(study.lr_pilot.confirm_seeds),
        arms=arms, ladder_base=study.budgets[0] if study.budgets and study.ladder != "rungs" else None,
    )  # fmt: skip


def with_confirm(study: StudyConfig, rates: RatesAt, main: list[RunRecord], sub: list[RunRecord]) -> Confirm:
    """The confirmation's outcome: per core arm its mean select/ce over the confirmation seeds at half, one and twice
    its chosen rate (the chosen rate's from the study's own runs), and whether the rate holds: interior to its pilot's
    grid and within δ/2 of the best of the three (None: a run missing)."""
    margin = float(study.claims.get("margin", 0.01))
    seeds = set(study.lr_pilot.confirm_seeds)
    arms = {}
    for arm in core_arms(study):
        lr = rates.arms[arm].chosen
        if lr is None:
            continue
        at = {lr: [r for r in main if r.arm == arm and r.ok and r.seed in seeds]}
        for x in (float(f"{lr / 2:.6g}"), float(f"{lr * 2:.6g}")):
            at[x] = [r for r in sub if r.arm == arm and r.ok and r.seed in seeds and math.isclose(r.lr, x)]
        means: dict[float, float | None] = {}
        for x, rs in at.items():
            v = [y for y in (r.value("select_ce") for r in rs) if y is not None]
            means[x] = sum(v) / len(v) if len(v) == len(seeds) else None
        edge = rates.arms[arm].edge
        complete = all(v is not None for v in means.values())
        values = [v for v in means.values() if v is not None]
        best = min(values) if complete else None
        holds = None if best is None else bool(not edge and (means[lr] or 0.0) <= best + margin / 2)
        arms[arm] = ConfirmArm(tuple(Score(x, means[x]) for x in sorted(means)), lr, edge, holds)
    return Confirm(CONFIRM_DIR, tuple(study.lr_pilot.confirm_seeds), margin, arms, confirm_budget(study))


def rate_gate(claims: list, section: dict, rates: RatesAt | None, study: StudyConfig | None = None) -> list:
    """The claims with every verdict that reads an arm whose rate did not hold (or could not be confirmed) replaced by
    "undetermined (learning rate)", raw and Holm-adjusted (descriptive lines and untested claims stay)."""
    confirm = rates.confirm if rates is not None else None
    if rates is not None and rates.enveloped:
        failing = not_closed(study, rates.envelope, {a for a in section.values() if isinstance(a, str)})
        why = "its bracket did not close at this budget"
    elif confirm is None:
        return claims
    else:
        failing = {arm for arm, c in confirm.arms.items() if c.holds is not True}
        why = "did not hold at this budget"
    out = []
    for c in claims:
        if c.key and c.kind == "verdict" and c.verdict != NOT_TESTED and claim_arms(section, c.key) & failing:
            c = dataclasses.replace(c, verdict=RATE_UNDETERMINED, holm=RATE_UNDETERMINED)
            c.sentence += f" Read as {RATE_UNDETERMINED}: the rate of {', '.join(sorted(claim_arms(section, c.key) & failing))} {why}."
        out.append(c)
    return out
