"""Text: one column of free text (:mod:`jaxfeed.recipes.text.text_columns`), tokenized (``--tokenizer``,
or a byte-level BPE trained on the train split, kept as ``tokenizer.json``:
:mod:`jaxfeed.recipes.text.tokenizer`) and padded to a few bucket lengths, batches of similar lengths;
the ``transformer`` classifier (or regressor) by default; exported with its tokenizer, strings in.
A Hub checkpoint brings its own ``tokenizer.json`` and length limit (:meth:`TextKind.plan_from_checkpoint`).

>>> prep = Preprocessing("lm", ["t"], "", [4], "lm", text={})
>>> export_example(prep, {"input_ids": "input_ids", "positions": "positions"})["positions"]
array([[0, 1, 2, 3]], dtype=int32)
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
from pathlib import Path
from typing import Any

import numpy as np

from jaxfeed.data.dataset import Dataset
from jaxfeed.loading.padding import Padding, choose_lengths
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.config.budget import NGRAM_BUCKETS, NGRAM_N
from jaxfeed.recipes.kinds.base import Baseline, Kind, select_columns, target_line
from jaxfeed.recipes.kinds.builtins import BUILTINS
from jaxfeed.recipes.kinds.objectives import numeric_options
from jaxfeed.recipes.spec import TARGETS, TEXT_COLUMNS, Preprocessing
from jaxfeed.recipes.text.text_columns import check_labels, check_text_column, string_profile
from jaxfeed.recipes.text.tokenizer import (
    EOS_NAMES,
    PAD_NAMES,
    TOKENIZER_FILE,
    as_texts,
    attach_tokenizer,
    load_tokenizer_option,
    special_id,
    token_batch,
    token_lengths,
    tokenizer_bytes,
    write_tokenizer,
)

MAX_TEXT_TOKENS = 512  # a classifier's longest text by default (longer ones are truncated)
KEPT_WHOLE = 0.99  # ... and by default at most the length that keeps this share of texts whole
BUCKETS = 4  # pad lengths of a classifier's batches, at most
BATCHES_PER_BUCKET = 32  # ... and at most one per this many batches of an epoch (see buckets_for)
BATCH_TOKENS = 2048  # a classifier's batch size by default: at most this many tokens a batch (a
# step's buffers follow it: 120 MB at 8 x 256 tokens of the default transformer, 240 MB at 16)


class TextKind(Kind):
    """A text column classified or regressed (see the module docstring).

    >>> TextKind().describe(Preprocessing("text", ["t"], "y", [24], text={}), None)
    'inputs: token ids (up to 24)'
    """

    default_model = "transformer"
    tokens = True
    hub_task = "sequence-classification"
    token_columns = TEXT_COLUMNS[:2]  # what the model may take by name: ids and mask

    def __init__(self, name: str = "text") -> None:
        super().__init__(name)

    @staticmethod
    def check_options(config: RunConfig) -> None:
        """Before any data is read: ``--task lm`` takes no label column nor class weights; a
        ``--tokenizer`` loads."""
        if config.task == "lm" and config.label_column is not None:
            raise ConfigError("--task lm learns the text itself: drop --label-column")
        if config.task == "lm" and config.class_weights is not None:
            raise ConfigError("--class-weights is for classification; --task lm predicts tokens")
        if config.tokenizer is not None and not config.resume:
            load_tokenizer_option(config.tokenizer)

    def clean(self, data: dict[str, Any], columns: Any) -> tuple[dict[str, Any], list[str]]:
        """Rows of empty text left out (most of them empty: refused); a missing label refused."""
        notes: list[str] = []
        for name, part in data.items():
            if columns.inputs[0] in part.features:
                data[name], note = check_text_column(part, columns.inputs[0], f"split {name!r}")
                notes += [note] if note else []
            if self.task is None and columns.label in part.features:
                check_labels(part, columns.label, f"split {name!r}")
        return data, notes

    # ------------------------------------------------------------------ planning
    def plan(self, run_data: Any, config: RunConfig,
             pretrained: Any = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        if pretrained is not None:
            return self.plan_from_checkpoint(pretrained, run_data, config)
        columns = run_data.columns
        prep, notes = self.plan_text(
            run_data.splits.train, columns.inputs[0], columns.label, run_data.task, config,
            why=columns.why,
        )  # fmt: skip
        if columns.excluded:
            excluded = ", ".join(c for c, _ in columns.excluded)
            notes.append(
                f"excluded: {excluded} (the text column is the input; to learn from the others "
                "as a table instead, name them in --input-columns)"
            )
        return prep, notes

    def plan_text(
        self, train: Dataset, column: str, label: str | None, task: str, config: RunConfig, *,
        eos_fallback: int | None = None, owner: str | None = None, why: str | None = None,
    ) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """The preprocessing of a text run, planned on the train split: its tokenizer (given, or
        a byte-level BPE trained on ``train``) and its lengths (:meth:`plan_lengths`).
        ``eos_fallback``: the end-of-sequence id when the tokenizer has none (a checkpoint's);
        ``owner``: where the tokenizer came from, for messages; ``why``: why the column is text,
        as the column choice said (else read again on ``train``)."""
        from jaxfeed.text import tokenize  # import cost: JAX via jaxfeed.text

        self.check_model(config)
        notes = [self.column_line(train, column, config, why)]
        tokenizer, source, line = _tokenizer(train, column, config)
        notes.append(line)
        pad, eos = special_id(tokenizer, PAD_NAMES), special_id(tokenizer, EOS_NAMES)
        try:
            tokens = tokenize(
                train.select_columns([column]), tokenizer, column, remove_columns=True
            )
        except ValueError as err:
            raise ConfigError(f"--data {config.data}: {err}") from None
        text: dict[str, Any] = {
            "column": column,
            "tokenizer": TOKENIZER_FILE,
            "source": source,
            "sha256": hashlib.sha256(tokenizer_bytes(source, tokenizer)).hexdigest(),
            "vocab_size": int(tokenizer.get_vocab_size()),
            "pad_id": 0 if pad is None else pad,
            "eos_id": eos if eos is not None else eos_fallback,
        }
        shape = self.plan_lengths(text, train, token_lengths(tokens), config, notes, owner)
        prep = Preprocessing(self.name, [column], label or "", shape, task, scale=False, text=text)
        prep.tokenizer = tokenizer
        if task == "regression":  # the model learns the standardised target, as for tables
            prep.target_mean, prep.target_std = _target_scale(train, label)
        return prep, notes

    def check_model(self, config: RunConfig) -> None:
        """A classifier's ``--model`` is not the language model."""
        spec = config.model_spec
        if spec is not None and spec.text == "transformer_lm":
            raise ConfigError(
                "--model transformer_lm is a language model: train it with --task lm (a text "
                "column with a label takes --model transformer)"
            )

    def column_line(self, train: Dataset, column: str, config: RunConfig,
                    why: str | None = None) -> str:  # fmt: skip
        """The plan's first line: the text column, and why (``why``, as the column choice said
        it)."""
        profile = string_profile(train, column)
        if config.text_column is not None:
            return f"text: column {column!r} (--text-column), median {profile.median:g} words"
        return f"text: column {column!r} is {why or profile.why()} (--text-column to choose)"

    def plan_lengths(self, text: dict[str, Any], train: Dataset, lengths: np.ndarray,
                     config: RunConfig, notes: list[str], owner: str | None) -> list[int]:  # fmt: skip
        """A classifier's padding: up to :data:`BUCKETS` lengths (``text["lengths"]``), texts
        cut at ``--seq-len`` (default: the length that keeps :data:`KEPT_WHOLE` of the train
        texts whole, a multiple of 8, at most :data:`MAX_TEXT_TOKENS`: a few long texts would
        otherwise set the longest bucket, whose attention costs the square of its length);
        returns the input shape."""
        cap = config.seq_len or default_cap(lengths)
        clipped = np.minimum(lengths, cap)
        rows = len(lengths)  # the batch the budget will choose: a tenth of the rows, 8 to 64
        batch = config.batch_size or min(64, max(8, rows // 10), self.max_batch_of(cap))
        count = buckets_for(rows, batch)
        buckets = [int(v) for v in choose_lengths(clipped, count=count, multiple_of=8)]
        buckets[-1] = max(buckets[-1], cap) if config.seq_len else buckets[-1]
        text.update(max_length=cap, lengths=buckets)
        longer = int((lengths > cap).sum())
        notes.append(
            (
                f"padding: to {len(buckets)} lengths {tuple(buckets)} tokens, batches of similar "
                "lengths (bucket_by_length)"
                if len(buckets) > 1
                else f"padding: to {buckets[0]} tokens, one length"
            )
            + f"; texts of {int(lengths.min())}-{int(lengths.max())} "
            f"tokens (median {np.median(lengths):g})"
            + (
                f"; {longer:,} longer than {cap} tokens are cut (--seq-len to choose)"
                if longer
                else f"; longer texts in eval and predict are cut to {cap} (--seq-len)"
            )
        )
        return [buckets[-1]]

    def plan_from_checkpoint(self, pretrained: Any, run_data: Any,
                        config: RunConfig) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """A Hub checkpoint's ``tokenizer.json`` (as ``--tokenizer``), its pad id, texts cut to
        the length the model takes (``pretrained``: what the model source handed in)."""
        columns = run_data.columns
        train, column = run_data.splits.train, columns.inputs[0]
        tokenizer = checkpoint_tokenizer(pretrained, config, f"column {column!r}")
        limit = (tokenizer.truncation or {}).get("max_length")
        if config.seq_len is not None and limit and config.seq_len > limit:
            raise ConfigError(
                f"--seq-len {config.seq_len}: the model takes at most {limit} tokens "
                f"({pretrained.spec}'s tokenizer_config.json / max_position_embeddings)"
            )
        options = dataclasses.replace(config, tokenizer=str(pretrained.tokenizer_file))
        prep, notes = self.plan_text(train, column, columns.label, run_data.task, options)
        if limit and int(prep.text["max_length"]) > limit:
            options = dataclasses.replace(options, seq_len=int(limit))
            prep, notes = self.plan_text(train, column, columns.label, run_data.task, options)
        if tokenizer.padding:
            prep.text["pad_id"] = int(tokenizer.padding["pad_id"])
        if (tokenizer.truncation or {}).get("direction") == "left":  # tokenizer_config.json's
            prep.text["truncation_side"] = "left"  # (tokenizer.json itself does not carry it)
        prep.text["pretrained"] = pretrained.spec
        return prep, checkpoint_notes(notes, tokenizer)

    def reopen(self, prep: Preprocessing, run_data: Any, out: Path) -> None:
        attach_tokenizer(prep, out)

    def baseline(self, prep: Preprocessing) -> Baseline | None:
        """The built-in ``ngram``: a bag of the run's token 1- and 2-grams, hashed.

        >>> TextKind().baseline(Preprocessing("text", ["t"], "y", [24], text={})).model
        'ngram'
        """
        shown = f"a bag of token 1- to {NGRAM_N}-grams (the run's tokenizer), hashed"
        return Baseline("ngram", {"n": NGRAM_N, "buckets": NGRAM_BUCKETS}, shown)

    def max_batch(self, prep: Preprocessing) -> tuple[int, str] | None:
        """A classifier's batch size by default: at most :data:`BATCH_TOKENS` tokens of its
        longest row (a batch's attention costs its rows times the square of their length)."""
        length = int(prep.input_shape[0])
        return self.max_batch_of(length), f"at most {BATCH_TOKENS:,} tokens of {length}"

    @staticmethod
    def max_batch_of(length: int) -> int:
        """The power of two rows of ``length`` tokens that fit :data:`BATCH_TOKENS`, at least 8.

        >>> TextKind.max_batch_of(248), TextKind.max_batch_of(56), TextKind.max_batch_of(4000)
        (8, 32, 8)
        """
        rows = max(BATCH_TOKENS // max(length, 1), 1)
        return max(8, 1 << (rows.bit_length() - 1))

    def next_step(self, quoted_out: str) -> str:
        """The summary's last line: predict takes texts, .txt files or tables.

        >>> TextKind().next_step("runs/a")
        'predict:    jaxfeed predict runs/a "TEXT"|FILE.txt|TABLE...'
        """
        return f'predict:    jaxfeed predict {quoted_out} "TEXT"|FILE.txt|TABLE...'

    def describe(self, prep: Preprocessing, run_data: Any) -> str:
        shown = f"inputs: token ids (up to {prep.input_shape[0]})"
        return shown if run_data is None else f"{shown}, {target_line(run_data)}"

    # ------------------------------------------------------------------ loading
    def prepare(self, prep: Preprocessing, ds: Dataset) -> Dataset:
        """``ds`` tokenized as the run reads it: ``input_ids`` and ``attention_mask`` and the
        label, the text column dropped, cut to the run's longest length."""
        return tokenized(prep, ds, [prep.label_column], int(prep.text["max_length"]), False)

    def loader_options(self, prep: Preprocessing, train: bool) -> dict[str, Any]:
        """The padding to the run's bucket lengths; the train loader batches similar lengths."""
        padding = _padding(prep, [int(v) for v in prep.text["lengths"]])
        return {"padding": padding, "bucket_by_length": True} if train else {"padding": padding}

    def epoch_flops(self, prep: Preprocessing, config: RunConfig, train: Dataset,
                    held: Dataset | None) -> float | None:  # fmt: skip
        """One epoch of the built-in ``transformer`` classifier (None for another model): each
        train row padded to its bucket length and computed three times (a forward pass and a
        backward pass of twice its cost), each held-out row once, padded as
        :meth:`held_options` pads it (a multiply-add counts 2)."""
        spec = config.model_spec
        if (
            self.task == "lm"
            or spec is None
            or (spec.source, spec.name) != ("builtin", "transformer")
        ):
            return None
        shape = transformer_shape(spec.init_args)
        lengths = np.asarray(prep.text["lengths"], np.int64)
        total = 3 * forward_flops(padded_lengths(train, lengths), *shape)
        if held is not None and held.num_rows:
            batches = -(-held.num_rows // max(int(config.batch_size or 1), 1))
            kept = np.asarray(self.held_options(prep, batches)["padding"].lengths, np.int64)
            total += forward_flops(padded_lengths(held, kept), *shape)
        return float(total)

    def held_options(self, prep: Preprocessing, batches: int) -> dict[str, Any]:
        """A held-out split padded to the longest of the run's lengths, and to shorter ones only
        as its ``batches`` pay for them (:func:`buckets_for`): each length compiles the
        evaluation step once more, which the few batches of a small validation split do not
        pay back.

        >>> prep = Preprocessing("text", ["t"], "y", [256], text={"lengths": [96, 256], "pad_id": 0})
        >>> TextKind().held_options(prep, 9)["padding"].lengths, TextKind().held_options(prep, 64)["padding"].lengths
        ((256,), (96, 256))
        """
        lengths = [int(v) for v in prep.text["lengths"]]
        count = max(1, min(len(lengths), batches // BATCHES_PER_BUCKET))
        return {"padding": _padding(prep, lengths[-count:])}

    def write_files(self, prep: Preprocessing, out: Path) -> None:
        write_tokenizer(prep, out)

    # ------------------------------------------------------------------ model
    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return numeric_options(config, prep, class_weights, scale=None)

    def model_inputs(self, prep: Preprocessing, model: Any) -> str | dict[str, str]:
        """``{argument: column}`` for the token columns the model's ``__call__`` takes by name
        (a model whose first argument has another name gets ``input_ids`` there)."""
        params = [p for p in _parameters(type(model).__call__) if p != "self"]
        wanted = {c: c for c in self.token_columns if c in params}
        if "input_ids" not in wanted:
            if not params:
                raise ConfigError(f"the model {type(model).__name__} takes no input")
            wanted = {params[0]: "input_ids", **wanted}
        return wanted

    def export(self, trainer: Any, folder: Path, prep: Preprocessing, labels: list[str],
               extra: dict[str, Any]) -> None:  # fmt: skip
        """Strings in: the declared spec and ``tokenizer.json`` travel in ``model/``; the token
        ids the model takes are recorded in ``extra["text"]``."""
        from jaxfeed.serve.export import export  # import cost: jax.export, when a run exports

        inputs = dict(trainer.inputs)
        extra = {**extra, "text": {**prep.text, "inputs": inputs}}
        spec = dataclasses.replace(prep.serving(labels), text=prep.serving_text(inputs))
        export(trainer, folder, export_example(prep, trainer.inputs), extra=extra,
               preprocessing=spec, tokenizer=prep.tokenizer)  # fmt: skip

    # ------------------------------------------------------------------ eval and predict
    reads = "texts"  # texts, .txt files or tables with the text column
    retrain = "train again"

    def servable(self, folder: Path) -> bool:
        return (folder / "config.json").is_file()

    def open_served(self, prep: Preprocessing, run: Path) -> None:
        attach_tokenizer(prep, run)

    def exported_logits(self, served: Any, prep: Preprocessing,
                        labels: list[str]) -> tuple[Any, Any]:  # fmt: skip
        """Texts -> token ids (the run's tokenizer, cut to its longest length) -> ``model/``."""
        inputs = served.config.get("text", {}).get("inputs") or {"input_ids": "input_ids"}
        width = max(len(labels), 1)

        def exported(raw: Any) -> np.ndarray:
            texts = as_texts(raw)
            if not texts:
                return np.zeros((0, width), np.float32)
            batch = token_batch(prep, texts)
            return np.asarray(served.call(**{a: batch[c] for a, c in inputs.items()}))

        return prep.serving(labels), exported

    def trained_logits(self, trainer: Any, prep: Preprocessing) -> Any:
        import jax  # the trainer has started JAX already

        def trained(raw: Any) -> np.ndarray:
            texts = as_texts(raw)
            batch = token_batch(prep, texts)
            batch[TARGETS] = np.zeros(len(texts), np.int32)
            return np.asarray(trainer.predict(jax.device_put(batch)))

        return trained

    def eval_rows(self, prep: Preprocessing, ds: Dataset, split: str) -> tuple[Dataset, str | None]:
        """Raw texts (the served model tokenizes them), rows of empty text left out."""
        column = prep.text["column"]
        return check_text_column(
            prep_columns(ds, [column, prep.label_column]), column, f"split {split!r}"
        )


# ---------------------------------------------------------------------------------- helpers
def _padding(prep: Preprocessing, lengths: list[int]) -> Padding:
    """Token ids and mask padded (and cut) to ``lengths``, ids with the run's pad id."""
    return Padding(
        lengths=tuple(lengths),
        truncate=True,
        pad_values={"input_ids": int(prep.text["pad_id"])},
        columns=["input_ids", "attention_mask"],
    )


def buckets_for(rows: int, batch_size: int) -> int:
    """How many pad lengths a classifier's batches get: :data:`BUCKETS`, or fewer for a small
    data set, one per :data:`BATCHES_PER_BUCKET` batches of an epoch: each length compiles the
    train step once more (seconds, and about 50 MB the run keeps), which a few dozen batches an
    epoch do not pay back.

    >>> buckets_for(614, 8), buckets_for(100_000, 64), buckets_for(160, 16), buckets_for(3, 1)
    (2, 4, 1, 1)
    """
    return max(1, min(BUCKETS, math.ceil(rows / batch_size) // BATCHES_PER_BUCKET))


def transformer_shape(init_args: dict[str, Any]) -> tuple[int, int, int]:
    """``(dim, depth, mlp_dim)`` of the built-in ``transformer`` with ``init_args`` (its own
    defaults for the others).

    >>> transformer_shape({}), transformer_shape({"dim": 64, "depth": 1})
    ((128, 2, 512), (64, 1, 256))
    """
    params = inspect.signature(BUILTINS["transformer"].model_class().__init__).parameters
    value = {
        name: init_args.get(name, params[name].default) for name in ("dim", "depth", "mlp_dim")
    }
    dim = int(value["dim"])
    mlp = 4 * dim if value["mlp_dim"] is None else int(value["mlp_dim"])
    return dim, int(value["depth"]), mlp


def forward_flops(padded: np.ndarray, dim: int, depth: int, mlp: int) -> float:
    """The forward pass of the built-in transformer on rows padded to ``padded`` tokens: per
    token and block the four attention projections and the MLP (``8 dim^2 + 4 dim mlp``) and
    attention over the row (``4 length dim``).

    >>> forward_flops(np.array([256] * 16), 128, 2, 512) / 1e9   # a batch of 16 x 256 tokens
    4.294967296
    """
    t = padded.astype(np.float64)
    return float((t * depth * (8 * dim * dim + 4 * dim * mlp + 4 * t * dim)).sum())


def padded_lengths(ds: Dataset, lengths: np.ndarray) -> np.ndarray:
    """Each row's tokens padded to the shortest of ``lengths`` that holds it (cut to the last)."""
    tokens = np.minimum(token_lengths(ds), int(lengths[-1]))
    return lengths[np.searchsorted(lengths, tokens)]


def default_cap(lengths: np.ndarray) -> int:
    """A classifier's longest row by default: the length that keeps :data:`KEPT_WHOLE` of the
    texts whole, rounded up to a multiple of 8, at most :data:`MAX_TEXT_TOKENS` (and never past
    the longest text).

    >>> default_cap(np.array([10] * 199 + [600])), default_cap(np.array([5, 7])), default_cap(np.array([900] * 9))
    (16, 7, 512)
    """
    longest = int(lengths.max())
    kept = int(math.ceil(np.quantile(lengths, KEPT_WHOLE, method="higher") / 8) * 8)
    return min(longest, kept, MAX_TEXT_TOKENS)


def _tokenizer(train: Dataset, column: str, config: RunConfig) -> tuple[Any, str, str]:
    """``(tokenizer, source, line)``: ``--tokenizer``, or a byte-level BPE trained on ``train``."""
    from jaxfeed.text import train_tokenizer  # import cost: JAX via jaxfeed.text

    if config.tokenizer is not None:
        tokenizer = load_tokenizer_option(config.tokenizer)
        return (
            tokenizer,
            config.tokenizer,
            (
                f"tokenizer: {config.tokenizer} (--tokenizer; {tokenizer.get_vocab_size():,} tokens), "
                f"copied into the run folder as {TOKENIZER_FILE}"
            ),
        )
    try:
        tokenizer = train_tokenizer(train, column, vocab_size=config.vocab_size, kind="bpe")
    except ValueError as err:
        raise ConfigError(f"--data {config.data}: {err}") from None
    return (
        tokenizer,
        "trained",
        (
            f"tokenizer: byte-level BPE trained on the train split ({tokenizer.get_vocab_size():,} "
            f"tokens, --vocab-size {config.vocab_size}), saved as {TOKENIZER_FILE} in the run "
            "folder (--tokenizer to give one)"
        ),
    )


def _target_scale(train: Dataset, label: str) -> tuple[float, float]:
    """The mean and deviation of a regression target (a value that is not finite is refused)."""
    y = train.select_columns([label]).flatten_indices().data.column(label)
    y = np.asarray(y.to_numpy(zero_copy_only=False), np.float64)
    if not np.all(np.isfinite(y)):
        row = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ConfigError(f"the label column {label!r} is not finite at row {row}")
    return float(y.mean()), float(y.std() or 1.0)


def checkpoint_tokenizer(pretrained: Any, config: RunConfig, what: str) -> Any:
    """A Hub checkpoint's tokenizer (``pretrained.processor``, read from its ``tokenizer.json``
    and checked against its vocabulary by :func:`~jaxfeed.models.hub.preprocessor`); refused when
    it has none (``what``: the text the run reads) or when ``--tokenizer`` gives another."""
    if config.tokenizer is not None:
        raise ConfigError(
            f"--tokenizer: --model {pretrained.spec} brings its own tokenizer.json; drop "
            "--tokenizer"
        )
    tokenizer = pretrained.processor
    if not hasattr(tokenizer, "encode_batch"):
        raise ConfigError(
            f"--model {pretrained.spec} is a {pretrained.model_type} model with no tokenizer.json "
            f"(not a text model); the data is text ({what})"
        )
    return tokenizer  # (one with more tokens than vocab_size: refused by preprocessor)


def checkpoint_notes(notes: list[str], tokenizer: Any) -> list[str]:
    """The plan's lines, the tokenizer's saying it is the checkpoint's.

    >>> from types import SimpleNamespace
    >>> checkpoint_notes(["text: column 't'", "tokenizer: trained"],
    ...                  SimpleNamespace(get_vocab_size=lambda: 30522))[1]
    "tokenizer: the checkpoint's tokenizer.json (30,522 tokens), copied into the run folder as tokenizer.json"
    """
    return [
        f"tokenizer: the checkpoint's tokenizer.json ({tokenizer.get_vocab_size():,} tokens), "
        f"copied into the run folder as {TOKENIZER_FILE}"
        if n.startswith("tokenizer:")
        else n
        for n in notes
    ]


def tokenized(prep: Preprocessing, ds: Dataset, keep: list[str], max_length: int | None,
              joined: bool) -> Dataset:  # fmt: skip
    """``ds``'s text column (and the ``keep`` columns) tokenized with the run's tokenizer, cut at
    ``max_length``; ``joined``: without special tokens (the texts are put end to end); an empty
    text is refused naming the row."""
    from jaxfeed.text import tokenize  # import cost: JAX via jaxfeed.text

    column = prep.text["column"]
    if column not in ds.features:
        raise ConfigError(
            f"the data has no column {column!r} (the run's text column); its columns are "
            f"{list(ds.features)[:12]}"
        )
    keep = [column, *keep]
    missing = [c for c in keep if c not in ds.features]
    if missing:
        raise ConfigError(
            f"the data has no column {missing[0]!r} (the run reads {keep}); its columns are "
            f"{list(ds.features)[:12]}"
        )
    if prep.tokenizer is None:
        raise ConfigError("the run's tokenizer is not loaded (its tokenizer.json)")
    try:
        return tokenize(
            ds.select_columns(keep), prep.tokenizer, column, max_length, remove_columns=True,
            add_special_tokens=not joined, truncation_side=prep.text.get("truncation_side"),
        )  # fmt: skip
    except ValueError as err:
        raise ConfigError(str(err)) from None


def prep_columns(ds: Dataset, columns: list[str]) -> Dataset:
    """``ds`` with only ``columns`` (a missing one is refused naming the data's columns).

    >>> prep_columns(Dataset.from_dict({"t": ["a"], "y": [0], "z": [1]}), ["t", "y"]).column_names
    ['t', 'y']
    """
    return select_columns(ds, columns, f"the run reads {columns}")


def _parameters(function: Any) -> dict[str, Any]:
    try:
        return dict(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return {}


def export_example(prep: Preprocessing, inputs: dict[str, str]) -> dict[str, np.ndarray]:
    """One batch of the exported text model's inputs, ``{argument: array}`` as ``inputs``
    (the Trainer's) names them: token ids padded to the run's longest length (the batch
    dimension is symbolic)."""
    length = int(prep.input_shape[0])
    ones = np.ones((1, length), np.int32)
    columns = {
        "input_ids": ones,
        "attention_mask": ones,
        "segment_ids": ones,
        "positions": np.arange(length, dtype=np.int32)[None],
    }
    return {argument: columns[column] for argument, column in inputs.items()}


__all__ = ["BUCKETS", "MAX_TEXT_TOKENS", "TextKind", "export_example"]
