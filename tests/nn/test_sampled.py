"""The sampled teacher (issue 40's loss): n draws per token with importance weights give an unbiased estimate of the
full-vocabulary distillation loss and of its gradient. Hand-made distributions; each tolerance is derived here from
the estimator's own variance, computed exactly over the vocabulary."""

import math

import pytest
import torch
import torch.nn.functional as F

from normgrow.nn.losses import SampledTeacher, distill_loss, draw_samples, sampled_token_losses

P_T = torch.tensor([[0.40, 0.25, 0.15, 0.10, 0.07, 0.03], [0.05, 0.05, 0.10, 0.20, 0.25, 0.35]])
S_LOGITS = torch.tensor([[1.0, 0.2, -0.3, 0.5, -1.0, 0.1], [-0.4, 0.9, 0.0, 0.3, -0.2, 1.2]])
Q_FLAT = torch.full((2, 6), 1 / 6)  # a proposal other than the teacher: importance weights p/q ≠ 1
DRAWS, N, SIGMAS = 4000, 4, 4.5  # 4,000 independent caches of 4 draws per token; a miss beyond 4.5 sd: p ≈ 7e-6


def exact(s_logits=S_LOGITS):
    s_logp = F.log_softmax(s_logits, -1)
    ce = -(P_T * s_logp).sum(-1)
    grad = s_logp.exp() - P_T  # ∂ce/∂logits
    return ce, grad


def estimates(proposal, seed=0):
    """DRAWS independent estimates of ce (2,) and of its gradient (2, 6) per token."""
    g = torch.Generator().manual_seed(seed)
    t_logp = P_T.log()
    q_logp = None if proposal is None else proposal.log()
    entropy = -(P_T * t_logp).sum(-1)
    ces, grads = [], []
    for _ in range(DRAWS):
        ids, w = draw_samples(t_logp, N, g, q_logp)
        z = S_LOGITS.clone().requires_grad_(True)
        ce = sampled_token_losses(z, SampledTeacher(ids, w, entropy), torch.zeros(2, dtype=torch.long), "ce", 1.0, 0)
        (grad,) = torch.autograd.grad(ce.sum(), z)
        ces.append(ce.detach())
        grads.append(grad)
    return torch.stack(ces), torch.stack(grads)


def sd_of_mean(proposal, f):
    """The standard deviation of the mean of DRAWS estimates Σ_i w_i f(id_i) (n draws from q, w = p/(n·q)), per
    token and component: Var(one estimate) = (E_q[(p f / q)²] − (E_p f)²) / n, exactly over the vocabulary."""
    q = P_T if proposal is None else proposal
    f = f if f.dim() == 3 else f.unsqueeze(-1)  # (2, V, k): k functions of the drawn id
    mean = (P_T.unsqueeze(-1) * f).sum(1)
    second = ((P_T.unsqueeze(-1) * f) ** 2 / q.unsqueeze(-1)).sum(1)
    return ((second - mean**2) / N / DRAWS).sqrt()


@pytest.mark.parametrize("proposal", [None, Q_FLAT], ids=["from the teacher", "importance-weighted"])
def test_the_sampled_loss_and_its_gradient_are_unbiased(proposal):
    ce_hat, grad_hat = estimates(proposal)
    ce, grad = exact()
    s_logp = F.log_softmax(S_LOGITS, -1)
    ce_sd = sd_of_mean(proposal, -s_logp).squeeze(-1)  # f(v) = −log p_S(v)
    # gradient of one draw's term: w (p_S − e_v); its v-dependent part is −e_v: f_j(v) = [v = j]
    grad_sd = sd_of_mean(proposal, torch.eye(6).expand(2, 6, 6))
    assert torch.all((ce_hat.mean(0) - ce).abs() <= SIGMAS * ce_sd), (ce_hat.mean(0), ce, ce_sd)
    if proposal is None:  # with q = p the weights sum to 1 exactly: the p_S part carries no noise
        assert torch.all((grad_hat.mean(0) - grad).abs() <= SIGMAS * grad_sd), (grad_hat.mean(0) - grad, grad_sd)
    else:  # Σw varies too: bound the p_S part's noise as well (sd of Σw times p_S, added to the bound)
        w_sd = sd_of_mean(proposal, torch.ones(2, 6)).squeeze(-1)
        bound = SIGMAS * (grad_sd + w_sd.unsqueeze(-1) * s_logp.exp())
        assert torch.all((grad_hat.mean(0) - grad).abs() <= bound), (grad_hat.mean(0) - grad, bound)
    # the estimates really vary (a degenerate estimator could not fail the checks above)
    assert ce_hat.std(0).min() > 0.01


def test_kl_is_ce_minus_the_stored_entropy_and_the_other_losses_are_refused():
    g = torch.Generator().manual_seed(1)
    t_logp = P_T.log()
    ids, w = draw_samples(t_logp, 8, g)
    entropy = -(P_T * t_logp).sum(-1)
    t = SampledTeacher(ids, w, entropy)
    y = torch.zeros(2, dtype=torch.long)
    ce = sampled_token_losses(S_LOGITS, t, y, "ce", 1.0, 0.0)
    kl = sampled_token_losses(S_LOGITS, t, y, "kl", 1.0, 0.0)
    torch.testing.assert_close(kl, ce - entropy)
    # by hand: every weight is 1/8, so ce is the mean of −log p_S over the drawn ids
    by_hand = -F.log_softmax(S_LOGITS, -1).gather(1, ids).mean(-1)
    torch.testing.assert_close(ce, by_hand)
    assert torch.allclose(w, torch.full_like(w, 1 / 8))
    for kind in ("reverse_kl", "jsd"):
        with pytest.raises(ValueError, match=f"distill.loss '{kind}' has no unbiased estimate"):
            sampled_token_losses(S_LOGITS, t, y, kind, 1.0, 0.0)


def test_temperature_scales_by_tau_squared_and_draws_are_seeded():
    t_logp = P_T.log()
    a = draw_samples(t_logp, 12, torch.Generator().manual_seed(5))
    b = draw_samples(t_logp, 12, torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    t = SampledTeacher(a[0], a[1], torch.zeros(2))
    y = torch.zeros(2, dtype=torch.long)
    at2 = sampled_token_losses(S_LOGITS, t, y, "ce", 2.0, 0.0)
    by_hand = -(a[1] * F.log_softmax(S_LOGITS / 2, -1).gather(1, a[0])).sum(-1) * 4
    torch.testing.assert_close(at2, by_hand)


def test_the_chunked_loss_reads_a_sampled_teacher_the_same_in_any_chunks():
    torch.manual_seed(0)
    hidden, weight = torch.randn(10, 8), torch.randn(6, 8)
    t_logp = F.log_softmax(torch.randn(10, 6), -1)
    ids, w = draw_samples(t_logp, 5, torch.Generator().manual_seed(2))
    t = SampledTeacher(ids, w, -(t_logp.exp() * t_logp).sum(-1))
    y = torch.randint(0, 6, (10,))
    grads = []
    for chunk in (3, 100):
        h, wt = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        loss = distill_loss(h, wt, t, y, 10, "ce", 1.0, chunk=chunk)
        loss.backward()
        grads.append((loss.detach(), h.grad, wt.grad))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)
    direct = sampled_token_losses((hidden @ weight.T), t, y, "ce", 1.0, 0.0).mean()
    assert math.isclose(grads[0][0].item(), direct.item(), rel_tol=1e-6)
