"""A whole run from a config: the pipeline (data, teacher, cache, training, diagnosis), budget matching, export to
Hugging Face, and a run's figures. Imports machine/ and below; the study wing and the command line import it."""
