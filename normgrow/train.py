"""The one training loop: a student distilled from a teacher through the stages of a curriculum.

    for each stage:                          (a growth event opens every stage after the first)
        for each step:  lr ← schedule(tokens) → batch → teacher → loss → backward → clip → step
                        → log → eval → checkpoint

Everything a run writes goes into its run directory (DESIGN.md §4):
    config.yaml       the fully resolved config (vocab size filled in)
    metrics.jsonl     one object per event: step, tokens, compute counters, n_layer, stage, event, metrics
    checkpoints/      step_XXXXXXXX/ directories, written atomically (checkpoint.py)
    summary.json      final metrics, compute totals, one entry per stage, vocabulary and init records

Running again on an existing run directory resumes from its latest checkpoint: the metrics logged
after that checkpoint are dropped and recomputed, so a killed-and-resumed run writes the same
metrics as an uninterrupted one (bitwise on a CPU with the same thread count). Under `torchrun`
every rank trains on its slice of each global batch (DDP; gloo on CPU, NCCL on GPU); rank 0 alone
writes. The loss is a per-token mean over the global batch, whatever the split (losses.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch
from tqdm import tqdm

from normgrow import __version__, checkpoint, dist
from normgrow.config import RunConfig, load_config, save_config, to_dict
from normgrow.curriculum import StagePlan, flops_per_token, grow, match_budget, plan_stages, tokens_per_step
from normgrow.data import BatchIterator, Prepared, prepare, probe_batch, val_sequences
from normgrow.diagnostics import diagnose, make_probe
from normgrow.errors import ConfigError, NormgrowError
from normgrow.losses import SparseTeacher, distill_loss, eval_sums
from normgrow.model import Student
from normgrow.teacher import Teacher, copy_embeddings, load_teacher, resolve_teacher_path


class TrainingDiverged(NormgrowError):
    """The loss or gradient became NaN/inf."""


# Keys allowed to differ when resuming a run directory (they do not change what is computed).
RESUME_MAY_DIFFER = ("train.device", "train.threads")


# ----------------------------------------------------------------------------- schedule


def lr_at(tokens: int, cfg: RunConfig, start: int, total: int) -> float:
    """Learning rate for a step beginning at `tokens`, in a schedule spanning [start, start + total)."""
    t = cfg.train
    pos = tokens - start + tokens_per_step(cfg)  # tokens seen once this step is done: the first step has lr > 0
    if t.warmup_tokens and pos <= t.warmup_tokens:
        return t.lr * pos / t.warmup_tokens
    if t.schedule == "constant":
        return t.lr
    if t.schedule == "cosine":
        progress = (pos - t.warmup_tokens) / max(1, total - t.warmup_tokens)
        frac = 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress))))
    else:  # wsd: stable, then a linear decay over the last decay_fraction of the budget
        decay_start = total * (1 - t.decay_fraction)
        frac = 1.0 if pos <= decay_start else max(0.0, 1 - (pos - decay_start) / (total - decay_start))
    return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * frac)


def schedule_span(plans: list[StagePlan], stage: int, cfg: RunConfig) -> tuple[int, int]:
    """(start tokens, length) of the schedule governing `stage`: the whole run, or the stage alone."""
    if cfg.curriculum.lr_schedule == "global":
        return 0, sum(p.tokens for p in plans)
    return sum(p.tokens for p in plans[:stage]), plans[stage].tokens


# ----------------------------------------------------------------------------- optimizer


def build_optimizer(model: Student, cfg: RunConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices of the blocks and the LM head only (not norms or embeddings).

    Only trainable parameters enter the optimizer, in a deterministic order (module order), so a
    checkpointed optimizer state maps back onto the same parameters.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim == 2 and not name.startswith("embed_tokens") else no_decay).append(p)
    t = cfg.train
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), fused=fused)


# ----------------------------------------------------------------------------- run directory


def _diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    keys = []
    for k in sorted(set(a) | set(b)):
        key = f"{prefix}{k}"
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            keys += _diff(a[k], b[k], key + ".")
        elif a.get(k) != b.get(k):
            keys.append(key)
    return keys


def open_run_dir(out: Path, cfg: RunConfig) -> bool:
    """Create the run directory, or check that an existing one holds the same run. True = resume."""
    saved = out / "config.yaml"
    if saved.is_file():
        old = load_config(str(saved))
        differ = [k for k in _diff(to_dict(old), to_dict(cfg)) if k not in RESUME_MAY_DIFFER]
        if differ:
            raise ConfigError(f"{out}: holds a run with a different config ({', '.join(differ[:3])}"
                              f"{' …' if len(differ) > 3 else ''}); choose another output directory")
        return True
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"{out}: cannot write the run directory ({e.strerror})") from None
    save_config(cfg, saved)
    return False


def _truncate_jsonl(path: Path, n_lines: int) -> None:
    """Keep the first `n_lines` events: those written before the checkpoint being resumed."""
    if not path.is_file():
        return
    kept = path.read_text().splitlines()[:n_lines]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


LOGGER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_loggers(cfg: RunConfig) -> None:
    """The packages train.loggers needs, checked before the run directory is created."""
    import importlib.util

    for name in cfg.train.loggers:
        if importlib.util.find_spec(LOGGER_PACKAGES[name]) is None:
            raise ConfigError(f"train.loggers: '{name}' needs the {LOGGER_PACKAGES[name]} package "
                              f"(pip install {LOGGER_PACKAGES[name]}, or pip install -e .[loggers])")


def wandb_run_id(out: Path) -> str:
    """One W&B run per run directory, the same across resumes: its name plus a hash of its absolute path
    (the arms of two studies share names such as post-grow-s0 and must not resume each other's W&B run)."""
    path = str(Path(out).resolve())
    return f"{Path(path).name}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"


def _numeric(record: dict) -> dict:
    """The metrics of an event (keys such as train/loss, val/ce, grow/max_dlogit) that a dashboard plots."""
    return {k: v for k, v in record.items() if "/" in k and isinstance(v, (int, float)) and not isinstance(v, bool)}


class MetricsWriter:
    """Appends events to metrics.jsonl (rank 0), mirrored to TensorBoard / W&B when configured."""

    def __init__(self, out: Path, cfg: RunConfig, enabled: bool):
        self.path, self.enabled = out / "metrics.jsonl", enabled
        self.lines = len(self.path.read_text().splitlines()) if enabled and self.path.is_file() else 0
        self.tb = self.wandb = None
        if not enabled:
            return
        if "tensorboard" in cfg.train.loggers:
            from torch.utils.tensorboard import SummaryWriter  # availability checked by check_loggers
            # rebuilt from metrics.jsonl each time the run (re)starts, so that after a resume it holds exactly
            # the events of metrics.jsonl: none of those a killed attempt wrote after its last checkpoint
            shutil.rmtree(out / "tensorboard", ignore_errors=True)
            self.tb = SummaryWriter(str(out / "tensorboard"))
            if self.path.is_file():
                for line in self.path.read_text().splitlines():
                    self._to_tensorboard(json.loads(line))
        if "wandb" in cfg.train.loggers:
            import wandb  # availability checked by check_loggers
            os.environ.setdefault("WANDB_MODE", "offline")  # offline-safe unless the user opts in
            self.wandb = wandb.init(project="normgrow", name=cfg.name or out.name, dir=str(out),
                                    config=to_dict(cfg), resume="allow", id=wandb_run_id(out))

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        self.lines += 1
        numeric = _numeric(record)
        if self.tb is not None:
            self._to_tensorboard(record)
        if self.wandb is not None:
            self.wandb.log({**numeric, "tokens": record["tokens"]}, step=record["step"])

    def _to_tensorboard(self, record: dict) -> None:
        for k, v in _numeric(record).items():
            self.tb.add_scalar(k, v, record["tokens"])

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate(model: Student, teacher: Optional[Teacher], val: torch.Tensor, n_layer: int, cfg: RunConfig,
             info: dist.DistInfo) -> dict[str, float]:
    """val/ce, val/kl, val/teacher_entropy (with a teacher) and val/nll on the fixed validation set."""
    was_training = model.training
    model.eval()
    rows = val[info.rank :: info.world_size]
    mb = cfg.train.micro_batch_size or max(1, cfg.train.batch_size // info.world_size)
    totals = torch.zeros(5, dtype=torch.float64)
    for batch in rows.split(mb):
        x, y = batch[:, :-1].to(info.device), batch[:, 1:].to(info.device)
        with _autocast(cfg, info.device):
            h = model.hidden(x, n_layer)
        s = eval_sums(h.reshape(-1, h.shape[-1]), model.lm_head.weight,
                      teacher.chunks(x) if teacher is not None else None, y.reshape(-1), cfg.distill.chunk_tokens)
        totals += torch.tensor([s["ce"], s["kl"], s["teacher_entropy"], s["nll"], s["tokens"]], dtype=torch.float64)
    dist.all_reduce_sum(totals)
    model.train(was_training)
    ce, kl, ent, nll, n = totals.tolist()
    out = {"val/nll": nll / n}
    if teacher is not None:
        out.update({"val/ce": ce / n, "val/kl": kl / n, "val/teacher_entropy": ent / n})
    return out


def _autocast(cfg: RunConfig, device: torch.device):
    if cfg.train.dtype == "bfloat16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ----------------------------------------------------------------------------- the run


def teacher_cache(cfg: RunConfig, teacher_path: str, prep: Prepared, teacher: Teacher, say, progress: bool):
    """The run's verified top-k cache: an explicit teacher.cache_path, or the keyed one (built if missing)."""
    from normgrow import cache

    if cfg.teacher.cache_path:
        return cache.open_cache_dir(Path(cfg.teacher.cache_path), cache.expected_meta(cfg, teacher_path, prep))
    cache.build(cfg, teacher_path, prep, teacher, log=say, progress=progress)
    return cache.open_cache(cfg, teacher_path, prep)


def resolve_config(cfg: RunConfig, prep: Prepared) -> RunConfig:
    """Fill in what the data decides (the vocabulary size); a mismatch is an error."""
    v = prep.vocab_size
    if cfg.model.vocab_size is not None and cfg.model.vocab_size != v:
        raise ConfigError(f"model.vocab_size: {cfg.model.vocab_size} differs from the tokenizer's {v} tokens")
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=v))


def resolve_budget(cfg: RunConfig, say: Callable[[str], None]) -> tuple[RunConfig, Optional[dict]]:
    """Apply curriculum.match_budget and report the matched totals."""
    cfg, match = match_budget(cfg)
    if match is not None:
        say(f"budget matched by {match['by']} to {match['source']}: target {match['target']:,.0f}, "
            f"this run {match['planned']:,.0f} ({match['planned'] / match['target'] - 1:+.4%})")
    return cfg, match


def versions() -> dict:
    import transformers

    return {"normgrow": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "threads": torch.get_num_threads()}


def run(cfg: RunConfig, out_dir: str | Path, log: Callable[[str], None] = print, progress: bool = True) -> dict:
    """Train (or resume) one run into `out_dir`; returns its summary."""
    info = dist.setup(cfg.train.device)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    out = Path(out_dir)
    say = log if info.is_main else (lambda *_: None)
    if (out / "summary.json").is_file() and (out / "config.yaml").is_file():
        open_run_dir(out, _resolved_from_saved(out, cfg))  # same run? (raises if not)
        say(f"{out}: already finished")
        return json.loads((out / "summary.json").read_text())

    # shared work first: the default teacher and the token shards (rank 0 builds, the others wait)
    if info.is_main:
        teacher_path = resolve_teacher_path(cfg, log=say, progress=progress)
        prep = prepare(cfg, teacher_path=teacher_path, log=say)
    dist.barrier()
    if not info.is_main:
        teacher_path = resolve_teacher_path(cfg, log=say, build=False)
        prep = prepare(cfg, teacher_path=teacher_path, log=say)
    cfg = resolve_config(cfg, prep)
    cfg, budget_match = resolve_budget(cfg, say)
    teacher = None
    if teacher_path is not None:  # before the run dir exists: a bad teacher leaves nothing on disk
        teacher = load_teacher(teacher_path, cfg.teacher.dtype, info.device, prep.vocab_size, cfg.model.vocab_size)
    tcache = None
    if cfg.teacher.cache or cfg.teacher.cache_path:  # training reads the top-k cache; validation stays online
        tcache = teacher_cache(cfg, teacher_path, prep, teacher, say, progress)
    plans = plan_stages(cfg)
    torch.manual_seed(cfg.seed)
    model = Student(cfg.model, n_layer=plans[0].n_layer, max_seq_len=cfg.data.seq_len).to(info.device)
    if cfg.model.init_embeddings == "teacher":
        copy_embeddings(model, teacher)
    set_trainable(model, plans[0])
    batches = BatchIterator(prep.train, cfg.data.seq_len, cfg.train.batch_size, cfg.seed, info.rank, info.world_size)
    val = val_sequences(prep, cfg.data.seq_len, cfg.data.val_tokens)
    probe = None
    if cfg.diagnostics.enabled and info.is_main:
        rows, _ = probe_batch(prep, cfg.data.probe_sequences, cfg.data.seq_len)
        probe = make_probe(rows, prep.token_classes, teacher, info.device)

    check_loggers(cfg)
    # everything that can fail on bad input has been checked: now the run directory may be created
    resume = open_run_dir(out, cfg) if info.is_main else True
    resume = dist.broadcast_object(resume)
    dist.barrier()
    state = {"step": 0, "tokens": 0, "active_layer_tokens": 0, "trainable_layer_tokens": 0, "flops": 0.0,
             "stage": 0, "stage_step": 0, "stages": [], "wall_time_s": 0.0}

    ckpt_dir = out / "checkpoints"
    latest = checkpoint.latest(ckpt_dir) if resume else None
    if latest is not None:
        model_sd, optim_sd, rng, state = checkpoint.load(latest, map_location=info.device)
        plan = plans[state["stage"]]
        if model.n_layer < plan.n_layer:
            grow(model, plan.n_layer, cfg.curriculum.growth_init, cfg.seed)
        model.load_state_dict(model_sd)
        set_trainable(model, plan)
        optimizer = build_optimizer(model, cfg, info.device)
        optimizer.load_state_dict(optim_sd)
        checkpoint.restore_rng(rng)
        batches.load_state_dict(state["data"])
        if info.is_main:
            _truncate_jsonl(out / "metrics.jsonl", state["metrics_lines"])
            _truncate_jsonl(out / "diagnostics.jsonl", state.get("diagnostics_lines", 0))
        say(f"resuming {out} from {latest.name} (stage {state['stage']}, {state['tokens']:,} tokens)")
    else:
        optimizer = build_optimizer(model, cfg, info.device)
        if info.is_main:
            (out / "metrics.jsonl").unlink(missing_ok=True)
            (out / "diagnostics.jsonl").unlink(missing_ok=True)

    writer = MetricsWriter(out, cfg, info.is_main)
    ddp = _wrap(model, info, cfg.train.compile)
    total_steps = sum(p.steps for p in plans)
    stage_end_steps = frozenset(sum(p.steps for p in plans[: i + 1]) for i in range(len(plans)))
    bar = tqdm(total=total_steps, initial=state["step"], disable=not (progress and info.is_main), unit="step",
               dynamic_ncols=True, desc=cfg.name or out.name, file=sys.stderr)
    per_step = tokens_per_step(cfg)
    n_local = per_step // info.world_size  # tokens this rank contributes to a step
    mb = cfg.train.micro_batch_size or cfg.train.batch_size // info.world_size
    t_start = time.perf_counter() - state["wall_time_s"]

    def record(event: str, metrics: dict) -> dict:
        rec = {"step": state["step"], "tokens": state["tokens"], "active_layer_tokens": state["active_layer_tokens"],
               "trainable_layer_tokens": state["trainable_layer_tokens"], "flops": state["flops"],
               "n_layer": model.n_layer, "stage": state["stage"], "event": event, **metrics}
        writer.write(rec)
        return rec

    def diagnose_now(event: str) -> None:
        if probe is None:
            return
        rec = diagnose(model, probe, cfg.diagnostics.sink_threshold, cfg.diagnostics.skip_ce, cfg.distill.chunk_tokens)
        head = {"step": state["step"], "tokens": state["tokens"], "active_layer_tokens": state["active_layer_tokens"],
                "n_layer": model.n_layer, "stage": state["stage"], "event": event}
        with open(out / "diagnostics.jsonl", "a") as f:
            f.write(json.dumps({**head, **rec}) + "\n")
        state["diagnostics_lines"] = state.get("diagnostics_lines", 0) + 1

    def save() -> None:
        state["data"] = batches.state_dict()
        state["wall_time_s"] = time.perf_counter() - t_start
        state["metrics_lines"] = writer.lines
        if info.is_main:
            checkpoint.save(ckpt_dir, state["step"], model.state_dict(), optimizer.state_dict(), state,
                            keep=cfg.train.keep_checkpoints, protected=stage_end_steps)
        dist.barrier()

    try:
        for plan in plans[state["stage"]:]:
            if state["stage"] != plan.index or state["stage_step"] == 0:
                # ---- stage start (a growth event for every stage after the first)
                growth = None
                if plan.index > 0:
                    # ---- growth event: the model just before growth is the one evaluated at the end of the
                    # previous stage, so its evaluation is reused for the `pre_growth` event.
                    pre = state["stages"][-1]["end"]
                    record("pre_growth", pre)
                    probe_x = val[: min(len(val), mb), :-1].to(info.device)
                    growth = grow_event(model, plan, cfg, probe_x)
                    set_trainable(model, plan)
                    optimizer = rebuild_optimizer(optimizer, model, cfg, info.device)
                    ddp = _wrap(model, info, cfg.train.compile)
                state["stage"], state["stage_step"] = plan.index, 0
                start = evaluate(model, teacher, val, model.n_layer, cfg, info)
                if growth is not None:
                    growth.update({f"grow/val_{k[4:]}_jump": start[k] - pre[k] for k in start})
                    record("growth", growth)
                record("stage_start", start)
                diagnose_now("stage_start")
                state["stages"].append({"index": plan.index, "n_layer": plan.n_layer, "steps": plan.steps,
                                        "tokens": plan.tokens, "train_blocks": list(plan.train_blocks),
                                        "growth": growth, "start": start})
            sched_start, sched_len = schedule_span(plans, plan.index, cfg)
            n_trainable = len(plan.train_blocks)
            step_flops = flops_per_token(cfg.model, plan.n_layer, n_trainable, cfg.data.seq_len) * per_step
            t_log, tok_log = time.perf_counter(), 0
            while state["stage_step"] < plan.steps:
                lr = lr_at(state["tokens"], cfg, sched_start, sched_len)
                for g in optimizer.param_groups:
                    g["lr"] = lr
                batch = next(batches)  # (B/W, T+1)
                seq_idx = torch.from_numpy(batches.last_sequences).split(mb)
                loss_sum = torch.zeros((), device=info.device)
                micro = batch.split(mb)
                for i, part in enumerate(micro):
                    x, y = part[:, :-1].to(info.device), part[:, 1:].to(info.device)  # both (b, T)
                    # DDP reduces gradients on the last micro-batch only (no_sync on the others)
                    sync = ddp.no_sync() if info.world_size > 1 and i < len(micro) - 1 else contextlib.nullcontext()
                    with sync:
                        with _autocast(cfg, info.device):
                            h = ddp(x, n_layer=plan.n_layer, hidden_only=True)  # (b, T, C)
                        if tcache is not None:
                            tchunks = SparseTeacher(*tcache.sequences(seq_idx[i], info.device))
                        else:
                            tchunks = teacher.chunks(x) if teacher is not None else None
                        loss = distill_loss(h.reshape(-1, h.shape[-1]), model.lm_head.weight, tchunks, y.reshape(-1),
                                            n_global=n_local, kind=cfg.distill.loss,
                                            temperature=cfg.distill.temperature, jsd_beta=cfg.distill.jsd_beta,
                                            nll_weight=cfg.distill.nll_weight, chunk=cfg.distill.chunk_tokens)
                        loss.backward()
                    loss_sum += loss.detach()
                dist.all_reduce_sum(loss_sum)
                train_loss = loss_sum.item() / info.world_size
                params = [p for p in model.parameters() if p.requires_grad]
                grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.train.grad_clip if cfg.train.grad_clip > 0 else float("inf"))
                if not (math.isfinite(train_loss) and torch.isfinite(grad_norm)):
                    last = checkpoint.latest(ckpt_dir)
                    raise TrainingDiverged(f"non-finite {'loss' if not math.isfinite(train_loss) else 'gradient norm'} "
                                           f"at step {state['step'] + 1} (train/loss={train_loss}); last good "
                                           f"checkpoint: {last if last else 'none'}")
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                state["step"] += 1
                state["stage_step"] += 1
                state["tokens"] += per_step
                state["active_layer_tokens"] += per_step * plan.n_layer
                state["trainable_layer_tokens"] += per_step * n_trainable
                state["flops"] += step_flops
                tok_log += per_step
                bar.update(1)
                last_step = state["stage_step"] == plan.steps
                if state["step"] % cfg.train.log_every_steps == 0 or last_step:
                    now = time.perf_counter()
                    tps = tok_log / max(now - t_log, 1e-9)
                    t_log, tok_log = now, 0
                    record("train", {"train/loss": train_loss, "train/grad_norm": grad_norm.item(), "lr": lr,
                                     "perf/tokens_per_s": tps})
                    bar.set_postfix(loss=f"{train_loss:.4f}", tok_s=f"{tps:,.0f}", depth=plan.n_layer)
                if last_step:
                    end = evaluate(model, teacher, val, model.n_layer, cfg, info)
                    record("stage_end", end)
                    diagnose_now("stage_end")
                    state["stages"][-1]["end"] = end
                elif _crossed(state["tokens"], per_step, cfg.train.eval_every_tokens):
                    record("eval", evaluate(model, teacher, val, model.n_layer, cfg, info))
                if cfg.diagnostics.every_tokens and not last_step and _crossed(state["tokens"], per_step,
                                                                               cfg.diagnostics.every_tokens):
                    diagnose_now("interval")
                if last_step or _crossed(state["tokens"], per_step, cfg.train.checkpoint_every_tokens):
                    save()
    finally:
        bar.close()
        writer.close()

    final = state["stages"][-1]["end"]
    summary = {
        **final,
        "final": final,
        "ce_source": (f"online teacher, full vocabulary ({cfg.model.vocab_size} tokens)" if teacher is not None
                      else "no teacher (next-token training): only val/nll"),
        "train_teacher": (f"top-{tcache.meta['k']} teacher cache + tail bucket holding "
                          f"{tcache.meta['mean_tail_mass']:.1%} of the teacher's mass on average ({tcache.dir})"
                          if tcache is not None
                          else "online teacher, full vocabulary" if teacher is not None else None),
        "compute": {k: state[k] for k in ("step", "tokens", "active_layer_tokens", "trainable_layer_tokens", "flops")},
        "stages": state["stages"],
        "boundaries": boundary_summary(out / "diagnostics.jsonl") if info.is_main else None,
        "budget_match": budget_match,
        "n_layer": model.n_layer,
        "teacher": teacher.report if teacher is not None else None,
        "data": {"shards": str(prep.dir), "train_tokens": prep.meta["n_tokens"]["train"],
                 "val_split_tokens": prep.meta["n_tokens"]["val"],
                 "val_eval_tokens": int(val.shape[0] * cfg.data.seq_len)},
        "init": model.init_record(),
        "versions": versions(),
        "world_size": info.world_size,
        "wall_time_s": time.perf_counter() - t_start,
    }
    if info.is_main:
        tmp = out / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=1))
        os.replace(tmp, out / "summary.json")
    dist.barrier()
    return summary


def boundary_summary(path: Path) -> list[dict]:
    """Per growth event: the boundary residual (input of the first appended block) at the event and at
    the end of the stage that follows, per token class, and the identity-ness of the last prefix block
    just before growth. Read back from diagnostics.jsonl (so a resumed run summarizes all of it)."""
    if not path.is_file():
        return []
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    ends = {r["stage"]: r for r in recs if r["event"] == "stage_end"}
    out = []
    for k in sorted(ends):
        if k + 1 not in ends:
            continue
        before, after = ends[k], ends[k + 1]
        b = before["n_layer"]  # residual index of the boundary = prefix depth

        def pick(r: dict) -> dict:
            return {c: r["residual_rms"][b][c] for c in ("all", "structural", "content", "bos", "first")}

        out.append({"stage": k + 1, "boundary": b,
                    "rms_at_growth": pick(before), "rms_end_of_next_stage": pick(after),
                    "struct_content_ratio": [before["struct_content_ratio"][b], after["struct_content_ratio"][b]],
                    "last_prefix_block": {"index": b - 1, "rel_update": before["rel_update"][b - 1],
                                          "cos": before["cos"][b - 1],
                                          "skip_ce_delta": (before.get("skip_ce_delta") or [None] * b)[b - 1]}})
    return out


def _crossed(tokens: int, per_step: int, every: int) -> bool:
    """Did the step that just ended cross a multiple of `every` tokens?"""
    return tokens // every != (tokens - per_step) // every


def set_trainable(model: Student, plan: StagePlan) -> None:
    """Blocks outside the stage's train list are frozen (no gradients, so no optimizer state and no
    weight decay). The token embedding trains exactly when block 0 does (it feeds the prefix: a
    frozen prefix on moving embeddings would be retrained in effect); the final norm and LM head
    always train."""
    for i, block in enumerate(model.layers):
        block.requires_grad_(i in plan.train_blocks)
    model.embed_tokens.requires_grad_(0 in plan.train_blocks)
    if model.cfg.tie_embeddings:  # a tied head is the embedding: it must train for the head to train
        model.embed_tokens.requires_grad_(True)


@torch.no_grad()
def grow_event(model: Student, plan: StagePlan, cfg: RunConfig, probe_x: torch.Tensor) -> dict:
    """Append the stage's new blocks and measure how much the function changed on a fixed batch."""
    was_training = model.training
    model.eval()
    before = model(probe_x).float()  # (b, T, V)
    prefix = model.n_layer
    grow(model, plan.n_layer, cfg.curriculum.growth_init, cfg.seed)
    after = model(probe_x).float()
    model.train(was_training)
    diff = after - before
    return {"grow/from": prefix, "grow/to": plan.n_layer, "grow/init": cfg.curriculum.growth_init,
            "grow/logit_max_abs_diff": diff.abs().max().item(),
            "grow/logit_rms_diff": diff.pow(2).mean().sqrt().item(),
            "grow/logit_rms": before.pow(2).mean().sqrt().item()}


def rebuild_optimizer(old: torch.optim.AdamW, model: Student, cfg: RunConfig, device: torch.device) -> torch.optim.AdamW:
    """The optimizer after growth. `keep`: parameters still trainable keep their moments and step
    counts, new (and newly unfrozen) ones start fresh; `reset`: every parameter starts fresh.
    Frozen parameters leave the optimizer, and their state with them."""
    new = build_optimizer(model, cfg, device)
    if cfg.curriculum.optimizer == "keep":
        for group in new.param_groups:
            for p in group["params"]:
                if p in old.state:
                    new.state[p] = old.state[p]
    return new


def _wrap(model: Student, info: dist.DistInfo, compile: bool = False):
    """The module the training step calls: DDP across ranks, compiled if asked (re-wrapped after growth,
    so new blocks join both; the loss's chunked head projection stays outside the compiled graph)."""
    wrapped = model
    if info.world_size > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        wrapped = DDP(model, device_ids=[info.device.index] if info.device.type == "cuda" else None)
    return torch.compile(wrapped) if compile else wrapped


def _resolved_from_saved(out: Path, cfg: RunConfig) -> RunConfig:
    """The caller's config with the saved vocabulary size, to compare against a finished run."""
    saved = load_config(str(out / "config.yaml"))
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=saved.model.vocab_size))
    return match_budget(cfg)[0]

