"""Test-wide settings: small sizes (also for notebooks run by nbmake), and a
check that no child process outlives the test session."""

import os

os.environ.setdefault("DBKIT_SMALL", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

# needs a real cluster: tests/test_lessons.py runs it against a `dask scheduler` and two `dask worker` processes
collect_ignore = ["notebooks/07_scaling_out.ipynb"]
