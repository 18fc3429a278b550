"""The package's version: one declaration, read by ``pyproject.toml`` and by every module that reports it."""

__version__ = "0.1.0"
