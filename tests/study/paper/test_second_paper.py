"""A second paper's claims on the verdict engine, registered from this file alone (no edit to the package): its
roles and its setting, declared by the claims that use them, named in a study file, and its two verdicts in the
report — one supported, one contradicted, by arithmetic done here — beside the first paper's (not tested); its
report section; and a study-file section of its own."""

import math
from dataclasses import dataclass, field

import pytest
from test_report import write_run

import normgrow.study as study_api
from conftest import cli
from normgrow.errors import ConfigError
from normgrow.study.config import load_study, study_fields, study_yaml
from normgrow.study.engine.verdicts import CLAIMS, ROLES, SETTINGS, equivalence_claim, gap, sign_claim
from normgrow.study.pilot import pilot_study
from normgrow.study.sections import SECTIONS, section

T_DF2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # two-sided 95% t quantile, 2 degrees of freedom: 4.3027


def beats_post(r, m):
    """The second paper's first claim: sandwich beats post-norm (val/ce sandwich − post < 0), beyond its margin."""
    return sign_claim(f"val/ce {r.p2_sandwich} − {r.p2_post}", gap(m, r.p2_post, r.p2_sandwich), -1, r.p2_margin)


def matches_pre(r, m):
    """Its second claim: sandwich reaches pre-norm's val/ce (about zero, within the same margin)."""
    return equivalence_claim(f"val/ce {r.p2_sandwich} − {r.p2_pre}", gap(m, r.p2_pre, r.p2_sandwich), r.p2_margin)


@pytest.fixture
def second_paper():
    study_api.register_role("p2_sandwich", "Arm: the sandwich-norm student of the second paper.")
    study_api.register_role("p2_post", "Arm: its post-norm baseline.")
    study_api.register_setting("p2_margin", 0.02, "The second paper's practical margin (nats/token).")
    study_api.register_claim("p2_beats_post", "Sandwich beats post-norm.", beats_post, roles=("p2_sandwich", "p2_post"))
    study_api.register_claim(  # p2_pre is declared by the claim itself
        "p2_matches_pre", "Sandwich matches pre-norm.", matches_pre, roles=("p2_sandwich", "p2_pre")
    )
    yield
    for registry, name in ((CLAIMS, "p2_beats_post"), (CLAIMS, "p2_matches_pre"), (SETTINGS, "p2_margin")):
        registry.unregister(name)
    for name in ("p2_sandwich", "p2_post", "p2_pre"):
        ROLES.unregister(name)


# val/ce per arm and seed: sandwich − post = −0.05, −0.06, −0.04; sandwich − pre = +0.10, +0.11, +0.09
CE = {"pre": (5.00, 5.10, 5.20), "post": (5.15, 5.27, 5.33), "sandwich": (5.10, 5.21, 5.29)}


def test_a_second_papers_claims_come_out_of_the_report(second_paper, tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    (out / "study.yaml").write_text("""name: second
base: tiny
seeds: [0, 1, 2]
arms:
  pre: {overrides: [model.norm=pre]}
  post: {overrides: [model.norm=post]}
  sandwich: {overrides: [model.norm=sandwich]}
claims: {p2_sandwich: sandwich, p2_post: post, p2_pre: pre, p2_margin: 0.02}
""")
    for arm, values in CE.items():
        for seed, ce in enumerate(values):
            write_run(out / "runs" / f"{arm}-s{seed}", arm, seed, ce, arm)
    cli("report", out)
    report = (out / "report.md").read_text()
    # by hand: mean −0.05, sd 0.01, half-width 4.3027 · 0.01 / √3 = 0.0248 → [−0.0748, −0.0252], below −0.02
    half = T_DF2 * 0.01 / math.sqrt(3)
    assert "| p2_beats_post | **supported** | supported | " in report
    assert f"-0.0500 [{-0.05 - half:+.4f}, {-0.05 + half:+.4f}]" in report
    assert "- **p2_beats_post** — paper: Sandwich beats post-norm. Here: val/ce sandwich − post:" in report
    # +0.10 ± 0.0248 lies entirely outside ±0.02: not "about zero"
    assert "| p2_matches_pre | **contradicted** | contradicted | " in report
    assert "| grow_gap | **not tested** |" in report  # the first paper's claims: their roles are unset here
    assert load_study(str(out / "study.yaml")).claims["p2_margin"] == 0.02
    # the same study with the margin at 0.03: the first claim's interval no longer clears −0.03 → undetermined
    (out / "study.yaml").write_text((out / "study.yaml").read_text().replace("p2_margin: 0.02", "p2_margin: 0.03"))
    cli("report", out)
    assert "| p2_beats_post | **undetermined** |" in (out / "report.md").read_text()


def test_a_study_naming_a_role_nobody_registered_is_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbase: tiny\narms: {a: {}}\nclaims: {p2_sandwich: a}\n")
    with pytest.raises(ConfigError, match=r"claims.p2_sandwich: no registered claim needs this role or setting"):
        load_study(str(path))
    path.write_text("name: s\nbase: tiny\narms: {a: {}}\nclaims: {p2_sandwich: null}\n")
    assert "p2_sandwich" not in load_study(str(path)).claims  # a role of an extension not loaded, set to nothing


def test_a_second_papers_report_section_registers_from_this_file(second_paper, tmp_path):
    """A report part registered here: its section follows the claims table (and the first paper's parts, which add
    nothing to this study), its headline line ends `normgrow report`'s output, its caution opens the report; the
    count it prints is computed from the view it is handed (3 seeds of sandwich at their chosen rate)."""
    from normgrow.study.report.parts import REPORT_PARTS, Part

    def sandwich_runs(view):
        n = sum(1 for r in view.kept if r.arm == view.study.claims["p2_sandwich"])
        return Part(
            {"after_claims": ["## The second paper's runs", "", f"sandwich runs read: {n}", ""]},
            [f"second paper: {n} sandwich runs"],
            ["Caution: the second paper reads sandwich only."],
        )

    study_api.register_report_part("p2_runs", study_api.ReportPart(study=sandwich_runs))
    try:
        out = tmp_path / "study"
        out.mkdir()
        (out / "study.yaml").write_text(
            "name: second\nbase: tiny\nseeds: [0, 1, 2]\narms:\n  pre: {overrides: [model.norm=pre]}\n"
            "  post: {overrides: [model.norm=post]}\n  sandwich: {overrides: [model.norm=sandwich]}\n"
            "claims: {p2_sandwich: sandwich, p2_post: post, p2_pre: pre}\n"
        )
        for arm, values in CE.items():
            for seed, ce in enumerate(values):
                write_run(out / "runs" / f"{arm}-s{seed}", arm, seed, ce, arm)
        proc = cli("report", out)
        report = (out / "report.md").read_text()
        part = report.index("## The second paper's runs\n\nsandwich runs read: 3\n")
        assert report.index("| p2_beats_post |") < part < report.index("## Validation CE per arm")
        assert "- Caution: the second paper reads sandwich only." in report[: report.index("## ")]
        assert "second paper: 3 sandwich runs" in proc.stdout
    finally:
        REPORT_PARTS.unregister("p2_runs")
    assert "p2_runs" not in REPORT_PARTS and list(REPORT_PARTS) == ["regime", "rivals", "dose"]


# ----------------------------------------------------------------------------- a study-file section of its own


@dataclass
class ProbeConfig:
    arms: list[str] = field(default_factory=list)
    """Arms the second paper probes."""
    min_share: float | None = None
    """Its threshold, a share in (0, 1]; null: none."""


def validate_probe(s) -> None:
    p = section(s, "p2_probe")
    if p.min_share is not None and not 0 < p.min_share <= 1:
        raise ConfigError(f"p2_probe.min_share: a share in (0, 1], got {p.min_share}")


PROBE = study_api.StudySection(
    "p2_probe", ProbeConfig, ProbeConfig, "claims", "The second paper's probe.", validate_probe
)


@pytest.fixture
def probe_section():
    study_api.register_study_section(PROBE)
    yield
    SECTIONS.pop("p2_probe")


PROBED = """name: probed
base: tiny
arms:
  pre: {overrides: [model.norm=pre]}
  post: {overrides: [model.norm=post]}
lr_pilot: {lrs: [0.001, 0.002]}
p2_probe: {arms: [pre, post], min_share: 0.5}
"""


def test_a_second_papers_study_file_section_registers_from_this_file(probe_section, tmp_path):
    """Its section is read, checked in one line naming its field, saved in study.yaml after the field it follows
    (claims, after the first paper's rivals), listed by `config --study`, emptied in the learning-rate pilot's
    study; a study saved with it no longer loads once it is gone (one line naming it)."""
    path = tmp_path / "probed.yaml"
    path.write_text(PROBED)
    s = load_study(str(path))
    assert section(s, "p2_probe") == ProbeConfig(arms=["pre", "post"], min_share=0.5)
    assert section(load_study(str(path), ["p2_probe.min_share=0.25"]), "p2_probe").min_share == 0.25
    with pytest.raises(ConfigError, match=r"^p2_probe.min_share: a share in \(0, 1\], got 2.0$"):
        load_study(str(path), ["p2_probe.min_share=2"])
    with pytest.raises(ConfigError, match="p2_probe.nope"):
        load_study(str(path), ["p2_probe.nope=1"])
    keys = [line.split(":")[0] for line in study_yaml(s).splitlines() if line[:1].isalpha()]
    assert keys[keys.index("claims") :][:4] == ["claims", "rivals", "p2_probe", "select_tokens"]
    rows = [key for key, _, _ in study_fields()]
    assert rows[rows.index("rivals") + 1 : rows.index("rivals") + 3] == ["p2_probe.arms", "p2_probe.min_share"]
    assert section(pilot_study(s), "p2_probe") == ProbeConfig() and section(pilot_study(s), "dose") == section(
        s, "dose"
    )
    saved = tmp_path / "saved.yaml"
    saved.write_text(study_yaml(s))
    assert section(load_study(str(saved)), "p2_probe") == section(s, "p2_probe")
    SECTIONS.pop("p2_probe")
    try:
        with pytest.raises(ConfigError, match="p2_probe") as e:
            load_study(str(saved))
        assert "\n" not in str(e.value)
    finally:
        study_api.register_study_section(PROBE)


def test_a_section_cannot_take_a_fields_name_or_follow_a_field_that_is_not_there():
    with pytest.raises(ValueError, match="'seeds' is already a field"):
        study_api.register_study_section(study_api.StudySection("seeds", ProbeConfig, ProbeConfig, "claims", "", print))
    with pytest.raises(ValueError, match="follows 'nope'"):
        study_api.register_study_section(study_api.StudySection("p2_x", ProbeConfig, ProbeConfig, "nope", "", print))
    assert "seeds" not in SECTIONS and "p2_x" not in SECTIONS
