"""Datasets from local files: ``.npz`` archives and MNIST-format IDX files.

An ``.npz`` holds ``X_train y_train X_test y_test``. An IDX dataset is a
folder holding ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each optionally
``.gz``), the layout of the MNIST distribution. No download ever happens.
"""

from __future__ import annotations

import gzip
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .dataset import DataError, Dataset

NPZ_KEYS = ("X_train", "y_train", "X_test", "y_test")
IDX_FILES = {
    "X_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "X_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
#: the most a dataset's arrays may take, decompressed, unless told otherwise (``max_data_gib``): a small
#: file can decompress to far more than the machine holds (a zip bomb, a .gz of zeros)
MAX_DATA_BYTES = 4 * 2**30


#: bytes per value of what a dataset is built into (``Dataset``: float32 features, int64 labels)
BUILT_ITEMSIZE = {"X": 4, "y": 8}


def built_bytes(key: str, values: int, itemsize: int) -> int:
    """Bytes an array of ``values`` values of ``itemsize`` bytes read as ``key`` (``X_train``, ``y_test``, ...)
    takes in memory: as read, and as ``Dataset`` converts it (float32 features, int64 labels); a uint8 image
    file becomes 4 bytes a pixel (issue #48: a 2.8 MB .gz of 2.7 GB of pixels needed 10.8 GiB)."""
    return values * (itemsize + BUILT_ITEMSIZE.get(key[:1], 0))


def _too_large(path: Path, need: int, limit: int) -> DataError:
    return DataError(f"{path}: its arrays need {need / 2**30:,.2f} GiB decompressed and built (float32 features, "
                     f"int64 labels), more than the {limit / 2**30:,.2f} GiB allowed; raise --max-data-gib "
                     "(max_data_gib=) if this machine has the memory")


def load_npz(path: str | Path, max_bytes: int = MAX_DATA_BYTES) -> Dataset:
    """Load an ``.npz`` with ``X_train y_train X_test y_test``; refused if its arrays would take more
    than ``max_bytes`` decompressed (checked from their headers, before any is read)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if not zipfile.is_zipfile(path):
        with path.open("rb") as f:  # six bytes, not the whole file
            what = "a single .npy array" if f.read(6) == b"\x93NUMPY" else "not a zip archive"
        raise DataError(f"{path}: not an .npz dataset ({what}); save the four arrays with "
                        f"np.savez(path, {', '.join(f'{k}=...' for k in NPZ_KEYS)})")
    _check_members(path, max_bytes)
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in NPZ_KEYS if k not in z.files]
            if missing:
                raise DataError(f"{path}: missing keys {missing}; an .npz dataset needs {list(NPZ_KEYS)}, "
                                f"found {z.files}")
            arrays = {k: z[k] for k in NPZ_KEYS}
    except DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"{path}: not a readable .npz file ({e})") from e
    image_shape = None
    if arrays["X_train"].ndim in (3, 4):
        shape = arrays["X_train"].shape[1:]
        image_shape = tuple(shape) + (1,) * (3 - len(shape))
    return Dataset(**arrays, name=path.name, image_shape=image_shape)


def _check_members(path: Path, max_bytes: int) -> None:
    """Refuse, before numpy allocates anything, an archive whose array headers claim more data than
    the archive holds (a header can promise terabytes) or than ``max_bytes`` together (a member of a
    few MB can decompress to GBs: numpy would read it all), or hold Python objects (never unpickled)."""
    total = 0
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with z.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                       else np.lib.format.read_array_header_2_0(f))
                if dtype.hasobject:
                    raise DataError(f"{path}: {info.filename} holds Python objects (dtype {dtype}); a dataset "
                                    "holds numbers only, and dbkit never loads pickled objects")
                need = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if need > info.file_size:
                    raise DataError(f"{path}: {info.filename} claims shape {shape} ({need:,} bytes) but holds "
                                    f"{info.file_size:,} bytes: truncated or corrupt")
                total += built_bytes(Path(info.filename).stem, int(np.prod(shape, dtype=object)), dtype.itemsize)
                if total > max_bytes:
                    raise _too_large(path, total, max_bytes)
    except DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"{path}: not a readable .npz file ({e})") from e


def read_idx(path: str | Path, max_bytes: int = MAX_DATA_BYTES, key: str = "", already: int = 0) -> np.ndarray:
    """Read one IDX file (optionally gzipped) into a numpy array, streaming: the header is read and
    checked first, then exactly the data it promises; refused if, with ``already`` bytes of the dataset's
    other arrays, what it builds as ``key`` (``built_bytes``) would take more than ``max_bytes``."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            magic = f.read(4)
            if len(magic) < 4 or magic[0] != 0 or magic[1] != 0 or magic[2] not in _IDX_DTYPES:
                raise DataError(f"{path}: not an IDX file (bad magic number {magic.hex() or 'empty'})")
            ndim = magic[3]
            head = f.read(4 * ndim)
            if ndim == 0 or len(head) < 4 * ndim:
                raise DataError(f"{path}: truncated IDX header")
            dims = tuple(int(d) for d in np.frombuffer(head, ">u4", count=ndim))
            dtype = np.dtype(_IDX_DTYPES[magic[2]])
            need = int(np.prod(dims, dtype=object)) * dtype.itemsize
            built = built_bytes(key, int(np.prod(dims, dtype=object)), dtype.itemsize)
            if already + built > max_bytes:
                raise _too_large(path, already + built, max_bytes)
            raw = f.read(need + 1)  # one byte more tells a file longer than its header says
    except DataError:
        raise
    except (OSError, EOFError, zlib.error) as e:  # EOFError, zlib.error: a truncated or corrupt .gz
        raise DataError(f"{path}: cannot read ({e})") from e
    if len(raw) != need:
        has = f"{len(raw)}" if len(raw) < need else "more"
        raise DataError(f"{path}: IDX header promises {dims} ({need} bytes of data) but the file has {has}")
    return np.frombuffer(raw, dtype).reshape(dims).astype(dtype.newbyteorder("="))


def _find(folder: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (folder / name).is_file():
            return folder / name
    raise DataError(f"{folder}: missing IDX file {stem} (or {stem}.gz)")


def load_idx(folder: str | Path, max_bytes: int = MAX_DATA_BYTES) -> Dataset:
    """Load an MNIST-format IDX dataset from a local folder (at most ``max_bytes`` of arrays together)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such folder")
    arrays: dict[str, np.ndarray] = {}
    total = 0  # what the arrays read so far take, as read and as built
    for k, stem in IDX_FILES.items():
        arrays[k] = read_idx(_find(folder, stem), max_bytes, key=k, already=total)
        total += built_bytes(k, arrays[k].size, arrays[k].itemsize)
    for k in ("X_train", "X_test"):
        if arrays[k].ndim != 3:
            raise DataError(f"{folder}: {IDX_FILES[k]} must hold images (3 dimensions), got shape {arrays[k].shape}")
    h, w = arrays["X_train"].shape[1:]
    return Dataset(arrays["X_train"], arrays["y_train"], arrays["X_test"], arrays["y_test"], name=folder.name,
                   image_shape=(h, w, 1))
