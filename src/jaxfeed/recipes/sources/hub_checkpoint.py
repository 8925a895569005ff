"""The Hub checkpoint of ``--model hf:ORG/NAME`` or ``--model ./folder``: opened once (resolved to
one commit, its ``config.json`` read and checked, its files hashed), checked against a resumed
run's record, and what it fixes of a run's inputs (:class:`Pretrained`, handed to the input kind).

A checkpoint is a Hub id (downloaded into the ``huggingface_hub`` cache at the revision the run
asks for, ``--model.init_args.revision``, pinned to the commit it resolves to) or a local folder
in the Hub's layout (``config.json``, ``model.safetensors``, ``tokenizer.json`` or
``preprocessor_config.json``). ``config.json`` of the run records the id, the commit and the
SHA-256 of each file the run read; ``--resume`` and ``export --format hf`` refuse a checkpoint
whose files changed, and a saved run reopens it at its recorded commit.

>>> RECORDED[:2]
('config.json', 'model.safetensors.index.json')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxfeed._base.files import atomic_write
from jaxfeed.models.hub import preprocessor
from jaxfeed.models.hub.api import CARRIED
from jaxfeed.models.hub.files import Resolved, Weights, checkpoint_file, read_config, resolve
from jaxfeed.models.hub.registry import family_of
from jaxfeed.recipes.config import ConfigError

PREPROCESSOR_FILE = "preprocessor_config.json"
# files of a checkpoint the run may read (each one present is hashed into config.json; the
# weights are added); a run recorded before some were hashed checks the ones it recorded
RECORDED = ("config.json", "model.safetensors.index.json", *CARRIED)
HASHED_BEFORE = ("config.json", "tokenizer.json", "preprocessor_config.json")


@dataclass
class Checkpoint:
    """An opened checkpoint: where its files are (``folder``, at ``commit`` of ``repo_id`` for
    a Hub id), what it is (``config``), and the SHA-256 of its files (``files``; empty for one
    reopened from a run's record without hashing)."""

    spec: str
    folder: Path
    repo_id: str | None
    commit: str | None
    config: dict[str, Any]
    files: dict[str, str]

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type"))

    @property
    def resolved(self) -> Resolved:
        """The folder at its commit, as :func:`~jaxfeed.models.from_pretrained` takes it."""
        return Resolved(self.folder, self.repo_id, self.commit)

    def record(self) -> dict[str, Any]:
        """What the run's ``config.json`` keeps (``resolved["pretrained"]``)."""
        return {
            "model": self.spec,
            "repo_id": self.repo_id,
            "commit": self.commit,
            "folder": str(self.folder),
            "model_type": self.model_type,
            "sha256": dict(self.files),
            "hashed": list(RECORDED),
        }

    def line(self) -> str:
        """``pretrained: bert from ORG/NAME at COMMIT``."""
        where_from = self.repo_id or str(self.folder)
        commit = f" at {self.commit[:12]}" if self.commit else ""
        return f"pretrained: {self.model_type} from {where_from}{commit}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def open_checkpoint(spec: str, revision: str | None = None, *, hashed: bool = True) -> Checkpoint:
    """Resolve ``--model`` at ``revision`` (a download goes into the ``huggingface_hub`` cache,
    pinned to its commit), read its ``config.json`` and family, and hash its files (``hashed``);
    one clear error each, naming ``--model``."""
    try:
        resolved = resolve(spec, revision)
        config = read_config(resolved.folder)
        family_of(config, resolved.folder / "config.json")
        files = _hashes(resolved.folder) if hashed else {}
    except ImportError as err:
        raise ConfigError(f"--model {spec}: {err}") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"--model {spec}: {err}") from None
    return Checkpoint(spec, resolved.folder, resolved.repo_id, resolved.commit, config, files)


def _hashes(folder: Path) -> dict[str, str]:
    """The SHA-256 of the checkpoint's weights and of each :data:`RECORDED` file it has."""
    files = {p.name: _sha256(p) for p in Weights(folder).files()}
    for extra in RECORDED:
        found = checkpoint_file(folder, extra)
        if found is not None:
            files[extra] = _sha256(found)
    return files


def reopen(saved: dict[str, Any], *, hashed: bool = False) -> Checkpoint:
    """The checkpoint a run recorded (``resolved["pretrained"]``), reopened at its recorded
    commit (a Hub id; a local folder as recorded), never at whatever ``main`` now names."""
    spec = str(saved.get("model"))
    revision = saved.get("commit") if saved.get("repo_id") else None
    return open_checkpoint(spec, revision, hashed=hashed)


def check_unchanged(saved: dict[str, Any], checkpoint: Checkpoint) -> None:
    """``--resume`` (and ``export --format hf``): the checkpoint's files are the ones the run
    started from."""
    before = saved.get("sha256") or {}
    now = dict(checkpoint.files)
    if not saved.get("hashed"):  # a run recorded before every file read was hashed
        now = {
            n: h for n, h in now.items() if n in before or n not in RECORDED or n in HASHED_BEFORE
        }
    changed = sorted(n for n in set(before) | set(now) if before.get(n) != now.get(n))
    if changed:
        shown = ", ".join(
            f"{n} ({'gone' if n not in now else 'new' if n not in before else 'changed'})"
            for n in changed[:5]
        )
        raise ConfigError(
            f"--resume: the checkpoint {saved.get('model')} ({checkpoint.folder}) changed since the "
            f"run started: {shown}; resume with the checkpoint the run was started from (the run "
            "recorded each file's SHA-256), or start a new run (another --out)"
        )


def check_data(checkpoint: Checkpoint, kind: str, task: str | None) -> None:
    """The checkpoint's family takes the data's ``kind`` (text, image or audio), whose Hub task
    is ``task`` (``causal-lm`` for a language model; None: no Hub model takes it)."""
    family = family_of(checkpoint.config)
    lm = task == "causal-lm"
    if lm and task not in family.tasks:
        raise ConfigError(
            f"--model {checkpoint.spec} is an encoder ({checkpoint.model_type}): --task lm needs "
            "a causal language model (gpt2, llama, mistral, qwen2, qwen3)"
        )
    if "causal-lm" in family.tasks and not lm:
        raise ConfigError(
            f"--model {checkpoint.spec} is a causal language model ({checkpoint.model_type}): it "
            f"fine-tunes with --task lm on text (a corpus), not on {kind} data for "
            "classification or regression; those take an encoder (bert, roberta, vit...)"
        )
    if task is None or task not in family.tasks:
        raise ConfigError(
            f"--model {checkpoint.spec} ({checkpoint.model_type}) cannot learn from {kind} data "
            f"(its tasks: {', '.join(family.tasks)})"
        )


# ---------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Pretrained:
    """What a Hub checkpoint fixes of a run's inputs, handed by the Hub model source to the input
    kind's plan (the kind needs nothing else of the Hub): ``spec`` (``--model`` as given, for the
    lines), its ``model_type`` and ``folder``, its preprocessor (``processor``: a ``tokenizers``
    tokenizer, an image processor or an audio feature extractor, as
    :func:`~jaxfeed.models.hub.preprocessor` reads it; None when it has none), the positions a
    causal LM takes (``context``), the end-of-sequence and padding ids its ``config.json`` sets,
    and the ``(height, width)`` an image model takes (``image_size``).

    >>> Pretrained("hf:org/m", "bert", Path("m")).tokenizer_file.name
    'tokenizer.json'
    """

    spec: str
    model_type: str
    folder: Path
    processor: Any = None
    context: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    image_size: tuple[int, int] | None = None

    @property
    def tokenizer_file(self) -> Path:
        return self.folder / "tokenizer.json"

    def processor_with(self, attribute: str, what: str) -> Any:
        """The preprocessor, which must have ``attribute`` (a ``what`` model's: ``encode_batch``
        a tokenizer's, ``image_mean`` an image processor's, ``num_mel_bins`` an audio front end's);
        refused naming ``--model`` otherwise."""
        if self.processor is None or not hasattr(self.processor, attribute):
            article = "an" if what[0] in "aeiou" else "a"
            raise ConfigError(
                f"--model {self.spec} is a {self.model_type} model, not {article} {what} model; "
                f"the data is {'images' if what == 'image' else what}"
            )
        return self.processor


def pretrained_inputs(checkpoint: Checkpoint) -> Pretrained:
    """:class:`Pretrained` of ``checkpoint``: its preprocessor read (a damaged one refused naming
    ``--model``), its context and special ids from ``config.json``."""
    try:
        processor = preprocessor(checkpoint.folder)
    except (OSError, ValueError) as err:
        raise ConfigError(f"--model {checkpoint.spec}: {err}") from None
    config, size = checkpoint.config, None
    if hasattr(processor, "output_size"):  # an image model's: the size it makes, checked
        try:
            processor.check_model(config)
        except ValueError as err:
            raise ConfigError(f"--model {checkpoint.spec}: {err}") from None
        size = processor.output_size()
    return Pretrained(
        checkpoint.spec, checkpoint.model_type, checkpoint.folder, processor,
        _first_int(config, ("max_position_embeddings", "n_positions")),
        _token_id(config.get("eos_token_id")), _token_id(config.get("pad_token_id")),
        None if size is None else (int(size[0]), int(size[1])),
    )  # fmt: skip


def _first_int(config: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` that ``config`` gives as an int (a causal LM's positions:
    ``max_position_embeddings``, GPT-2's ``n_positions``)."""
    for key in keys:
        if isinstance(config.get(key), int) and not isinstance(config.get(key), bool):
            return int(config[key])
    return None


def _token_id(found: Any) -> int | None:
    """A token id ``config.json`` sets: an id, or the first of a list (Llama 3's ``eos_token_id``).

    >>> _token_id([128001, 128009]), _token_id(2), _token_id(None), _token_id(True)
    (128001, 2, None, None)
    """
    if isinstance(found, list) and found:
        found = found[0]
    return int(found) if isinstance(found, int) and not isinstance(found, bool) else None


def copy_preprocessor(checkpoint: Checkpoint, out: Path) -> None:
    """The checkpoint's ``preprocessor_config.json`` (images, audio) kept in the run folder, as
    data (text runs keep its ``tokenizer.json``)."""
    source = checkpoint_file(checkpoint.folder, PREPROCESSOR_FILE)
    if source is not None:
        atomic_write(Path(out) / PREPROCESSOR_FILE, source.read_bytes())


__all__ = [
    "HASHED_BEFORE",
    "PREPROCESSOR_FILE",
    "RECORDED",
    "Checkpoint",
    "Pretrained",
    "check_data",
    "check_unchanged",
    "copy_preprocessor",
    "open_checkpoint",
    "pretrained_inputs",
    "reopen",
]
