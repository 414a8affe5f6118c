"""`normgrow report B --against A`: each contrast of study B next to the same contrast of study A (e.g. the
same study at twice the budget), with the claims' verdicts of both."""

from __future__ import annotations

from pathlib import Path

from normgrow.errors import NormgrowError
from normgrow.study.claims import NOT_TESTED, Claim, evaluate_claims
from normgrow.study.config import StudyConfig, load_study
from normgrow.study.measures import study_measures
from normgrow.study.results import read_results
from normgrow.study.stats import contrast_sign, paired


def study_claims(study: StudyConfig, rows: list[dict], out: Path) -> list[Claim]:
    """The claims' verdicts of a finished study from its rows (results.csv) and run directories."""
    return evaluate_claims(study.claims, study_measures(rows, out))


def compare_studies(base_dir: Path, other_dir: Path) -> list[str]:
    """Each contrast of the study in `other_dir` next to the same contrast in `base_dir` (e.g. the same study
    at twice the budget), and the claims' verdicts in both. Markdown lines.

    Readings of "the conclusions no longer move", all printed: the strict one — every contrast's change stays
    within `other`'s 95% half-width (seed noise, which shrinks as the arms converge) —, the practical one —
    every change within the claims' margin (`claims.margin`, what the claims call "about zero") —, and the
    one a reader acts on — each contrast's sign (its interval below 0, above 0, or containing 0) and each
    claim's verdict are the same at both budgets. Runs of learning rates not selected are left out; contrasts
    missing from either study are skipped; claims are compared where either study tests them."""
    studies = {}
    for d in (base_dir, other_dir):
        if not (d / "study.yaml").is_file() or not (d / "results.csv").is_file():
            raise NormgrowError(f"{d}: not a finished study directory (no study.yaml or results.csv)")
        kept = [r for r in read_results(d / "results.csv") if r.get("selected") != "no"]  # each arm's chosen lr
        studies[d] = (load_study(str(d / "study.yaml")), kept)
        if studies[d][0].sweep.axes:
            raise NormgrowError(f"{d}: is a sweep study; compare two of its points instead (DIR/points/<label>)")
    (a, rows_a), (b, rows_b) = studies[base_dir], studies[other_dir]
    L = [f"Contrasts (b − a of val/ce, mean ± 95% half-width) in `{base_dir}` (budget scale {a.budget_scale}) and "
         f"`{other_dir}` (budget scale {b.budget_scale}); sign: − or + where the interval excludes 0, ? where it "
         "contains it:", "",
         "| contrast | base | other | change | within other's interval | sign (base → other) |",
         "|---|---|---|---|---|---|"]
    within_n = signs_same = small = compared = 0
    for name, (x, y) in b.contrasts.items():
        if a.contrasts.get(name) != [x, y]:
            continue
        ca, cb = paired(rows_a, x, y), paired(rows_b, x, y)
        if ca["mean"] is None or cb["mean"] is None:
            L.append(f"| {name} | — | — | — | no paired seeds | — |")
            continue
        change = cb["mean"] - ca["mean"]
        hw = cb["ci95"]
        within = "—" if hw is None else ("yes" if abs(change) <= hw else "**no**")
        sa, sb = _sign(ca), _sign(cb)
        compared += 1
        within_n += within == "yes"
        signs_same += sa == sb
        small += abs(change) <= b.claims.margin
        L.append(f"| {name} | {ca['mean']:+.4f} ± {_hw(ca)} | {cb['mean']:+.4f} ± {_hw(cb)} | {change:+.4f} | {within} "
                 f"| {sa} → {sb} |")
    claims = [(ca, cb) for ca, cb in zip(study_claims(a, rows_a, base_dir), study_claims(b, rows_b, other_dir), strict=True)
              if not (ca.verdict == cb.verdict == NOT_TESTED)]
    if claims:
        L += ["", "| claim | verdict at base | verdict at other | same |", "|---|---|---|---|"]
        L += [f"| {ca.key} | {ca.verdict} | {cb.verdict} | {'yes' if ca.verdict == cb.verdict else '**no**'} |"
              for ca, cb in claims]
    L += ["", f"Convergence: {within_n} of {compared} contrasts moved by no more than their interval at budget scale "
          f"{b.budget_scale}; {small} of {compared} by no more than the claims' margin of "
          f"{b.claims.margin:g} nats (their 'about zero'). Signs: {signs_same} of {compared} unchanged."
          + (f" Claims: {sum(ca.verdict == cb.verdict for ca, cb in claims)} of {len(claims)} verdicts unchanged."
             if claims else "")]
    return L


def _sign(c: dict) -> str:
    """− / + where the 95% interval of a contrast lies below / above 0, ? where it contains 0 (or is unknown)."""
    return {-1: "−", 1: "+", 0: "?"}[contrast_sign(c)]



def _hw(c: dict) -> str:
    return "—" if c["ci95"] is None else f"{c['ci95']:.4f}"
