"""Shared setup of the kernel tests; import it first in a kernel test module. It runs Triton in its
interpreter on CPU (TRITON_INTERPRET=1, set before anything can import triton: the decorator reads it),
skips the importing module when triton is not importable, and holds what the tests share.

A plain module, not tests/kernels/conftest.py: a second, package-less conftest.py would replace
tests/conftest.py as `sys.modules["conftest"]`, which breaks `from conftest import ...` in tests/."""
import os

os.environ["TRITON_INTERPRET"] = "1"  # before anything can import triton (the decorator reads it)

import pytest  # noqa: E402
import torch  # noqa: E402

try:
    import triton  # noqa: E402,F401
except Exception as e:  # pragma: no cover
    pytest.skip(f"triton is not importable ({e}); install the 'kernels' extra to run the kernel tests",
                allow_module_level=True)

EPS32 = torch.finfo(torch.float32).eps
