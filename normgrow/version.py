"""The package version: a leaf module, so that any module can name it without importing the package's
`__init__` (which imports the launchers, and so the whole pipeline)."""

__version__ = "0.1.0"
