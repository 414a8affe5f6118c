"""The paper's claims read for the rivals a reviewer names: another placement, or post-norm under another growth
operator, in post-norm's part of the joint-gap and grow-gap claims.

A study's `rivals:` section names, per entry, the arms `against` = [joint, grow] that take post-norm's part and the
`reference` = [joint, grow] that take pre-norm's (default: the claims' pre_joint and pre_grow). Each entry gets

    joint_gap[<entry>]   under joint training the rival and the reference reach the same val/ce (inside ±δ)
    grow_gap[<entry>]    under growth the rival beats the reference (its whole interval below −δ)

computed by the paper's own claim functions (paper.joint_gap, paper.grow_gap) with the roles remapped, so the
measures, margins, rules and sentences are the paper's; p-values and Holm's adjustment run across every rival claim
of the study (a family of its own beside the paper's claims). A pair of arms the paper's claims already read (the
study's post_joint against pre_joint, say), or that an earlier entry read, is not read again: it would count one
question twice in Holm's family.
"""

from __future__ import annotations

from typing import Any

from normgrow.study.engine.measures import Measures
from normgrow.study.engine.verdicts import Claim, ClaimSpec, Roles, evaluate_specs, study_roles
from normgrow.study.paper.claims import grow_gap, joint_gap

PAPER = {
    "joint_gap": (
        "Under joint training {x} and the reference reach the same validation CE (the paper's joint gap, post − pre "
        "= −0.0004, with {x} in post-norm's part).",
        joint_gap,
        ("pre_joint", "post_joint"),
    ),
    "grow_gap": (
        "Under curriculum growth {x} beats the reference (the paper's grow gap, post − pre = −0.0328, with {x} in "
        "post-norm's part).",
        grow_gap,
        ("pre_grow", "post_grow"),
    ),
}


def rival_specs(rivals: dict[str, Any], section: dict[str, Any]) -> list[tuple[ClaimSpec, Roles]]:
    """(claim, the roles it reads) for every rival entry and claim, skipping a pair already read."""
    base = study_roles(section)
    read = {(base.pre_joint, base.post_joint), (base.pre_grow, base.post_grow)}
    out = []
    for name, rival in rivals.items():
        ref = list(rival.reference) or [base.pre_joint, base.pre_grow]
        roles = {"pre_joint": ref[0], "pre_grow": ref[1], "post_joint": rival.against[0], "post_grow": rival.against[1]}
        r = study_roles({**section, **roles})
        for key, (paper, evaluate, parts) in PAPER.items():
            pair = (getattr(r, parts[0]), getattr(r, parts[1]))
            if pair in read:
                continue
            read.add(pair)
            out.append((ClaimSpec(f"{key}[{name}]", paper.format(x=name), evaluate, parts, ("val_ce",)), r))
    return out


def rival_claims(rivals: dict[str, Any], section: dict[str, Any], measures: Measures) -> list[Claim]:
    """Every rival entry's claims with verdicts, p-values and Holm's adjustment across them."""
    return evaluate_specs(rival_specs(rivals, section), measures) if rivals else []


RIVALS_TITLE = "## Rivals against the reference: the paper's joint and grow gaps, generalised"


def rivals_intro(rivals: dict[str, Any], section: dict[str, Any]) -> list[str]:
    """What each entry compares (arms in post-norm's part, and the reference), above the rival claims' table."""
    base = study_roles(section)
    lines = []
    for name, rival in rivals.items():
        ref = list(rival.reference) or [base.pre_joint, base.pre_grow]
        lines.append(f"- `{name}`: {rival.against[0]} − {ref[0]} (joint), {rival.against[1]} − {ref[1]} (grow)")
    return [
        "Each entry puts its arms in post-norm's part of the paper's joint-gap and grow-gap claims, against the "
        "reference in pre-norm's (negative = the entry's arm is better); a pair the paper's claims already read is "
        "not repeated. Holm's adjustment runs across the claims of this section.",
        "",
        *lines,
        "",
    ]
