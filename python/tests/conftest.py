"""Shared fixtures: the `spotwave` command (built beside the extension, or $SPOTWAVE_CLI), a CPU
context, and helpers to run the command on files the tests write."""

import csv
import os
import shutil
import subprocess

import numpy as np
import pytest

import spotwave


def _find_cli():
    path = os.environ.get("SPOTWAVE_CLI")
    if path and os.access(path, os.X_OK):
        return path
    # The in-tree build: <build>/python/spotwave/__init__.py -> <build>/spotwave.
    here = os.path.dirname(os.path.abspath(spotwave.__file__))
    cand = os.path.join(os.path.dirname(os.path.dirname(here)), "spotwave")
    if os.access(cand, os.X_OK) and os.path.isfile(cand):
        return cand
    return shutil.which("spotwave")


@pytest.fixture(scope="session")
def cli():
    """A function running `spotwave ARGS...` on the CPU backend; returns the completed process
    (check=True). Skips the test when the command is not found."""
    path = _find_cli()
    if path is None:
        pytest.skip("the spotwave command was not found (set SPOTWAVE_CLI)")

    def run(*args, check=True):
        p = subprocess.run([path, "--backend", "cpu", "--quiet", *map(str, args)],
                           capture_output=True, text=True)
        if check and p.returncode != 0:
            raise AssertionError(f"spotwave {' '.join(map(str, args))} failed "
                                 f"({p.returncode}): {p.stderr}")
        return p

    return run


@pytest.fixture(scope="session")
def cpu():
    """A CPU context (the command runs on the CPU too, so numbers compare exactly)."""
    return spotwave.Context("cpu")


def read_csv(path):
    """A CSV as (header, rows of strings)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def fmt(v, spec):
    """A number as the command prints it (C printf formats; NaN as 'nan')."""
    if isinstance(v, (float, np.floating)) and np.isnan(v):
        return "nan"
    return spec % v
