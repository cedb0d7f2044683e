"""Runs the Python package's pytest suite for ctest (tests/CMakeLists.txt, python/pytest):
exit 77 (skipped) with the reason when numpy or pytest cannot be imported, or when pytest
collects nothing; otherwise pytest's exit status. PYTHONPATH points at the build's package."""

import importlib.util
import os
import sys

missing = [m for m in ("numpy", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    print(f"SKIP: {', '.join(missing)} not importable by {sys.executable} "
          f"(pip install numpy pytest)")
    sys.exit(77)

import pytest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
rc = pytest.main([here, "-q", "-rs", "-p", "no:cacheprovider"])
sys.exit(77 if rc == pytest.ExitCode.NO_TESTS_COLLECTED else int(rc))
