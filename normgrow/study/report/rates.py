"""The report's sections on learning rates (the choices pilot.py and envelope.py make): the header line, the pilot's
table of select/ce per rate, a ladder's check and the rate confirmation."""

from __future__ import annotations

from normgrow.study.choice import UNSET, ArmAt, Confirm, EnvelopeScore, PilotScore, RateChoice, RatesAt, Score, given
from normgrow.study.pilot import RATE_UNDETERMINED, rates_at


def header_line(choice: RatesAt) -> str:
    p = choice.pilot
    n = len(p.seeds)
    env = choice.envelope
    if env:
        seeds = ", ".join(map(str, env.seeds))
        first = (
            "at each arm's own train.lr (no pilot)"
            if p.dir is None
            else f"by a pilot (`{p.dir}/`) at budget scale {p.budget_scale:g}"
        )
        return (
            f"Learning rates: every arm at its own best rate at this budget (envelope rates: r/2, r, 2r on seed(s) "
            f"{seeds}, chosen by the lowest mean CE on the model-selection split, never on the validation set "
            f"reported here), anchored at the rate chosen at the budget before — at the first, {first}; "
            f'see "Learning rates at budget {env.budget_scale:g} (envelope)".'
        )
    return (
        f"Learning rates: chosen per arm by a pilot (`{p.dir}/`) at budget scale {p.budget_scale:g} "
        f"({p.fraction:g} × this study's) on {n} seed{'s' if n > 1 else ''} ({', '.join(map(str, p.seeds))}), "
        f"by the lowest mean CE on the model-selection split ({p.select_tokens:,} tokens of validation-split "
        'documents after the validation set), never on the validation set reported here; see "Learning rates" '
        "and `lr_choice.json`."
    )


def _cell(rate: PilotScore, chosen: float | None) -> str:
    if rate.select_ce is None:
        return "excluded"
    v = f"{rate.select_ce:.4f}"
    return f"**{v}** ✓" if rate.lr == chosen else v


def _source_cell(at: ArmAt) -> str:
    """`pilot`, `twin X`, `lr_from X`, or with a longer path `lr_from X → … → Y` (Y the piloted arm)."""
    c = at.record
    if c.source == "pilot":
        return "pilot"
    return f"{c.source} " + " → ".join(c.via)


def choice_lines(choice: RatesAt | None) -> list[str]:
    """The report's "Learning rates" section: per arm its rate, every rate's select/ce, the shared rate's regret (none
    without a pilot: the envelope's section says it all)."""
    if not choice or choice.pilot.dir is None:
        return []
    grid = list(choice.pilot.lrs)  # the grid as written, then the rates an extension added
    extra = sorted({r.lr for c in choice.arms.values() for r in c.record.rates} - set(grid))
    lrs = sorted(grid + extra) if grid == sorted(grid) else grid + extra
    L = [
        "## Learning rates",
        "",
        "Per arm, the mean selection-set CE (`select/ce`, nats/token) of each pilot rate over the pilot's seeds; ✓ the "
        "rate it trains at here; — a rate its pilot did not try (an extending pilot adds rates beyond an edge per "
        "arm). *From*: `pilot` (its own pilot arm), `twin X` (a matched arm takes the rate of its "
        "unmatched twin X) or `lr_from X` (an arm not piloted takes X's chosen rate: arms.<arm>.lr_from; an arrow "
        "follows X to the piloted arm whose rate it is). Regret = select/ce at the shared rate (the arm's train.lr without a pilot) − at the "
        "chosen rate, at the pilot's budget.",
        "",
        "| arm | from | "
        + " | ".join(f"lr {lr:g}" for lr in lrs)
        + " | chosen | shared rate | regret at the shared rate |",
        "|---|---|" + "---|" * (len(lrs) + 3),
    ]
    if choice.envelope is not None:
        L[2] += " Under envelope rates the pilot's choice (✓ here) is only the first budget's anchor."
    notes = []
    for arm, at in choice.arms.items():
        c = at.record
        src = _source_cell(at)
        tried = {r.lr: r for r in c.rates}  # an extending pilot's arms tried some rates the others did not
        pick = c.chosen if choice.enveloped else at.chosen  # the pilot's choice (under the envelope, the anchor)
        cells = " | ".join(_cell(tried[lr], pick) if lr in tried else "—" for lr in lrs)
        chosen = "—" if pick is None else f"{pick:g}"
        regret = "—" if c.regret is None else f"{c.regret:+.4f}"
        L.append(f"| {arm} | {src} | {cells} | {chosen} | {c.shared:g} | {regret} |")
        if at.edge:
            notes.append(
                f"- `{arm}`: its rate {at.chosen:g} is the pilot's {at.edge}: a better one may lie beyond "
                "the grid (widen lr_pilot.lrs)."
            )
        if c.regret_note:
            notes.append(f"- `{arm}`: {c.regret_note}.")
        if pick is None:
            notes.append(
                f"- `{arm}`: **not run** — its pilot ({c.piloted_as}) finished no rate on every pilot seed, "
                "so no rate was chosen and its runs were not launched."
            )
    failed = {(at.record.piloted_as, f.lr, f.seed): f for at in choice.arms.values() for f in at.record.failed}
    for (src, lr, seed), f in sorted(failed.items()):
        notes.append(
            f"- pilot run `{src}` lr {lr:g} seed {seed}: {f.status} — {f.error}; rate {lr:g} is excluded for {src}."
        )
    return L + [""] + (notes + [""] if notes else [])


# ----------------------------------------------------------------------------- the second pilot point (a ladder's)


def check_lines(choice: RateChoice | None, budgets: list[float]) -> list[str]:
    """The ladder report's section on the second pilot point: per arm the three rates' select/ce there, whether the
    choice held, and the rate each budget trains at."""
    check = given(choice.check) if choice else None
    if choice and given(choice.check_skipped):
        return [
            "## Do the learning rates hold across budgets?",
            "",
            f"The pilot's check was {choice.check_skipped}.",
            "",
        ]
    if not choice or not check:
        return []
    p1, m = choice.pilot.budget_scale, check.budget_scale
    L = [
        "## Do the learning rates hold across budgets?",
        "",
        f"The pilot chose at budget {p1:g}; a second pilot point at budget {m:g} (`{check.dir}/`, seed "
        f"{', '.join(map(str, check.seeds))}) ran each piloted arm at its chosen rate and the rate next to it on "
        "either side (select/ce, nats/token). Where the best of the three differs, the choice moved, and each budget "
        "trains at the choice of the pilot point nearest to it in log budget.",
        "",
        f"| arm | rates at {m:g} | select/ce at {m:g} | best at {m:g} | held | rate per budget |",
        "|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    for arm, c in choice.arms.items():
        k = given(c.check)
        if not k:
            L.append(f"| {arm} | — | — | — | not checked | {c.chosen} |")
            continue
        rates = ", ".join(f"{r.lr:g}" for r in k.rates)
        ces = _ces(k.rates)
        held = "undetermined (a check run did not finish)" if k.held is None else "yes" if k.held else "**no**"
        per = ", ".join(f"{b:g}: {rates_at(choice, b).arms[arm].chosen:g}" for b in budgets)
        best = "—" if k.chosen is None else f"{k.chosen:g}"
        L.append(f"| {arm} | {rates} | {ces} | {best} | {held} | {per} |")
        if k.held is False and k.chosen in (k.rates[0].lr, k.rates[-1].lr):
            notes.append(
                f"- `{arm}`: its best rate at budget {m:g} is an edge of the three: a better one may lie beyond."
            )
    return L + [""] + (notes + [""] if notes else [])


# ----------------------------------------------------------------------------- confirming the rates at the budget


def _ces(rates: tuple[Score, ...] | tuple[EnvelopeScore, ...]) -> str:
    return ", ".join("—" if r.select_ce is None else f"{r.select_ce:.4f}" for r in rates)


def confirm_lines(confirm: Confirm | None) -> list[str]:
    """The report's table of the confirmation: per core arm its three rates' select/ce and whether the rate holds."""
    if not confirm:
        return []
    L = [
        f"## Do the rates hold at budget {confirm.budget_scale:g}?"
        if confirm.budget_scale is not UNSET
        else "## Do the rates hold at this budget?",
        "",
        f"Each core arm also ran at half and twice its chosen rate on seed(s) {', '.join(map(str, confirm.seeds))} "
        f"(`{confirm.dir}/`; select/ce, nats/token, mean over those seeds). A rate holds when the pilot's choice is "
        f"interior to its grid and within δ/2 = {confirm.margin / 2:g} of the best of the three; a claim reading an "
        f"arm whose rate does not hold reads *{RATE_UNDETERMINED}*.",
        "",
        "| arm | rates | select/ce | edge of the pilot's grid | holds |",
        "|---|---|---|---|---|",
    ]
    for arm, c in confirm.arms.items():
        rates = ", ".join(f"{r.lr:g}" for r in c.rates)
        holds = {True: "yes", False: "**no**", None: "not confirmed (a run missing)"}[c.holds]
        L.append(f"| {arm} | {rates} | {_ces(c.rates)} | {'yes' if c.edge else 'no'} | {holds} |")
    return L + [""]
