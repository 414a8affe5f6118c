"""Errors a user can cause. The CLI prints each as one line (`normgrow: error: …`) and exits non-zero."""


class NormgrowError(Exception):
    """A problem with the user's input or environment, stated in one line naming the field or file."""


class ConfigError(NormgrowError):
    """A config value is missing, unknown, mistyped or inconsistent."""


class DataError(NormgrowError):
    """A corpus, tokenizer or token-shard problem."""
