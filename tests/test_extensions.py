"""The extension points, used from this file only (no edit to the package): a placement, a growth operator,
a diagnostic and a launcher registered here train a tiny grow run and a micro study; a package's entry point
registers a placement for the command line; a corpus source registered here feeds the real tokenizer, token
shards and a tiny run."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import normgrow
from conftest import assert_same_run, cli, kill_and_resume, stage_started, tiny_cfg
from normgrow.config import ModelConfig, load_config
from normgrow.data import SOURCES, corpus_sha256, prepare
from normgrow.errors import ConfigError
from normgrow.nn.model import PLACEMENTS, Student, block_parameters, count_parameters
from normgrow.run.pipeline import run
from normgrow.study.config import load_study
from normgrow.study.engine.verdicts import CLAIMS, ROLES, sign_claim, values
from normgrow.study.launch import LAUNCHERS, inline
from normgrow.study.runner import run_study
from normgrow.train import checkpoint
from normgrow.train.diagnostics import DIAGNOSTICS
from normgrow.train.growth import GROWTH, set_trainable
from normgrow.train.stages import plan_stages, student_at_stage
from normgrow.train.step import build_optimizer

QUIET = dict(log=lambda *_: None, progress=False)


class ParallelBlock(normgrow.Block):
    """parallel residual (GPT-J): h = h + Attn(N1(h)) + MLP(N2(h)), with one extra gain on the MLP branch."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.mlp_scale = torch.nn.Parameter(torch.ones(cfg.d_model))

    def forward(self, h, cos, sin):
        return (
            h
            + self.self_attn(self.input_layernorm(h), cos, sin)[0]
            + self.mlp_scale * self.mlp(self.post_attention_layernorm(h))
        )

    def attention_input(self, h):
        return self.input_layernorm(h)


class Middle(normgrow.GrowthOperator):
    """Inserts the new blocks in the middle of the trained prefix (above its lower half)."""

    def new_blocks(self, prefix, depth):
        return list(range(prefix // 2, prefix // 2 + depth - prefix))


def embed_rms(obs):
    return {
        "toy/embed_rms": obs.residuals[0].pow(2).mean().sqrt().item(),
        "toy/block_rms": [r.pow(2).mean().sqrt().item() for r in obs.residuals],
    }  # per block: read by name below


def top_rms_gap(r, m):
    """A claim of this file's own: the top residual's RMS differs between two arms it names by new roles."""
    return sign_claim(
        f"top residual RMS, {r.toy_b} − {r.toy_a}",
        [
            b[-1] - a[-1]
            for a, b in zip(
                values(m, r.toy_a, "toy/block_rms").values(), values(m, r.toy_b, "toy/block_rms").values(), strict=False
            )
        ],
        -1,
    )


LAUNCHED = []


def recording_launcher(jobs, options, out, progress):
    LAUNCHED.extend(j.name for j in jobs)
    return inline(jobs, options, out, progress)


@pytest.fixture
def extensions():
    normgrow.register_placement("parallel", ParallelBlock)
    normgrow.register_growth("halfway", Middle())
    normgrow.register_diagnostic("toy", embed_rms)
    normgrow.register_launcher("recording", recording_launcher)
    normgrow.register_claim(
        "toy_rms", "The top residual is smaller in b.", top_rms_gap, roles=("toy_a", "toy_b"), reads=("toy/block_rms",)
    )
    yield
    for registry, name in (
        (PLACEMENTS, "parallel"),
        (GROWTH, "halfway"),
        (DIAGNOSTICS, "toy"),
        (LAUNCHERS, "recording"),
        (CLAIMS, "toy_rms"),
        (ROLES, "toy_a"),
        (ROLES, "toy_b"),
    ):
        registry.unregister(name)


def test_a_registered_placement_builds_counts_and_follows_its_equation(extensions):
    cfg = ModelConfig(norm="parallel", n_layer=2, d_model=32, n_head=4, n_kv_head=2, d_ff=64, vocab_size=50)
    model = Student(cfg).eval()
    block = model.layers[0]
    assert isinstance(block, ParallelBlock)
    h = torch.randn(2, 5, 32)
    cos, sin = model.rotary(5, h.device)
    with torch.no_grad():
        block.mlp_scale.fill_(0.5)
        attn = block.self_attn(block.input_layernorm(h), cos, sin)[0]
        mlp = block.mlp(block.post_attention_layernorm(h))
        torch.testing.assert_close(block(h, cos, sin), h + attn + 0.5 * mlp)
    # FLOP accounting counts what the placement builds (its extra gain included)
    assert block_parameters(cfg, 0) == sum(p.numel() for p in block.parameters())
    assert count_parameters(model)["per_block"] == block_parameters(cfg, 0)


def test_a_registered_growth_operator_decides_positions_boundaries_and_freezing(extensions, tiny_cache, tmp_path):
    stages = "curriculum.stages=[{n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 2560, train: new}]"
    cfg = tiny_cfg(
        tiny_cache,
        stages,
        "model.norm=parallel",
        "curriculum.growth=halfway",
        "train.weight_decay=0.5",
        "train.checkpoint_every_tokens=2560",
    )
    plans = plan_stages(cfg)
    assert plans[1].growth.new_blocks == (1,) and plans[1].growth.boundaries == (1,) and plans[1].train_blocks == (1,)
    summary = run(cfg, tmp_path / "run", **QUIET)
    growth = summary["stages"][1]["growth"]
    assert (
        growth["grow/operator"] == "halfway" and growth["grow/new_blocks"] == [1] and growth["grow/boundaries"] == [1]
    )
    # zero init: the parallel block's branches output 0, so inserting it mid-stack preserves the function
    assert growth["grow/logit_max_abs_diff"] == 0.0
    (w1, _, _, _), (w2, _, _, _) = (
        checkpoint.load(c) for c in checkpoint.list_checkpoints(tmp_path / "run" / "checkpoints")[-2:]
    )
    # the old top block moved from index 1 to 2 unchanged (frozen), the new block 1 trained
    assert torch.equal(w1["layers.1.mlp.up_proj.weight"], w2["layers.2.mlp.up_proj.weight"])
    assert torch.equal(w1["layers.0.self_attn.q_proj.weight"], w2["layers.0.self_attn.q_proj.weight"])
    assert not torch.equal(
        w2["layers.1.self_attn.o_proj.weight"], torch.zeros_like(w2["layers.1.self_attn.o_proj.weight"])
    )
    assert summary["boundaries"][0]["boundary"] == 1
    # compute accounting from the placement's own parameter count
    assert summary["compute"]["trainable_layer_tokens"] == 2560 * 2 + 2560 * 1


def test_a_registered_diagnostic_and_launcher_reach_diagnostics_jsonl_and_the_report(extensions, tiny_cache, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"""name: ext
base: tiny
overrides: [data.cache_dir={tiny_cache}, model.n_layer=2, curriculum.growth=halfway,
            "curriculum.stages=[{{n_layer: 1, tokens: 1280}}, {{n_layer: 2, tokens: 1280}}]"]
seeds: [0]
arms:
  parallel: {{overrides: [model.norm=parallel]}}
  pre: {{overrides: [model.norm=pre]}}
launcher: {{kind: recording}}
claims: {{roles: {{toy_a: pre, toy_b: parallel}}}}
""")
    LAUNCHED.clear()
    report = run_study(load_study(str(spec)), tmp_path / "study", **QUIET)
    assert sorted(LAUNCHED) == ["parallel-s0", "pre-s0"]
    text = report.read_text()
    values = {}
    for arm in ("parallel", "pre"):
        recs = [
            json.loads(line)
            for line in (tmp_path / "study" / "runs" / f"{arm}-s0" / "diagnostics.jsonl").read_text().splitlines()
        ]
        assert all("toy/embed_rms" in r for r in recs)
        values[arm] = [r for r in recs if r["event"] == "stage_end"][-1]["toy/embed_rms"]
        assert math.isfinite(values[arm]) and values[arm] > 0
    assert f"| toy/embed_rms | {values['parallel']:.4f} | {values['pre']:.4f} |" in text
    # the registered claim read the per-block diagnostic by name, through the study's measures (one seed: undetermined)
    tops = {
        arm: [
            json.loads(line)
            for line in (tmp_path / "study" / "runs" / f"{arm}-s0" / "diagnostics.jsonl").read_text().splitlines()
            if '"stage_end"' in line
        ][-1]["toy/block_rms"][-1]
        for arm in values
    }
    assert f"| toy_rms | **undetermined** | undetermined | — | {tops['parallel'] - tops['pre']:+.4f} |" in text
    assert "The top residual is smaller in b." in text and "| grow_gap | **not tested** |" in text


@pytest.mark.e2e
def test_an_entry_point_registers_a_placement_for_the_command_line(tiny_cache, tmp_path):
    pkg = tmp_path / "site"
    pkg.mkdir()
    (pkg / "toyext.py").write_text("""import normgrow
from normgrow.nn.model import PreNormBlock

class Halved(PreNormBlock):
    def forward(self, h, cos, sin):
        return 0.5 * (h + super().forward(h, cos, sin))

normgrow.register_placement("halved", Halved)
""")
    dist = pkg / "toyext-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyext\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[normgrow.extensions]\ntoy = toyext\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(pkg)}
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "normgrow.cli",
            "run",
            "tiny",
            "-o",
            str(out),
            f"data.cache_dir={tiny_cache}",
            "model.norm=halved",
            "--no-progress",
            "--no-plots",
            "curriculum.stages=[{n_layer: 3, tokens: 2048}]",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["val/ce"] > 0
    bare = cli("config", "tiny", "model.norm=halved", check=False)  # this process: the package is not on its path
    assert bare.returncode == 2 and "unknown placement 'halved'" in bare.stderr
    fields = subprocess.run(
        [sys.executable, "-m", "normgrow.cli", "config", "--fields"], capture_output=True, text=True, env=env
    ).stdout  # the help names what the entry point registered
    assert "halved]" in next(line for line in fields.splitlines() if line.startswith("model.norm "))


class GeneratedCorpus(normgrow.CorpusSource):
    """Documents generated here, none from a file: each starts with `quokka<version>`, a word no other corpus has."""

    def __init__(self, n):
        self.n, self.version = n, 0

    def text(self, i):
        words = ("alpha", "beta", "gamma", "delta", "epsilon")
        body = " ".join(f"{words[(i * 7 + j) % 5]}{(i + j) % 13}" for j in range(40))
        return f"quokka{self.version} document {i}: {body}\n"

    def documents(self, d):
        for i in range(self.n):
            yield f"gen/{i}", self.text(i)

    def fingerprint(self, d):
        return [self.version]  # what corpus_sha256 compares before it rescans


@pytest.fixture
def generated():
    source = normgrow.register_corpus_source("generated", GeneratedCorpus(120))
    yield source
    SOURCES.unregister("generated")


def test_a_registered_corpus_source_feeds_the_tokenizer_the_shards_and_a_run(generated, tmp_path):
    with pytest.raises(ConfigError, match="data.format: unknown corpus source 'nope'"):
        tiny_cfg(tmp_path / "cache", "data.format=nope")
    cfg = tiny_cfg(
        tmp_path / "cache",
        "data.format=generated",
        "data.corpus=made-in-the-test",
        "teacher.path=none",
        "curriculum.stages=[{n_layer: 3, tokens: 2048}]",
    )
    prep = prepare(cfg, log=lambda *_: None)
    assert prep.meta["corpus"]["source"] == "generated"
    assert sum(prep.meta["n_documents"].values()) == 120
    # every document of the shards decodes back to one generated here, and all of them are there
    decoded = set()
    for split in ("train", "val"):
        tokens, starts = getattr(prep, split), getattr(prep, f"{split}_docs")
        for start, end in zip(starts, [*starts[1:], len(tokens)], strict=True):
            assert tokens[start] == prep.bos_id
            decoded.add(prep.tokenizer.decode(tokens[start + 1 : end].tolist()))
    assert decoded == {generated.text(i) for i in range(120)}
    assert "quokka" in prep.tokenizer.get_vocab()  # the BPE learnt the corpus's own word
    summary = run(cfg, tmp_path / "run", **QUIET)
    assert summary["data"]["shards"] == str(prep.dir) and math.isfinite(summary["val/nll"])

    # a changed document changes the fingerprint, so the corpus hash and the shards follow it
    sha = corpus_sha256(cfg.data)
    generated.version = 1
    assert corpus_sha256(cfg.data) != sha
    again = prepare(cfg, log=lambda *_: None)
    assert again.dir != prep.dir and not again.cache_hit
    assert again.tokenizer.decode(again.train[1 : again.train_docs[1]].tolist()).startswith("quokka1 document")


class NewAndBelow(normgrow.GrowthOperator):
    """append with its own policy after growth: the new blocks and the block just below them train (the blocks
    further down and the embedding freeze), and that block restarts its AdamW moments."""

    def new_blocks(self, prefix, depth):
        return list(range(prefix, depth))

    def train_blocks(self, spec, n_layer, event):
        if event is None:  # the first stage: its `train` field, as by default
            return super().train_blocks(spec, n_layer, event)
        return sorted({*event.new_blocks, event.new_blocks[0] - 1})

    def keeps_state(self, name, plan, optimizer):
        below = f"layers.{plan.growth.new_blocks[0] - 1}."
        return not name.startswith(below) and super().keeps_state(name, plan, optimizer)


def optimizer_steps(run_dir, ckpt, stage):
    """{parameter name: AdamW step count} of a checkpoint's optimizer state, taken at `stage`."""
    cfg = load_config(str(run_dir / "config.yaml"))  # resolved: vocabulary size filled in
    model = student_at_stage(cfg, stage)
    set_trainable(model, plan_stages(cfg)[stage])
    names = {id(p): n for n, p in model.named_parameters()}
    order = [names[id(p)] for g in build_optimizer(model, cfg, torch.device("cpu")).param_groups for p in g["params"]]
    _, optim, _, _ = checkpoint.load(ckpt)
    return {order[int(i)]: int(s["step"]) for i, s in optim["state"].items()}


@pytest.fixture
def newbelow(tmp_path, monkeypatch):
    """`curriculum.growth=newbelow` registered here, and in the processes a test starts (an entry point importing
    the operator from this file)."""
    normgrow.register_growth("newbelow", NewAndBelow())
    site = tmp_path / "site"
    (site / "newbelow_ext-0.1.dist-info").mkdir(parents=True)
    (site / "newbelow_ext.py").write_text(
        "import normgrow\nfrom test_extensions import NewAndBelow\n\n"
        "normgrow.register_growth('newbelow', NewAndBelow())\n"
    )
    (site / "newbelow_ext-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: newbelow_ext\nVersion: 0.1\n"
    )
    (site / "newbelow_ext-0.1.dist-info" / "entry_points.txt").write_text(
        "[normgrow.extensions]\nnewbelow = newbelow_ext\n"
    )
    path = [str(site), str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    yield
    GROWTH.unregister("newbelow")


@pytest.mark.e2e
def test_a_growth_operator_brings_its_own_trainability_and_optimizer_policy(newbelow, tiny_cache, tmp_path):
    overrides = [
        f"data.cache_dir={tiny_cache}",
        "model.n_layer=4",
        "curriculum.growth=newbelow",
        "train.weight_decay=0.5",
        "curriculum.stages=[{n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 2560}, {n_layer: 4, tokens: 20480}]",
        "train.checkpoint_every_tokens=100000",
        "train.threads=1",
    ]
    plans = plan_stages(tiny_cfg(tiny_cache, *overrides))
    assert [p.train_blocks for p in plans] == [(0, 1), (1, 2), (2, 3)]  # the stages' `train: all` overridden
    # killed just after the second growth event: the resumed run replays the first with the policy's trainability
    full, killed = kill_and_resume(tmp_path, ["tiny", *overrides, "--no-progress"], stage_started(2))
    summary = json.loads((full / "summary.json").read_text())
    assert summary["compute"]["trainable_layer_tokens"] == 2560 * 2 + 2560 * 2 + 20480 * 2  # accounting follows it
    ckpts = checkpoint.list_checkpoints(full / "checkpoints")  # the ends of stages 0, 1 and 2 (steps 10, 20, 100)
    (w0, _, _, _), (w1, _, _, _), (w2, _, _, _) = (checkpoint.load(c) for c in ckpts)

    def same(a, b, prefix):
        keys = [k for k in a if k.startswith(prefix)]
        assert keys, prefix
        return all(torch.equal(a[k], b[k]) for k in keys)

    # frozen by the policy: bit-identical from the growth event on; trained by it: changed
    assert same(w0, w1, "layers.0.") and same(w0, w2, "layers.0.") and same(w0, w2, "embed_tokens.")
    assert same(w1, w2, "layers.1.") and not same(w0, w1, "layers.1.")
    assert not same(w1, w2, "layers.2.") and not same(w1, w2, "lm_head.")
    # AdamW state: the block below the new ones restarts (step counts from the event), the head keeps its own
    steps1, steps2 = optimizer_steps(full, ckpts[1], 1), optimizer_steps(full, ckpts[2], 2)
    assert steps1["lm_head.weight"] == 20 and steps1["layers.1.mlp.up_proj.weight"] == 10
    assert steps1["layers.2.mlp.up_proj.weight"] == 10 and not any(n.startswith("layers.0.") for n in steps1)
    assert steps2["lm_head.weight"] == steps2["norm.weight"] == 100
    assert steps2["layers.2.mlp.up_proj.weight"] == steps2["layers.3.mlp.up_proj.weight"] == 80
    assert not any(n.startswith(("layers.0.", "layers.1.", "embed_tokens.")) for n in steps2)
    assert_same_run(full, killed)


def test_a_registry_backed_field_checked_before_its_registry_exists_is_an_error(monkeypatch):
    """registry.check used to pass any name when the field's registry had not been created yet, so a check worked
    only through import order. The registry-backed fields are now fixed (registry.BACKED): each has its registry once
    normgrow is imported, a check of one without it raises, and a field no registry backs passes as before."""
    from normgrow import registry

    assert registry.BACKED <= set(registry.BY_FIELD)  # every backed field's registry exists after `import normgrow`
    registry.check("model.norm", "post")
    with pytest.raises(ConfigError, match="model.norm: unknown placement 'nope'"):
        registry.check("model.norm", "nope")
    monkeypatch.delitem(registry.BY_FIELD, "model.norm")
    with pytest.raises(RuntimeError, match="model.norm: checked before the module that creates its registry"):
        registry.check("model.norm", "nope")
    registry.check("train.lr", "anything")  # no registry backs it: nothing to check


def test_a_second_registry_on_a_field_already_backed_is_refused():
    """The study's claims and a ladder's limit claims both declared the field "claims", so BY_FIELD kept whichever
    registry was created last and a check of "claims" would have read the other's names. One field, one registry."""
    from normgrow import registry

    assert registry.BY_FIELD["claims"].kind == "claim" and registry.BY_FIELD["claims.limit"].kind == "limit claim"
    with pytest.raises(ValueError, match="the field 'model.norm' already has the placement registry"):
        registry.Registry("another placement", field="model.norm")
    assert registry.BY_FIELD["model.norm"].kind == "placement"
