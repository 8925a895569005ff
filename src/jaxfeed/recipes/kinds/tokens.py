"""Token ids made elsewhere (a Spark or Ray job's pre-tokenized ``input_ids``: a column of lists
of integers), classified or regressed as text is (:mod:`jaxfeed.recipes.kinds.text`) but read as
they are: no tokenizer, the vocabulary one past the largest id of the data (a Hub checkpoint's
own, which the ids must fit), rows padded to a few bucket lengths; ``transformer`` by default;
exported with the ids in (a ``tokens`` spec), predict reads tables holding the column.

>>> ds = Dataset.from_dict({"input_ids": [[5, 6, 7], [8]], "y": [0, 1]})
>>> prep = Preprocessing("tokens", ["input_ids"], "y", [8], text={"column": "input_ids", "max_length": 2})
>>> out = TokensKind().prepare(prep, ds)
>>> out["input_ids"][:], out["attention_mask"][:], out["y"][:]
([[5, 6], [8]], [[1, 1], [1]], [0, 1])
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Features, List, Value
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.base import target_scale
from jaxfeed.recipes.kinds.text import TextKind, checkpoint_tokenizer
from jaxfeed.recipes.spec import TARGETS, Preprocessing
from jaxfeed.recipes.text.text_columns import check_labels, rows_shown
from jaxfeed.serve.spec import SpecError, id_batch


class TokensKind(TextKind):
    """Token ids given as they are (see the module docstring).

    >>> TokensKind().next_step("runs/a")
    "predict:    jaxfeed predict runs/a TABLE... (tables holding the run's column of token ids)"
    """

    reads = "token ids"  # tables (or folders of them) holding the run's column

    def __init__(self) -> None:
        super().__init__("tokens")

    def check(self, config: RunConfig) -> None:
        """No ``--tokenizer`` nor ``--task lm``: the ids are the inputs, with a label."""
        super().check(config)
        for flag, given in (("--tokenizer", config.tokenizer is not None),
                            ("--task lm", config.task == "lm")):  # fmt: skip
            if given:
                raise ConfigError(
                    f"{flag}: the input column holds token ids (lists of integers), read as they "
                    "are; a text column of strings takes it"
                )

    def clean(self, data: dict[str, Any], columns: Any) -> tuple[dict[str, Any], list[str]]:
        """Rows with no token ids left out (most of them: refused), a negative id or a missing
        label refused, naming the split and row."""
        notes: list[str] = []
        column = columns.inputs[0]
        for name, part in data.items():
            if column in part.features:
                data[name], note = check_ids(part, column, f"split {name!r}")
                notes += [note] if note else []
            if columns.label in part.features:
                check_labels(part, columns.label, f"split {name!r}")
        return data, notes

    def plan(self, run_data: Any, config: RunConfig,
             pretrained: Any = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """The lengths of the train split's rows (:meth:`plan_lengths`), the vocabulary one past
        the largest id of every split (a Hub checkpoint's: the ids must fit it)."""
        columns, splits = run_data.columns, run_data.splits
        train, column = splits.train, columns.inputs[0]
        parts = [p for p in (train, splits.eval, splits.test) if p is not None]
        top = max(int(pc.max(pc.list_flatten(_ids(p, column))).as_py() or 0) for p in parts)
        vocab, pad, limit, owner = top + 1, 0, None, "the data's ids"
        if pretrained is not None:
            vocab, pad, limit = _checkpoint_ids(pretrained, config, top)
            owner = f"{pretrained.spec}'s vocabulary"
        line = (
            f"tokens: column {column!r} holds token ids (lists of integers), read as they are "
            f"(no tokenizer): the largest id {top}, a vocabulary of {vocab:,} ({owner})"
        )
        text = {"column": column, "tokenizer": None, "source": "token ids", "vocab_size": vocab,
                "pad_id": pad, "eos_id": None}  # fmt: skip
        lengths = pc.list_value_length(_ids(train, column)).to_numpy(zero_copy_only=False)
        notes = [line]
        shape = self.plan_lengths(text, train, lengths.astype(np.int64), config, notes, None)
        if limit and int(text["max_length"]) > limit:  # cut to the length the checkpoint takes
            config, notes = dataclasses.replace(config, seq_len=int(limit)), [line]
            shape = self.plan_lengths(text, train, lengths.astype(np.int64), config, notes, None)
        prep = Preprocessing(self.name, [column], columns.label, shape, run_data.task,
                             scale=False, text=text)  # fmt: skip
        if pretrained is not None:
            prep.text["pretrained"] = pretrained.spec
        if run_data.task == "regression":
            prep.target_mean, prep.target_std = target_scale(train, columns.label)
        if columns.excluded:
            notes.append(f"excluded: {', '.join(c for c, _ in columns.excluded)} (not the ids)")
        return prep, notes

    def baseline(self, prep: Preprocessing) -> Any:
        """None: the built-in ``ngram`` reads a text column through its tokenizer, not ids given
        as they are, so token ids get no linear baseline nor candidate.

        >>> TokensKind().baseline(Preprocessing("tokens", ["i"], "y", [8], text={})) is None
        True
        """
        return None

    def resolved_options(self, config: RunConfig, prep: Preprocessing, run_data: Any) -> RunConfig:
        """As any kind's, with no ``--text-column``: the ids are the input column."""
        resolved = super().resolved_options(config, prep, run_data)
        return dataclasses.replace(resolved, text_column=config.text_column)

    def reopen(self, prep: Preprocessing, run_data: Any, out: Any) -> None:
        """Nothing to attach: no tokenizer."""

    def write_files(self, prep: Preprocessing, out: Any) -> None:
        """No ``tokenizer.json``: the ids are the inputs."""

    def prepare(self, prep: Preprocessing, ds: Dataset) -> Dataset:
        """``ds`` as the loader reads it: ``input_ids`` (int32, cut to the run's longest length)
        and ``attention_mask`` (ones) of the run's column, and the label."""
        column, label = prep.text["column"], prep.label_column
        ids = pc.list_slice(_ids(ds, column), 0, int(prep.text["max_length"]))
        ids = pc.cast(ids, pa.list_(pa.int32()))
        ones = pa.array(np.ones(len(ids.values), np.int8))
        mask = pa.ListArray.from_arrays(ids.offsets, ones)
        columns = {"input_ids": ids, "attention_mask": mask}
        features = {"input_ids": List(Value("int32")), "attention_mask": List(Value("int8"))}
        if label and label in ds.features:
            columns[label] = ds.select_columns([label]).flatten_indices().data.column(label)
            features[label] = ds.features[label]
        return Dataset.from_arrow(pa.table(columns), Features(features))

    # ------------------------------------------------------------------ eval and predict
    def open_served(self, prep: Preprocessing, run: Any) -> None:
        """Nothing to attach: no tokenizer."""

    def exported_logits(self, served: Any, prep: Preprocessing,
                        labels: list[str]) -> tuple[Any, Any]:  # fmt: skip
        """Token ids -> ``model/`` (its spec pads them as training did)."""

        def exported(raw: Any) -> np.ndarray:
            try:
                return np.asarray(served.logits(raw))
            except SpecError as err:
                raise ConfigError(str(err)) from None

        return served.spec or prep.serving(labels), exported

    def trained_logits(self, trainer: Any, prep: Preprocessing) -> Any:
        import jax  # the trainer has started JAX already

        spec, length, pad = prep.serving([]), int(prep.text["max_length"]), int(prep.text["pad_id"])

        def trained(raw: Any) -> np.ndarray:
            try:
                batch = id_batch(spec.token_ids(raw), length, pad)
            except SpecError as err:
                raise ConfigError(str(err)) from None
            batch = {c: batch[c] for c in self.token_columns}
            batch[TARGETS] = np.zeros(len(batch["input_ids"]), np.int32)
            return np.asarray(trainer.predict(jax.device_put(batch)))

        return trained

    def eval_rows(self, prep: Preprocessing, ds: Dataset, split: str) -> tuple[Dataset, str | None]:
        """The ids as they are (the served model pads them), rows without ids left out."""
        column = prep.text["column"]
        return check_ids(_select(ds, [column, prep.label_column]), column, f"split {split!r}")

    def next_step(self, quoted_out: str) -> str:
        return (
            f"predict:    jaxfeed predict {quoted_out} TABLE... (tables holding the run's column "
            "of token ids)"
        )


def _ids(ds: Dataset, column: str) -> pa.Array:
    """The lists of ``column`` of the rows ``ds`` selects, as one array."""
    return ds.select_columns([column]).flatten_indices().data.column(column).combine_chunks()


def _select(ds: Dataset, columns: list[str]) -> Dataset:
    missing = [c for c in columns if c and c not in ds.features]
    if missing:
        raise ConfigError(
            f"the data has no column {missing[0]!r} (the run reads {columns}); its columns are "
            f"{list(ds.features)[:12]}"
        )
    return ds.select_columns([c for c in columns if c])


def check_ids(ds: Dataset, column: str, where: str) -> tuple[Dataset, str | None]:
    """``ds`` without its rows of no token ids (said in the note; most of them: refused); a
    negative or missing id refused naming the row.

    >>> ds = Dataset.from_dict({"ids": [[1, 2], [], None, [3]]})
    >>> kept, note = check_ids(ds, "ids", "split 'train'")
    >>> kept["ids"][:], note
    ([[1, 2], [3]], "tokens: left out 2 rows of split 'train' whose 'ids' holds no token id (rows 1, 2)")
    """
    ids = _ids(ds, column)
    flat = pc.list_flatten(ids)
    bad = np.asarray(pc.fill_null(pc.less(flat, 0), True))
    if bad.any():
        row = int(np.asarray(pc.list_parent_indices(ids))[np.flatnonzero(bad)[0]])
        value = flat[int(np.flatnonzero(bad)[0])].as_py()
        raise ConfigError(
            f"{where}, row {row}: column {column!r} holds the token id {value}; token ids are "
            "integers from 0"
        )
    empty = np.asarray(pc.fill_null(pc.equal(pc.list_value_length(ids), 0), True))
    count = int(empty.sum())
    if not count:
        return ds, None
    shown = rows_shown(np.flatnonzero(empty))
    if count > len(empty) // 2:
        raise ConfigError(
            f"{where}: the column {column!r} holds no token id in {count:,} of {len(empty):,} "
            f"rows ({shown}); is it the column of token ids? (--input-columns to choose)"
        )
    kept = ds.select(np.flatnonzero(~empty).tolist()).flatten_indices()
    return (
        kept,
        f"tokens: left out {count:,} rows of {where} whose {column!r} holds no token id ({shown})",
    )


def _checkpoint_ids(pretrained: Any, config: RunConfig, top: int) -> tuple[int, int, int | None]:
    """A Hub checkpoint's vocabulary, pad id and longest row for ids given as they are (the
    data's largest id must fit it; ``--seq-len`` past the longest row is refused)."""
    tokenizer = checkpoint_tokenizer(pretrained, config, "token ids")
    vocab = int(tokenizer.get_vocab_size())
    if top >= vocab:
        raise ConfigError(
            f"the token ids go up to {top}, past the {vocab:,} of --model {pretrained.spec}'s "
            "vocabulary: were they made by its tokenizer?"
        )
    limit = (tokenizer.truncation or {}).get("max_length")
    if config.seq_len is not None and limit and config.seq_len > limit:
        raise ConfigError(
            f"--seq-len {config.seq_len}: the model takes at most {limit} tokens "
            f"({pretrained.spec}'s tokenizer_config.json / max_position_embeddings)"
        )
    pad = tokenizer.padding["pad_id"] if tokenizer.padding else pretrained.pad_id
    return vocab, int(pad or 0), int(limit) if limit else None


__all__ = ["TokensKind", "check_ids"]
