"""Fused kernels (Triton on CUDA, pure-torch references elsewhere) behind one dispatch.

`draftlab.kernels.dispatch` picks the backend per call; importing this package never imports
Triton and never queries CUDA.
"""
from draftlab.kernels.dispatch import greedy_walk, resolve_backend, transition_scores, tv_overlap  # noqa: F401
