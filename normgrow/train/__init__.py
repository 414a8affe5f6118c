"""One training run: the loop, the step and its cadence, evaluation and diagnostics, growth (operators and event),
stages and their compute, checkpoints, branches, and the run directory it writes. Imports teacher/ and below."""
