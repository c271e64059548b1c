"""The one error every checkpoint reader raises (no Dask import)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, corrupt, truncated, or of another model or layout."""
