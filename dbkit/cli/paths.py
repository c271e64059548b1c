"""A command's outputs never overwrite what it reads: every output path (``--report``, ``--plot``, ``--out``, the
files of ``--checkpoint-dir``) is checked, before anything runs, against every input (``--profile``,
``--extension``, the ``--dataset`` file or the files of an IDX folder, the checkpoint of ``--resume``) through
resolved paths, so that a symbolic link, ``./``, ``..`` or a hard link to an input is caught too (issue #48)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..ps.checkpoint import probe_writable

#: files a checkpoint folder holds (``--checkpoint-dir``, ``--resume``): an output never takes one of these names
CHECKPOINT_FILES = ("checkpoint.json", "sandblaster.json", "shard-*.npz", "sandblaster-shard-*.npz", "*.tmp")


def check_writable(flag: str, path: str | None) -> None:
    """``ValueError`` naming ``flag`` if ``path`` cannot be written (its folder is made if missing), or, for
    ``--plot``, if matplotlib cannot write its format."""
    if not path:
        return
    target = Path(path)
    if flag == "--plot":
        from matplotlib.figure import Figure

        formats = Figure().canvas.get_supported_filetypes()
        if target.suffix.lstrip(".").lower() not in formats:
            raise ValueError(f"--plot {path}: give a file name ending in one of {', '.join('.' + f for f in formats)} "
                             "(.png is usual)")
    if target.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file name")
    try:
        probe_writable(target.parent)
        if target.exists() and not os.access(target, os.W_OK):
            raise PermissionError(f"{path} is read-only")
    except OSError as e:
        raise ValueError(f"{flag} {path} cannot be written ({e.strerror or e}); choose another path") from e


def _extension_file(source: str) -> Path | None:
    """The file an ``--extension`` was loaded from: the path given, or a module's own file."""
    path = Path(source).expanduser()
    if path.is_file():
        return path
    module = sys.modules.get(source)
    origin = getattr(module, "__file__", None) if module is not None else None
    return Path(origin) if origin else None


def command_inputs(args: argparse.Namespace) -> dict[Path, str]:
    """Every file the command reads, resolved, with the flag that names it."""
    inputs: dict[Path, str] = {}
    name = getattr(args, "dataset", None)
    dataset = Path(name) if name else None  # a built-in's name is no file here, unless one is so named
    if dataset is not None and dataset.is_file():
        inputs[dataset.resolve()] = "--dataset"
    elif dataset is not None and dataset.is_dir():
        inputs.update({f.resolve(): "--dataset" for f in dataset.iterdir() if f.is_file()})
    profile = getattr(args, "profile", None)
    if profile and Path(profile).expanduser().is_file():
        inputs[Path(profile).expanduser().resolve()] = "--profile"
    for source in getattr(args, "extension", None) or []:
        found = _extension_file(source)
        if found is not None:
            inputs[found.resolve()] = "--extension"
    resume = getattr(args, "resume", None)
    if resume and Path(resume).is_dir():
        inputs.update({f.resolve(): "--resume" for f in Path(resume).iterdir()
                       if f.is_file() and any(f.match(p) for p in CHECKPOINT_FILES)})
    return inputs


def _same(a: Path, b: Path) -> bool:
    try:
        return a == b or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_outputs(outputs: dict[str, str | None], args: argparse.Namespace) -> None:
    """``ValueError`` before anything starts if an output would overwrite an input (``command_inputs``), a
    checkpoint file in ``--resume`` or ``--checkpoint-dir``, or another output; or if ``--checkpoint-dir``
    would write its files over an input."""
    given = {flag: Path(path).expanduser().resolve() for flag, path in outputs.items() if path}
    if len(set(given.values())) < len(given):
        raise ValueError(f"{' and '.join(given)} name the same file ({next(iter(given.values()))}); give each its own")
    inputs = command_inputs(args)
    folders = {flag: Path(d).resolve() for flag in ("--resume", "--checkpoint-dir")
               if (d := getattr(args, flag[2:].replace("-", "_"), None))}
    for flag, target in given.items():
        for source, input_flag in inputs.items():
            if _same(target, source):
                raise ValueError(f"{flag} {outputs[flag]} would overwrite the input {input_flag} file ({source}); "
                                 "choose another path")
        for folder_flag, folder in folders.items():
            if target.parent == folder and any(target.match(pattern) for pattern in CHECKPOINT_FILES):
                raise ValueError(f"{flag} {outputs[flag]} would overwrite a checkpoint file in {folder_flag} "
                                 f"{folder}; choose another path")
    into = folders.get("--checkpoint-dir")
    if into is not None:
        for source, input_flag in inputs.items():
            if source.parent == into and input_flag != "--resume" and any(
                    source.match(pattern) for pattern in CHECKPOINT_FILES):
                raise ValueError(f"--checkpoint-dir {into} would overwrite the input {input_flag} file ({source}); "
                                 "choose another folder")
