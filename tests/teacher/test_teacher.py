"""Teacher and export: HF round trips, vocabulary reconciliation, the default teacher, init from the teacher."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from conftest import QUIET, cli, tiny_cfg, trained_student
from normgrow.run.pipeline import default_teacher_dir, run
from normgrow.teacher.load import TeacherError, load_teacher
from normgrow.train import checkpoint


@pytest.mark.e2e
def test_pre_norm_export_loads_in_stock_transformers_and_generates(tiny_cache, tmp_path):
    run(tiny_cfg(tiny_cache), tmp_path / "run", **QUIET)
    cli("export", tmp_path / "run", "-o", tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "qwen3"
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    idx = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = trained_student(tmp_path / "run")(idx)
    torch.save(idx, tmp_path / "idx.pt")
    # a fresh interpreter that never imports normgrow: stock transformers only
    script = f"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
m = AutoModelForCausalLM.from_pretrained({str(tmp_path / "hf")!r}).eval()
tok = AutoTokenizer.from_pretrained({str(tmp_path / "hf")!r})
idx = torch.load({str(tmp_path / "idx.pt")!r}, weights_only=True)
with torch.no_grad():
    torch.save(m(input_ids=idx).logits, {str(tmp_path / "logits.pt")!r})
prompt = tok("def main(", return_tensors="pt")
out = m.generate(**prompt, max_new_tokens=12, do_sample=False)
tok.pad_token = tok.pad_token or tok.eos_token
texts, tok.padding_side = ["def main(", "import os", "x"], "left"
batch = tok(texts, return_tensors="pt", padding=True)
rows, width = m.generate(**batch, max_new_tokens=6, do_sample=False), batch["input_ids"].shape[1]
for i, t in enumerate(texts):
    one = m.generate(**tok(t, return_tensors="pt"), max_new_tokens=6, do_sample=False)[0].tolist()
    assert rows[i, width - int(batch["attention_mask"][i].sum()):].tolist()[: len(one)] == one, t
print(type(m).__name__, repr(tok.decode(out[0])))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cls, text = proc.stdout.strip().split(" ", 1)
    assert cls == "Qwen3ForCausalLM"
    assert text.startswith("'def main(") and len(text) > len("'def main('") + 1
    torch.testing.assert_close(torch.load(tmp_path / "logits.pt", weights_only=True), ours, atol=1e-5, rtol=1e-5)


NON_QWEN3 = {
    "post": ["model.norm=post"],
    "sandwich": ["model.norm=sandwich"],
    "deepnorm": [
        "model.norm=deepnorm",
        "curriculum.growth=interleave",
        "curriculum.stages=[{n_layer: 1, tokens: 2560}, {n_layer: 3, tokens: 2560}]",
    ],
    "mixln": ["model.norm=mixln", "model.mixln_ratio=0.34"],
}

LOAD_ALL = """
import sys, torch
from transformers import AutoModelForCausalLM
idx = torch.load({idx!r}, weights_only=True)
for name in {names!r}:
    m = AutoModelForCausalLM.from_pretrained({root!r} + '/hf-' + name, {kwargs}).eval()
    with torch.no_grad():
        torch.save(m(input_ids=idx).logits, {root!r} + '/logits-' + name + '.pt')
    print(name, type(m).__module__)
"""


EVERY_PLACEMENT = ["pre", "post", "sandwich", "deepnorm", "reordered", "hybrid", "lnscale", "keel", "sandwich-ds"]
RIVALS = {  # every placement in one student (a per-block list), in each norm kind
    f"rivals-{kind}": [
        "model.n_layer=9",
        f"model.norm_kind={kind}",
        f"model.block_norms=[{', '.join(EVERY_PLACEMENT)}]",
        "curriculum.stages=[{n_layer: 3, tokens: 2560}, {n_layer: 9, tokens: 2560}]",
    ]
    for kind in ("rmsnorm", "layernorm", "dyt")
}


@pytest.mark.slow  # 27 s (two fresh interpreters); the stock-transformers export test stays in the default suite
def test_every_placement_loads_after_a_plain_import_and_with_remote_code_without_normgrow(tiny_cache, tmp_path):
    """Students that are not a stock Qwen3 load through AutoModelForCausalLM with the student's exact logits:
    in an interpreter that only ran `import normgrow`, and, with trust_remote_code=True, in one where normgrow
    cannot be imported at all (the export's own modeling_normgrow.py, blocks.py and norms.py)."""
    check_exports(tiny_cache, tmp_path, NON_QWEN3 | {"rivals-rmsnorm": RIVALS["rivals-rmsnorm"]})
    assert json.loads((tmp_path / "hf-mixln" / "normgrow_export.json").read_text())["placements"] == [
        "post",
        "pre",
        "pre",
    ]


@pytest.mark.e2e
def test_the_rival_placements_in_every_norm_kind_export_with_and_without_normgrow(tiny_cache, tmp_path):
    """A block of every placement (grown 3 → 9 by appending) with LayerNorm and with DyT norms (RMSNorm: the slow test
    above): exact logits, generate, pipeline and save-and-reload, after `import normgrow` and without normgrow."""
    variants = {k: v for k, v in RIVALS.items() if k != "rivals-rmsnorm"}  # rmsnorm's in the slow test above
    check_exports(tiny_cache, tmp_path, variants)
    record = json.loads((tmp_path / "hf-rivals-dyt" / "normgrow_export.json").read_text())
    assert record["norm_kind"] == "dyt" and record["placements"] == EVERY_PLACEMENT
    assert (tmp_path / "hf-rivals-dyt" / "norms.py").is_file()


def check_exports(tiny_cache, tmp_path, variants: dict[str, list[str]]) -> None:
    """Train, export and load each variant (tmp_path/run-<name>, hf-<name>) in the two fresh interpreters."""
    idx = torch.randint(0, 512, (2, 20), generator=torch.Generator().manual_seed(1))
    torch.save(idx, tmp_path / "idx.pt")
    expected = {}
    for name, overrides in variants.items():
        run(
            tiny_cfg(tiny_cache, "curriculum.stages=[{n_layer: 3, tokens: 2560}]", *overrides),
            tmp_path / f"run-{name}",
            **QUIET,
        )
        cli("export", tmp_path / f"run-{name}", "-o", tmp_path / f"hf-{name}")
        config = json.loads((tmp_path / f"hf-{name}" / "config.json").read_text())
        assert config["model_type"] == "normgrow" and "AutoModelForCausalLM" in config["auto_map"]
        assert (tmp_path / f"hf-{name}" / "modeling_normgrow.py").is_file()
        with torch.no_grad():
            expected[name] = trained_student(tmp_path / f"run-{name}")(idx)
    for prelude, kwargs, module in (
        ("import normgrow", "", "normgrow.run.export"),
        ("sys.modules['normgrow'] = None  # as if not installed", "trust_remote_code=True", "transformers_modules"),
    ):
        logits = LOAD_ALL.format(idx=str(tmp_path / "idx.pt"), names=list(variants), root=str(tmp_path), kwargs=kwargs)
        printed = check_users_calls(tmp_path, list(variants), prelude, kwargs, before=logits)  # one interpreter
        assert all(line.split()[1].startswith(module) for line in printed.splitlines()), printed
        for name in variants:
            got = torch.load(tmp_path / f"logits-{name}.pt", weights_only=True)
            torch.testing.assert_close(got, expected[name], atol=0, rtol=0, msg=f"{name} ({prelude})")


USE_EXPORT = """
import sys, json, torch
{prelude}
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
out = {{}}
for name in {names!r}:
    d = {root!r} + '/hf-' + name
    m = AutoModelForCausalLM.from_pretrained(d, {kwargs}).eval()
    tok = AutoTokenizer.from_pretrained(d, {kwargs})
    prompt = tok("def main(", return_tensors="pt")
    r = {{"prompt": prompt["input_ids"][0].tolist()}}
    for cache in (True, False):
        r[f"cache={{cache}}"] = m.generate(**prompt, max_new_tokens=10, do_sample=False, use_cache=cache)[0].tolist()
    r["pipeline"] = pipeline("text-generation", model=d, {kwargs})("def main(", max_new_tokens=10,
                                                                       do_sample=False)[0]["generated_text"]
    r["decoded"] = tok.decode(r["cache=True"], skip_special_tokens=True)
    m.save_pretrained({root!r} + '/saved-' + name)
    tok.save_pretrained({root!r} + '/saved-' + name)
    again = AutoModelForCausalLM.from_pretrained({root!r} + '/saved-' + name, {kwargs}).eval()
    r["reloaded"] = again.generate(**prompt, max_new_tokens=10, do_sample=False)[0].tolist()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    texts = ["def main(", "import os\\nclass Reader(object):", "x"]
    r["single"] = [m.generate(**tok(t, return_tensors="pt"), max_new_tokens=6, do_sample=False)[0].tolist()
                   for t in texts]
    diff = 0.0
    for side in ("right", "left"):  # left last: generate below reads the left-padded batch
        tok.padding_side = side
        batch = tok(texts, return_tensors="pt", padding=True)
        assert not bool(batch["attention_mask"].all())
        with torch.no_grad():
            padded = m(**batch).logits
            for i, t in enumerate(texts):
                alone = m(**tok(t, return_tensors="pt")).logits[0]
                diff = max(diff, (padded[i][batch["attention_mask"][i].bool()] - alone).abs().max().item())
    r["padded_max_diff"] = diff
    rows = m.generate(**batch, max_new_tokens=6, do_sample=False)  # left padding, as generate wants it
    width = batch["input_ids"].shape[1]
    r["batched"] = [rows[i, width - int(batch["attention_mask"][i].sum()):].tolist() for i in range(len(texts))]
    out[name] = r
print(json.dumps(out))
"""


def greedy(student, prompt: list[int], n: int) -> list[int]:
    """The student's own greedy decoding: n times, the argmax of the last position's logits appended."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            ids = torch.cat([ids, student(ids)[:, -1].argmax(-1, keepdim=True)], 1)
    return ids[0].tolist()


def check_users_calls(tmp_path, names: list[str], prelude: str, kwargs: str, before: str = "") -> str:
    """Every export in `names` (tmp_path/hf-<name>, trained in tmp_path/run-<name>) in a fresh interpreter: greedy
    `generate` with the KV cache on and off, `pipeline("text-generation")` and a save-and-reload all give the
    student's own greedy decoding, token for token. `before`: a script run first in the same interpreter (its
    output is returned)."""
    script = USE_EXPORT.format(prelude=prelude + "\n" + before, names=names, root=str(tmp_path), kwargs=kwargs)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in names:
        r = got[name]
        ours = greedy(trained_student(tmp_path / f"run-{name}"), r["prompt"], 10)
        assert r["cache=True"] == r["cache=False"] == r["reloaded"] == ours, name
        assert r["pipeline"] == r["decoded"] and r["pipeline"].startswith("def main("), name
        # a padded batch: each row's logits are its own sequence's, left or right; batched generate = one by one
        assert r["padded_max_diff"] <= 2e-5, (name, r["padded_max_diff"])
        for one, batched in zip(r["single"], r["batched"], strict=True):
            assert batched[: len(one)] == one, name
    return "\n".join(proc.stdout.strip().splitlines()[:-1])


@pytest.mark.e2e
def test_a_post_norm_export_works_in_generate_pipeline_and_save_reload_without_normgrow(tiny_cache, tmp_path):
    run(
        tiny_cfg(tiny_cache, "curriculum.stages=[{n_layer: 3, tokens: 2560}]", "model.norm=post"),
        tmp_path / "run-post",
        **QUIET,
    )
    cli("export", tmp_path / "run-post", "-o", tmp_path / "hf-post")
    check_users_calls(
        tmp_path, ["post"], "sys.modules['normgrow'] = None  # as if not installed", "trust_remote_code=True"
    )


def test_export_errors_are_one_line(tmp_path):
    proc = cli("export", tmp_path / "nothing", "-o", tmp_path / "hf", check=False)
    assert proc.returncode == 2 and "nothing: no such directory" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = cli("export", tmp_path / "empty", "-o", tmp_path / "hf", check=False)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "hf").exists()


def padded_teacher(tiny_cache, tmp_path, extra_rows):
    """The tiny default teacher with `extra_rows` LM-head rows added (Qwen pads its head this way), or removed."""
    src = default_teacher_dir(tiny_cfg(tiny_cache))
    base = AutoModelForCausalLM.from_pretrained(str(src))
    cfg = Qwen3Config.from_pretrained(str(src))
    cfg.vocab_size = base.config.vocab_size + extra_rows
    padded = Qwen3ForCausalLM(cfg)
    sd = base.state_dict()
    with torch.no_grad():
        for name, p in padded.state_dict().items():
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                n = min(p.shape[0], sd[name].shape[0])
                p[:n] = sd[name][:n]
                p[n:] = 5.0  # padded rows with large logits: untrimmed, they would swallow probability mass
            else:
                p.copy_(sd[name])
    out = tmp_path / f"teacher{extra_rows:+d}"
    padded.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(out))
    return out


@pytest.mark.e2e
def test_padded_teacher_head_is_trimmed_and_reported(tiny_cache, tmp_path):
    plain = run(tiny_cfg(tiny_cache, "data.val_tokens=512"), tmp_path / "plain", **QUIET)
    padded_dir = padded_teacher(tiny_cache, tmp_path, 16)
    padded = run(
        tiny_cfg(tiny_cache, "data.val_tokens=512", f"teacher.path={padded_dir}", "data.tokenizer=teacher"),
        tmp_path / "padded",
        **QUIET,
    )
    rep = padded["teacher"]
    assert (rep["head_rows"], rep["tokenizer_size"], rep["trimmed_rows"]) == (528, 512, 16)
    # the teacher's distribution over real tokens is unchanged by the padding: same entropy as the plain teacher
    assert padded["stages"][0]["start"]["val/teacher_entropy"] == pytest.approx(
        plain["stages"][0]["start"]["val/teacher_entropy"], rel=1e-6
    )


def test_teacher_with_fewer_head_rows_than_the_tokenizer_is_refused(tiny_cache, tmp_path):
    short = padded_teacher(tiny_cache, tmp_path, -12)
    with pytest.raises(TeacherError, match="LM-head rows"):
        load_teacher(str(short), "float32", torch.device("cpu"), tokenizer_size=512, student_vocab=512)
    proc = cli(
        "run",
        "tiny",
        "-o",
        tmp_path / "r",
        f"data.cache_dir={tiny_cache}",
        f"teacher.path={short}",
        "data.tokenizer=teacher",
        check=False,
    )
    assert proc.returncode == 2 and "500 LM-head rows" in proc.stderr and not (tmp_path / "r").exists()


def test_default_teacher_beats_the_unigram_baseline(tiny_cache):
    info = json.loads((default_teacher_dir(tiny_cfg(tiny_cache)) / "normgrow_teacher.json").read_text())
    assert info["val/nll"] < info["unigram_val_nll"]
    # it is a stock Qwen3 with its tokenizer, loaded like Qwen3-8B would be
    cfg = json.loads((default_teacher_dir(tiny_cfg(tiny_cache)) / "config.json").read_text())
    assert cfg["model_type"] == "qwen3"


def test_student_embeddings_copied_from_the_teacher(tiny_cache, tmp_path):
    teacher = AutoModelForCausalLM.from_pretrained(str(default_teacher_dir(tiny_cfg(tiny_cache))))
    cfg = tiny_cfg(
        tiny_cache,
        "model.d_model=48",
        "model.init_embeddings=teacher",
        "curriculum.stages=[{n_layer: 3, tokens: 256}]",
        "train.lr=1e-12",
    )
    run(cfg, tmp_path / "run", **QUIET)
    student = trained_student(tmp_path / "run")
    torch.testing.assert_close(student.embed_tokens.weight, teacher.get_input_embeddings().weight, atol=1e-9, rtol=1e-6)
    torch.testing.assert_close(student.lm_head.weight, teacher.get_output_embeddings().weight, atol=1e-9, rtol=1e-6)
    proc = cli(
        "run",
        "tiny",
        "-o",
        tmp_path / "bad",
        f"data.cache_dir={tiny_cache}",
        "model.init_embeddings=teacher",
        check=False,
    )  # d_model 32 vs the teacher's 48
    assert proc.returncode == 2 and "model.init_embeddings" in proc.stderr and not (tmp_path / "bad").exists()


KEY_FIX = (
    "normgrow/config/fields.py declares what enters the key, with each field: setting(..., key=False) for a field "
    "that cannot change the teacher's weights, before=<the behaviour from before it existed> for a new field, "
    "old_default=<the old default> for a changed default (see config.Meaning)"
)


def test_default_teacher_key_covers_its_recipe_only(tmp_path):
    """Settings that cannot change the default teacher's weights do not retrain it; its recipe does."""
    from normgrow.config import load_config
    from normgrow.run.pipeline import default_teacher_key

    def key(*student, teacher_yaml=""):
        preset = "teacher-tiny"
        if teacher_yaml:
            preset = tmp_path / f"t{abs(hash(teacher_yaml))}.yaml"
            preset.write_text("base: teacher-tiny\n" + teacher_yaml)
        return default_teacher_key(load_config("tiny", [f"teacher.default_preset={preset}", *student]))

    base = key()
    # the student's own settings and the teacher run's bookkeeping
    for free in (
        ["data.cache_dir=/elsewhere"],
        ["distill.chunk_tokens=64"],
        ["data.val_tokens=4096"],
        ["diagnostics.enabled=false"],
        ["model.d_model=64"],
        ["train.lr=1e-2"],
        ["seed=3"],
        ["data.train_pool_sequences=16"],
        ["data.max_pool_repeats=1"],
    ):  # the teacher trains on the whole split
        assert key(*free) == base, f"{free} changed the default teacher's key; {KEY_FIX}"
    for free in (
        "train: {eval_every_tokens: 777, log_every_steps: 3, checkpoint_every_tokens: 999}",
        "distill: {chunk_tokens: 32}",
        "diagnostics: {enabled: false}",
        "name: renamed",
    ):
        assert key(teacher_yaml=free) == base, f"{free} changed the default teacher's key; {KEY_FIX}"
    # the data it trains on and its own recipe
    for bound in (["data.seq_len=64"], ["data.vocab_size=1024"], ["data.max_documents=100"], ["data.val_fraction=0.1"]):
        assert key(*bound) != base, f"{bound} left the default teacher's key unchanged; {KEY_FIX}"
    for bound in (
        "train: {lr: 1.0e-2}",
        "model: {d_model: 64}",
        "seed: 5",
        "curriculum: {stages: [{n_layer: 2, tokens: 9000}]}",
    ):
        assert key(teacher_yaml=bound) != base, f"{bound} left the default teacher's key unchanged; {KEY_FIX}"


def test_cached_default_teachers_keep_their_keys():
    """Keys of teachers users already have cached: a change to the config's fields or defaults must not
    orphan them (values pinned when they were first built; the default's on a CPU without native bfloat16,
    where `auto` resolves to float32 as the dtype it was trained in)."""
    from normgrow.config import load_config
    from normgrow.machine.hardware import BF16_FLAGS, cpu_info
    from normgrow.run.pipeline import default_teacher_key

    pinned = {"tiny": "1220da9fb7215c4e"}
    if not cpu_info().flags & BF16_FLAGS:  # the default teacher since issue 13's redesign (4 × d_model 192)
        pinned["default"] = "1c59d1c739189016"
    for preset, want in pinned.items():
        got = default_teacher_key(load_config(preset))
        assert got == want, (
            f"a config field changed the default teacher's key of the {preset} preset ({got}, pinned "
            f"{want}), which would retrain every cached default teacher; {KEY_FIX}"
        )


def test_eval_log_and_checkpoint_cadence_do_not_change_training(tiny_cache, tmp_path):
    """Why those fields can stay out of the default teacher's key."""
    a = run(tiny_cfg(tiny_cache, "teacher.path=none"), tmp_path / "a", **QUIET)
    b = run(
        tiny_cfg(
            tiny_cache,
            "teacher.path=none",
            "train.eval_every_tokens=3000",
            "train.log_every_steps=1",
            "train.checkpoint_every_tokens=4000",
            "data.curve_tokens=512",
        ),
        tmp_path / "b",
        **QUIET,
    )
    assert "val/nll" in a["final"] and a["final"] == b["final"]
    wa = checkpoint.load(checkpoint.latest(tmp_path / "a" / "checkpoints"))[0]
    wb = checkpoint.load(checkpoint.latest(tmp_path / "b" / "checkpoints"))[0]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.e2e
def test_every_export_has_a_model_card_the_hub_parses(tiny_cache, tmp_path):
    import yaml
    from huggingface_hub import ModelCard

    from normgrow.run.export import model_card

    run(
        tiny_cfg(tiny_cache, "curriculum.stages=[{n_layer: 3, tokens: 2560}]", "model.norm=post"),
        tmp_path / "r",
        **QUIET,
    )
    cli("export", tmp_path / "r", "-o", tmp_path / "hf")
    card = ModelCard.load(tmp_path / "hf" / "README.md")
    data = card.data.to_dict()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "text-generation"
    assert {"normgrow", "placement-post", "curriculum-joint", "norm-kind-rmsnorm"} <= set(data["tags"])
    assert "base_model" not in data and "datasets" not in data  # the embedded teacher and corpus have no Hub id
    assert data["normgrow"]["metrics"]["val/ce"] == summary["final"]["val/ce"]
    assert data["normgrow"]["loads_with"] == "import normgrow, or trust_remote_code=True"
    assert "trust_remote_code=True" in card.text
    config = card.text.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(config)["model"]["norm"] == "post"  # the run's config, whole
    # a Hub teacher and corpus: base model and dataset in the header; a local teacher directory is not an id
    record = json.loads((tmp_path / "hf" / "normgrow_export.json").read_text())
    cfg = tiny_cfg(tiny_cache, "teacher.path=Qwen/Qwen3-8B", "data.corpus=hf:HuggingFaceFW/fineweb-edu")
    hub = ModelCard(model_card(cfg, record, {"val/ce": 1.5})).data.to_dict()
    assert hub["base_model"] == "Qwen/Qwen3-8B" and hub["datasets"] == ["HuggingFaceFW/fineweb-edu"]
    local = ModelCard(model_card(tiny_cfg(tiny_cache, f"teacher.path={tmp_path / 'hf'}"), record, {})).data.to_dict()
    assert "base_model" not in local
    # the card's own snippet, as written, in a fresh interpreter with no terminal: it loads without a prompt (before:
    # its AutoTokenizer line stopped at transformers' "run the custom code? [y/N]" for a post-norm export)
    snippet = card.text.split("```python\n", 1)[1].split("```", 1)[0].replace("PATH", str(tmp_path / "hf"))
    snippet += "print(type(model).__name__, type(tokenizer).__name__, tokenizer('def f').input_ids[:1])\n"
    proc = subprocess.run(
        [sys.executable, "-c", snippet], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("NormgrowForCausalLM "), proc.stderr[-2000:]
