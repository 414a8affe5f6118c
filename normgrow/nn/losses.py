"""Distillation losses and the paper's metrics, computed chunk by chunk over tokens.

Definitions (docs/DESIGN.md §3.2; p_T teacher, p_S student, softmax over the vocabulary, T=1 for metrics):

    ce               = −Σ_v p_T(v) log p_S(v)        the paper's "validation CE" (val/ce)
    teacher_entropy  = −Σ_v p_T(v) log p_T(v)
    kl               = KL(p_T ‖ p_S) = ce − teacher_entropy
    nll              = −log p_S(y)                    y = the next token of the data

Training losses at temperature τ (p^τ = softmax(logits / τ)), scaled by τ² so gradient magnitudes
do not depend on τ (Hinton et al. 2015):

    ce          −Σ p_T^τ log p_S^τ · τ²           (what torchtune/MiniLLM call "forward KL")
    kl          KL(p_T^τ ‖ p_S^τ) · τ²            (same gradient as ce; the value excludes H(p_T))
    reverse_kl  KL(p_S^τ ‖ p_T^τ) · τ²
    jsd         β·KL(p_T^τ ‖ M) + (1−β)·KL(p_S^τ ‖ M),  M = β·p_T^τ + (1−β)·p_S^τ,  · τ²
    plus `nll_weight` · nll at τ = 1.

Normalization: each call returns Σ_tokens ℓ / n_tokens for the caller's `n_tokens`, so that the
calls of one optimizer step add up to a per-token mean. The training step (step.train_step) passes
the tokens its rank contributes to the step and lets DDP average over ranks: the result is the
per-token mean over the global batch for any split into micro-batches and ranks (a loss normalized
per micro-batch or per rank instead would be wrong by a factor under accumulation or data
parallelism).

Memory: full-vocabulary logits are never materialized for more than `chunk_tokens` tokens at a
time (Qwen3's vocabulary has 151,936 entries). The student's logits come from its final hidden
states and LM head, and `ChunkedDistillLoss` computes each chunk's loss *and* its gradients with
respect to the hidden states and head weight in the forward pass, keeping only those gradients
(the approach of fused linear-cross-entropy kernels), so backward holds no logits either.
The teacher side is also given as final hidden states and LM-head rows, and projected per chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

LOSSES = ("ce", "kl", "reverse_kl", "jsd")


# Evaluation sets (the validation set, the diagnostics probe) are scored against the same teacher again at
# every evaluation. Their teacher log-probabilities are kept after the first one when the whole distribution
# fits this many bytes per set (the default study's 16,384 validation tokens × 4,096 ids: 256 MiB): the
# teacher's forward and softmax then run once per run instead of once per evaluation, with identical numbers.
KEEP_TEACHER_BYTES = 512 * 2**20


@dataclass
class TeacherChunks:
    """The teacher's distribution, projected chunk by chunk: logits = hidden @ weight.T (rows trimmed to V).
    With `keep`, log_probs remembers each chunk it computed (an evaluation set scored again and again)."""

    hidden: torch.Tensor  # (N, C_T)
    weight: torch.Tensor  # (V, C_T): the teacher's LM-head rows for the student's vocabulary
    keep: bool = False
    _kept: dict = field(default_factory=dict, repr=False)

    def logits(self, sl: slice) -> torch.Tensor:
        return (self.hidden[sl] @ self.weight.T).float()  # (n, V)

    def log_probs(self, sl: slice) -> torch.Tensor:
        """log p_T at temperature 1 of rows sl (n, V), float32."""
        key = (sl.start, sl.stop)
        if key in self._kept:
            return self._kept[key]
        out = F.log_softmax(self.logits(sl), dim=-1)
        if self.keep:
            self._kept[key] = out
        return out

    def fits(self, budget: int = KEEP_TEACHER_BYTES) -> bool:
        """Would the whole distribution (N × V float32) fit `budget` bytes?"""
        return self.hidden.shape[0] * self.weight.shape[0] * 4 <= budget


def _scale_and_add_nll(
    loss: torch.Tensor, s_logits: torch.Tensor, targets: torch.Tensor, tau: float, nll_weight: float
) -> torch.Tensor:
    """τ² scaling of a distillation term, plus the optional hard-label NLL at τ = 1 (every loss kind)."""
    loss = loss * tau * tau
    if nll_weight:
        loss = loss + nll_weight * F.cross_entropy(s_logits, targets, reduction="none")
    return loss


@dataclass
class SparseTeacher:
    """The teacher's distribution from a cache (teacher/cache.py), one row per token: k log-probs at temperature τ, their
    ids, and the log of the remaining (tail) mass; or, from a full-distribution cache (k = V), ids and tail None:
    the V log-probs in vocabulary order (the ids are implicit) and no tail."""

    logp: torch.Tensor  # (N, k) float32, log p_T^τ of the top-k tokens (of every token, in vocabulary order)
    ids: torch.Tensor | None  # (N, k) int64; None: implicit, 0 … V−1
    tail: torch.Tensor | None  # (N,) float32, log of the teacher's mass outside the top-k; None with implicit ids

    def rows(self, sl: slice) -> SparseTeacher:
        return SparseTeacher(
            self.logp[sl], None if self.ids is None else self.ids[sl], None if self.tail is None else self.tail[sl]
        )


@dataclass
class SampledTeacher:
    """The teacher's distribution as n draws per token (the cache kind `sampled`): ids drawn from a proposal q (by
    default the teacher's own p_T^τ) and their importance weights w = p_T^τ(id) / (n · q(id)), so that Σ_i w_i f(id_i)
    is an unbiased estimate of E_{p_T^τ}[f] for every f (with q = p_T^τ every weight is 1/n); and the teacher's entropy
    H(p_T^τ) per token, which the value of KL needs (its gradient does not)."""

    ids: torch.Tensor  # (N, n) int64
    weights: torch.Tensor  # (N, n) float32
    entropy: torch.Tensor  # (N,) float32

    def rows(self, sl: slice) -> SampledTeacher:
        return SampledTeacher(self.ids[sl], self.weights[sl], self.entropy[sl])


def inverse_cdf(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draws by inversion: for each row of log-probs (N, V) and uniforms u (N, n) in [0, 1), the ids j with
    F(j − 1) ≤ u·F(V − 1) < F(j), F the row's cumulative sum in float64. A zero-probability id is never drawn (the
    strict `<`); the uniforms come from whatever generator the caller seeds, so the draw does not depend on the
    device's random-number generator."""
    cdf = logp.double().exp().cumsum(-1)
    ids = torch.searchsorted(cdf, u.to(cdf.device, torch.float64) * cdf[:, -1:], right=True)
    return ids.clamp_max(logp.shape[1] - 1)


def draw_samples(
    t_logp: torch.Tensor, n: int, generator: torch.Generator, proposal_logp: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """n ids per row drawn with replacement from the proposal q (log-probs, default t_logp itself) with `generator`
    (uniforms, then `inverse_cdf`: the cache's own draw), and their importance weights p(id) / (n · q(id)) (in log
    space: exp(log p − log q) / n)."""
    q_logp = t_logp if proposal_logp is None else proposal_logp
    u = torch.rand(q_logp.shape[0], n, generator=generator, dtype=torch.float64)
    ids = inverse_cdf(q_logp, u)
    weights = (t_logp.float().gather(1, ids) - q_logp.float().gather(1, ids)).exp() / n
    return ids, weights


SAMPLED_LOSSES = ("ce", "kl")


def sampled_token_losses(
    s_logits: torch.Tensor, t: SampledTeacher, targets: torch.Tensor, kind: str, temperature: float, nll_weight: float
) -> torch.Tensor:
    """Per-token ce or kl against a sampled teacher, each an unbiased estimate of the full-vocabulary loss, with an
    unbiased gradient:

        ce ≈ −Σ_i w_i log p_S^τ(id_i)        (E = −Σ_v p_T^τ(v) log p_S^τ(v); gradient (Σ_i w_i) p_S^τ − Σ_i w_i e_{id_i},
                                              of expectation p_S^τ − p_T^τ)
        kl ≈ ce − H(p_T^τ)                   (the same gradient; H stored exactly per token)

    both · τ². Reverse KL and JSD weight log p_T by the *student's* distribution; draws from the teacher's say nothing
    unbiased about that, so they are refused."""
    if kind not in SAMPLED_LOSSES:
        raise ValueError(
            f"distill.loss '{kind}' has no unbiased estimate from draws of the teacher's distribution (its value "
            "weights log p_T by the student's probabilities); use ce or kl with a sampled teacher cache"
        )
    s_logp = F.log_softmax(s_logits / temperature, dim=-1)
    loss = -(t.weights * s_logp.gather(1, t.ids)).sum(-1)
    if kind == "kl":
        loss = loss - t.entropy
    return _scale_and_add_nll(loss, s_logits, targets, temperature, nll_weight)


def tail_logsumexp(logp: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log Σ_{j ∉ ids} p(j) per row, summed directly over the tail (not as 1 − Σ top-k, which cancels
    catastrophically when the tail is small). An empty tail (k = V) gives log 1e-30: finite, so that its
    zero weight in the loss gives zero rather than NaN."""
    if ids.shape[1] >= logp.shape[1]:
        return torch.full_like(logp[:, 0], math.log(1e-30))
    return torch.logsumexp(logp.scatter(1, ids, -float("inf")), dim=1)


def sparse_token_losses(
    s_logits: torch.Tensor, t: SparseTeacher, targets: torch.Tensor, kind: str, temperature: float, nll_weight: float
) -> torch.Tensor:
    """Per-token soft CE or KL between the teacher's top-k + tail bucket and the student coarsened
    to the same k + 1 buckets (its mass outside the teacher's top-k forms the tail bucket).

    ce = −Σ_i p_T(i) log p_S(i) − p_T(tail) log p_S(tail);  kl = Σ_i p_T(i) log(p_T(i)/p_S(i)) + tail term
    (both · τ²). With k = V the tail is empty and these are exactly the full-vocabulary losses; with implicit ids
    (`t.ids` None: a full-distribution cache) they are token_losses' own terms.
    """
    tau = temperature
    s_logp = F.log_softmax(s_logits / tau, dim=-1)
    if t.ids is None:
        return _scale_and_add_nll(_full_losses(s_logp, t.logp, kind), s_logits, targets, tau, nll_weight)
    assert t.tail is not None  # ids and tail are None together
    s_top = s_logp.gather(1, t.ids)  # (n, k)
    s_tail = tail_logsumexp(s_logp, t.ids)
    t_p, t_tail_p = t.logp.exp(), t.tail.exp()
    if kind == "ce":
        loss = -(t_p * s_top).sum(-1) - t_tail_p * s_tail
    elif kind == "kl":
        tail_term = torch.where(t_tail_p > 0, t_tail_p * (t.tail.clamp_min(-1e30) - s_tail), torch.zeros_like(s_tail))
        loss = (t_p * (t.logp - s_top)).sum(-1) + tail_term
    else:
        raise ValueError(f"distill.loss '{kind}' is not available on a top-k teacher cache (use ce or kl)")
    return _scale_and_add_nll(loss, s_logits, targets, tau, nll_weight)


def _full_losses(s_logp: torch.Tensor, t_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token ce or kl (before τ²) against a full distribution given as log-probs in vocabulary order (n, V),
    as token_losses computes them; a token the teacher gives probability 0 (a −inf log-prob) adds 0 to kl."""
    t_p = t_logp.exp()
    if kind == "ce":
        return -(t_p * s_logp).sum(-1)
    if kind == "kl":
        return torch.where(t_p > 0, t_p * (t_logp - s_logp), torch.zeros_like(s_logp)).sum(-1)
    raise ValueError(f"distill.loss '{kind}' is not available on a teacher cache (use ce or kl)")


def token_losses(
    s_logits: torch.Tensor,
    t_logits: torch.Tensor,
    targets: torch.Tensor,
    kind: str,
    temperature: float,
    jsd_beta: float,
    nll_weight: float,
) -> torch.Tensor:
    """Per-token training loss (n,) from float32 student and teacher logits (n, V)."""
    tau = temperature
    s_logp = F.log_softmax(s_logits / tau, dim=-1)
    t_logp = F.log_softmax(t_logits / tau, dim=-1)
    t_p = t_logp.exp()
    if kind == "ce":
        loss = -(t_p * s_logp).sum(-1)
    elif kind == "kl":
        loss = (t_p * (t_logp - s_logp)).sum(-1)
    elif kind == "reverse_kl":
        loss = (s_logp.exp() * (s_logp - t_logp)).sum(-1)
    elif kind == "jsd":
        b = jsd_beta
        # log M = logsumexp(log β + log p_T, log(1−β) + log p_S), stable for tiny probabilities
        m_logp = torch.logsumexp(
            torch.stack([t_logp + torch.log(torch.tensor(b)), s_logp + torch.log(torch.tensor(1 - b))]), dim=0
        )
        loss = b * (t_p * (t_logp - m_logp)).sum(-1) + (1 - b) * (s_logp.exp() * (s_logp - m_logp)).sum(-1)
    else:
        raise ValueError(f"unknown distillation loss '{kind}' (expected one of {LOSSES})")
    return _scale_and_add_nll(loss, s_logits, targets, tau, nll_weight)


class ChunkedDistillLoss(torch.autograd.Function):
    """Σ_tokens ℓ / n_tokens with gradients for the student's hidden states and head weight.

    forward computes, chunk by chunk, the loss and (by autograd on that chunk alone) its gradients;
    backward only scales them. Peak memory: one chunk of (chunk, V) float32 logits and their grads.
    """

    @staticmethod
    def forward(
        ctx,
        hidden,
        weight,
        teacher,
        targets,
        n_tokens: int,
        kind: str,
        temperature: float,
        jsd_beta: float,
        nll_weight: float,
        chunk: int,
    ):
        grad_h = torch.zeros_like(hidden)
        grad_w = torch.zeros_like(weight)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        w = weight.detach().requires_grad_(True)
        for start in range(0, hidden.shape[0], chunk):
            sl = slice(start, start + chunk)
            with torch.enable_grad():
                h = hidden[sl].detach().requires_grad_(True)
                s_logits = (h @ w.T).float()  # (n, V)
                if teacher is None:  # plain next-token training (the default teacher's own run)
                    losses = F.cross_entropy(s_logits, targets[sl], reduction="none")
                elif isinstance(teacher, SparseTeacher):  # a top-k cache
                    losses = sparse_token_losses(s_logits, teacher.rows(sl), targets[sl], kind, temperature, nll_weight)
                elif isinstance(teacher, SampledTeacher):  # a sampled cache
                    losses = sampled_token_losses(
                        s_logits, teacher.rows(sl), targets[sl], kind, temperature, nll_weight
                    )
                else:
                    with torch.no_grad():
                        t_logits = teacher.logits(sl)
                    losses = token_losses(s_logits, t_logits, targets[sl], kind, temperature, jsd_beta, nll_weight)
                loss = losses.sum() / n_tokens
                gh, gw = torch.autograd.grad(loss, (h, w))
            grad_h[sl] = gh
            grad_w += gw
            total += loss.detach()
        ctx.save_for_backward(grad_h, grad_w)
        return total

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_out, grad_w * grad_out, None, None, None, None, None, None, None, None


def distill_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    teacher: TeacherChunks | SparseTeacher | SampledTeacher | None,
    targets: torch.Tensor,
    n_tokens: int,
    kind: str = "ce",
    temperature: float = 1.0,
    jsd_beta: float = 0.5,
    nll_weight: float = 0.0,
    chunk: int = 1024,
) -> torch.Tensor:
    """Training loss of one micro-batch: its sum over tokens divided by `n_tokens` (see the module docstring).

    hidden (N, C) student final hidden states, weight (V, C) its LM head, targets (N,) next tokens,
    teacher None = plain next-token NLL. Returns a scalar whose backward reaches hidden and weight.
    """
    return ChunkedDistillLoss.apply(
        hidden, weight, teacher, targets, n_tokens, kind, temperature, jsd_beta, nll_weight, chunk
    )


@torch.no_grad()
def eval_sums(
    hidden: torch.Tensor, weight: torch.Tensor, teacher: TeacherChunks | None, targets: torch.Tensor, chunk: int = 1024
) -> dict[str, float]:
    """Sums over tokens of ce, kl, teacher_entropy and nll at T=1, exact over the full vocabulary.

    Returned as sums (plus the token count) so evaluation can add them across batches and ranks
    before dividing; float64 accumulation keeps the mean independent of the batching.
    """
    return eval_sums_split(hidden, weight, teacher, targets, chunk, 0)[0]


def eval_sums_split(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    teacher: TeacherChunks | None,
    targets: torch.Tensor,
    chunk: int,
    prefix: int,
    per_token: list[torch.Tensor] | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """eval_sums over all N tokens, and the same sums over the first `prefix` of them (0 ≤ prefix ≤ N), from one
    pass: the sums over all tokens are computed exactly as eval_sums computes them (the same chunks, the same
    float32 per-token values, the same float64 sums), the prefix's from the same per-token values. `per_token` (with
    a teacher): each chunk's per-token ce appended, in float64 on the CPU (the sums are unchanged)."""
    keys = ("ce", "kl", "teacher_entropy", "nll", "tokens")
    sums, head = dict.fromkeys(keys, 0.0), dict.fromkeys(keys, 0.0)
    for start in range(0, hidden.shape[0], chunk):
        sl = slice(start, start + chunk)
        s_logp = F.log_softmax((hidden[sl] @ weight.T).float(), dim=-1)
        part = {"nll": F.nll_loss(s_logp, targets[sl], reduction="sum").double().item(), "tokens": s_logp.shape[0]}
        k = min(max(prefix - start, 0), s_logp.shape[0])  # of this chunk's tokens, those in the prefix
        split = 0 < k < s_logp.shape[0]  # the chunk straddles the prefix's end
        cut = {
            "nll": F.nll_loss(s_logp[:k], targets[sl][:k], reduction="sum").double().item() if split else 0.0,
            "tokens": k,
        }
        if teacher is not None:
            t_logp = teacher.log_probs(sl)
            t_p = t_logp.exp()
            # each term computed directly (not kl = ce − H), so the identity is a real check
            per = {
                "ce": -(t_p * s_logp).sum(-1),
                "teacher_entropy": -(t_p * t_logp).sum(-1),
                "kl": (t_p * (t_logp - s_logp)).sum(-1),
            }
            part.update({name: v.double().sum().item() for name, v in per.items()})
            if per_token is not None:
                per_token.append(per["ce"].double().cpu())
            cut.update({name: v[:k].double().sum().item() if split else 0.0 for name, v in per.items()})
        for name in part:
            sums[name] += part[name]
            head[name] += part[name] if k == s_logp.shape[0] else cut[name]
    return sums, head
