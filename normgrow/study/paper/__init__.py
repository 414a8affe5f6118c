"""The paper, "Rethinking Normalization Placement for LLMs: Post-Norm under Curriculum Depth Growing", as a plug-in
on the study wing: importing this package registers its claims on the verdict engine (claims.py, with mechanism.py's
measures and rivals.py's rival reading), its claims at the limit of a ladder (limits.py), its study-file sections
(sections.py: rivals:, regime:, dose:) and its report parts (plugin.py: regime checks, rivals, the causal dose). Nothing
outside this folder imports it but the study package's `__init__`; a second paper registers the same way
(docs/extending.md).
"""

from normgrow.study.paper import claims, limits, plugin  # noqa: F401 - each registers on import
