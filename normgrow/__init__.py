"""normgrow: controlled distillation studies of normalization placement under curriculum depth growth.

Importing the package fills the extension registries with their built-in entries, registers the
exported model classes with transformers' Auto classes (run/export.py), and exposes the calls that add
more (see registry.py):

    normgrow.register_placement(name, BlockSubclass)          model.norm / model.block_norms
    normgrow.register_norm_kind(name, factory(cfg, dim))      model.norm_kind
    normgrow.register_growth(name, GrowthOperatorInstance)    curriculum.growth
    normgrow.register_diagnostic(name, fn(observation))       diagnostics.include
    normgrow.register_launcher(name, fn(jobs, options, out, progress))   launcher.kind
    normgrow.register_claim(key, paper, fn(roles, measures), roles=…)   every study's claims
    normgrow.register_corpus_source(name, CorpusSourceInstance)   data.format
"""

import os as _os  # noqa: E402
import sys as _sys  # noqa: E402

# torch's CPU threads (OpenMP) spin while they wait unless told otherwise, and OpenMP reads its wait policy
# once, when torch loads. Spinning threads make a run that shares the CPU lose an order of magnitude: two
# 2-thread runs on 2 cores kept 8% of their throughput each, 47% with passive waiting (docs/LOG.md). So
# normgrow's processes wait passively unless the environment already says otherwise (OMP_WAIT_POLICY=ACTIVE
# buys back ≈ 14% on a machine nobody else uses). No effect if torch was imported before normgrow.
if "torch" not in _sys.modules:
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Registers NormgrowConfig / NormgrowForCausalLM with transformers' Auto classes, so that after a plain
# `import normgrow` AutoModelForCausalLM.from_pretrained loads any export (normgrow/nn/modeling_normgrow.py).
import normgrow.run.export  # noqa: E402, F401
from normgrow.data import CorpusSource, register_corpus_source  # noqa: E402
from normgrow.nn.model import Block, register_norm_kind, register_placement  # noqa: E402
from normgrow.study.engine.verdicts import register_claim  # noqa: E402
from normgrow.study.launch import register_launcher  # noqa: E402
from normgrow.train.diagnostics import Observation, register_diagnostic  # noqa: E402
from normgrow.train.growth import GrowthOperator, register_growth  # noqa: E402
from normgrow.version import __version__  # noqa: E402

__all__ = [
    "__version__",
    "Block",
    "CorpusSource",
    "GrowthOperator",
    "Observation",
    "register_claim",
    "register_corpus_source",
    "register_diagnostic",
    "register_growth",
    "register_launcher",
    "register_norm_kind",
    "register_placement",
]
