"""The paper's claims at the limit of a budget ladder, registered on limits.py's registry as a user's would be: the
asymptotes E of the four main arms' fitted curves (fits.py), compared as the paper compares their final losses.

    joint_limit        ΔE = E[post_joint] − E[pre_joint] inside ±δ ("joint training: no placement gap")
    grow_limit         ΔE = E[post_grow] − E[pre_grow] below −δ ("under growth post-norm ends lower")
    interaction_limit  (E[post_grow] − E[pre_grow]) − (E[post_joint] − E[pre_joint]) below −δ ("the grow gap
                       goes beyond the joint gap")

Each over the seeds all its arms have at every fitted budget, with the centred jackknife pseudo-values as its
per-seed values (t-interval, the margin δ = claims.margin); not informative unless the ladder's extrapolation
check is supported (limits.limit_claims).
"""

from __future__ import annotations

from functools import partial

from normgrow.study.engine.verdicts import Claim, Roles, equivalence_claim, sign_claim
from normgrow.study.limits import Limits, combination, limit_claim, register_limit_claim


def joint_limit(r: Roles, lim: Limits) -> Claim:
    d = combination(lim, [(r.pre_joint, -1), (r.post_joint, +1)])
    return limit_claim(
        f"joint gap at the limit, E[{r.post_joint}] − E[{r.pre_joint}]", d, partial(_equiv, margin=r.margin)
    )


def grow_limit(r: Roles, lim: Limits) -> Claim:
    d = combination(lim, [(r.pre_grow, -1), (r.post_grow, +1)])
    return limit_claim(
        f"grow gap at the limit, E[{r.post_grow}] − E[{r.pre_grow}]", d, partial(_below, margin=r.margin)
    )


def interaction_limit(r: Roles, lim: Limits) -> Claim:
    d = combination(lim, [(r.pre_grow, -1), (r.post_grow, +1), (r.pre_joint, +1), (r.post_joint, -1)])
    return limit_claim("interaction at the limit, grow gap − joint gap of E", d, partial(_below, margin=r.margin))


def _equiv(measure: str, values: list[float], margin: float) -> Claim:
    return equivalence_claim(measure, values, margin)


def _below(measure: str, values: list[float], margin: float) -> Claim:
    return sign_claim(measure, values, -1, margin)


register_limit_claim(
    "joint_limit",
    "Under joint training the placements reach the same loss: the joint gap at the limit is about zero.",
    joint_limit,
    ("pre_joint", "post_joint"),
)
register_limit_claim(
    "grow_limit",
    "Under curriculum growth post-norm reaches a lower loss: the grow gap at the limit is negative.",
    grow_limit,
    ("pre_grow", "post_grow"),
)
register_limit_claim(
    "interaction_limit",
    "Placement and curriculum interact: at the limit post-norm gains more under growth than under joint training.",
    interaction_limit,
    ("pre_grow", "post_grow", "pre_joint", "post_joint"),
)
