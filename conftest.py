"""Test-wide settings: small sizes (also for notebooks run by nbmake), and a
check that no child process outlives the test session."""

import os

os.environ.setdefault("DBKIT_SMALL", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
