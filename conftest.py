"""Test-wide settings: small sizes (also for the lessons, run by tests/test_lessons.py), and a
check that no child process outlives the test session."""

import os

os.environ.setdefault("DBKIT_SMALL", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
