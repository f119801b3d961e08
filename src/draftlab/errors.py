"""The error types every draftlab package raises: one line that names what is wrong and how to fix it.

A stage prints `error [stage]: <message>` and exits 2 on any `DraftlabError`; everything else is a bug.
An `InputFileError` names the file, so the stage can add which stage rebuilds it (from dvc.yaml).
This module imports nothing, so the lowest layers (kernels, verifier, drafter, corrector, ...) raise
these without depending on the configuration code.
"""
from __future__ import annotations


class DraftlabError(Exception):
    """An error with a one-line, user-facing message (bad input, bad config, missing data)."""


class ConfigError(DraftlabError):
    """A parameter is unknown, has the wrong type or an impossible value."""


class InputFileError(DraftlabError):
    """An input file is missing, corrupt or unreadable (`path`: the file, `problem`: what is wrong)."""

    def __init__(self, path, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"{path} {problem}")
