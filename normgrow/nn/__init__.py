"""The student's network: norms, blocks by placement, the decoder, the distillation losses, compilation, and the
Hugging Face modeling file an export carries. Imports config/ and the package's utilities only."""
