"""Losses: identities of the metrics, chunked = naive, the teacher signal reaches the gradient."""

import math

import pytest
import torch
import torch.nn.functional as F

from normgrow.nn.losses import TeacherChunks, distill_loss, eval_sums, token_losses

torch.manual_seed(0)
N, C, V = 37, 16, 53  # deliberately not multiples of the chunk size


def setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, C, generator=g)
    w = torch.randn(V, C, generator=g) * 0.5
    th = torch.randn(N, C + 3, generator=g)
    tw = torch.randn(V, C + 3, generator=g) * 0.5
    y = torch.randint(0, V, (N,), generator=g)
    return h, w, TeacherChunks(th, tw), y


def naive(h, w, t: TeacherChunks, y, kind, tau=1.0, beta=0.5, nll=0.0):
    """Textbook formulas on full (N, V) probabilities, written independently of normgrow.losses."""
    s = (h @ w.T) / tau
    tl = (t.hidden @ t.weight.T) / tau
    p_t, p_s = tl.softmax(-1), s.softmax(-1)
    if kind == "ce":
        per = -(p_t * p_s.log()).sum(-1)
    elif kind == "kl":
        per = (p_t * (p_t.log() - p_s.log())).sum(-1)
    elif kind == "reverse_kl":
        per = (p_s * (p_s.log() - p_t.log())).sum(-1)
    else:
        m = beta * p_t + (1 - beta) * p_s
        per = beta * (p_t * (p_t / m).log()).sum(-1) + (1 - beta) * (p_s * (p_s / m).log()).sum(-1)
    per = per * tau * tau
    if nll:
        per = per - nll * (h @ w.T).log_softmax(-1).gather(1, y[:, None]).squeeze(1)
    return per.mean()


@pytest.mark.parametrize("kind", ["ce", "kl", "reverse_kl", "jsd"])
@pytest.mark.parametrize("tau,nll", [(1.0, 0.0), (2.0, 0.3)])
def test_chunked_loss_and_gradients_equal_naive(kind, tau, nll):
    h, w, t, y = setup()
    h1, w1 = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = distill_loss(h1, w1, t, y, n_tokens=N, kind=kind, temperature=tau, nll_weight=nll, chunk=8)
    loss.backward()
    h2, w2 = h.clone().double().requires_grad_(), w.clone().double().requires_grad_()
    t2 = TeacherChunks(t.hidden.double(), t.weight.double())
    ref = naive(h2, w2, t2, y, kind, tau=tau, nll=nll)
    ref.backward()
    torch.testing.assert_close(loss.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h1.grad.double(), h2.grad, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(w1.grad.double(), w2.grad, atol=1e-6, rtol=1e-4)


def test_ce_equals_kl_plus_teacher_entropy_and_nll_is_data_likelihood():
    h, w, t, y = setup(1)
    s = eval_sums(h, w, t, y, chunk=5)
    assert s["tokens"] == N
    assert s["ce"] == pytest.approx(s["kl"] + s["teacher_entropy"], rel=1e-6)
    assert s["kl"] > 0
    expected_nll = F.cross_entropy(h.double() @ w.double().T, y, reduction="sum").item()
    assert s["nll"] == pytest.approx(expected_nll, rel=1e-6)
    # teacher entropy is bounded by log V
    assert 0 < s["teacher_entropy"] / N < math.log(V)


def test_kl_of_identical_distributions_is_zero():
    h, w, _, y = setup(2)
    same = TeacherChunks(h, w)
    s = eval_sums(h, w, same, y)
    assert abs(s["kl"]) < 1e-9 * N
    for kind in ("kl", "reverse_kl", "jsd"):
        per = token_losses(h @ w.T, h @ w.T, y, kind, 1.0, 0.5, 0.0)
        assert per.abs().max() < 1e-6, kind


def test_teacher_signal_reaches_the_student_gradient():
    """Two different teachers must give different student gradients (the term is not dropped)."""
    h, w, t, y = setup(3)
    grads = []
    for teacher in (t, TeacherChunks(-t.hidden, t.weight)):
        hh = h.clone().requires_grad_()
        distill_loss(hh, w, teacher, y, n_tokens=N).backward()
        grads.append(hh.grad)
    assert not torch.allclose(grads[0], grads[1])
    # and the soft-CE gradient w.r.t. the student logits is p_S − p_T (per token, / N)
    logits = (h @ w.T).requires_grad_()
    hh = h.clone().requires_grad_()
    distill_loss(hh, w, t, y, n_tokens=N).backward()
    expected = (logits.softmax(-1) - (t.hidden @ t.weight.T).softmax(-1)) / N
    torch.testing.assert_close(hh.grad, expected @ w, atol=1e-6, rtol=1e-4)


def test_global_mean_is_split_invariant():
    """Summing micro-batch losses with n_tokens = total tokens equals the one-batch loss and grads."""
    h, w, t, y = setup(4)
    w1 = w.clone().requires_grad_()
    full = distill_loss(h, w1, t, y, n_tokens=N, chunk=7)
    full.backward()
    w2 = w.clone().requires_grad_()
    parts = 0
    for sl in (slice(0, 10), slice(10, 25), slice(25, N)):
        part = distill_loss(h[sl], w2, TeacherChunks(t.hidden[sl], t.weight), y[sl], n_tokens=N, chunk=4)
        part.backward()
        parts = parts + part.detach()
    torch.testing.assert_close(parts, full.detach(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(w2.grad, w1.grad, atol=1e-7, rtol=1e-5)


def test_no_teacher_is_next_token_nll():
    h, w, _, y = setup(5)
    hh = h.clone().requires_grad_()
    loss = distill_loss(hh, w, None, y, n_tokens=N)
    ref = F.cross_entropy(h @ w.T, y)
    torch.testing.assert_close(loss, ref, atol=1e-6, rtol=1e-6)


def test_sparse_tail_is_exact_when_the_tail_is_tiny():
    """The student's tail mass is summed over the tail, not taken as 1 − Σ top-k: with a tail of ~1e-9
    (float32 rounds 1 − Σ top-k to 0 or to ~1e-7) the loss and its gradient match a float64 reference."""
    from normgrow.nn.losses import SparseTeacher, sparse_token_losses

    V, k = 64, 4
    logits = torch.full((3, V), -12.0)
    logits[:, :k] = torch.tensor([8.0, 7.5, 7.0, 6.5])  # top-4 hold all but ~1e-8 of the mass
    t_logp = torch.log_softmax(torch.randn(3, V, generator=torch.Generator().manual_seed(0)), -1)
    ids = torch.arange(k).expand(3, k)
    t_top = t_logp.gather(1, ids)
    t_tail = torch.log1p(-t_top.exp().sum(-1))  # the teacher keeps a large tail (≈ 0.9)
    targets = torch.zeros(3, dtype=torch.long)
    out = []
    for dtype in (torch.float32, torch.float64):
        s = logits.to(dtype).clone().requires_grad_()
        t = SparseTeacher(t_top.to(dtype), ids, t_tail.to(dtype))
        loss = sparse_token_losses(s, t, targets, "ce", 1.0, 0.0).sum()
        loss.backward()
        out.append((loss.detach().double(), s.grad.double()))
    # float64 reference written out: −Σ p_T(i) log p_S(i) − p_T(tail) log Σ_{j>k} p_S(j)
    s64 = torch.log_softmax(logits.double(), -1)
    ref = (-(t_top.double().exp() * s64[:, :k]).sum(-1) - t_tail.double().exp() * torch.logsumexp(s64[:, k:], -1)).sum()
    assert torch.isclose(out[1][0], ref, rtol=1e-12)
    assert torch.isclose(out[0][0], ref, rtol=1e-5)
    torch.testing.assert_close(out[0][1], out[1][1], rtol=1e-4, atol=1e-6)


def test_implicit_ids_are_the_online_losses_bit_for_bit():
    """A full-distribution cache row (ids None: the V log-probs in vocabulary order, no tail) gives token_losses'
    values exactly, with the τ² scaling and the NLL term; a token of teacher probability 0 (−inf) adds 0 to kl."""
    from normgrow.nn.losses import SparseTeacher, sparse_token_losses, token_losses

    g = torch.Generator().manual_seed(3)
    s, t_logits = torch.randn(6, 40, generator=g), torch.randn(6, 40, generator=g) * 2
    y = torch.randint(0, 40, (6,), generator=g)
    for kind, tau in (("ce", 1.0), ("kl", 2.0)):
        t = SparseTeacher(torch.log_softmax(t_logits / tau, -1), None, None)
        got = sparse_token_losses(s, t, y, kind, tau, 0.3)
        assert torch.equal(got, token_losses(s, t_logits, y, kind, tau, 0.5, 0.3)), kind
    masked = t_logits.clone()
    masked[:, :5] = -float("inf")  # the teacher rules out 5 tokens
    t = SparseTeacher(torch.log_softmax(masked, -1), None, None)
    kl = sparse_token_losses(s, t, y, "kl", 1.0, 0.0)
    p = torch.softmax(masked[:, 5:], -1)
    ref = (p * (p.log() - torch.log_softmax(s, -1)[:, 5:])).sum(-1)
    assert torch.isfinite(kl).all()
    torch.testing.assert_close(kl, ref)
    assert t.rows(slice(1, 3)).ids is None and t.rows(slice(1, 3)).logp.shape == (2, 40)
