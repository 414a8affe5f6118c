"""The run configuration: typed, nested dataclasses merged from YAML presets and dotted overrides.

    preset YAML  ─┐
    dotted keys  ─┼─► OmegaConf.merge (types and unknown keys checked) ─► RunConfig ─► validate()
    (defaults)   ─┘

Every field carries a one-line attribute docstring, read back by `schema.field_docs()` as its help text
(`normgrow config --fields`), and declares its meaning (`schema.setting`, `schema.section`): whether it enters the
default teacher's key and whether a resumed run may change it (`resume_may_differ`). A config saved with
`save_config` reloads equal. The machinery (meanings, the YAML reader, the merge loop shared with study files,
number bounds) lives in config/schema.py; this module holds the run's fields and their validation. Presets are the YAML
files in `configs/` (the package `normgrow.configs`), named by file stem (`tiny`) or given as a path. Fields that
name an extension (a placement, a norm kind, a growth operator, a diagnostic, a launcher) are strings checked
against their registry (registry.py), so names user code registers are valid too.
"""

from normgrow.config.checks import LOGGERS, PLACEMENT_RULES, resolved_head_dim, validate
from normgrow.config.fields import (
    CurriculumConfig,
    DataConfig,
    DiagnosticsConfig,
    DistillConfig,
    ModelConfig,
    RunConfig,
    StageConfig,
    TeacherConfig,
    TrainConfig,
)
from normgrow.config.load import (
    load_config,
    preset_names,
    preset_path,
    resume_may_differ,
    save_config,
    to_dict,
    to_yaml,
)

__all__ = [
    "LOGGERS",
    "PLACEMENT_RULES",
    "CurriculumConfig",
    "DataConfig",
    "DiagnosticsConfig",
    "DistillConfig",
    "ModelConfig",
    "RunConfig",
    "StageConfig",
    "TeacherConfig",
    "TrainConfig",
    "load_config",
    "preset_names",
    "preset_path",
    "resolved_head_dim",
    "resume_may_differ",
    "save_config",
    "to_dict",
    "to_yaml",
    "validate",
]
