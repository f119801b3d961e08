"""The toy world: a positive control for the workbench (docs: DESIGN.md "Positive control").

Generated task families whose answers the prompt determines (`tasks`), a word-level tokenizer over the
world's fixed vocabulary with a ChatML template (`tokenizer`), and a recipe that trains a small
`LlamaForCausalLM` target from scratch on 2 CPU cores and evaluates it (`train`, `evaluate`).
Plain torch + transformers + tokenizers: no Lightning, MLflow, DVC or project paths here.
"""
from draftlab.toy.tasks import FAMILIES, Example, FamilySpec, WorldConfig, examples, family_of, valid

__all__ = ["FAMILIES", "Example", "FamilySpec", "WorldConfig", "examples", "family_of", "valid"]
