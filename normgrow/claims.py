"""The paper's claims, each turned into a verdict from this study's numbers and their uncertainty.

Every claim names the arms it compares (`ClaimsConfig`, part of a study file), a measure taken per
seed, and a rule that turns the measure's 95% interval over seeds into one of

    supported      the interval lies on the side the paper states
    contradicted   the interval lies on the other side
    undetermined   the interval straddles the boundary, or there are fewer than two seeds
    not tested     the study lacks the arms the claim needs

The sentence a report prints for a claim is generated here from the numbers: nothing is written
by hand, and "undetermined at this number of seeds" is a valid answer. Two kinds of rule:

- sign: the paper says a difference has a sign (post − pre < 0 under growth). Supported when
  the whole interval has that sign, contradicted when it has the other.
- equivalence: the paper says a difference is about zero (the joint gap, 0.0004). Supported
  when the whole interval lies within ±margin (`ClaimsConfig.margin`, default 0.01 nats/token —
  a third of the paper's grow gap, so "about zero" means small next to the effect under study),
  contradicted when it lies entirely outside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from normgrow.stats import fieller_ratio, mean_ci

SUPPORTED, CONTRADICTED, UNDETERMINED, NOT_TESTED = "supported", "contradicted", "undetermined", "not tested"


@dataclass
class ClaimsConfig:
    pre_joint: Optional[str] = None
    """Arm: pre-norm, joint training."""
    post_joint: Optional[str] = None
    """Arm: post-norm, joint training."""
    pre_grow: Optional[str] = None
    """Arm: pre-norm, curriculum growth."""
    post_grow: Optional[str] = None
    """Arm: post-norm, curriculum growth."""
    matched: list[str] = field(default_factory=list)
    """Two arms [joint, grow] compared at equal compute: one of them is budget-matched to the other."""
    pre_single: Optional[str] = None
    """Arm: pre-norm, the single-block control (one block appended per stage)."""
    post_single: Optional[str] = None
    """Arm: post-norm, the single-block control."""
    pre_freeze: Optional[str] = None
    """Arm: pre-norm, the freeze control (only appended blocks train after each growth)."""
    post_freeze: Optional[str] = None
    """Arm: post-norm, the freeze control."""
    pre_shallow: Optional[str] = None
    """Arm: pre-norm, the shallow control (the first-stage prefix for the whole budget)."""
    post_shallow: Optional[str] = None
    """Arm: post-norm, the shallow control."""
    margin: float = 0.01
    """Differences inside ±margin (nats/token) count as 'about zero' for the claims that say so."""


@dataclass
class Claim:
    key: str
    paper: str  # what the paper says
    measure: str  # what is measured here, and its sign convention
    n: int = 0  # seeds
    mean: Optional[float] = None
    lo: Optional[float] = None  # 95% interval
    hi: Optional[float] = None
    verdict: str = NOT_TESTED
    sentence: str = ""


# per-seed values of one measure for one arm: {seed: value}
Values = dict[int, float]


def paired(a: Values, b: Values) -> list[float]:
    """b − a over the seeds both have."""
    return [b[s] - a[s] for s in sorted(set(a) & set(b))]


def _interval(diffs: list[float]) -> tuple[int, Optional[float], Optional[float], Optional[float]]:
    s = mean_ci(diffs)
    if s["mean"] is None:
        return 0, None, None, None
    if s["ci95"] is None:
        return s["n"], s["mean"], None, None
    return s["n"], s["mean"], s["mean"] - s["ci95"], s["mean"] + s["ci95"]


def sign_verdict(n: int, lo: Optional[float], hi: Optional[float], expected: int) -> str:
    """expected −1: the paper says the value is negative; +1: positive."""
    if n < 2 or lo is None:
        return UNDETERMINED
    if (expected < 0 and hi < 0) or (expected > 0 and lo > 0):
        return SUPPORTED
    if (expected < 0 and lo > 0) or (expected > 0 and hi < 0):
        return CONTRADICTED
    return UNDETERMINED


def equivalence_verdict(n: int, lo: Optional[float], hi: Optional[float], margin: float) -> str:
    if n < 2 or lo is None:
        return UNDETERMINED
    if -margin < lo and hi < margin:
        return SUPPORTED
    if lo > margin or hi < -margin:
        return CONTRADICTED
    return UNDETERMINED


def describe(n: int, mean: Optional[float], lo: Optional[float], hi: Optional[float], nd: int = 4) -> str:
    """'−0.0123 [−0.0200, −0.0046] over 3 seeds', or the single value with 'one seed: no interval'."""
    if mean is None:
        return "no finished runs"
    if lo is None:
        return f"{mean:+.{nd}f} (one seed: no interval)"
    return f"{mean:+.{nd}f} [{lo:+.{nd}f}, {hi:+.{nd}f}] over {n} seeds"


def _because(verdict: str, n: int, rule: str) -> str:
    if verdict == UNDETERMINED and n < 2:
        return "undetermined at one seed"
    if verdict == UNDETERMINED:
        return f"undetermined at {n} seeds: the 95% interval {rule}"
    return verdict


def sign_claim(key: str, paper: str, measure: str, diffs: list[float], expected: int) -> Claim:
    n, mean, lo, hi = _interval(diffs)
    verdict = sign_verdict(n, lo, hi, expected)
    side = "below" if expected < 0 else "above"
    c = Claim(key, paper, measure, n, mean, lo, hi, verdict)
    c.sentence = (f"{measure}: {describe(n, mean, lo, hi)} — "
                  f"{_because(verdict, n, f'includes 0 (the paper puts it {side} 0)')}.")
    return c


def equivalence_claim(key: str, paper: str, measure: str, diffs: list[float], margin: float) -> Claim:
    n, mean, lo, hi = _interval(diffs)
    verdict = equivalence_verdict(n, lo, hi, margin)
    c = Claim(key, paper, measure, n, mean, lo, hi, verdict)
    c.sentence = (f"{measure}: {describe(n, mean, lo, hi)} — "
                  f"{_because(verdict, n, f'crosses ±{margin:g}, the margin for about zero')}.")
    return c


def not_tested(key: str, paper: str, why: str) -> Claim:
    return Claim(key, paper, "—", verdict=NOT_TESTED, sentence=f"not tested: {why}.")


# ----------------------------------------------------------------------------- the claims

Measures = dict[str, dict[int, dict]]  # arm → seed → the run's measures (study.run_measures)


def values(measures: Measures, arm: Optional[str], key: str) -> Values:
    """{seed: measure} of an arm's finished runs that have this measure."""
    if arm is None:
        return {}
    return {s: m[key] for s, m in measures.get(arm, {}).items() if m.get(key) is not None}


def gap_by_seed(measures: Measures, a: Optional[str], b: Optional[str], key: str = "val_ce") -> dict[int, float]:
    """{seed: b − a} of a measure over the seeds both arms have."""
    va, vb = values(measures, a, key), values(measures, b, key)
    return {s: vb[s] - va[s] for s in sorted(set(va) & set(vb))}


def _gap(measures: Measures, a: Optional[str], b: Optional[str], key: str = "val_ce") -> list[float]:
    return list(gap_by_seed(measures, a, b, key).values())


def _need(roles: ClaimsConfig, *names: str) -> Optional[str]:
    missing = [n for n in names if not getattr(roles, n)]
    return f"the study names no {', '.join(missing)} arm" if missing else None


def joint_gap(r: ClaimsConfig, m: Measures) -> Claim:
    paper = "Under joint training pre- and post-norm reach the same validation CE (post − pre = −0.0004)."
    if why := _need(r, "pre_joint", "post_joint"):
        return not_tested("joint_gap", paper, why)
    return equivalence_claim("joint_gap", paper, f"joint gap, val/ce {r.post_joint} − {r.pre_joint}",
                             _gap(m, r.pre_joint, r.post_joint), r.margin)


def grow_gap(r: ClaimsConfig, m: Measures) -> Claim:
    paper = "Under curriculum growth post-norm beats pre-norm (post − pre = −0.0328)."
    if why := _need(r, "pre_grow", "post_grow"):
        return not_tested("grow_gap", paper, why)
    return sign_claim("grow_gap", paper, f"grow gap, val/ce {r.post_grow} − {r.pre_grow}",
                      _gap(m, r.pre_grow, r.post_grow), -1)


def interaction(r: ClaimsConfig, m: Measures) -> Claim:
    paper = "The grow gap is an order of magnitude larger than the joint gap (−0.0328 vs −0.0004)."
    if why := _need(r, "pre_joint", "post_joint", "pre_grow", "post_grow"):
        return not_tested("grow_vs_joint", paper, why)
    js, gs = gap_by_seed(m, r.pre_joint, r.post_joint), gap_by_seed(m, r.pre_grow, r.post_grow)
    seeds = sorted(set(js) & set(gs))
    c = sign_claim("grow_vs_joint", paper, "grow gap − joint gap (how much more growth favours post)",
                   [gs[s] - js[s] for s in seeds], -1)
    n, _, glo, ghi = _interval([gs[s] for s in seeds])
    grow_verdict = sign_verdict(n, glo, ghi, -1)
    if grow_verdict == CONTRADICTED or c.verdict == CONTRADICTED:
        c.verdict = CONTRADICTED
    elif grow_verdict != SUPPORTED:
        c.verdict = UNDETERMINED  # "larger in post's favour" needs the grow gap itself to favour post
    c.sentence = c.sentence.rsplit(" — ", 1)[0] + f" — {_because(c.verdict, n, 'of the grow gap or of this difference includes 0')}."
    ratio = fieller_ratio([gs[s] for s in seeds], [js[s] for s in seeds])
    if ratio["ratio"] is None:
        c.sentence += " Ratio grow gap / joint gap: undefined (the joint gap is 0)."
    elif ratio["lo"] is None:
        c.sentence += (f" Ratio grow gap / joint gap: {ratio['ratio']:+.1f}, interval undefined "
                       f"({ratio['why']}).")
    else:
        c.sentence += f" Ratio grow gap / joint gap: {ratio['ratio']:+.1f} [{ratio['lo']:+.1f}, {ratio['hi']:+.1f}] (Fieller)."
    return c


def matched_control(r: ClaimsConfig, m: Measures) -> Claim:
    paper = ("A compute-matched post-norm joint control stays worse than post-norm growth: compute alone "
             "does not explain the gap.")
    if len(r.matched) != 2:
        return not_tested("matched", paper, "the study names no matched [joint, grow] pair")
    joint, grow = r.matched
    c = sign_claim("matched", paper, f"at equal active-layer tokens, val/ce {grow} − {joint}",
                   _gap(m, joint, grow), -1)
    scales = list(values(m, joint, "match_scale").values()) + list(values(m, grow, "match_scale").values())
    if scales and all(s < 1 for s in scales) and c.verdict == SUPPORTED:
        c.verdict = UNDETERMINED
        c.sentence += (" But the matched arm was given less compute than its own preset (matched downward): a "
                       "comparator that only loses compute cannot test the compute explanation — undetermined.")
    elif scales:
        way = "upward" if all(s >= 1 for s in scales) else "downward"
        c.sentence += f" The matched arm's budget was scaled {way} (×{sum(scales) / len(scales):.2f})."
    return c


def crossover(r: ClaimsConfig, m: Measures) -> Claim:
    paper = "Phase-wise, the pre/post ranking crosses over: post-norm takes the lead once blocks are appended."
    if why := _need(r, "pre_grow", "post_grow"):
        return not_tested("crossover", paper, why)
    pre, post = values(m, r.pre_grow, "stage_ce"), values(m, r.post_grow, "stage_ce")
    seeds = sorted(set(pre) & set(post))
    if not seeds:
        return not_tested("crossover", paper, "no finished pair of grow runs")
    n_stages = min(len(pre[s]) for s in seeds)
    ends = [_interval([post[s][k] - pre[s][k] for s in seeds]) for k in range(n_stages)]
    text = "; ".join(f"stage {k}: {describe(*e)}" for k, e in enumerate(ends))
    sig = [(k, -1 if e[3] is not None and e[3] < 0 else 1 if e[2] is not None and e[2] > 0 else 0)
           for k, e in enumerate(ends)]
    pre_leads = [k for k, s in sig if s > 0]
    post_leads = [k for k, s in sig if s < 0]
    measure = "val/ce post − pre at every stage end of the grow arms"
    c = Claim("crossover", paper, measure, len(seeds))
    if len(seeds) < 2:
        c.verdict, why = UNDETERMINED, "undetermined at one seed (a crossover needs intervals)"
    elif pre_leads and post_leads and min(post_leads) > min(pre_leads) and max(post_leads) >= 1:
        k0, k1 = min(pre_leads), min(k for k in post_leads if k > min(pre_leads))
        c.verdict, why = SUPPORTED, f"pre leads at stage {k0} and post at stage {k1}, both intervals excluding 0"
    elif post_leads and 0 in post_leads and not pre_leads:
        c.verdict, why = CONTRADICTED, "post already leads before any block is appended and never loses the lead"
    elif pre_leads and n_stages - 1 in pre_leads:
        c.verdict, why = CONTRADICTED, "pre still leads at the last stage end"
    else:
        c.verdict, why = UNDETERMINED, f"undetermined at {len(seeds)} seeds: no lead change with intervals excluding 0"
    c.sentence = f"{measure}: {text} — {why}."
    return c


def control(key: str, paper: str, pre_role: str, post_role: str) -> Callable[[ClaimsConfig, Measures], Claim]:
    def evaluate(r: ClaimsConfig, m: Measures) -> Claim:
        if why := _need(r, pre_role, post_role):
            return not_tested(key, paper, why)
        pre, post = getattr(r, pre_role), getattr(r, post_role)
        return sign_claim(key, paper, f"val/ce {post} − {pre}", _gap(m, pre, post), -1)
    return evaluate


def shallow(r: ClaimsConfig, m: Measures) -> Claim:
    paper = "The ranking change is not shallow-block quality: on the prefix alone post-norm has no advantage."
    if why := _need(r, "pre_shallow", "post_shallow"):
        return not_tested("shallow", paper, why)
    n, mean, lo, hi = _interval(_gap(m, r.pre_shallow, r.post_shallow))
    c = Claim("shallow", paper, f"val/ce {r.post_shallow} − {r.pre_shallow}", n, mean, lo, hi)
    if n < 2 or lo is None:
        c.verdict = UNDETERMINED
    elif lo > -r.margin:
        c.verdict = SUPPORTED  # post is not better by more than the margin
    elif hi < -r.margin:
        c.verdict = CONTRADICTED  # post's prefix alone is already clearly better
    else:
        c.verdict = UNDETERMINED
    c.sentence = (f"{c.measure}: {describe(n, mean, lo, hi)} — "
                  f"{_because(c.verdict, n, f'crosses −{r.margin:g} (post better by more than the margin)')}.")
    return c


def boundary_scale(r: ClaimsConfig, m: Measures) -> Claim:
    paper = "Post-norm goes with stable residual scales at the growth boundary."
    if why := _need(r, "pre_grow", "post_grow"):
        return not_tested("boundary_scale", paper, why)
    c = sign_claim("boundary_scale", paper,
                   "boundary scale drift |log(RMS end of next stage / RMS at growth)|, post − pre",
                   _gap(m, r.pre_grow, r.post_grow, "boundary_drift"), -1)
    upd = {arm: values(m, arm, "first_new_update") for arm in (r.pre_grow, r.post_grow)}
    if all(upd.values()):
        c.sentence += (" Placement-independent view — first appended block's update ‖F(h)‖/‖h‖ at the end of "
                       "its stage: " + ", ".join(f"{a} {sum(v.values()) / len(v):.3f}" for a, v in upd.items())
                       + "; note a post-norm stream's RMS is its norm's gains by construction.")
    return c


def structural_drift(r: ClaimsConfig, m: Measures) -> Claim:
    paper = "Pre-norm goes with scale drift of structural tokens (BOS, delimiters, whitespace) at the boundary."
    if why := _need(r, "pre_grow", "post_grow"):
        return not_tested("structural_drift", paper, why)
    return sign_claim("structural_drift", paper,
                      "structural/content RMS-ratio drift at the boundary (position 0 excluded), pre − post",
                      _gap(m, r.post_grow, r.pre_grow, "struct_drift"), +1)


def identity_block(r: ClaimsConfig, m: Measures) -> Claim:
    paper = "On a fixed batch the final pre-growth block of the pre-norm model is nearly an identity map."
    if why := _need(r, "pre_grow", "pre_joint"):
        return not_tested("identity", paper, why)
    grown, index = values(m, r.pre_grow, "last_prefix_update"), values(m, r.pre_grow, "last_prefix_index")
    joint = values(m, r.pre_joint, "block_updates")  # the joint run's relative update of every block at its end
    diffs = [grown[s] - joint[s][index[s]] for s in sorted(set(grown) & set(joint)) if index[s] < len(joint[s])]
    c = sign_claim("identity", paper,
                   f"relative update of the last pre-growth block, {r.pre_grow} − the same block index in {r.pre_joint}",
                   diffs, -1)
    prov = {p for p in values(m, r.pre_grow, "last_prefix_provenance").values()}
    if prov:
        c.sentence += f" Provenance of that block: {', '.join(sorted(prov))}."
    return c


CLAIMS: list[Callable[[ClaimsConfig, Measures], Claim]] = [
    joint_gap, grow_gap, interaction, matched_control, crossover,
    control("single_block", "Single-block control: appending one block per stage also favours post-norm.",
            "pre_single", "post_single"),
    control("freeze", "Freeze control: with the prefix frozen (only appended blocks train), post-norm still wins.",
            "pre_freeze", "post_freeze"),
    shallow, boundary_scale, structural_drift, identity_block,
]


def evaluate_claims(roles: ClaimsConfig, measures: Measures) -> list[Claim]:
    """Every claim's verdict for this study."""
    return [claim(roles, measures) for claim in CLAIMS]
