"""The learning-rate pilot (study section `lr_pilot`, normgrow/study/pilot.py): validation, the twin rule, the choice
from hand-made pilot rows, and tiny real studies whose main runs train at the rates their pilot chose."""

import dataclasses
import json

import pytest
from test_runner import results, write_study

from conftest import cli
from normgrow.errors import ConfigError
from normgrow.study.choice import RateChoice, RatesAt
from normgrow.study.config import ArmConfig, LrPilotConfig, StudyConfig, twin_of, validate_study
from normgrow.study.pilot import (
    beyond_edges,
    choose_rates,
    extension_study,
    pilot_study,
    rates_at,
    round_dir,
    with_rates,
)
from normgrow.study.record import from_row


def hand_rates(chosen: dict, **arms) -> RatesAt:
    """The rates a study trains at, from each arm's chosen rate by hand (the choice's other keys unset)."""
    return rates_at(RateChoice.from_json({"arms": {a: {"chosen": r, **arms.get(a, {})} for a, r in chosen.items()}}))


@pytest.mark.parametrize(
    "over,needle",
    [
        (["lr_pilot.lrs=[0.001]"], "lr_pilot.lrs: a pilot of one rate (0.001) chooses nothing"),
        (["lr_pilot.lrs=[0.001,0.001]"], "lr_pilot.lrs: need distinct positive learning rates"),
        (["lr_pilot.lrs=[0.001,-0.002]"], "lr_pilot.lrs: need distinct positive learning rates"),
        (["lr_pilot.budget_scale=0"], "lr_pilot.budget_scale: must be in (0, 1]"),
        (["lr_pilot.budget_scale=1.5"], "lr_pilot.budget_scale: must be in (0, 1]"),
        (["lr_pilot.seeds=[]"], "lr_pilot.seeds: need distinct seeds"),
        (["lr_pilot.seeds=[1,1]"], "lr_pilot.seeds: need distinct seeds"),
        (["lr_pilot.overrides=[seeds=3]"], "lr_pilot.overrides: expected run-config overrides key=value"),
        (
            ["lr_pilot.lrs=[0.001,0.002]", "lr_pilot.extend=-1"],
            "lr_pilot.extend: must be between 0 and 8 rounds, got -1",
        ),
        (["lr_pilot.lrs=[0.001,0.002]", "lr_pilot.extend=9"], "lr_pilot.extend: must be between 0 and 8 rounds, got 9"),
        (
            ["lr_pilot.lrs=[0.001,0.002]", "arms.pre-grow.lrs=[0.001,0.002]"],
            "lr_pilot.lrs: arm pre-grow sweeps its own rates (arms.pre-grow.lrs) and a pilot would choose another: use "
            "either arms.pre-grow.lrs",
        ),
        (
            ["lr_pilot.lrs=[0.001,0.002]", "sweep.axes=[{key: model.d_model, values: [32, 64]}]"],
            "lr_pilot.lrs: a sweep study cannot run a learning-rate pilot yet",
        ),
    ],
)
def test_bad_pilot_input_is_one_line_naming_the_field(tmp_path, over, needle):
    proc = cli("study", "default", "-o", tmp_path / "s", *over, check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and err[0].startswith("normgrow: error:"), proc.stderr
    assert needle in err[0], err[0]
    assert not (tmp_path / "s").exists()


def hand_study(**pilot) -> StudyConfig:
    """joint/grow arms of both placements on the tiny preset, two matched arms with a twin, one without."""
    arms = {
        "pj": ArmConfig(preset="joint", overrides=["model.norm=pre"]),
        "pg": ArmConfig(preset="grow", overrides=["model.norm=post"]),
        "pg-m": ArmConfig(preset="grow", overrides=["model.norm=post"], match="pj"),  # twin: pg
        "pj-m": ArmConfig(preset="joint", overrides=["model.norm=pre"], match="pg"),  # twin: pj
        "base": ArmConfig(overrides=["model.norm=post"]),  # the base preset, named by omission
        "base-m": ArmConfig(preset="tiny", overrides=["model.norm=post"], match="pj"),  # twin: base (same preset)
        "lonely": ArmConfig(preset="grow", overrides=["model.norm=pre"], match="pj"),
    }  # no unmatched twin
    return StudyConfig(
        base="tiny",
        budget_scale=0.5,
        seeds=[0, 1, 2],
        arms=arms,
        contrasts={"g": ["pj", "pg"]},
        overrides=["train.lr=0.003"],
        lr_pilot=LrPilotConfig(**pilot),
    )


def test_a_matched_arm_takes_its_unmatched_twins_rate_and_one_without_a_twin_is_piloted_unmatched():
    s = hand_study(lrs=[0.001, 0.004], budget_scale=0.25, seeds=[7], overrides=["diagnostics.enabled=false"])
    validate_study(s)
    assert {a: twin_of(s, a) for a in s.arms} == {
        "pj": None,
        "pg": None,
        "pg-m": "pg",
        "pj-m": "pj",
        "base": None,
        "base-m": "base",
        "lonely": None,
    }
    p = pilot_study(s)
    assert list(p.arms) == ["pj", "pg", "base", "lonely"]
    assert all(a.lrs == [0.001, 0.004] and a.match is None for a in p.arms.values())
    assert p.arms["lonely"].overrides == ["model.norm=pre"] and p.arms["lonely"].preset == "grow"
    assert p.seeds == [7] and p.budget_scale == 0.125  # 0.5 × 0.25
    assert p.overrides == ["train.lr=0.003", "diagnostics.enabled=false"]  # the pilot's own after the study's
    assert with_rates(s, hand_rates(dict.fromkeys(s.arms))).overrides == ["train.lr=0.003"]
    assert not p.contrasts and not p.lr_pilot.lrs  # the pilot compares no arms and pilots nothing itself
    validate_study(p)
    chosen = {"pj": 0.004, "pg": 0.001, "pg-m": 0.001, "pj-m": 0.004, "base": 0.004, "base-m": 0.004, "lonely": None}
    rated = with_rates(s, hand_rates(chosen))
    assert rated.arms["pg-m"].overrides == ["model.norm=post", "train.lr=0.001"] and rated.arms["pg-m"].match == "pj"
    assert rated.arms["pj"].overrides == ["model.norm=pre", "train.lr=0.004"]
    assert rated.arms["lonely"].overrides == ["model.norm=pre"]  # no rate: left as it was (and not launched)
    assert not rated.lr_pilot.lrs and rated.seeds == s.seeds and rated.budget_scale == s.budget_scale


def row(arm, lr, seed, ce, status="ok"):
    """A pilot run's results.csv row, as its record."""
    return from_row(
        {
            "arm": arm,
            "lr": str(lr),
            "seed": str(seed),
            "status": status,
            "select_ce": "" if ce is None else str(ce),
            "error": "" if status == "ok" else "TrainingDiverged: non-finite train/loss",
            "selected": "",
        }
    )


def test_the_choice_excludes_a_rate_with_a_failed_pilot_run_and_measures_the_shared_rates_regret():
    """Hand-made pilot rows at two seeds. `pj`: 0.001 → 3.0, 3.2 (mean 3.1); 0.003 → 2.9, failed (excluded, though the
    surviving seed is the lowest number); 0.004 → 3.0, 3.0 (mean 3.0, chosen). `pg` at 0.001 → 2.5 (chosen), 0.003 →
    2.7, so its regret at the shared rate 0.003 (the study sets train.lr=0.003) is 2.7 − 2.5 = 0.2."""
    s = hand_study(lrs=[0.001, 0.003, 0.004], seeds=[0, 1])
    rows = [
        row("pj", 0.001, 0, 3.0),
        row("pj", 0.001, 1, 3.2),
        row("pj", 0.003, 0, 2.9),
        row("pj", 0.003, 1, None, "failed"),
        row("pj", 0.004, 0, 3.0),
        row("pj", 0.004, 1, 3.0),
    ]
    rows += [row("pg", lr, sd, ce) for lr, ce in ((0.001, 2.5), (0.003, 2.7), (0.004, 2.6)) for sd in (0, 1)]
    rows += [row("base", lr, sd, None, "failed") for lr in (0.001, 0.003, 0.004) for sd in (0, 1)]  # every run failed
    rows += [row("lonely", lr, sd, 4.0 - lr) for lr in (0.001, 0.003, 0.004) for sd in (0, 1)]
    c = choose_rates(s, rows).to_json()["arms"]  # as lr_choice.json holds it
    assert c["pj"]["chosen"] == 0.004 and c["pj"]["from"] == "pilot"
    assert [(r["lr"], r["select_ce"], r["seeds"]) for r in c["pj"]["rates"]] == [
        (0.001, pytest.approx(3.1), 2),
        (0.003, None, 1),
        (0.004, 3.0, 2),
    ]
    assert [(f["lr"], f["seed"]) for f in c["pj"]["failed"]] == [(0.003, 1)]
    assert c["pg"]["chosen"] == 0.001 and c["pg-m"]["chosen"] == 0.001 and c["pg-m"]["from"] == "twin"
    assert c["pg-m"]["piloted_as"] == "pg"
    assert c["base"]["chosen"] is None and c["base-m"]["chosen"] is None  # no finished rate: not launched
    assert c["lonely"]["chosen"] == 0.004 and c["lonely"]["from"] == "pilot"
    assert (c["pj"]["edge"], c["pg"]["edge"], c["base"]["edge"]) == ("highest", "lowest", None)
    assert c["pg"]["shared"] == 0.003 and c["pg"]["regret"] == pytest.approx(0.2) and c["pg"]["regret_note"] is None
    assert c["pg-m"]["regret"] == pytest.approx(0.2)  # the twin's numbers
    assert c["pj"]["regret"] is None and "0.003 has no pilot score" in c["pj"]["regret_note"]  # it failed a seed
    assert c["base"]["regret"] is None and c["base"]["shared"] == 0.003
    off = choose_rates(hand_study(lrs=[0.001, 0.004], seeds=[0, 1]), [r for r in rows if r.lr != 0.003]).arms["pg"]
    assert off.regret is None and off.regret_note == (
        "the shared rate 0.003 is not among the pilot's rates: its regret is not measured"
    )


def test_an_extending_pilot_adds_one_grid_step_beyond_each_edge_choice_and_stops_when_interior():
    """Grid 0.001 / 0.002 / 0.004 (steps ×2 at the top, ×½ at the bottom). Round 0: pj is best at 0.004 (highest),
    pg at 0.001 (lowest), base interior at 0.002; the matched arms take their twins' rates and get no round of their
    own. Round 1 gives pj 0.008 and pg 0.0005. With pj worse at 0.008 its choice stays 0.004, now interior; pg better at
    0.0005 sits at the new lowest edge, so round 2 would give it 0.00025."""
    s = hand_study(lrs=[0.001, 0.002, 0.004], seeds=[0], extend=2)
    ce = {"pj": (3.3, 3.2, 3.1), "pg": (2.5, 2.6, 2.7), "base": (3.0, 2.9, 3.0), "lonely": (3.0, 2.9, 3.0)}
    rows = [row(arm, lr, 0, v) for arm, vals in ce.items() for lr, v in zip((0.001, 0.002, 0.004), vals, strict=True)]
    first = beyond_edges(s, choose_rates(s, rows))
    assert first == pytest.approx({"pj": 0.008, "pg": 0.0005})
    sub = extension_study(s, 1, {arm: [lr] for arm, lr in first.items()})
    assert {a: arm.lrs for a, arm in sub.arms.items()} == {"pj": [0.008], "pg": [0.0005]} and round_dir(
        1
    ) == "pilot/extend-1"
    rows += [row("pj", 0.008, 0, 3.15), row("pg", 0.0005, 0, 2.4)]
    c = choose_rates(s, rows, {"pj": [0.008], "pg": [0.0005]})
    assert c.arms["pj"].chosen == 0.004 and c.arms["pj"].edge is None
    assert c.arms["pg"].chosen == 0.0005 and c.arms["pg"].edge == "lowest"
    assert c.arms["pg-m"].chosen == 0.0005 and c.pilot.extended == {"pj": (0.008,), "pg": (0.0005,)}
    assert [r.lr for r in c.arms["pg"].rates] == [0.001, 0.002, 0.004, 0.0005]
    assert beyond_edges(s, c) == pytest.approx({"pg": 0.00025})
    assert choose_rates(s, rows).arms["pg"].chosen == 0.001  # without the extension, its rows are not scored


def test_validation_of_a_hand_made_study_names_the_field():
    with pytest.raises(ConfigError, match=r"^lr_pilot\.budget_scale: must be in \(0, 1\]"):
        validate_study(hand_study(lrs=[0.001, 0.002], budget_scale=2.0))


def summaries(study_dir, arm):
    """{(lr, seed): select/ce} read from the run directories' summary.json files of one pilot arm."""
    out = {}
    for d in sorted((study_dir / "runs").glob(f"{arm}-lr*-s*")):
        s = json.loads((d / "summary.json").read_text())
        lr, seed = d.name[len(arm) + 3 :].rsplit("-s", 1)
        out[(float(lr), int(seed))] = s["select"]["select/ce"]
    return out


@pytest.mark.e2e
def test_a_study_with_a_pilot_trains_each_arm_at_its_chosen_rate(tiny_cache, tmp_path):
    """Pilot: pre and post at 1e-4 and 3e-3, seed 0, half the study's budget; the study's shared rate is 1e-4. Main:
    pre, post and post-m (post matched to pre: it takes post's rate), two seeds each."""
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {
            "pre": "{overrides: [model.norm=pre]}",
            "post": "{overrides: [model.norm=post]}",
            "post-m": "{overrides: [model.norm=post], match: pre}",
        },
        launcher="inline",
        extra="select_tokens: 1024\ncontrasts: {gap: [pre, post]}\n"
        "lr_pilot: {lrs: [0.0001, 0.003], seeds: [0], budget_scale: 0.5}\n",
    )
    spec.write_text(spec.read_text().replace("model.n_layer=2]", "model.n_layer=2, train.lr=0.0001]"))
    out = tmp_path / "study"
    first = cli("study", spec, "-o", out, "--no-progress").stdout.splitlines()
    # the pilot's summary lines say they are the pilot's: none before the choice reads as the study's result
    before = first[: next(i for i, line in enumerate(first) if line.startswith("learning rate of"))]
    assert any(line.startswith("pilot (budget 0.5): ") for line in before), first
    assert not any(line.startswith(("collapsed", "paper's claims", "gap (")) for line in before), first
    pilot = results(out / "pilot")
    assert sorted((r["arm"], float(r["lr"]), r["seed"]) for r in pilot) == [
        ("post", 0.0001, "0"),
        ("post", 0.003, "0"),
        ("pre", 0.0001, "0"),
        ("pre", 0.003, "0"),
    ]  # no pilot of post-m
    for r in pilot:  # half the study's budget: 2 stages of 1280 tokens
        assert r["status"] == "ok" and int(r["tokens"]) == 2560
    choice = json.loads((out / "lr_choice.json").read_text())
    for arm, src in (("pre", "pre"), ("post", "post"), ("post-m", "post")):
        sel = summaries(out / "pilot", src)
        best = min((0.0001, 0.003), key=lambda lr: sel[(lr, 0)])
        c = choice["arms"][arm]
        assert c["chosen"] == best and c["piloted_as"] == src and c["from"] == ("pilot" if arm == src else "twin")
        assert [(x["lr"], x["select_ce"]) for x in c["rates"]] == [
            (lr, pytest.approx(sel[(lr, 0)])) for lr in (0.0001, 0.003)
        ]
        assert c["shared"] == 0.0001 and c["regret"] == pytest.approx(sel[(0.0001, 0)] - sel[(best, 0)])
        for seed in (0, 1):  # the main runs trained at it
            cfg = (out / "runs" / f"{arm}-s{seed}" / "config.yaml").read_text()
            assert f"lr: {best}\n" in cfg, arm
    rows = results(out)
    assert sorted((r["arm"], r["seed"]) for r in rows) == [(a, s) for a in ("post", "post-m", "pre") for s in "01"]
    assert all(r["status"] == "ok" and float(r["lr"]) == choice["arms"][r["arm"]]["chosen"] for r in rows)
    report = (out / "report.md").read_text()
    assert (
        "## Learning rates" in report
        and "by a pilot (`pilot/`) at budget scale 0.5 (0.5 × this study's) on 1 seed" in report
    )
    post = choice["arms"]["post"]
    cells = " | ".join(
        f"**{x['select_ce']:.4f}** ✓" if x["lr"] == post["chosen"] else f"{x['select_ce']:.4f}" for x in post["rates"]
    )
    assert f"| post-m | twin post | {cells} | {post['chosen']:g} | 0.0001 | {post['regret']:+.4f} |" in report
    edge = "highest" if post["chosen"] == 0.003 else "lowest"  # two rates: the chosen one is always an edge
    assert (
        f"- `post-m`: its rate {post['chosen']:g} is the pilot's {edge}: a better one may lie beyond the grid" in report
    )
    cli("report", out / "pilot")  # the pilot is a study of its own
    assert "## Learning-rate selection" in (out / "pilot" / "report.md").read_text()

    again = cli("study", spec, "-o", out, "--no-progress")  # a rerun: every run skipped, the same choice
    assert "4 of 4 runs already finished" in again.stdout and "6 of 6 runs already finished" in again.stdout
    assert json.loads((out / "lr_choice.json").read_text()) == choice and results(out) == rows
    cli("report", out)
    assert json.loads((out / "lr_choice.json").read_text()) == choice and results(out) == rows
    # lr_choice.json is a record, never an input: edited, cut or deleted, the rerun derives it again from the
    # pilot's runs and trains (here: keeps) the same runs
    edited = {**choice, "arms": {a: {**c, "chosen": 0.5} for a, c in choice["arms"].items()}}
    for damage in (json.dumps(edited), '{"arms": {"pre": {"cho', None):
        if damage is None:
            (out / "lr_choice.json").unlink()
        else:
            (out / "lr_choice.json").write_text(damage)
        again = cli("study", spec, "-o", out, "--no-progress")
        assert "6 of 6 runs already finished" in again.stdout
        assert json.loads((out / "lr_choice.json").read_text()) == choice and results(out) == rows


@pytest.mark.slow  # 19 s; the extension rule by hand: test_an_extending_pilot_adds_one_grid_step_beyond_…
def test_an_extending_pilot_runs_its_rounds_and_every_arm_trains_at_the_best_rate_it_tried(tiny_cache, tmp_path):
    """lr_pilot.extend=2 on the tiny student: rates 1e-4 and 3e-4 (step ×3), then, for each arm whose best is an edge,
    one more rate per round. Checked against the runs' own summaries: each round ran exactly the arms at an edge after
    the rounds before (at the next grid step), the final choice is the lowest select/ce over every rate the arm tried,
    the main runs train at it, and a rerun and `normgrow report` re-derive the same choice."""
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        launcher="inline",
        extra="select_tokens: 1024\ncontrasts: {gap: [pre, post]}\n"
        "lr_pilot: {lrs: [0.0001, 0.0003], seeds: [0], budget_scale: 0.5, extend: 2}\n",
    )
    out = tmp_path / "study"
    cli("study", spec, "-o", out, "--no-progress")
    choice = json.loads((out / "lr_choice.json").read_text())
    tried = {
        arm: {0.0001: summaries(out / "pilot", arm)[(0.0001, 0)], 0.0003: summaries(out / "pilot", arm)[(0.0003, 0)]}
        for arm in ("pre", "post")
    }
    for k in (1, 2):
        edge = {
            arm: float(f"{max(t) * 3:.6g}") if min(t, key=t.get) == max(t) else float(f"{min(t) / 3:.6g}")
            for arm, t in tried.items()
            if min(t, key=t.get) in (max(t), min(t))
        }
        ran = (
            {r["arm"]: float(r["lr"]) for r in results(out / f"pilot/extend-{k}")}
            if (out / f"pilot/extend-{k}").is_dir()
            else {}
        )
        assert ran == pytest.approx(edge)
        for arm, lr in ran.items():
            tried[arm][lr] = summaries(out / f"pilot/extend-{k}", arm)[(lr, 0)]
    assert (out / "pilot/extend-1").is_dir() and not (out / "pilot/extend-3").exists()  # two rates: one is an edge
    for arm, t in tried.items():
        c = choice["arms"][arm]
        assert c["chosen"] == pytest.approx(min(t, key=t.get)) and len(c["rates"]) == len(t)
        cfg = (out / "runs" / f"{arm}-s0" / "config.yaml").read_text()
        assert f"lr: {c['chosen']}\n" in cfg
    again = cli("study", spec, "-o", out, "--no-progress")
    assert "already finished" in again.stdout and json.loads((out / "lr_choice.json").read_text()) == choice
    cli("report", out)
    assert json.loads((out / "lr_choice.json").read_text()) == choice
    # the report's table has one column per rate any arm tried, each arm's ✓ under its own chosen rate
    lines = (out / "report.md").read_text().split("## Learning rates")[1].splitlines()
    table = [line for line in lines if line.startswith("| ")][:3]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rates = sorted({lr for t in tried.values() for lr in t})
    assert header[2 : 2 + len(rates)] == [f"lr {lr:g}" for lr in rates]
    for row in table[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == len(header), row
        c = choice["arms"][cells[0]]
        assert "✓" in cells[2 + rates.index(min(rates, key=lambda r: abs(r - c["chosen"])))]


@pytest.mark.e2e
def test_a_diverged_pilot_rate_is_excluded_and_an_arm_with_no_rate_is_not_run(tiny_cache, tmp_path):
    """`good` diverges at lr 1e4 (no clipping, no warmup) and trains at 3e-3; `bad` (a loss temperature of 1e-38:
    logits scaled by 1e38 overflow float32) diverges at both, so no rate is chosen for it and its main run is not launched;
    the study then exits 1, naming it."""
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"good": "{overrides: [model.norm=pre]}", "bad": "{overrides: [model.norm=pre, distill.temperature=1e-38]}"},
        seeds=(0,),
        launcher="inline",
        extra="select_tokens: 1024\nlr_pilot: {lrs: [10000, 0.003], seeds: [0]}\n",
    )
    spec.write_text(
        spec.read_text().replace("model.n_layer=2]", "model.n_layer=2, train.grad_clip=0, train.warmup_tokens=0]")
    )
    out = tmp_path / "study"
    proc = cli("study", spec, "-o", out, "--no-progress", check=False)
    assert proc.returncode == 1 and "1 run of the study did not finish: bad-s0" in proc.stderr
    pilot = {(r["arm"], float(r["lr"])): r for r in results(out / "pilot")}
    assert [k for k, r in sorted(pilot.items()) if r["status"] == "ok"] == [("good", 0.003)]
    choice = json.loads((out / "lr_choice.json").read_text())["arms"]
    assert choice["good"]["chosen"] == 0.003 and [f["lr"] for f in choice["good"]["failed"]] == [10000.0]
    assert choice["bad"]["chosen"] is None and sorted(f["lr"] for f in choice["bad"]["failed"]) == [0.003, 10000.0]
    rows = {r["arm"]: r for r in results(out)}
    assert rows["good"]["status"] == "ok" and float(rows["good"]["lr"]) == 0.003
    assert rows["bad"]["status"] == "failed" and rows["bad"]["error"].startswith(
        "not launched: the learning-rate pilot of bad"
    )
    assert not (out / "runs" / "bad-s0").exists()
    report = (out / "report.md").read_text()
    assert "| good | pilot | excluded | **" in report and "| bad | pre | 1-2 | — (no pilot rate) | — |" in report
    assert "- pilot run `good` lr 10000 seed 0: failed — " in report and "rate 10000 is excluded for good." in report
    assert "- `bad`: **not run** — its pilot (bad) finished no rate on every pilot seed" in report
    before = results(out)
    cli("report", out)  # rebuilt from disk: the same
    assert results(out) == before and (out / "report.md").read_text() == report


def test_the_plan_of_a_study_counts_its_pilot_runs(tmp_path):
    """`normgrow plan`: 3 arms × 2 seeds of 2 × 2,560 tokens, plus the pilot's 2 arms (post-m takes post's rate) × 2
    rates × 1 seed at half that budget: 10 runs, 6 × 5,120 + 4 × 2,560 = 40,960 tokens."""
    spec = write_study(
        tmp_path / "s.yaml",
        tmp_path / "cache",
        {
            "pre": "{overrides: [model.norm=pre]}",
            "post": "{overrides: [model.norm=post]}",
            "post-m": "{overrides: [model.norm=post], match: pre}",
        },
        extra="lr_pilot: {lrs: [0.0001, 0.003], seeds: [0]}\n",
    )
    out = cli("plan", spec, "--no-measure").stdout
    assert "10 run(s), 40,960 training tokens in all" in out


@pytest.mark.e2e
def test_a_pilot_can_be_turned_off_with_the_envelope():
    """`lr_pilot.lrs=[]` on a study with a pilot (gap) turns the pilot off; with its envelope seeds kept the envelope
    then anchors at each arm's own train.lr (no pilot phase in the plan), and with envelope_seeds=[] too every arm
    trains at its own train.lr (coord: no arm names a pilot's; gap's lr_pilot.arms and lr_from are then refused)."""
    from normgrow.study.config import envelope_on, load_study
    from normgrow.study.plan import study_plan

    assert load_study("gap").lr_pilot.lrs and load_study("gap").lr_pilot.envelope_seeds == [0, 1]
    off = load_study("gap", ["lr_pilot.lrs=[]"])
    assert off.lr_pilot.lrs == [] and envelope_on(off)
    assert "pilot" not in {j.phase for j in study_plan(off, None, False)[0]}
    assert not envelope_on(load_study("coord", ["lr_pilot.lrs=[]", "lr_pilot.envelope_seeds=[]"]))
    with pytest.raises(ConfigError, match="lr_pilot.arms: names the arms of a pilot that does not run"):
        load_study("gap", ["lr_pilot.lrs=[]", "lr_pilot.envelope_seeds=[]"])


@pytest.mark.slow  # ≈ 40 s: a real process killed; the default suite kills a study in test_faults.py
def test_a_pilot_killed_midway_resumes_and_chooses_as_from_its_runs(tiny_cache, tmp_path):
    """The study (and its pilot run's process) killed while the pilot's first run trains: the rerun resumes that
    run, runs the rest of the pilot, and chooses from the pilot's finished runs as an unkilled study does."""
    import os
    import signal
    import subprocess
    import sys
    import time

    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        seeds=(0,),
        extra="select_tokens: 1024\ncontrasts: {gap: [pre, post]}\n"
        "lr_pilot: {lrs: [0.0001, 0.003], seeds: [0], budget_scale: 0.5}\n",
        more=["train.checkpoint_every_tokens=1024", "train.threads=1"],
    )
    spec.write_text(spec.read_text().replace("tokens: 2560}]", "tokens: 5120}]"))
    out = tmp_path / "study"
    proc = subprocess.Popen(
        [sys.executable, "-m", "normgrow.cli", "study", str(spec), "-o", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs = out / "pilot" / "runs"
    deadline = time.time() + 180
    while time.time() < deadline and not any(runs.glob("*/checkpoints/step_*")):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = [p.parent.parent.name for p in runs.glob("*/checkpoints/step_*")]
    assert killed and not (out / "lr_choice.json").exists() and not (out / "runs").exists()
    cli("study", spec, "-o", out, "--no-progress")
    assert "resuming" in (out / "pilot" / "logs" / f"{killed[0]}.log").read_text()
    choice = json.loads((out / "lr_choice.json").read_text())["arms"]
    for arm in ("pre", "post"):
        ce = {float(r["lr"]): float(r["select_ce"]) for r in results(out / "pilot") if r["arm"] == arm}
        assert len(ce) == 2 and choice[arm]["chosen"] == min(ce, key=ce.get)
    assert all(r["status"] == "ok" and float(r["lr"]) == choice[r["arm"]]["chosen"] for r in results(out))


def _rec(arm, seed, lr, select_ce):
    from normgrow.study.record import from_row

    return from_row(
        {"arm": arm, "seed": str(seed), "lr": str(lr), "status": "ok", "select_ce": str(select_ce)}, runs=False
    )


def test_a_neighbouring_rate_that_beats_the_chosen_one_by_2_delta_leaves_its_claims_undetermined_by_rate():
    """Hand-made results: four core arms, chosen rates 4e-3 (pre) and 8e-3 (post), confirmed on seeds 0 and 1. For
    pre-grow the rate 2e-3 beats the chosen one by 2δ = 0.02 in select/ce; every other arm's chosen rate is the best
    of its three. Every claim reading pre-grow reads "undetermined (learning rate)"; joint_gap, which does not, keeps
    its verdict; post-joint's pilot choice at an edge of its grid fails it too."""
    from test_paper import ROLES, study

    from normgrow.study.engine.verdicts import evaluate_claims
    from normgrow.study.pilot import RATE_UNDETERMINED, rate_gate, with_confirm
    from normgrow.study.report.rates import confirm_lines

    roles = dict(ROLES)
    s = StudyConfig(
        arms={a: ArmConfig() for a in ("pj", "qj", "pg", "qg")},
        seeds=[0, 1, 2],
        claims=roles,
        lr_pilot=LrPilotConfig(lrs=[2e-3, 4e-3, 8e-3], confirm_seeds=[0, 1]),
    )
    chosen = {"pj": 4e-3, "qj": 8e-3, "pg": 4e-3, "qg": 8e-3}
    rates = hand_rates(chosen)
    main, sub = [], []
    for arm, lr in chosen.items():
        for seed in (0, 1):
            main.append(_rec(arm, seed, lr, 3.50))
            sub.append(_rec(arm, seed, lr / 2, 3.48 if arm == "pg" else 3.55))  # pre-grow: half the rate, 2δ better
            sub.append(_rec(arm, seed, lr * 2, 3.60))
    confirm = with_confirm(s, rates, main, sub)
    holds = {arm: c.holds for arm, c in confirm.arms.items()}
    assert holds == {"pj": True, "qj": True, "pg": False, "qg": True}
    assert confirm.to_json()["arms"]["pg"]["rates"] == [
        {"lr": 2e-3, "select_ce": 3.48},
        {"lr": 4e-3, "select_ce": 3.50},
        {"lr": 8e-3, "select_ce": pytest.approx(3.60)},
    ]
    out = rates_at(dataclasses.replace(rates.choice, confirm=confirm))
    claims = {c.key: c for c in rate_gate(evaluate_claims(roles, study(0.0004, -0.0328)), roles, out)}
    for key in ("grow_gap", "grow_vs_joint", "interaction", "crossover"):
        assert claims[key].verdict == claims[key].holm == RATE_UNDETERMINED, key
        assert "the rate of pg did not hold" in claims[key].sentence
    assert claims["joint_gap"].verdict == "supported"  # reads pj and qj only
    assert any(
        "| pg | 0.002, 0.004, 0.008 | 3.4800, 3.5000, 3.6000 | no | **no** |" == line for line in confirm_lines(confirm)
    )
    # within δ/2 the chosen rate holds; a pilot choice at its grid's edge does not, whatever the neighbours
    close = [_rec(a, sd, r.lr, 3.496) if a == "pg" and r.lr == 2e-3 else r for r in sub for a, sd in [(r.arm, r.seed)]]
    edge = hand_rates(chosen, qj={"edge": "top"})
    again = with_confirm(s, edge, main, close).arms
    assert again["pg"].holds is True and again["qj"].holds is False
    # a missing run: the rate is not confirmed, and its claims read undetermined (learning rate) too
    assert with_confirm(s, rates, main[:-1], sub).arms[main[-1].arm].holds is None
