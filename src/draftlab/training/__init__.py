"""Drafter training: target tap features (cached or on the fly), off-policy pretraining, metrics."""
