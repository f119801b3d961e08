"""Shared setup of the kernel tests; import it first in a kernel test module. It runs Triton in its
interpreter on CPU (TRITON_INTERPRET=1, set before anything can import triton: the decorator reads it),
fails loudly when triton is not importable (the project pins it; set DRAFTLAB_SKIP_KERNEL_TESTS=1 to
skip them on purpose, with the reason shown), and holds what the tests share.

A plain module, not tests/kernels/conftest.py: a second, package-less conftest.py would replace
tests/conftest.py as `sys.modules["conftest"]`, which breaks `from conftest import ...` in tests/."""
import os

os.environ["TRITON_INTERPRET"] = "1"  # before anything can import triton (the decorator reads it)

import pytest  # noqa: E402
import torch  # noqa: E402

try:
    import triton  # noqa: E402,F401
except Exception as e:  # pragma: no cover
    if os.environ.get("DRAFTLAB_SKIP_KERNEL_TESTS") != "1":
        raise ImportError(f"triton is not importable ({e}): the kernel tests need it (make install, or "
                          "pip install -e '.[kernels]'); set DRAFTLAB_SKIP_KERNEL_TESTS=1 to skip them on purpose") from e
    pytest.skip(f"DRAFTLAB_SKIP_KERNEL_TESTS=1 and triton is not importable ({e})", allow_module_level=True)

EPS32 = torch.finfo(torch.float32).eps
