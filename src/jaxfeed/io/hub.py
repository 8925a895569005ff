"""Datasets on the Hugging Face Hub: download a repo's data files into the standard cache.

Only data files (Parquet, JSON, CSV, Arrow) and the README (its ``configs:`` YAML) are fetched.
Offline (no network, or ``HF_HUB_OFFLINE=1``) the cached snapshot is used; when there is none, the
error says so.
"""

from __future__ import annotations

from pathlib import Path

from jaxfeed.extras import require

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
    from huggingface_hub import constants, errors

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
