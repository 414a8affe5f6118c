"""Envelope rates (study section `lr_pilot.envelope_seeds`): every arm at its own best learning rate at every budget a
claim is read at, chosen there, not carried over from the pilot's budget.

Per budget (a plain study's one; every budget of a ladder, smallest first) and per piloted arm (config.piloted_arms):

    bracket     the arm at r/2, r and 2r on the envelope seeds, r anchored at the rate the arm chose at the budget
                before (at the first budget: the pilot's choice)
    widen       while the best rate is the highest (lowest) rate tried, one more rate a factor 2 beyond it, up to
                lr_pilot.envelope_widen rounds, each decided by the runs before it
    choose      the rate with the lowest mean select/ce (the model-selection set, never the validation set) over the
                envelope seeds; a rate is scored only when every envelope seed finished at it
    fill        every other seed of the study at the chosen rate

The bracket's runs are the budget's own runs (`<arm>-lr<lr>-s<seed>` in its study directory; results.csv marks them
selected yes / no), so an envelope seed's run at the chosen rate *is* that seed's run: nothing trains twice. An arm
that takes another's rate (a matched arm's unmatched twin, arms.X.lr_from) takes its source's chosen rate at that
budget.

A bracket is **closed** when its best rate has a tried rate on either side that is scored or failed (a run that
diverged bounds the bracket from its side as a worse rate would; a rate whose runs are missing does not). A claim
reading an arm whose bracket is not closed reads "undetermined (learning rate)" (pilot.rate_gate); that is the only
way a rate leaves a claim undetermined under the envelope.

Descriptive, beside the choice: the vertex of the parabola in log2(lr) through the chosen rate and its two
neighbours (where the three are scored and it curves upward), and the **shared-rate reading** — the paper's protocol,
one rate for every arm: among the rates every bracketed arm scored, the one with the lowest mean select/ce over the
arms; the report gives the contrasts' val/ce there, on the envelope seeds.

What is stored (lr_choice.json, "envelope": {budget label: …}) is recomputed from the runs on every rerun; the
module reads no file itself (runner.py hands in the records).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from normgrow.study.choice import ArmEnvelope, BudgetEnvelope, EnvelopeScore, RateChoice, Score, given
from normgrow.study.config import LrPilotConfig, StudyConfig, piloted_arms, rate_path
from normgrow.study.jobs import Job, plan_jobs
from normgrow.study.record import RunRecord
from normgrow.study.report.contrasts import contrast


def envelopes(choice: RateChoice | None) -> dict[str, BudgetEnvelope]:
    """Every budget's envelope in a choice, by budget label (none: no envelope)."""
    return dict(given(choice.envelope) or {}) if choice is not None else {}


FACTOR = 2.0  # the bracket's step: r/2, r, 2r; a widening round goes one such step beyond an edge


def _g(x: float) -> float:
    """A rate to six significant digits, as run names and configs carry it."""
    return float(f"{x:.6g}")


def bracket(anchor: float) -> list[float]:
    """The three rates of a bracket around `anchor`: r/2, r, 2r."""
    return [_g(anchor / FACTOR), _g(anchor), _g(anchor * FACTOR)]


def bracketed(study: StudyConfig) -> list[str]:
    """The arms that choose their own rate at every budget: the piloted arms (the others take a source's)."""
    return piloted_arms(study)


def scores(records: list[RunRecord], arm: str, seeds: list[int]) -> dict[float, dict]:
    """Per rate the arm ran at on the envelope seeds: the mean select/ce over them (None unless every envelope seed
    finished at it and recorded one), how many did, and whether any run failed (diverged or crashed)."""
    out: dict[float, dict] = {}
    runs = [r for r in records if r.arm == arm and r.seed in seeds]
    for lr in sorted({r.lr for r in runs}):
        at = [r for r in runs if math.isclose(r.lr, lr, rel_tol=1e-9)]
        vals = [v for r in at if r.ok and (v := r.value("select_ce")) is not None]
        whole = len(vals) == len(seeds)
        out[lr] = {
            "mean": sum(vals) / len(vals) if whole else None,
            "n": len(vals),
            "failed": any(r.status == "failed" for r in at),
        }
    return out


def vertex(points: list[tuple[float, float]]) -> float | None:
    """The rate at the vertex of the parabola in log2(lr) through three (lr, select/ce) points, when it curves upward
    (a minimum); None otherwise."""
    if len(points) != 3:
        return None
    (x0, y0), (x1, y1), (x2, y2) = [(math.log2(lr), y) for lr, y in points]
    d = (x0 - x1) * (x0 - x2) * (x1 - x2)
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / d
    b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / d
    if not a > 0:
        return None
    return _g(2 ** (-b / (2 * a)))


def arm_envelope(anchor: float, sc: dict[float, dict], rounds: int) -> ArmEnvelope:
    """One arm's envelope at one budget from its rates' scores: the chosen rate (the lowest mean select/ce), the edge
    it sits at among the rates tried (None: interior), whether the bracket is closed, the parabola's vertex."""
    tried = sorted(sc)
    scored = [lr for lr in tried if sc[lr]["mean"] is not None]
    chosen = min(scored, key=lambda lr: sc[lr]["mean"]) if scored else None
    edge, closed, vtx = None, False, None
    if chosen is not None:
        i = tried.index(chosen)
        edge = "highest" if i == len(tried) - 1 else "lowest" if i == 0 else None

        def bounds(lr: float) -> bool:
            return sc[lr]["mean"] is not None or sc[lr]["failed"]

        closed = edge is None and bounds(tried[i - 1]) and bounds(tried[i + 1])
        if edge is None and sc[tried[i - 1]]["mean"] is not None and sc[tried[i + 1]]["mean"] is not None:
            vtx = vertex([(lr, sc[lr]["mean"]) for lr in tried[i - 1 : i + 2]])
    rates = tuple(EnvelopeScore(lr, sc[lr]["mean"], sc[lr]["n"], sc[lr]["failed"]) for lr in tried)
    return ArmEnvelope(anchor, rates, chosen, edge, closed, vtx, rounds)


def budget_envelope(
    study: StudyConfig, records: list[RunRecord], anchors: dict[str, float | None], rounds: dict[str, int]
) -> BudgetEnvelope:
    """The envelope of one budget (`study` its study) from its runs: per bracketed arm its rates and choice, and the
    shared-rate reading."""
    seeds = list(study.lr_pilot.envelope_seeds)
    arms: dict[str, ArmEnvelope] = {}
    for arm in bracketed(study):
        anchor = anchors.get(arm)
        if anchor is None:
            arms[arm] = ArmEnvelope(None, (), None, None, False, None, 0)
            continue
        arms[arm] = arm_envelope(anchor, scores(records, arm, seeds), rounds.get(arm, 0))
    return BudgetEnvelope(study.budget_scale, tuple(seeds), study.lr_pilot.envelope_widen, arms, shared_rate(arms))


def shared_rate(arms: dict[str, ArmEnvelope]) -> Score:
    """The paper's protocol at this budget: among the rates every bracketed arm scored, the one with the lowest mean
    select/ce over the arms (None when the brackets share no scored rate)."""
    per = [{r.lr: r.select_ce for r in a.rates if r.select_ce is not None} for a in arms.values()]
    common = set.intersection(*(set(p) for p in per)) if per else set()
    if not common:
        return Score(None, None)
    best = min(sorted(common), key=lambda lr: sum(p[lr] for p in per))
    return Score(best, sum(p[best] for p in per) / len(per))


def widen_rates(env: BudgetEnvelope) -> dict[str, float]:
    """The next round's rate of every arm whose best rate is an edge of those it tried: a factor 2 beyond it."""
    return {
        arm: _g(a.chosen * FACTOR if a.edge == "highest" else a.chosen / FACTOR)
        for arm, a in env.arms.items()
        if a.chosen is not None and a.edge is not None
    }


# ----------------------------------------------------------------------------- jobs


def bracket_jobs(study: StudyConfig, out: Path, rates: dict[str, list[float]], point: str = "") -> list[Job]:
    """The runs of the given rates of the bracketed arms on the envelope seeds, in the budget's own directory
    (`<arm>-lr<lr>-s<seed>`)."""
    arms = {arm: dataclasses.replace(study.arms[arm], lrs=list(lrs), lr_from=None) for arm, lrs in rates.items()}
    sub = dataclasses.replace(study, arms=arms, seeds=list(study.lr_pilot.envelope_seeds), lr_pilot=LrPilotConfig())
    return plan_jobs(sub, out, point=point)


def env_rates(study: StudyConfig, env: BudgetEnvelope) -> dict[str, float | None]:
    """Every arm's rate at this budget: a bracketed arm's chosen one, any other arm its source's (pilot.piloted_as)."""
    return {arm: getattr(env.arms.get(_source(study, arm)), "chosen", None) for arm in study.arms}


def _source(study: StudyConfig, arm: str) -> str:
    """The bracketed arm whose rate `arm` trains at (pilot.piloted_as: the end of its rate path, or itself)."""
    return ([arm] + rate_path(study, arm))[-1]


def filled_study(study: StudyConfig, env: BudgetEnvelope) -> StudyConfig:
    """The budget's study with every arm at its rate there: a bracketed arm sweeping its chosen rate alone (so its
    runs keep the bracket's names, and the envelope seeds' runs are the bracket's own), every other arm with
    `train.lr=<its source's rate>` after its overrides; an arm without a rate keeps its own (its runs are blocked)."""
    rates, own = env_rates(study, env), set(bracketed(study))
    arms = {}
    for name, a in study.arms.items():
        rate = rates[name]
        if rate is None:
            arms[name] = a
        elif name in own:
            arms[name] = dataclasses.replace(a, lrs=[rate], lr_from=None)
        else:
            arms[name] = dataclasses.replace(a, overrides=[*a.overrides, f"train.lr={rate!r}"], lr_from=None)
    return dataclasses.replace(study, arms=arms, lr_pilot=LrPilotConfig())


def mark(records: list[RunRecord], env: BudgetEnvelope | None) -> list[RunRecord]:
    """The records with every bracketed arm's runs marked selected yes (at its chosen rate) or no (the rest of its
    bracket): the statistics keep the chosen rate's runs alone (RunRecord.kept). No envelope: as they are."""
    out = []
    for r in records:
        a = env.arms.get(r.arm) if env is not None else None
        if a is not None:
            ok = a.chosen is not None and math.isclose(r.lr, a.chosen, rel_tol=1e-9)
            r = dataclasses.replace(r, selected="yes" if ok else "no")
        out.append(r)
    return out


# ----------------------------------------------------------------------------- the choice per budget


def not_closed(
    study: StudyConfig | None, env: BudgetEnvelope | None, arms: frozenset[str] | set[str] = frozenset()
) -> set[str]:
    """The arms (any arm of `study`, through its source; without a study, the bracketed ones and `arms`) whose rate at
    this budget comes from a bracket that is not closed (every arm, where the budget has no envelope)."""
    own = env.arms if env is not None else {}
    if study is None:
        return {a for a in set(arms) | set(own) if not getattr(own.get(a), "closed", False)}
    if env is None:
        return set(study.arms)
    return {arm for arm in study.arms if not getattr(own.get(_source(study, arm)), "closed", False)}


# ----------------------------------------------------------------------------- the report


def _rate_cell(r: EnvelopeScore, chosen: float | None) -> str:
    if r.select_ce is None:
        return f"{r.lr:g}: " + ("failed" if r.failed else "—")
    v = f"{r.lr:g}: {r.select_ce:.4f}"
    return f"**{v}** ✓" if r.lr == chosen else v


def envelope_lines(
    env: BudgetEnvelope | None, contrasts: dict[str, tuple[float | None, int]] | None = None
) -> list[str]:
    """The report's section on the envelope at this budget: per bracketed arm its rates' select/ce, the choice, the
    edge, whether the bracket closed and the parabola's vertex; the shared-rate reading and, given, its contrasts
    ({name: (Δ val/ce, seeds)})."""
    if not env:
        return []
    seeds = ", ".join(map(str, env.seeds))
    L = [
        f"## Learning rates at budget {env.budget_scale:g} (envelope)",
        "",
        f"Each arm that chooses its own rate ran r/2, r and 2r on seed(s) {seeds}, r its choice at the budget before "
        f"(the pilot's at the first; without a pilot, the arm's own train.lr), widened a factor 2 beyond an edge up to {env.widen} round(s); the rate with "
        "the lowest mean select/ce over those seeds (nats/token, the model-selection set) is the one every seed trains "
        "at here. A bracket is *closed* when its best rate has a scored or diverged rate on either side; a claim "
        "reading an arm whose bracket is not closed reads *undetermined (learning rate)*. Vertex: the minimum of the "
        "parabola in log2(lr) through the best three (descriptive).",
        "",
        "| arm | anchor | rates: select/ce | chosen | closed | vertex |",
        "|---|---|---|---|---|---|",
    ]
    for arm, a in env.arms.items():
        cells = ", ".join(_rate_cell(r, a.chosen) for r in a.rates) or "—"
        chosen = "—" if a.chosen is None else f"{a.chosen:g}"
        closed = "yes" if a.closed else f"**no** ({a.edge} rate)" if a.edge else "**no**"
        vtx = "—" if a.vertex is None else f"{a.vertex:.3g}"
        anchor = "—" if a.anchor is None else f"{a.anchor:g}"
        L.append(f"| {arm} | {anchor} | {cells} | {chosen} | {closed} | {vtx} |")
    sh = env.shared
    L.append("")
    if sh.lr is None:
        L.append(
            "Shared-rate reading (one rate for every arm, the paper's protocol): the brackets share no scored rate."
        )
    else:
        L.append(
            f"Shared-rate reading (one rate for every arm, the paper's protocol; descriptive): {sh.lr:g}, mean "
            f"select/ce {sh.select_ce:.4f} over the arms."
        )
        for name, (d, n) in (contrasts or {}).items():
            shown = "no paired seeds" if d is None else f"{d:+.4f} ({n} seed{'s' if n != 1 else ''})"
            L.append(f"- {name} at the shared rate: {shown}")
    return L + [""]


def ladder_lines(choice: RateChoice | None) -> list[str]:
    """A ladder report's table of the envelope: per bracketed arm the rate chosen at every budget, marked where its
    bracket did not close, and the shared rate per budget (descriptive)."""
    envs = envelopes(choice)
    if not envs:
        return []
    labels = list(envs)
    arms = list(dict.fromkeys(a for env in envs.values() for a in env.arms))

    def cell(a: ArmEnvelope | None) -> str:
        if a is None or a.chosen is None:
            return "—"
        return f"{a.chosen:g}" + ("" if a.closed else " (**not closed**)")

    L = [
        "## Learning rates per budget (envelope)",
        "",
        "Each arm's rate at each budget, chosen there by its own bracket (r/2, r, 2r around its choice at the budget "
        "before, on the envelope seeds; each budget's report has the select/ce of every rate). A claim at a budget "
        "reading an arm whose bracket did not close there reads *undetermined (learning rate)*. Shared rate: one rate "
        "for every arm, the paper's protocol (descriptive).",
        "",
        "| arm | " + " | ".join(f"budget {envs[k].budget_scale:g}" for k in labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for arm in arms:
        L.append(f"| {arm} | " + " | ".join(cell(envs[k].arms.get(arm)) for k in labels) + " |")
    shared = [envs[k].shared.lr for k in labels]
    L.append("| *shared rate* | " + " | ".join("—" if x is None else f"{x:g}" for x in shared) + " |")
    return L + [""]


def envelope_section(study: StudyConfig, all_rows: list[RunRecord], env: BudgetEnvelope | None) -> list[str]:
    """The envelope's section at this budget, with the contrasts at the shared rate on the envelope seeds (every run
    of the study: the bracket's runs at other rates are not among the kept ones)."""
    if not env:
        return []
    lr, seeds, shown = env.shared.lr, set(env.seeds), {}
    if lr is not None:
        at = [r for r in all_rows if r.seed in seeds and math.isclose(r.lr, lr, rel_tol=1e-9)]
        for name, (a, b) in study.contrasts.items():
            if a in env.arms and b in env.arms:
                c = contrast(at, a, b)
                shown[name] = (c.est.mean, c.est.n)
    return envelope_lines(env, shown)
