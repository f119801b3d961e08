"""The example corrector family `lastrank` (lastrank.py), a package outside draftlab."""
