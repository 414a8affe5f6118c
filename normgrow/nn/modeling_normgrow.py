"""normgrow students behind the transformers interface: `NormgrowConfig` (model_type `normgrow`) and
`NormgrowForCausalLM` (logits, loss, `generate()`, `pipeline("text-generation")`, save and reload).

The students keep no KV cache: `generate(use_cache=True)` is accepted and gives the same tokens as
`use_cache=False`, each step running the whole sequence (`prepare_inputs_for_generation`). Padded batches (an
attention mask with zeros, left or right padding) give each row the logits of its unpadded sequence, so batched
evaluation and `generate` over prompts of different lengths (left padding) work.

This file imports only torch, transformers and `.blocks` (the architecture), never normgrow itself:
`normgrow export` copies it and blocks.py into every export that is not a stock Qwen3, and writes
`auto_map` into its config.json, so on a machine without normgrow

    AutoModelForCausalLM.from_pretrained(export_dir, trust_remote_code=True)

loads the student with the built-in placements (pre, post, sandwich, deepnorm, reordered, hybrid, lnscale, keel,
sandwich-ds, and mixln or any per-block mixture of them) and norm kinds (rmsnorm, layernorm, dyt). With normgrow
installed, `import normgrow` registers the same classes with the Auto classes (normgrow.export), which then also
build user-registered placements and norm kinds, and no remote code is needed.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutputWithPast

from .blocks import BUILTIN_PLACEMENTS, Block, Decoder, placement_of


class NormgrowConfig(PretrainedConfig):
    """`normgrow_model` holds the student's model config (normgrow.config.ModelConfig as a dict)."""

    model_type = "normgrow"

    def __init__(self, normgrow_model: dict | None = None, **kwargs):
        self.normgrow_model = normgrow_model or {}
        super().__init__(**kwargs)
        # the names transformers' generation and pipelines read (the student's own values; normgrow_model rules)
        m = self.normgrow_model
        for name, key in (
            ("num_hidden_layers", "n_layer"),
            ("hidden_size", "d_model"),
            ("num_attention_heads", "n_head"),
            ("num_key_value_heads", "n_kv_head"),
            ("vocab_size", "vocab_size"),
            ("intermediate_size", "d_ff"),
        ):
            if m.get(key) is not None:
                setattr(self, name, m[key])


class NormgrowForCausalLM(PreTrainedModel, GenerationMixin):
    """A normgrow student: its weights live under `student.` with the names of normgrow's Student."""

    config_class = NormgrowConfig
    base_model_prefix = "student"
    _tied_weights_keys: dict = {}

    def __init__(self, config: NormgrowConfig):
        super().__init__(config)
        cfg = SimpleNamespace(**config.normgrow_model)
        names = [placement_of(cfg, i) for i in range(cfg.n_layer)]
        self.student = Decoder(cfg, [self.block_class(name) for name in names])
        self.post_init()

    @classmethod
    def block_class(cls, name: str) -> type[Block]:
        """The Block class of a placement name (the built-in ones here; normgrow's registry when installed)."""
        if name not in BUILTIN_PLACEMENTS:
            raise ValueError(
                f"placement '{name}' is not built into this export's code "
                f"({', '.join(BUILTIN_PLACEMENTS)}); load it with normgrow and the code that registers it"
            )
        return BUILTIN_PLACEMENTS[name]

    def _init_weights(self, module):  # weights come from the checkpoint
        pass

    def get_input_embeddings(self):
        return self.student.embed_tokens

    def get_output_embeddings(self):
        return self.student.lm_head

    def get_decoder(self):
        return _DecoderView(self.student)

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, attention_mask=None, **kwargs) -> dict:
        """Every generation step sees the whole sequence (there is no cache to continue from)."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(
        self,
        input_ids: torch.LongTensor,
        labels: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs,
    ):
        logits = self.student(input_ids, attention_mask=attention_mask)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return CausalLMOutputWithPast(loss=loss, logits=logits)


class _DecoderView(torch.nn.Module):
    """`get_decoder()` view of a student: final hidden states (as normgrow's teacher code projects them)."""

    def __init__(self, student: Decoder):
        super().__init__()
        self.student = student

    def forward(self, input_ids, attention_mask=None, **kwargs):
        return BaseModelOutput(last_hidden_state=self.student.hidden(input_ids, attention_mask=attention_mask))
