"""A checkpoint in the Hugging Face Hub's layout: find it, read its config, view its weights.

:func:`resolve` turns a local folder or a Hub id (``hf:org/name`` or ``org/name``) into a local
folder; a Hub id is downloaded with ``huggingface_hub`` into its usual cache (only the config,
safetensors, tokenizer and preprocessor files), pinned to the commit the revision resolves to, and
read from the cache when ``HF_HUB_OFFLINE=1`` is set or the Hub cannot be reached.
:func:`read_config` reads ``config.json`` and refuses a checkpoint that asks for remote code.
:class:`Weights` is a lazy view over ``model.safetensors`` or a sharded
``model.safetensors.index.json``: each tensor is a read-only memory map, read one at a time.

Nothing read from a checkpoint is imported, executed or unpickled: weights come only from
safetensors files, whose header is JSON and whose data are raw little-endian arrays.

>>> import json, tempfile, numpy as np
>>> folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
>>> write_safetensors(folder / "model.safetensors", {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
>>> resolve(str(folder)).folder == folder
True
>>> read_config(folder)["model_type"]
'bert'
>>> w = Weights(folder)
>>> w.names(), w.shape("w"), w.dtype("w")
(['w'], (2, 3), dtype('float32'))
>>> w.get("w")[1].tolist()
[3.0, 4.0, 5.0]
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxfeed._base.extras import require
from jaxfeed._base.files import UnsafePathError, file_inside, temporary_file

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
INDEX = "model.safetensors.index.json"
# what a download fetches: never pickled weights, never code
ALLOW_PATTERNS = [
    "config.json",
    "adapter_config.json",  # a PEFT adapter (from_pretrained(adapter="hf:org/name"))
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "preprocessor_config.json",
]


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded: the message names the file and what was
    expected."""


class CheckpointNotCachedError(FileNotFoundError):
    """A Hub checkpoint was asked for offline, and it is not in the local cache."""


@dataclass(frozen=True)
class Resolved:
    """Where a checkpoint lies: its local ``folder``, and for a Hub id the ``repo_id`` and the
    ``commit`` its revision resolved to (both None for a local folder)."""

    folder: Path
    repo_id: str | None = None
    commit: str | None = None


# ---------------------------------------------------------------------------------- resolve
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?")


def _repo_id(name: str) -> str | None:
    """The Hub id ``name`` names (``hf:org/name`` or ``org/name``), or None for a local path."""
    if name.startswith(("hf:", "hf://")):
        repo = name.removeprefix("hf://").removeprefix("hf:").strip("/")
        if not _REPO_ID.fullmatch(repo):
            raise CheckpointError(f"{name!r} is not a Hub model id (hf:org/name)")
        return repo
    if Path(name).exists() or name.startswith((".", "/", "~")) or os.sep in name.replace("/", ""):
        return None
    return name if _REPO_ID.fullmatch(name) and name.count("/") == 1 else None


def resolve(name_or_path: str | os.PathLike, revision: str | None = None) -> Resolved:
    """The local folder of a checkpoint: ``name_or_path`` itself when it is a folder, else the
    Hub id's snapshot in the ``huggingface_hub`` cache (downloaded if needed).

    >>> import tempfile
    >>> resolve(tempfile.gettempdir()).repo_id is None
    True
    """
    name = os.fspath(name_or_path)
    repo = _repo_id(name)
    if repo is None:
        folder = Path(name).expanduser()
        if not folder.is_dir():
            what = "is a file, not a folder" if folder.exists() else "does not exist"
            raise FileNotFoundError(
                f"checkpoint {name!r} {what}: give a folder in the Hub's layout (config.json, "
                "model.safetensors, tokenizer.json) or a Hub id such as hf:org/name"
            )
        if revision is not None:
            raise ValueError(f"revision={revision!r} applies to Hub ids, not to the folder {name}")
        return Resolved(folder)
    return download(repo, revision)


def download(repo_id: str, revision: str | None = None) -> Resolved:
    """``repo_id``'s config, safetensors, tokenizer and preprocessor files in the
    ``huggingface_hub`` cache, every file at the one commit ``revision`` (default ``main``)
    resolves to; from the cache alone when offline (``HF_HUB_OFFLINE=1``, or the Hub
    unreachable: then the revision is the commit cached for it)."""
    hub = require("huggingface_hub", "hub", f"downloading the Hub model {repo_id}")
    from huggingface_hub import constants, errors  # noqa: PLC0415 (optional: the hub extra)

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    offline = bool(constants.HF_HUB_OFFLINE) or flag in ("1", "ON", "YES", "TRUE")
    try:
        folder = hub.snapshot_download(
            repo_id, revision=revision, allow_patterns=ALLOW_PATTERNS, local_files_only=offline
        )
    except errors.RepositoryNotFoundError as err:
        raise FileNotFoundError(
            f"model {repo_id!r} was not found on the Hub (nor is it a local folder)"
        ) from err
    except errors.RevisionNotFoundError as err:
        raise FileNotFoundError(
            f"revision {revision!r} of the Hub model {repo_id!r} does not exist"
        ) from err
    except (errors.LocalEntryNotFoundError, errors.HfHubHTTPError, OSError) as err:
        why = "HF_HUB_OFFLINE=1 is set" if offline else f"the Hub could not be reached ({err})"
        raise CheckpointNotCachedError(
            f"model {repo_id!r}{'' if revision is None else f' at {revision!r}'} is not in the "
            f"local cache ({constants.HF_HUB_CACHE}) and {why}; connect once to download it, or "
            "give a local folder"
        ) from err
    folder = Path(folder)
    return Resolved(folder, repo_id, folder.name)


# ---------------------------------------------------------------------------------- config
TEXT_LIMIT = 256 << 20  # bytes of a JSON or template file read from a checkpoint


def checkpoint_file(folder: str | os.PathLike, name: str) -> Path | None:
    """The file ``name`` of the checkpoint ``folder``, None when it has none: every file read
    from a checkpoint is opened through here. A link leading outside the folder (a Hub
    download's cache blobs are inside) is a :class:`CheckpointError` naming it.

    >>> import tempfile
    >>> checkpoint_file(tempfile.mkdtemp(), "tokenizer_config.json") is None
    True
    """
    try:
        return file_inside(folder, name, "checkpoint file")
    except UnsafePathError as err:
        raise CheckpointError(str(err)) from None


def read_checkpoint_text(folder: str | os.PathLike, name: str) -> str | None:
    """The UTF-8 text of the checkpoint file ``name`` (None when absent), read through
    :func:`checkpoint_file`; one too large or not UTF-8 is a :class:`CheckpointError` naming it.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "chat_template.jinja").write_bytes(b"\\xff{{ x }}")
    >>> read_checkpoint_text(folder, "chat_template.jinja")
    Traceback (most recent call last):
    ...
    jaxfeed.models.hub.files.CheckpointError: .../chat_template.jinja is not UTF-8 text ...
    """
    path = checkpoint_file(folder, name)
    if path is None:
        return None
    size = path.stat().st_size
    if size > TEXT_LIMIT:
        raise CheckpointError(
            f"{path} has {size} bytes, more than the {TEXT_LIMIT >> 20} MiB a checkpoint's "
            f"{name} may hold; replace it with the model's own file"
        )
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(
            f"{path} is not UTF-8 text (byte {err.start}: {err.reason}); save it as UTF-8"
        ) from None


def read_json(path: Path, what: str) -> Any:
    """The JSON in ``path`` (a checkpoint file, read through :func:`checkpoint_file`), or a
    :class:`CheckpointError` naming the file and ``what`` it is."""
    text = read_checkpoint_text(path.parent, path.name)
    if text is None:
        raise CheckpointError(f"{path} does not exist: the checkpoint has no {what}")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise CheckpointError(f"{path} is not a valid {what} (JSON): {err}") from None


def read_checkpoint_json(folder: str | os.PathLike, name: str, what: str) -> dict | None:
    """The JSON object in the checkpoint file ``name`` (None when absent); anything else than
    an object is a :class:`CheckpointError` naming the file."""
    path = Path(folder) / name
    if checkpoint_file(folder, name) is None:
        return None
    found = read_json(path, what)
    if not isinstance(found, dict):
        raise CheckpointError(
            f"{path} must hold a JSON object (the {what}), got {type(found).__name__}"
        )
    return found


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """``config.json`` of a checkpoint folder as a dict; refuses a folder without one and a
    config asking for remote code (``auto_map``): no code from a checkpoint is ever run."""
    folder = Path(folder)
    path = folder / CONFIG
    if checkpoint_file(folder, CONFIG) is None:
        present = sorted(p.name for p in folder.iterdir())[:8] if folder.is_dir() else []
        raise CheckpointError(
            f"{folder} has no config.json: a Hub-format checkpoint folder holds config.json, "
            f"model.safetensors and tokenizer files (found: {', '.join(present) or 'nothing'})"
        )
    config = read_json(path, "model config")
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got {type(config).__name__}")
    if config.get("auto_map") or config.get("trust_remote_code"):
        raise CheckpointError(
            f"{path} asks for remote code (auto_map: {config.get('auto_map')!r}): jaxfeed never "
            "runs code from a checkpoint; only its built-in architectures load"
        )
    if not isinstance(config.get("model_type"), str):
        raise CheckpointError(
            f"{path} has no 'model_type' string (got {config.get('model_type')!r})"
        )
    return config


# ---------------------------------------------------------------------------------- safetensors
def _dtypes() -> dict[str, np.dtype]:
    import ml_dtypes  # noqa: PLC0415 (import cost: only when reading bfloat16/float8 weights)

    out = {
        "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
        "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"),
        "I8": np.dtype("i1"), "U8": np.dtype("u1"), "U16": np.dtype("<u2"),
        "U32": np.dtype("<u4"), "U64": np.dtype("<u8"), "BOOL": np.dtype("?"),
        "BF16": np.dtype(ml_dtypes.bfloat16),
        "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn), "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    }  # fmt: skip
    return out


def _code(dtype: np.dtype) -> str:
    for code, known in _dtypes().items():
        if known == dtype:
            return code
    raise ValueError(f"safetensors cannot store dtype {dtype}")


@dataclass(frozen=True)
class _Entry:
    file: Path
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


def read_header(path: Path) -> dict[str, _Entry]:
    """The tensors of one safetensors file, checked against its size (a truncated or corrupt
    file raises :class:`CheckpointError` naming it)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path} is truncated: {size} bytes, not a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, 100 << 20):
            raise CheckpointError(
                f"{path} is not a safetensors file or is truncated (header of {n} bytes in a "
                f"file of {size})"
            )
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise CheckpointError(f"{path} is not a safetensors file (header: {err})") from None
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{path} is not a safetensors file: its header is a JSON {type(header).__name__}, "
            "not an object of tensor name -> dtype, shape, data_offsets"
        )
    base = 8 + n
    out = {
        str(name): _entry(path, str(name), info, base, size)
        for name, info in header.items()
        if name != "__metadata__"
    }
    spans = sorted((e.start, e.end, name) for name, e in out.items() if e.end > e.start)
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        if start < end:
            raise CheckpointError(
                f"{path}: tensors {first!r} and {second!r} overlap (data_offsets); the file is "
                "corrupt: download it again"
            )
    return out


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(path: Path, name: str, info: Any, base: int, size: int) -> _Entry:
    """One tensor of a safetensors header, checked: a known dtype, a shape of natural numbers,
    offsets inside the data (never in the header) spanning the shape's bytes."""
    code = info.get("dtype") if isinstance(info, dict) else None
    shape = info.get("shape") if isinstance(info, dict) else None
    offsets = info.get("data_offsets") if isinstance(info, dict) else None
    dtype = _dtypes().get(code) if isinstance(code, str) else None
    if dtype is None or not isinstance(shape, list) or not isinstance(offsets, list):
        raise CheckpointError(
            f"{path}: tensor {name!r} has a malformed entry {str(info)[:200]} (expected dtype, "
            "shape and data_offsets); the file is corrupt: download it again"
        )
    if not all(_natural(d) for d in shape):
        raise CheckpointError(
            f"{path}: tensor {name!r} has the shape {shape}; dimensions are integers >= 0"
        )
    if len(offsets) != 2 or not all(_natural(v) for v in offsets) or offsets[0] > offsets[1]:
        raise CheckpointError(
            f"{path}: tensor {name!r} has data_offsets {offsets}; they are two integers "
            "0 <= begin <= end, counted from the end of the header"
        )
    begin, end = offsets
    expected = dtype.itemsize * math.prod(shape)
    if end - begin != expected:
        raise CheckpointError(
            f"{path}: tensor {name!r} of shape {shape} {code} spans {end - begin} bytes, "
            f"expected {expected}"
        )
    if base + end > size:
        raise CheckpointError(
            f"{path} is truncated: tensor {name!r} ends at byte {base + end} but the file has "
            f"{size} bytes; download it again"
        )
    return _Entry(path, dtype, tuple(shape), base + begin, base + end)


def write_safetensors(path: str | os.PathLike, tensors: Mapping[str, Any] | Iterable[tuple[str, Any]],
                      metadata: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """Write ``tensors`` (name -> array with ``shape`` and ``dtype``: numpy, memory maps or
    ``jax.Array``) as one safetensors file through a temporary file and a rename; each array is
    turned into bytes only when written, one at a time."""
    path = Path(path)
    items = list(tensors.items() if isinstance(tensors, Mapping) else tensors)
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, value in items:
        shape = tuple(int(d) for d in value.shape)
        nbytes = np.dtype(value.dtype).itemsize * int(np.prod(shape, dtype=np.int64))
        header[name] = {"dtype": _code(np.dtype(value.dtype)), "shape": list(shape),
                        "data_offsets": [offset, offset + nbytes]}  # fmt: skip
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = temporary_file(path)
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for _, value in items:
                f.write(_le_bytes(value))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _le_bytes(value: Any) -> bytes:
    array = np.ascontiguousarray(np.asarray(value))
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array.tobytes()


class Weights:
    """A lazy view over a checkpoint's safetensors weights (``model.safetensors`` or the shards
    of ``model.safetensors.index.json``): names, shapes and dtypes from the headers, each tensor a
    read-only memory map read on demand.

    Refuses, naming the file: a folder with only pickled ``.bin`` weights (and says how to
    convert them), an index listing a shard that is missing or a tensor a shard lacks, and a
    truncated or corrupt safetensors file.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        index, single = self.folder / INDEX, self.folder / SAFETENSORS
        self.entries: dict[str, _Entry] = {}
        if checkpoint_file(self.folder, INDEX) is not None:
            data = read_json(index, "weights index")
            weight_map = data.get("weight_map") if isinstance(data, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError(f"{index} has no 'weight_map' of tensor name -> shard file")
            shards: dict[str, list[str]] = {}
            for name, shard in weight_map.items():
                shards.setdefault(str(shard), []).append(name)
            for shard, names in shards.items():
                try:
                    path = checkpoint_file(self.folder, shard)
                except CheckpointError as err:
                    raise CheckpointError(f"{index} lists the shard {shard!r}: {err}") from None
                if path is None:
                    raise CheckpointError(
                        f"{index} lists the shard {shard!r} (for {len(names)} tensors, e.g. "
                        f"{names[0]!r}), which is missing from {self.folder}; download it again"
                    )
                entries = read_header(path)
                for name in names:
                    if name not in entries:
                        raise CheckpointError(
                            f"{index} places tensor {name!r} in {shard}, which does not hold it"
                        )
                    self.entries[name] = entries[name]
        elif checkpoint_file(self.folder, SAFETENSORS) is not None:
            self.entries = read_header(single)
        else:
            others = sorted(p.name for p in self.folder.glob("*.safetensors"))
            if len(others) == 1 and checkpoint_file(self.folder, others[0]) is not None:
                self.entries = read_header(self.folder / others[0])
                return
            pickled = sorted(
                p.name
                for p in self.folder.iterdir()
                if p.suffix in (".bin", ".pt", ".pth", ".ckpt")
            )
            if pickled:
                raise CheckpointError(
                    f"{self.folder} has only pickled PyTorch weights ({', '.join(pickled)}), which "
                    "jaxfeed never unpickles; convert them to safetensors once, in an environment "
                    "you trust: `transformers.AutoModel.from_pretrained(folder)."
                    "save_pretrained(folder)` (writes model.safetensors), or use the Hub's "
                    "safetensors conversion (the 'refs/pr/N' revision it opens)"
                )
            raise CheckpointError(
                f"{self.folder} has no weights: expected model.safetensors or "
                "model.safetensors.index.json"
            )

    @classmethod
    def of_file(cls, path: str | os.PathLike) -> Weights:
        """The tensors of the one safetensors file ``path`` (an adapter's
        ``adapter_model.safetensors``), whatever else its folder holds."""
        view = cls.__new__(cls)
        view.folder = Path(path).parent
        view.entries = read_header(Path(path))
        return view

    def names(self) -> list[str]:
        """Every tensor name, in file order."""
        return list(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name).shape

    def dtype(self, name: str) -> np.dtype:
        return self._entry(name).dtype

    def files(self) -> list[Path]:
        """The safetensors files the weights come from."""
        return sorted({e.file for e in self.entries.values()})

    def _entry(self, name: str) -> _Entry:
        try:
            return self.entries[name]
        except KeyError:
            raise KeyError(f"the checkpoint in {self.folder} has no tensor {name!r}") from None

    def get(self, name: str) -> np.ndarray:
        """The tensor ``name`` as a read-only memory map (no copy until it is used)."""
        e = self._entry(name)
        if e.end == e.start:
            return np.zeros(e.shape, e.dtype)
        return np.memmap(e.file, dtype=e.dtype, mode="r", offset=e.start, shape=e.shape)


# ---------------------------------------------------------------------------------- identity
def file_stamps(folder: str | os.PathLike, weights: Weights | None = None) -> tuple[tuple, ...]:
    """``(name, device, inode, size, mtime_ns)`` of the checkpoint's ``config.json``, index and
    weights files: which files a model was read from. A file replaced since (a save, a download,
    a copy: another inode) or rewritten (another size or time) has another stamp. Stat, not
    hashes: hashing a 7B checkpoint's 13.5 GB at every load and every check would cost about as
    much again as the load.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.json").write_text("{}")
    >>> write_safetensors(folder / "model.safetensors", {"w": np.zeros(2, np.float32)})
    >>> [stamp[0] for stamp in file_stamps(folder)]
    ['config.json', 'model.safetensors']
    """
    folder = Path(folder)
    weights = Weights(folder) if weights is None else weights
    paths = [folder / CONFIG, *weights.files()]
    if checkpoint_file(folder, INDEX) is not None:
        paths.append(folder / INDEX)
    stamps = []
    for path in paths:
        st = os.stat(path)
        stamps.append((path.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(stamps))


def changed_files(folder: str | os.PathLike, stamps: tuple[tuple, ...]) -> list[str]:
    """The files of ``folder`` that are not the ones ``stamps`` (:func:`file_stamps`) recorded,
    each as ``NAME (changed | gone | new)``; ``[]`` when they all are.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.json").write_text("{}")
    >>> write_safetensors(folder / "model.safetensors", {"w": np.zeros(2, np.float32)})
    >>> before = file_stamps(folder)
    >>> write_safetensors(folder / "model.safetensors", {"w": np.ones(2, np.float32)})
    >>> changed_files(folder, before)
    ['model.safetensors (changed)']
    """
    try:
        now = {s[0]: s[1:] for s in file_stamps(folder)}
    except (OSError, CheckpointError) as err:
        return [f"its files cannot be read ({err})"]
    then = {s[0]: s[1:] for s in stamps}
    return [
        f"{name} ({'gone' if name not in now else 'new' if name not in then else 'changed'})"
        for name in sorted(set(now) | set(then))
        if now.get(name) != then.get(name)
    ]
