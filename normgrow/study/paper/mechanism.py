"""The paper's mechanism claims: how growth favours post-norm, read without assuming where the norms sit, each
against the joint runs at the same tokens (docs/DESIGN.md §3.6 joint snapshots, §3.7). Registered by paper.py.

    boundary_update    difference in differences of the first appended block's log ‖F(h)‖/‖h‖ (sign claim, +1)
    boundary_scale     the boundary stream's RMS drift, post − pre: descriptive (a post-norm stream's RMS is its gains)
    structural_drift   the boundary's structural/content RMS ratio drift, pre-grow − pre-joint (sign claim, +1)
    identity           the block below each boundary nearly an identity map at its growth event (identity_verdict)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from normgrow.study.engine.measures import BoundaryEvent, Measures
from normgrow.study.engine.stats import Estimate
from normgrow.study.engine.verdicts import (
    CONTRADICTED,
    DESCRIPTIVE,
    NOT_TESTED,
    SUPPORTED,
    UNDETERMINED,
    Claim,
    Roles,
    describe,
    interval,
    not_tested,
    sign_claim,
    values,
)

#
# Each reads a grow run's growth events (measures.BoundaryEvent: the boundary b, the block below it, the training
# tokens T_k at the event and at the end of the next stage) against the joint run of the same placement and seed at
# the same residual or block index and the same training tokens (its diagnostics snapshot there). Indices are the grown
# model's: residual b, appended block b, block b − 1 below the boundary (for `append` also the final student's). A joint
# run has a snapshot at T tokens when `diagnostics.every_tokens` divides T; without one the claim is not tested.
# Verdicts: boundary_update and structural_drift are sign claims (+1) with margin `scale_margin` (log units); identity
# is `identity_verdict`; boundary_scale is descriptive (kind "descriptive": a number, outside Holm and the headline).

GrowRead = Callable[[BoundaryEvent], Any]  # the grow run's value at one event (None: not recorded)
JointRead = Callable[[BoundaryEvent, dict, dict], Any]  # the joint's, from its snapshots at T_k and at the end
EventKey = tuple[int, int]  # (stage, boundary)


def _log(x: float | None) -> float | None:
    return math.log(x) if x is not None and x > 0 else None


def _drift(before: float | None, after: float | None) -> float | None:
    """|log(after / before)|: how far a scale moved, either way (None without both, or at 0)."""
    a, b = _log(before), _log(after)
    return abs(b - a) if a is not None and b is not None else None


def _pick(snap: dict, key: str, i: int, cls: str | None = None) -> float | None:
    v = snap.get(key)
    v = v[i] if isinstance(v, list | tuple) and 0 <= i < len(v) else None
    return v.get(cls) if cls is not None and isinstance(v, Mapping) else v


@dataclass
class EventValues:
    """Per seed both arms finished, per growth event of the grow run: (grow value, joint value at the same index and
    tokens); seeds lacking a value at some event are left out (`unreadable`), and joint snapshots that do not exist
    are listed (`missing`: (arm, seed, tokens))."""

    by_seed: dict[int, dict[EventKey, tuple[Any, Any]]] = field(
        default_factory=dict
    )  # a reader's values: a number, a pair
    missing: list[tuple[str, int, int | None]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    no_events: list[str] = field(default_factory=list)


def event_values(m: Measures, grow: str, joint: str, read_grow: GrowRead, read_joint: JointRead) -> EventValues:
    out = EventValues()
    for s in sorted(set(m.get(grow, {})) & set(m.get(joint, {}))):
        g, j = m[grow][s], m[joint][s]
        if not g.events:
            out.no_events.append(f"{grow} seed {s}")
            continue
        row, lacking = {}, len(out.missing)
        for ev in g.events:
            at, end = j.snapshots.get(ev.tokens_at), j.snapshots.get(ev.tokens_end)  # type: ignore[arg-type]  # None finds none
            out.missing += [(joint, s, t) for t, snap in ((ev.tokens_at, at), (ev.tokens_end, end)) if snap is None]
            gv, jv = read_grow(ev), (read_joint(ev, at, end) if at is not None and end is not None else None)
            if gv is not None and jv is not None:
                row[(ev.stage, ev.boundary)] = (gv, jv)
        if len(row) == len(g.events):
            out.by_seed[s] = row
        elif len(out.missing) == lacking:
            out.unreadable.append(f"{grow}/{joint} seed {s}")
    return out


def _untestable(*parts: EventValues) -> Claim | None:
    """'Not tested' when a joint snapshot is missing, a grow run has no growth events, or no seed has every value."""
    missing = sorted({x for v in parts for x in v.missing}, key=lambda x: (x[0], x[1], x[2] or -1))
    if missing:
        by_seed: dict[tuple[str, int], list[str]] = {}
        for arm, seed, tokens in missing:
            by_seed.setdefault((arm, seed), []).append("—" if tokens is None else f"{tokens:,}")
        by_tokens: dict[tuple[str, str], list[str]] = {}  # seeds that lack the same tokens, together
        for (arm, seed), t in by_seed.items():
            by_tokens.setdefault((arm, ", ".join(t)), []).append(str(seed))
        runs = "; ".join(
            f"{arm} seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)} at {t} tokens"
            for (arm, t), seeds in by_tokens.items()
        )
        known = [t for _, _, t in missing if t]
        hint = f" to a divisor of {math.gcd(*known):,}" if known else ""
        return not_tested(
            f"the joint runs have no diagnostics record at the grow runs' growth-event tokens ({runs}): "
            "a joint run records one at T tokens when diagnostics.every_tokens divides T — set "
            f"diagnostics.every_tokens{hint} for the joint arms"
        )
    none = [x for v in parts for x in v.no_events]
    if none:
        return not_tested(f"no growth events recorded ({', '.join(none)}: its summary has no boundaries)")
    if any(not v.by_seed for v in parts):
        bad = [x for v in parts for x in v.unreadable]
        return not_tested(f"no seed has the diagnostics this claim reads at every growth event ({', '.join(bad)})")
    return None


def _event_mean(v: EventValues, f: Callable[[float, float], float]) -> dict[int, float]:
    """{seed: mean over its growth events of f(grow, joint)}."""
    return {s: sum(f(g, j) for g, j in row.values()) / len(row) for s, row in v.by_seed.items() if row}


def _new_update(ev: BoundaryEvent) -> float | None:
    return _log(ev.new_update)


def _joint_new_update(ev: BoundaryEvent, at: dict, end: dict) -> float | None:
    return _log(_pick(end, "branch_update", ev.boundary))


def boundary_update(r: Roles, m: Measures) -> Claim:
    pre = event_values(m, r.pre_grow, r.pre_joint, _new_update, _joint_new_update)
    post = event_values(m, r.post_grow, r.post_joint, _new_update, _joint_new_update)
    if (why := _untestable(pre, post)) is not None:
        return why
    dpre, dpost = _event_mean(pre, lambda g, j: g - j), _event_mean(post, lambda g, j: g - j)
    seeds = sorted(set(dpre) & set(dpost))
    c = sign_claim(
        "first appended block's log ‖F(h)‖/‖h‖ at the end of its stage, difference in differences "
        f"[{r.post_grow} − {r.pre_grow}] − [{r.post_joint} − {r.pre_joint}] (joint at the same block index "
        "and tokens; mean over growth events)",
        [dpost[s] - dpre[s] for s in seeds],
        +1,
        r.scale_margin,
    )
    each = "; ".join(
        f"{g} − {j}: {describe(interval(list(d.values())), nd=3)}"
        for g, j, d in ((r.pre_grow, r.pre_joint, dpre), (r.post_grow, r.post_joint, dpost))
    )
    c.sentence += (
        f" Within each placement, grow − joint of that log ratio: {each}. The margin is {r.scale_margin:g} "
        f"in log units (a factor e^{r.scale_margin:g})."
    )
    return c


def _rms_drift(ev: BoundaryEvent) -> float | None:
    return _drift(ev.rms_at, ev.rms_end)


def _joint_rms_drift(ev: BoundaryEvent, at: dict, end: dict) -> float | None:
    return _drift(_pick(at, "residual_rms", ev.boundary, "all"), _pick(end, "residual_rms", ev.boundary, "all"))


def drift_excess(m: Measures, pre_grow: str | None, pre_joint: str | None) -> dict[int, float]:
    """{seed: pre_grow's boundary RMS drift over the stage after each growth event minus pre_joint's at the same tokens
    and residual index, mean over events} (regime check 4); seeds lacking an event's joint snapshot are left out."""
    if not pre_grow or not pre_joint:
        return {}
    return _event_mean(event_values(m, pre_grow, pre_joint, _rms_drift, _joint_rms_drift), lambda g, j: g - j)


def boundary_scale(r: Roles, m: Measures) -> Claim:
    pre = event_values(m, r.pre_grow, r.pre_joint, _rms_drift, _joint_rms_drift)
    post = event_values(m, r.post_grow, r.post_joint, _rms_drift, _joint_rms_drift)
    if (why := _untestable(pre, post)) is not None:
        return why
    seeds = sorted(set(pre.by_seed) & set(post.by_seed))
    grow = {k: _event_mean(v, lambda g, j: g) for k, v in (("pre", pre), ("post", post))}
    joint = {k: _event_mean(v, lambda g, j: j) for k, v in (("pre", pre), ("post", post))}
    est = interval([grow["post"][s] - grow["pre"][s] for s in seeds])
    measure = f"boundary RMS drift |log(RMS end of next stage / RMS at growth)|, {r.post_grow} − {r.pre_grow}"
    c = Claim(measure, est, DESCRIPTIVE, kind="descriptive")
    jd = describe(interval([joint["post"][s] - joint["pre"][s] for s in seeds]))
    c.sentence = (
        f"{c.measure}: {describe(est)}; the joint arms over the same tokens at the same residual "
        f"index, {r.post_joint} − {r.pre_joint}: {jd} — descriptive, no verdict: a post-norm stream is a "
        "norm's output, so its RMS is the norm's gains by construction and a small post drift says nothing "
        "about the mechanism (boundary_update is the placement-independent test)."
    )
    return c


def _ratio_drift(ev: BoundaryEvent) -> float | None:
    return _drift(ev.ratio_at, ev.ratio_end)


def _joint_ratio_drift(ev: BoundaryEvent, at: dict, end: dict) -> float | None:
    return _drift(_pick(at, "struct_content_ratio", ev.boundary), _pick(end, "struct_content_ratio", ev.boundary))


def structural_drift(r: Roles, m: Measures) -> Claim:
    pre = event_values(m, r.pre_grow, r.pre_joint, _ratio_drift, _joint_ratio_drift)
    post = (
        event_values(m, r.post_grow, r.post_joint, _ratio_drift, _joint_ratio_drift)
        if r.post_grow and r.post_joint
        else None
    )
    if (why := _untestable(pre, *([post] if post else []))) is not None:
        return why
    d = _event_mean(pre, lambda g, j: g - j)
    c = sign_claim(
        f"|log| drift of the boundary's structural/content RMS ratio from the growth event to the end of the "
        f"next stage, {r.pre_grow} − {r.pre_joint} (joint at the same residual index and tokens; mean over "
        "growth events)",
        [d[s] for s in sorted(d)],
        +1,
        r.scale_margin,
    )
    if post is not None:
        dp = _event_mean(post, lambda g, j: g - j)
        c.sentence += (
            f" The same for post (context), {r.post_grow} − {r.post_joint}: {describe(interval(list(dp.values())))}."
        )
    return c


IdentityEvent = tuple[tuple[float | None, float | None], tuple[float | None, float | None]]  # r (lo, hi), s (lo, hi)


def identity_verdict(n: int, events: list[IdentityEvent], r_max: float, s_max: float) -> tuple[str, str]:
    """ "Nearly an identity map" at every growth event, from the 95% intervals of the block's relative update r and
    skip-ΔCE s there: supported when at every event both upper bounds lie below their thresholds (r < r_max and
    s < s_max); contradicted when at some event a lower bound lies above its threshold; undetermined otherwise or
    with one seed. Returns (verdict, why) — why names the first event that decides against."""
    if n < 2 or not events or any(lo is None for (rl, _), (sl, _) in events for lo in (rl, sl)):
        return UNDETERMINED, "undetermined at one seed" if n < 2 else "undetermined: no intervals"
    for k, ((rlo, _), (slo, _)) in enumerate(events):
        if rlo > r_max or slo > s_max:  # type: ignore[operator]  # no lower bound is None (above)
            what = (
                f"r's lower bound {rlo:.3f} > {r_max:g}"
                if rlo > r_max  # type: ignore[operator]  # as above
                else f"s's lower bound {slo:+.4f} > {s_max:g}"
            )
            return CONTRADICTED, f"contradicted: at event {k + 1} {what}"
    if all(rhi < r_max and shi < s_max for (_, rhi), (_, shi) in events):  # type: ignore[operator]  # bounds pair up
        return SUPPORTED, f"supported: at every event r's upper bound < {r_max:g} and s's < {s_max:g} nats"
    return UNDETERMINED, (
        f"undetermined at {n} seeds: at some event an interval crosses its threshold (r {r_max:g}, s {s_max:g} nats)"
    )


def _prefix(ev: BoundaryEvent) -> tuple[float, float] | None:
    return None if ev.prefix_update is None or ev.prefix_skip is None else (ev.prefix_update, ev.prefix_skip)


def _joint_prefix(ev: BoundaryEvent, at: dict, end: dict) -> tuple[float, float] | None:
    """The joint run's block b − 1 at T_k: the grown model's index of the block below the boundary (= ev.prefix, the
    index before growth, for append)."""
    rel, skip = _pick(at, "rel_update", ev.boundary - 1), _pick(at, "skip_ce_delta", ev.boundary - 1)
    return None if rel is None or skip is None else (rel, skip)


def _per_event(v: EventValues, side: int) -> dict[EventKey, tuple[list[float], list[float]]]:
    """{event: (r over seeds, s over seeds)} of the grow run (side 0) or the joint run (side 1)."""
    out: dict[EventKey, tuple[list[float], list[float]]] = {}
    for row in v.by_seed.values():
        for key, pair in row.items():
            rs, ss = out.setdefault(key, ([], []))
            rs.append(pair[side][0])
            ss.append(pair[side][1])
    return out


def _bounds(e: Estimate) -> tuple[float | None, float | None]:
    return e.lo, e.hi


def _rs(rs: list[float], ss: list[float]) -> str:
    er, es = interval(rs), interval(ss)
    r = f"r {er.mean:.3f}" + (f" [{er.lo:.3f}, {er.hi:.3f}]" if er.lo is not None else "")
    return r + f", s {es.mean:+.4f}" + (f" [{es.lo:+.4f}, {es.hi:+.4f}]" if es.lo is not None else "")


def identity_block(r: Roles, m: Measures) -> Claim:
    pre = event_values(m, r.pre_grow, r.pre_joint, _prefix, _joint_prefix)
    post = event_values(m, r.post_grow, r.post_joint, _prefix, _joint_prefix) if r.post_grow and r.post_joint else None
    if (why := _untestable(pre, *([post] if post else []))) is not None:
        return why
    arms = [(r.pre_grow, _per_event(pre, 0))] + ([(r.post_grow, _per_event(post, 0))] if post else [])
    arms += [(r.pre_joint, _per_event(pre, 1))] + ([(r.post_joint, _per_event(post, 1))] if post else [])
    grown, keys = arms[0][1], sorted(arms[0][1])
    n = min(len(grown[k][0]) for k in keys)
    intervals = [(_bounds(interval(grown[k][0])), _bounds(interval(grown[k][1]))) for k in keys]
    c = Claim(
        f"block below each boundary at its growth event in {r.pre_grow}: relative update r (shown: the last "
        f"event's) and skip-ΔCE s; nearly an identity map = r < {r.identity_update:g} and s < {r.margin:g} nats",
        dataclasses.replace(interval(grown[keys[-1]][0]), n=n),
    )
    c.verdict, reason = identity_verdict(n, intervals, r.identity_update, r.margin)
    text = " | ".join(
        f"event {i + 1} (stage {k[0]}, boundary {k[1]}): "
        + "; ".join(f"{arm} {_rs(*ev[k])}" for arm, ev in arms if k in ev)
        for i, k in enumerate(keys)
    )
    c.sentence = f"{c.measure}: {text} — {reason}."
    prov = {x for x in values(m, r.pre_grow, "last_prefix_provenance").values()}
    if prov:
        c.sentence += f" Provenance of the last event's block: {', '.join(sorted(prov))}."
    return c


# ----------------------------------------------------------------------------- the causal dose

DOSE_PAPER = (
    "The mechanism is causal: a pre-norm student grown with a larger boundary stream (model.boundary_scale c, the "
    "function unchanged at each growth event) ends worse — val/ce rises with log c."
)


def slopes(m: Measures, doses: dict[str, float]) -> dict[int, float]:
    """{seed: the least-squares slope of final val/ce on log c over the arms `doses` ({arm: c}), for each seed every
    arm finished}."""
    arms = list(doses)
    seeds = sorted(set.intersection(*(set(m.get(a, {})) for a in arms))) if arms else []
    out = {}
    for s in seeds:
        x = [math.log(doses[a]) for a in arms]
        y = [v for a in arms if (v := m[a][s].val_ce) is not None]
        if len(y) < len(x):
            continue
        mx, my = sum(x) / len(x), sum(y) / len(y)
        sxx = sum((xi - mx) ** 2 for xi in x)
        if sxx > 0:
            out[s] = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y, strict=True)) / sxx
    return out


def dose_gate(dose: list[Claim], claims: list[Claim], own_rates: bool) -> list[Claim]:
    """The dose claim as a verdict only where it can speak (issue 50): every dose arm at its own rate (under Adam,
    scaling the stream by c scales the appended blocks' step relative to it by 1/c, so a dose at a shared rate is
    also a rate) and a regime whose interaction lies below −δ (the paper's situation: the `interaction` claim
    supported in the same study); otherwise descriptive, its rule's reading and the missing condition said."""
    inter = next((c for c in claims if c.key == "interaction"), None)
    missing = []
    if not own_rates:
        missing.append("not every dose arm chose its own rate (envelope rates for each c)")
    if inter is None or inter.verdict != SUPPORTED:
        state = "not tested" if inter is None else inter.verdict
        missing.append(f"the study's interaction is not below −δ (interaction: {state})")
    if not missing:
        return dose
    out = []
    for c in dose:
        if c.key == "dose" and c.kind != "descriptive" and c.verdict != NOT_TESTED:
            c = replace(c, verdict=DESCRIPTIVE, holm=DESCRIPTIVE, kind="descriptive",
                        sentence=f"{c.sentence} Descriptive: {'; '.join(missing)} (its rule alone would read "
                        f"{c.verdict}).")  # fmt: skip
        out.append(c)
    return out


def dose_claims(pre: dict[str, float], post: dict[str, float], margin: float, m: Measures) -> list[Claim]:
    """The dose claim (pre-norm's per-seed slope of val/ce on log c, supported above +δ per unit of log c) and
    post-norm's slope beside it (descriptive: its stream is renormalized by the first appended block's norm)."""
    if len(set(pre.values())) < 2:
        return [
            replace(
                not_tested("the study's dose.pre arms do not span two values of model.boundary_scale"),
                key="dose",
                paper=DOSE_PAPER,
            )
        ]
    c = sign_claim(
        f"slope of val/ce on log c over {', '.join(f'{a} (c {v:g})' for a, v in pre.items())}, per seed",
        list(slopes(m, pre).values()),
        +1,
        margin,
    )
    c = replace(c, key="dose", paper=DOSE_PAPER, holm=c.verdict if c.n >= 2 else UNDETERMINED)
    out = [c]
    if len(set(post.values())) >= 2:
        est = interval(list(slopes(m, post).values()))
        measure = f"slope of val/ce on log c over {', '.join(post)}, per seed"
        d = Claim(measure, est, DESCRIPTIVE, kind="descriptive", key="dose_post", holm=DESCRIPTIVE)
        d.paper = "Post-norm renormalizes the boundary stream in its first appended block: the dose should not move it."
        d.sentence = f"{measure}: {describe(est)} — descriptive, beside the pre-norm slope."
        out.append(d)
    return out
