"""Benchmark arms: the grammar of arm names (`grammar`: `method[-option][-seeded][-cut]` -> an `Arm` factory) and
the peers run by other people's code (`peers`: Hugging Face `generate`, the DFlash authors' loop). One floor above
the methods and their configuration: it composes them; `check_params` checks arm names here, once."""
