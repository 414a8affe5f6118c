"""`normgrow report B --against A`: each contrast of study B next to the same contrast of study A (e.g. the
same study at twice the budget), read as its retention ratio ρ = Δ(B) / Δ(A) (ladder.py), with the claims'
verdicts of both."""

from __future__ import annotations

from pathlib import Path

from normgrow.errors import NormgrowError
from normgrow.study.config import StudyConfig, load_study
from normgrow.study.engine.stats import Contrast
from normgrow.study.engine.verdicts import NOT_TESTED, Claim, evaluate_claims, study_roles
from normgrow.study.record import RunRecord, study_measures, verified_results
from normgrow.study.report.contrasts import contrast
from normgrow.study.report.ladder import (
    FADING,
    GROWING,
    PERSIST_HI,
    PERSIST_LO,
    PERSISTENT,
    REVERSING,
    UNDETERMINED,
    retention,
)
from normgrow.study.sections import budget_label


def study_claims(study: StudyConfig, records: list[RunRecord]) -> list[Claim]:
    """The claims' verdicts of a finished study from its records (results.csv and run directories)."""
    return evaluate_claims(study.claims, study_measures(records))


def compare_studies(base_dir: Path, other_dir: Path) -> list[str]:
    """Each contrast of the study in `other_dir` next to the same contrast in `base_dir` (e.g. the same study
    at twice the budget), and the claims' verdicts in both. Markdown lines.

    The convergence reading is the budget ladder's (ladder.py): each contrast's retention ratio ρ = Δ(other) /
    Δ(base), with Fieller's 95% interval over the seeds both studies have, labelled reversing, fading, persistent,
    growing or undetermined. (Not "the change stays within other's half-width": a contrast between two arms that
    both approach their teacher shrinks with the budget, so that check compares a drift with seed noise.) Also
    printed: each change against the claims' margin (`claims.margin`, what the claims call "about zero"), each
    contrast's sign (its interval below 0, above 0, or containing 0) and each claim's verdict at both. Runs of
    learning rates not selected are left out; contrasts missing from either study are skipped; claims are compared
    where either study tests them."""
    (a, rows_a), (b, rows_b) = (_finished_study(d) for d in (base_dir, other_dir))
    L = [
        f"Contrasts (b − a of val/ce, mean ± 95% half-width) in `{base_dir}` (budget scale {a.budget_scale}) and "
        f"`{other_dir}` (budget scale {b.budget_scale}); ρ = other / base with its Fieller 95% interval over the seeds "
        "both have, labelled reversing (upper bound < 0), fading (< 1), persistent (includes 1, within "
        f"[{PERSIST_LO:.2f}, {PERSIST_HI:.2f}]), "
        "growing (lower bound > 1) or undetermined; sign: − or + where the interval excludes 0, ? where it contains it:",
        "",
        "| contrast | base | other | change | ρ = other / base [95%] | retention | sign (base → other) |",
        "|---|---|---|---|---|---|---|",
    ]
    rows, labels, signs_same, small = _contrast_rows(a, rows_a, b, rows_b)
    L += rows or ["| (none in common) | — | — | — | — | — | — |"]
    L += left_out(a, b)
    compared = sum(labels.values())
    claims = [
        (ca, cb)
        for ca, cb in zip(study_claims(a, rows_a), study_claims(b, rows_b), strict=True)
        if not (ca.verdict == cb.verdict == NOT_TESTED)
    ]
    if claims:
        L += ["", "| claim | verdict at base | verdict at other | same |", "|---|---|---|---|"]
        L += [
            f"| {ca.key} | {ca.verdict} | {cb.verdict} | {'yes' if ca.verdict == cb.verdict else '**no**'} |"
            for ca, cb in claims
        ]
    order = [REVERSING, FADING, PERSISTENT, GROWING, UNDETERMINED]
    L += [
        "",
        f"Retention from budget scale {a.budget_scale} to {b.budget_scale}: "
        + (", ".join(f"{labels[k]} {k}" for k in order if k in labels) or "none")
        + f" of {compared} contrasts; "
        f"{small} of {compared} moved by no more than the claims' margin of {study_roles(b.claims).margin:g} nats (their 'about "
        f"zero'). Signs: {signs_same} of {compared} unchanged."
        + (
            f" Claims: {sum(ca.verdict == cb.verdict for ca, cb in claims)} of {len(claims)} verdicts unchanged."
            if claims
            else ""
        ),
    ]
    return L


def left_out(a: StudyConfig, b: StudyConfig) -> list[str]:
    """What the table leaves out, and why: contrasts only one study defines, or that both name on different arms
    (before: a table with no rows and "none of 0 contrasts", with no word why)."""
    only_a = [n for n in a.contrasts if n not in b.contrasts]
    only_b = [n for n in b.contrasts if n not in a.contrasts]
    other = [
        f"{n} (base {a.contrasts[n]}, other {b.contrasts[n]})"
        for n in b.contrasts
        if n in a.contrasts and a.contrasts[n] != b.contrasts[n]
    ]
    parts = [
        *([f"only the base defines {', '.join(only_a)}"] if only_a else []),
        *([f"only the other defines {', '.join(only_b)}"] if only_b else []),
        *([f"defined on other arms: {'; '.join(other)}"] if other else []),
    ]
    return (
        [
            "",
            "Left out (a contrast is compared where both studies define it on the same arms): "
            + "; ".join(parts)
            + ".",
        ]
        if parts
        else []
    )


def _contrast_rows(
    a: StudyConfig, rows_a: list[RunRecord], b: StudyConfig, rows_b: list[RunRecord]
) -> tuple[list[str], dict[str, int], int, int]:
    """The table's rows, one per contrast both studies define, and its tallies: retention labels, signs kept,
    changes within the claims' margin."""
    L: list[str] = []
    labels: dict[str, int] = {}
    signs_same = small = 0
    for name, (x, y) in b.contrasts.items():
        if a.contrasts.get(name) != [x, y]:
            continue
        ca, cb = contrast(rows_a, x, y), contrast(rows_b, x, y)
        if ca.est.mean is None or cb.est.mean is None:
            L.append(f"| {name} | — | — | — | no paired seeds | — | — |")
            continue
        change, r = cb.est.mean - ca.est.mean, retention(ca, cb)
        sa, sb = _sign(ca), _sign(cb)
        labels[r.label] = labels.get(r.label, 0) + 1
        signs_same += sa == sb
        small += abs(change) <= study_roles(b.claims).margin
        rho = (
            "undefined"
            if r.ratio is None
            else f"{r.ratio:+.2f}"
            + (f" [{r.lo:+.2f}, {r.hi:+.2f}]" if r.lo is not None else f" (no interval: {r.why})")
        )
        L.append(
            f"| {name} | {ca.est.mean:+.4f} ± {_hw(ca)} | {cb.est.mean:+.4f} ± {_hw(cb)} | {change:+.4f} | {rho} "
            f"| {r.label} | {sa} → {sb} |"
        )
    return L, labels, signs_same, small


def _finished_study(d: Path) -> tuple[StudyConfig, list[RunRecord]]:
    """A finished plain study's definition and its rows (each arm's selected learning rate); a sweep or a ladder
    is refused with a pointer to its sub-studies."""
    if not (d / "study.yaml").is_file() or not (d / "results.csv").is_file():
        raise NormgrowError(f"{d}: not a finished study directory (no study.yaml or results.csv)")
    study = load_study(str(d / "study.yaml"))
    if study.sweep.axes:
        raise NormgrowError(f"{d}: is a sweep study; compare two of its points instead (DIR/points/<label>)")
    if study.budgets:
        raise NormgrowError(
            f"{d}: is a budget ladder (its report already reads each contrast's retention between "
            "budgets); compare two of its budgets instead (DIR/budgets/<label>, e.g. "
            f"{d / 'budgets' / budget_label(study.budgets[-1])})"
        )
    rows = [r for r in verified_results(d) if r.kept]
    if not any(r.ok for r in rows):
        raise NormgrowError(f"{d}: no finished runs to compare")
    return study, rows


def _sign(c: Contrast) -> str:
    """− / + where the 95% interval of a contrast lies below / above 0, ? where it contains 0 (or is unknown)."""
    return {-1: "−", 1: "+", 0: "?"}[c.est.sign]


def _hw(c: Contrast) -> str:
    return "—" if c.est.half is None else f"{c.est.half:.4f}"
