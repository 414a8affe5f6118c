"""normgrow: controlled distillation studies of normalization placement under curriculum depth growth.

Importing the package fills the four extension registries with their built-in entries and exposes
the calls that add more (see registry.py):

    normgrow.register_placement(name, BlockSubclass)          model.norm / model.block_norms
    normgrow.register_growth(name, GrowthOperatorInstance)    curriculum.growth
    normgrow.register_diagnostic(name, fn(observation))       diagnostics.include
    normgrow.register_launcher(name, fn(jobs, options, out, progress))   launcher.kind
"""

__version__ = "0.1.0"

from normgrow.curriculum import GrowthOperator, register_growth  # noqa: E402
from normgrow.diagnostics import Observation, register_diagnostic  # noqa: E402
from normgrow.launch import register_launcher  # noqa: E402
from normgrow.model import Block, register_placement  # noqa: E402

__all__ = ["Block", "GrowthOperator", "Observation", "register_diagnostic", "register_growth", "register_launcher",
           "register_placement"]
