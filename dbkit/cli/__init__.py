"""The ``dbkit`` command line."""
