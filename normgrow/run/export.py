"""Students in Hugging Face format: `from_pretrained` loads what `normgrow export` writes.

- A pre-norm student with a final norm *is* a Qwen3: it is written as `Qwen3ForCausalLM`
  (config.json + model.safetensors), which stock `transformers` loads and `generate()`s with.
- Any other student (post-norm, sandwich, deepnorm, Mix-LN, a per-block mixture, no final norm) is
  written with `model_type: normgrow` (normgrow/modeling_normgrow.py). `import normgrow` registers
  `NormgrowConfig` / `NormgrowForCausalLM` with the Auto classes, after which
  `AutoModelForCausalLM.from_pretrained(dir)` loads it with the same logits as the student, no
  remote code executed. The export also carries modeling_normgrow.py and blocks.py (torch and
  transformers only) and an `auto_map`, so `from_pretrained(dir, trust_remote_code=True)` loads it
  on a machine without normgrow — for built-in placements; a student with a user-registered one is
  exported without them (normgrow_export.json says so) and needs normgrow and that code.

Weights are safetensors only; nothing is unpickled.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Qwen3ForCausalLM
from transformers.utils import logging as hf_logging

from normgrow import atomic
from normgrow.config import ModelConfig, RunConfig, to_yaml
from normgrow.errors import NormgrowError
from normgrow.nn import modeling_normgrow as modeling
from normgrow.nn.blocks import BUILTIN_NORM_KINDS, BUILTIN_PLACEMENTS, Block
from normgrow.nn.model import PLACEMENTS, Student, hf_config, placement_of, to_hf_state_dict
from normgrow.train import checkpoint
from normgrow.train.rundir import RunDir
from normgrow.train.stages import plan_stages


class NormgrowForCausalLM(modeling.NormgrowForCausalLM):
    """The export class with normgrow installed: builds every registered placement (user ones too)."""

    @classmethod
    def block_class(cls, name: str):
        return PLACEMENTS[name]


NormgrowConfig = modeling.NormgrowConfig
# what an export carries so that trust_remote_code=True loads it without normgrow
REMOTE_CODE = ("modeling_normgrow.py", "blocks.py", "norms.py")
AUTO_MAP = {
    "AutoConfig": "modeling_normgrow.NormgrowConfig",
    "AutoModelForCausalLM": "modeling_normgrow.NormgrowForCausalLM",
}


hf_logging.disable_progress_bar()
AutoConfig.register("normgrow", NormgrowConfig)
AutoModelForCausalLM.register(NormgrowConfig, NormgrowForCausalLM)


def is_qwen3(student: Student) -> bool:
    """Is this student a stock Qwen3 (every block's placement maps onto Qwen3's, RMSNorm, final norm, q/k norms)?"""
    m = student.cfg
    return (
        all(type(b).qwen3_compatible for b in typing.cast(Iterable[Block], student.layers))
        and m.norm_kind == "rmsnorm"
        and m.final_norm
        and m.qk_norm
        and m.boundary_scale == 1.0  # a dosed stream is not Qwen3's
    )


def exported_model_config(cfg: RunConfig, stage: int) -> ModelConfig:
    """The model config of the student at `stage`: its depth, and its blocks' placements (one name when
    they agree, else the per-block list)."""
    placements = plan_stages(cfg)[stage].placements
    uniform = len(set(placements)) == 1
    # init_depth pins the depth-derived constants (DeepNorm's α) to the run's full depth at any stage
    return dataclasses.replace(
        cfg.model,
        n_layer=len(placements),
        norm=placements[0] if uniform else cfg.model.norm,
        block_norms=[] if uniform else list(placements),
        init_depth=cfg.model.init_depth or cfg.model.n_layer,
    )


def check_export_target(run_dir: Path, out_dir: Path, force: bool = False) -> None:
    """Export replaces only what it wrote: the target may be new, empty, or a previous export of the same run
    (or anything with `force`), but never the run directory, one of its parents, or a file."""
    run, out = run_dir.resolve(), out_dir.resolve()
    if out == run or out in run.parents:
        raise NormgrowError(
            f"{out_dir}: is the run directory {'itself' if out == run else 'or one of its parents'}; "
            "export to a new directory"
        )
    if out.is_file() or (out.exists() and not out.is_dir()):
        raise NormgrowError(f"{out_dir}: exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()) or force:
        return
    try:
        previous = json.loads((out / EXPORT_RECORD).read_text()).get("run_dir")
    except (OSError, ValueError, AttributeError):
        previous = None
    if previous != str(run):
        what = f"an export of another run ({previous})" if previous else "files normgrow did not write"
        raise NormgrowError(
            f"{out_dir}: not empty and holds {what}; choose a new directory or pass --force to replace it"
        )


def export_student(run_dir: str | Path, out_dir: str | Path, tokenizer=None, force: bool = False) -> Path:
    """Write the run's latest checkpoint as a Hugging Face model directory (atomically). An existing target is
    replaced only if it is a previous export of this run (or with `force`); see check_export_target. A target that
    is a symbolic link is followed: the export lands in the directory it names, and the link stays."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if out_dir.is_symlink():
        out_dir = out_dir.resolve()
    RunDir(run_dir).require()
    check_export_target(run_dir, out_dir, force)
    ckpt, state, m, student = _latest_student(run_dir)
    if tokenizer is None:
        tokenizer = _run_tokenizer(run_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = atomic.make_temp_dir(out_dir.parent, f".{out_dir.name}.")
    try:
        _write_export(tmp, run_dir, ckpt, state, m, student, tokenizer)
        atomic.follow_umask(tmp)  # readable by whom the user's files are (the safetensors file was written 0600)
        _replace_export(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _latest_student(run_dir: Path) -> tuple[Path, dict, ModelConfig, Student]:
    """The run's latest checkpoint (verified), its state, the model config at its stage and the student it holds."""
    run = RunDir(run_dir)
    ckpt = checkpoint.latest(run.checkpoints)
    if ckpt is None:
        raise NormgrowError(f"{run_dir}: has no checkpoint to export")
    cfg = run.config()
    why = checkpoint.damage(ckpt)
    if why is not None:
        raise NormgrowError(f"{ckpt}: {why}; rerun `normgrow run` on {run_dir} to fall back to an intact checkpoint")
    weights, _, _, state = checkpoint.load(ckpt)
    m = exported_model_config(cfg, state["stage"])
    student = Student(m)
    student.load_state_dict(weights)
    return ckpt, state, m, student


def _write_export(
    tmp: Path, run_dir: Path, ckpt: Path, state: dict, m: ModelConfig, student: Student, tokenizer
) -> None:
    """The export's files in `tmp`: weights and config (a stock Qwen3 or a normgrow model), the remote code a
    built-in placement needs, the tokenizer and normgrow_export.json."""
    placements = [placement_of(m, i) for i in range(student.depth)]
    qwen3 = is_qwen3(student)
    remote = not qwen3 and all(p in BUILTIN_PLACEMENTS for p in placements) and m.norm_kind in BUILTIN_NORM_KINDS
    hf: Qwen3ForCausalLM | NormgrowForCausalLM
    if qwen3:
        hf = Qwen3ForCausalLM(hf_config(m, bos_token_id=_bos(tokenizer), eos_token_id=_eos(tokenizer)))
        hf.load_state_dict(to_hf_state_dict(student))
    else:
        hf_cfg = NormgrowConfig(
            normgrow_model=dataclasses.asdict(m),
            vocab_size=m.vocab_size,
            bos_token_id=_bos(tokenizer),
            eos_token_id=_eos(tokenizer),
            tie_word_embeddings=m.tie_embeddings,
        )
        if remote:
            hf_cfg.auto_map = dict(AUTO_MAP)
        hf = NormgrowForCausalLM(hf_cfg)
        hf.student.load_state_dict(student.state_dict())
    hf.save_pretrained(str(tmp), safe_serialization=True)
    if remote:
        for name in REMOTE_CODE:
            shutil.copyfile(Path(modeling.__file__).with_name(name), tmp / name)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(tmp))
    loads_with = (
        "transformers"
        if qwen3
        else "import normgrow, or trust_remote_code=True"
        if remote
        else "import normgrow and the code registering its placement or norm kind (not built into the export)"
    )
    record = {
        "run_dir": str(run_dir.resolve()),
        "checkpoint": ckpt.name,
        "step": state["step"],
        "tokens": state["tokens"],
        "n_layer": student.depth,
        "norm": m.norm,
        "norm_kind": m.norm_kind,
        "placements": placements,
        "format": "Qwen3ForCausalLM" if qwen3 else "NormgrowForCausalLM",
        "loads_with": loads_with,
    }
    record["source"] = checkpoint_source(ckpt)
    run = RunDir(run_dir)
    metrics = (run.summary() or {}).get("final", {})
    (tmp / "README.md").write_text(model_card(run.config(), record, metrics))
    record["sha256"] = {p.name: atomic.sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    (tmp / EXPORT_RECORD).write_text(json.dumps(record, indent=1))


EXPORT_RECORD = "normgrow_export.json"


def checkpoint_source(ckpt: Path) -> str | None:
    """What an export made from checkpoint `ckpt` comes from, in 16 hex digits: the checkpoint's name and the sha256
    of each of its files as recorded in its state.json when it was written (a checkpoint from before hashes were
    recorded: its step and tokens). None when its state.json is unreadable."""
    try:
        state = json.loads((Path(ckpt) / "state.json").read_text())
    except (OSError, ValueError):
        return None
    what = state.get("sha256") or {"step": state.get("step"), "tokens": state.get("tokens")}
    return hashlib.sha256(json.dumps([Path(ckpt).name, what], sort_keys=True).encode()).hexdigest()[:16]


def run_source(run_dir: Path) -> str | None:
    """The source an export of the run would have now (its latest checkpoint's; None when it has none)."""
    ckpt = checkpoint.latest(RunDir(Path(run_dir)).checkpoints)
    return None if ckpt is None else checkpoint_source(ckpt)


def export_record(export: Path) -> dict | None:
    try:
        record = json.loads((Path(export) / EXPORT_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def export_damage(export: Path) -> str | None:
    """Why an export cannot be scored as written (None if it verifies): no readable record, a file missing or cut,
    or a file whose sha256 differs from the one recorded when it was written (exports from before hashes were
    recorded: the record's hashes are missing, and the export cannot be verified)."""
    record = export_record(export)
    if record is None:
        return f"{EXPORT_RECORD} is missing or unreadable"
    sums = record.get("sha256")
    if not isinstance(sums, dict) or not sums:
        return f"{EXPORT_RECORD} records no file hashes (an export from before they were recorded)"
    for name, want in sums.items():
        path = Path(export) / name
        if not path.is_file():
            return f"{name} is missing"
        if atomic.sha256_file(path) != want:
            return f"{name} does not match its recorded sha256 (damaged or cut)"
    return None


def hub_id(name: str) -> str | None:
    """`name` as a Hub repository id (owner/name) when it is one and not a local path; else None."""
    name = name.removeprefix("hf:")
    parts = name.split("/")
    local = name.startswith((".", "/", "~")) or Path(name).expanduser().exists()
    return name if len(parts) == 2 and all(parts) and not local else None


def model_card(cfg: RunConfig, record: dict, metrics: Mapping) -> str:
    """The export's README.md: the Hub's YAML header (base model = the teacher where it has a Hub id, datasets = the
    corpus where it has one, tags, library and pipeline, normgrow's own fields) and a body with how to load it, its
    metrics, and the run's config."""
    from huggingface_hub import ModelCard, ModelCardData

    teacher, corpus = hub_id(cfg.teacher.path), hub_id(cfg.data.corpus) if cfg.data.corpus != "stdlib" else None
    curriculum = "grow" if len(cfg.curriculum.stages) > 1 else "joint"
    placements = sorted(set(record["placements"]))
    data = ModelCardData(
        base_model=teacher,
        datasets=[corpus] if corpus else None,
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=["normgrow", "knowledge-distillation", *(f"placement-{p}" for p in placements), f"curriculum-{curriculum}",
              f"norm-kind-{record['norm_kind']}"],
        normgrow={"format": record["format"], "loads_with": record["loads_with"], "step": record["step"],
                  "tokens": record["tokens"], "n_layer": record["n_layer"], "placements": record["placements"],
                  "metrics": {k: v for k, v in metrics.items() if isinstance(v, int | float)}},
    )  # fmt: skip
    remote = ", trust_remote_code=True" if record["format"] != "Qwen3ForCausalLM" else ""
    rows = [f"| `{k}` | {v:.6g} |" for k, v in metrics.items() if isinstance(v, int | float)]
    body = [
        f"# A {record['n_layer']}-block student distilled by normgrow",
        "",
        f"Distilled from {_teacher_words(cfg.teacher.path)} on {_corpus_words(cfg.data.corpus)} with {', '.join(placements)} normalization "
        f"({record['norm_kind']}) under {curriculum} training ({len(cfg.curriculum.stages)} stage(s)), "
        f"{record['tokens']:,} tokens in {record['step']:,} steps.",
        "",
        f"Loads with: {record['loads_with']}.",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        f'model = AutoModelForCausalLM.from_pretrained("PATH"{remote})',
        f'tokenizer = AutoTokenizer.from_pretrained("PATH"{remote})',
        "```",
        "",
        "## Metrics at the end of training (nats per token; `val/ce` against the teacher, full vocabulary)",
        "",
        *(["| metric | value |", "|---|---|", *rows] if rows else ["(the run has no summary yet)"]),
        "",
        "## The run's config",
        "",
        "```yaml",
        to_yaml(cfg).rstrip(),
        "```",
    ]
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body) + "\n"))


def _replace_export(tmp: Path, out_dir: Path) -> None:
    """Move the finished export `tmp` to `out_dir`; a previous export there is moved aside, not deleted, until the
    new one is in place (and put back if the move fails)."""
    old = None
    if out_dir.exists():
        old = atomic.make_temp_dir(out_dir.parent, f".{out_dir.name}.old.")
        os.rename(out_dir, old / "export")
    try:
        os.rename(tmp, out_dir)
    except BaseException:
        if old is not None:
            os.rename(old / "export", out_dir)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _run_tokenizer(run_dir: Path):
    summary = RunDir(run_dir).summary()
    if summary is not None:
        shards = summary.get("data", {}).get("shards")
        if shards and (Path(shards) / "tokenizer").is_dir():
            return AutoTokenizer.from_pretrained(str(Path(shards) / "tokenizer"))
    return None


def _bos(tok) -> int | None:
    return None if tok is None else (tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id)


def _eos(tok) -> int | None:
    return None if tok is None else tok.eos_token_id


def _teacher_words(path: str) -> str:
    return "normgrow's embedded default teacher (trained on the same corpus)" if path == "default" else f"`{path}`"


def _corpus_words(corpus: str) -> str:
    return "the Python standard library's source (the embedded corpus)" if corpus == "stdlib" else f"`{corpus}`"
