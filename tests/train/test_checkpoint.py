"""Checkpoints: a round trip restores everything; old ones are pruned except protected steps; torn writes are ignored."""

import hashlib
import json

import torch

from normgrow.train import checkpoint


def test_round_trip_restores_weights_optimizer_rng_and_state(tmp_path):
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    torch.manual_seed(123)
    state = {"step": 7, "tokens": 700, "stages": [{"index": 0, "end": {"val/ce": 1.5}}]}
    path = checkpoint.save(tmp_path, 7, model.state_dict(), opt.state_dict(), state)
    expected_draw = torch.rand(3)  # what the RNG gives right after the save
    torch.manual_seed(999)
    weights, optim, rng, loaded = checkpoint.load(path)
    assert loaded == state and path.name == "step_00000007"
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    other = torch.nn.Linear(4, 3)
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    other.load_state_dict(weights)
    other_opt.load_state_dict(optim)
    for p, q in zip(model.parameters(), other.parameters(), strict=True):
        assert torch.equal(opt.state[p]["exp_avg"], other_opt.state[q]["exp_avg"])
    checkpoint.restore_rng(rng)
    assert torch.equal(torch.rand(3), expected_draw)
    # state.json records each file's sha256 (checked here with hashlib), which `damage` verifies
    recorded = json.loads((path / "state.json").read_text())["sha256"]
    assert recorded == {
        n: hashlib.sha256((path / n).read_bytes()).hexdigest() for n in ("model.safetensors", "optimizer.pt", "rng.pt")
    }
    assert checkpoint.damage(path) is None
    (path / "rng.pt").write_bytes((path / "rng.pt").read_bytes()[:-1])  # truncated
    assert checkpoint.damage(path) == "rng.pt does not match its recorded sha256"


def test_pruning_keeps_the_latest_and_protected_steps_and_ignores_torn_writes(tmp_path):
    model = torch.nn.Linear(2, 2)
    for step in (1, 2, 3, 4, 5):
        checkpoint.save(tmp_path, step, model.state_dict(), {}, {"step": step}, keep=2, protected=frozenset({2}))
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == [
        "step_00000002",
        "step_00000004",
        "step_00000005",
    ]
    (tmp_path / "step_00000009").mkdir()  # a write killed before its state.json: not a checkpoint
    (tmp_path / ".tmp-step_00000010-1").mkdir()
    assert checkpoint.latest(tmp_path).name == "step_00000005"
    assert checkpoint.latest(tmp_path / "none") is None
