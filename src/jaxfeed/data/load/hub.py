"""Datasets on the Hugging Face Hub: download a repo's data files into the standard cache.

Only data files (Parquet, JSON, CSV, Arrow) and the README (its ``configs:`` YAML) are fetched.
Offline (no network, or ``HF_HUB_OFFLINE=1``) the cached snapshot is used; when there is none, the
error says so. A snapshot is untrusted input: its README ``configs`` may only name files inside it.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Any

import yaml

from jaxfeed._base.extras import require
from jaxfeed._base.files import UnsafePathError, check_inside, resolve_inside
from jaxfeed.data.formats.validate import short

PATTERNS = [
    "*.parquet",
    "*.json",
    "*.jsonl",
    "*.csv",
    "*.tsv",
    "*.arrow",
    "*.json.gz",
    "*.jsonl.gz",
    "*.csv.gz",
    "README.md",
]


class DatasetNotCachedError(FileNotFoundError):
    """A Hub dataset was asked for offline, and it is not in the local cache."""


def looks_like_repo_id(path: str) -> bool:
    parts = path.split("/")
    return (
        1 <= len(parts) <= 2
        and all(p and not p.startswith(".") for p in parts)
        and not Path(path).exists()
    )


def download(
    repo_id: str,
    revision: str | None = None,
    cache_dir: str | None = None,
    token: str | bool | None = None,
) -> Path:
    """The local folder holding ``repo_id``'s data files (downloaded, or from the cache offline)."""
    huggingface_hub = require("huggingface_hub", "hub", "loading a Hub dataset")
    from huggingface_hub import constants, errors  # noqa: PLC0415 (optional: the hub extra)

    kwargs = dict(
        repo_id=repo_id,
        repo_type="dataset",
        revision=revision,
        cache_dir=cache_dir,
        allow_patterns=PATTERNS,
    )
    offline = bool(constants.HF_HUB_OFFLINE)
    try:
        if not offline:
            try:
                return Path(huggingface_hub.snapshot_download(token=token, **kwargs))
            except errors.RepositoryNotFoundError as err:
                raise FileNotFoundError(
                    f"dataset {repo_id!r} was not found on the Hub (nor is it a local path or a built-in name)"
                ) from err
            except (OSError, errors.HfHubHTTPError, ValueError):
                pass  # no network: fall back on the cache below
        return Path(huggingface_hub.snapshot_download(local_files_only=True, **kwargs))
    except (errors.LocalEntryNotFoundError, FileNotFoundError, OSError) as err:
        if isinstance(err, FileNotFoundError) and "not found on the Hub" in str(err):
            raise
        where = cache_dir or constants.HF_HUB_CACHE
        why = "HF_HUB_OFFLINE=1 is set" if offline else "the Hub could not be reached"
        raise DatasetNotCachedError(
            f"dataset {repo_id!r} is not in the local cache ({where}) and {why}; connect to the network "
            "once to download it, or pass a local folder or file"
        ) from err


# ------------------------------------------------------------------------------ README configs
def readme_configs(folder: Path) -> list[dict]:
    """The ``configs:`` of a dataset card's YAML header, as ``[{config_name, default, data_files}]``.

    Raises ``ValueError`` naming ``README.md`` and the config for a header that does not have the
    documented shape (a list of mappings whose ``data_files`` are paths, lists of paths, or
    ``{split, path}`` entries).
    """
    readme = folder / "README.md"
    if not readme.is_file():
        return []
    try:
        text = check_inside(folder, readme, "dataset card").read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{readme} is not valid UTF-8 (byte {err.start})") from None
    m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, flags=re.S)
    if not m:
        return []
    meta = load_yaml(m.group(1), str(readme), "YAML header") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"{readme}: the YAML header must be a mapping, got {type(meta).__name__}")
    configs = meta.get("configs") or []
    if not isinstance(configs, list):
        raise ValueError(f"{readme}: 'configs' must be a list of configs, got {short(configs)}")
    out = []
    for i, config in enumerate(configs):
        where = f"{readme}: configs[{i}]"
        if not isinstance(config, dict):
            raise ValueError(f"{where} must be a mapping with data_files, got {short(config)}")
        files = config.get("data_files")
        if files is None:
            continue
        name = config.get("config_name", "default")
        if not isinstance(name, str):
            raise ValueError(f"{where}: config_name must be a string, got {short(name)}")
        out.append(
            {
                "config_name": name,
                "default": bool(config.get("default", False)),
                "data_files": _config_files(files, f"{where} ({short(name)}) data_files"),
            }
        )
    return out


MAX_YAML_NODES = 100_000  # values in a YAML header once its aliases are expanded


def load_yaml(text: str, source: str, what: str = "YAML", max_nodes: int = MAX_YAML_NODES) -> Any:
    """``yaml.safe_load`` of untrusted text, refusing documents whose aliases expand past
    ``max_nodes`` values (a 472-byte "billion laughs" header expands to 10^9) or nest too deep.

    The node graph is measured before any Python value is built: each node's expanded size is
    counted once, so the check costs the size of the text, not of the expansion.

    >>> load_yaml("a: &x [1, 2]\\nb: *x", "README.md")
    {'a': [1, 2], 'b': [1, 2]}
    >>> load_yaml("a: &a [1, 1]\\nb: &b [*a, *a]\\nc: [*b, *b]", "README.md", max_nodes=10)
    Traceback (most recent call last):
    ...
    ValueError: README.md: its YAML: aliases expand to more than 10 values; at most 10 are read
    """
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as err:  # a character YAML does not allow
        problem = " ".join(str(err).split())[:300]
        raise ValueError(f"{source}: cannot parse its {what}: {problem}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, f"{source}: its {what}", max_nodes)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        problem = " ".join(str(err).split())[:300]
        raise ValueError(f"{source}: cannot parse its {what}: {problem}") from None
    except RecursionError:
        raise ValueError(f"{source}: its {what} nests too deep to read") from None
    finally:
        loader.dispose()


def _expanded_size(root: yaml.Node, source: str, max_nodes: int) -> int:
    """Values under ``root`` once aliases are expanded, counted without expanding them."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    depth_guard = 0
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if done:
            total = 1 + sum(sizes.get(id(c), 0) for c in children)
            if total > max_nodes:
                raise ValueError(
                    f"{source}: aliases expand to more than {max_nodes} values; at most "
                    f"{max_nodes} are read"
                )
            sizes[id(node)] = total
            continue
        depth_guard += 1
        if depth_guard > 10 * max_nodes:
            raise ValueError(f"{source}: too many values to read")
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _config_files(files: Any, where: str) -> dict[str, list[str]]:
    def patterns(value: Any, what: str) -> list[str]:
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{what} must be a path or a list of paths, got {short(value)}")
        return value

    if isinstance(files, str):
        return {"train": [files]}
    if isinstance(files, dict):
        return {str(k): patterns(v, f"{where}[{short(k)}]") for k, v in files.items()}
    if isinstance(files, list) and files and all(isinstance(e, dict) for e in files):
        out: dict[str, list[str]] = {}
        for j, entry in enumerate(files):
            if "path" not in entry:
                raise ValueError(f"{where}[{j}] has no 'path' (entries are {{split, path}})")
            split = str(entry.get("split", "train"))
            out.setdefault(split, []).extend(patterns(entry["path"], f"{where}[{j}].path"))
        return out
    return {"train": patterns(files, where)}


def choose_config(configs: list[dict], name: str | None) -> dict:
    """The config called ``name``, else the default one (or the first)."""
    if name is None:
        defaults = [c for c in configs if c["default"]] or [
            c for c in configs if c["config_name"] == "default"
        ]
        return defaults[0] if defaults else configs[0]
    for config in configs:
        if config["config_name"] == name:
            return config
    raise ValueError(
        f"unknown config {short(name)}; this dataset has "
        f"{short([c['config_name'] for c in configs], 200)}"
    )


def expand_inside(data_files: dict[str, list[str]], root: Path) -> dict[str, list[str]]:
    """Expand the patterns of a dataset's own config (its README) into files inside ``root``.

    A pattern is a path relative to ``root``; one that names an existing file is taken literally
    (so ``a[1].csv`` is that file, not a glob). Absolute patterns, ``..`` and matches that are
    symlinks leading outside are refused with :class:`UnsafePathError`.
    """
    out: dict[str, list[str]] = {}
    for split, patterns in data_files.items():
        files: list[str] = []
        for pattern in patterns:
            what = f"data_files pattern {short(pattern)} (split {short(split)}) of {root / 'README.md'}"
            if os.path.isabs(pattern) or ".." in Path(pattern).parts or "\x00" in pattern:
                raise UnsafePathError(
                    f"{what} must be relative to the dataset folder {root}, without '..'"
                )
            literal = resolve_inside(root, pattern, what)
            if literal.is_file():
                matches = [str(literal)]
            else:
                found = glob.glob(pattern, root_dir=root, recursive=True)  # root taken literally
                matches = sorted(str(root / m) for m in found)
                if not matches:
                    hint = " ([ and ] are glob characters)" if "[" in pattern else ""
                    raise FileNotFoundError(f"{what}: nothing matches{hint}")
            files += [str(check_inside(root, m, "data file")) for m in matches if Path(m).is_file()]
        out[split] = files
    return out
