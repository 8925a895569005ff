"""Language models (``--task lm``): the text itself is the target, its token rows packed into
windows of ``--seq-len`` (:mod:`jaxfeed.recipes.text.corpus`: a corpus's texts put end to end, or one
segment per text with ``--sample-by``); an epoch counts texts; perplexity is the figure;
``jaxfeed generate`` uses the run. A causal LM checkpoint brings its tokenizer and context."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from jaxfeed.data.dataset import Dataset
from jaxfeed.loading.packing import Packing
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.objectives import LM_LOSS, lm_metrics
from jaxfeed.recipes.kinds.text import (
    TextKind,
    checkpoint_notes,
    checkpoint_tokenizer,
    tokenized,
)
from jaxfeed.recipes.spec import TEXT_COLUMNS, Preprocessing
from jaxfeed.recipes.text.corpus import (
    CONCAT,
    concatenate,
    ends_with_line_breaks,
    no_separator,
    separator,
)

LM_SEQ_LEN = 128  # --seq-len of a language model by default
HUB_SEQ_LEN = 1024  # ... of a causal LM checkpoint, at most its context (as run_clm)


class LMKind(TextKind):
    """A causal language model of a text column (see the module docstring).

    >>> kind = LMKind()
    >>> kind.unit, kind.describe(Preprocessing("lm", ["t"], "", [8], "lm", text={}), None)
    ('texts', 'inputs: packed rows of 8 token ids, target: the next token')
    >>> kind.next_step("runs/a")
    'generate:   jaxfeed generate runs/a PROMPT'
    """

    unit = "texts"  # an LM's epochs count packed rows of its texts
    hub_task = "causal-lm"
    task = "lm"  # no label: the text is the target
    token_columns = TEXT_COLUMNS  # ids, mask, segments and positions of packed rows

    def __init__(self) -> None:
        super().__init__("lm")

    # ------------------------------------------------------------------ planning
    def baseline(self, prep: Preprocessing) -> Any:
        """None: a language model has no linear baseline (its perplexity is its figure)."""
        return None

    def max_batch(self, prep: Preprocessing) -> tuple[int, str] | None:
        """Packed windows: the budget's batch size as for any rows."""
        return None

    def check_model(self, config: RunConfig) -> None:
        """Any ``--model`` may be a language model."""

    def column_line(self, train: Dataset, column: str, config: RunConfig,
                    why: str | None = None) -> str:  # fmt: skip
        if config.text_column is not None:
            return super().column_line(train, column, config)
        return f"text: column {column!r}" + (
            f", one text per {config.sample_by} (--sample-by)"
            if config.sample_by
            else ", concatenated (--sample-by line|paragraph|document: one text per row)"
        )

    def plan_lengths(self, text: dict[str, Any], train: Dataset, lengths: np.ndarray,
                     config: RunConfig, notes: list[str], owner: str | None) -> list[int]:  # fmt: skip
        """Packed rows of ``--seq-len`` tokens (default :data:`LM_SEQ_LEN`): the texts put end
        to end (separated by the end-of-sequence token unless they end with line breaks; with
        neither the plan is refused before anything is written: ``owner`` names where the
        tokenizer came from), or one segment per text with ``--sample-by``."""
        seq_len = config.seq_len or LM_SEQ_LEN
        text.update(max_length=seq_len, lengths=[seq_len], sample_by=config.sample_by or CONCAT)
        column, eos = text["column"], text["eos_id"]
        if config.sample_by is not None:
            longer = int((lengths > seq_len).sum())
            notes.append(
                f"packing: rows of {seq_len} tokens (--seq-len; the rows an epoch counts), "
                f"{len(lengths):,} texts (one per "
                f"{config.sample_by}, --sample-by) of {int(lengths.sum()):,} tokens (median "
                f"{np.median(lengths):g}); each text is its own segment (attention never crosses "
                "one)" + (f"; {longer:,} texts longer than {seq_len} are split" if longer else "")
            )
            return [seq_len]
        text["separator"] = separator(train, column, eos)
        if eos is None and not ends_with_line_breaks(train, column):
            raise no_separator(config, len(lengths), owner)
        joined = int(lengths.sum()) - (len(lengths) if text["separator"] is None else 0)
        kept = (
            "line breaks kept"
            if text["separator"] is None
            else "each ended by the end-of-sequence token"
        )
        notes.append(
            f"packing: the {len(lengths):,} texts put end to end ({kept}) and cut into windows of "
            f"{seq_len} tokens (--seq-len), as run_clm: {-(-joined // seq_len):,} windows (the "
            f"packed rows an epoch counts) of {joined:,} tokens; attention crosses line ends "
            "(--sample-by line|paragraph|document: one segment per text instead)"
        )
        return [seq_len]

    def plan(self, run_data: Any, config: RunConfig,
             pretrained: Any = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        if pretrained is not None:
            return self.plan_from_checkpoint(pretrained, run_data, config)
        return super().plan(run_data, config)

    def plan_from_checkpoint(self, pretrained: Any, run_data: Any,
                        config: RunConfig) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """``--task lm`` on a causal LM checkpoint: its ``tokenizer.json`` (no tokenizer trained),
        texts packed into rows of ``--seq-len`` tokens (default: the context, at most
        :data:`HUB_SEQ_LEN`); texts put end to end are separated by the tokenizer's
        end-of-sequence token, else the one ``config.json`` sets (``pretrained``: what the model
        source handed in)."""
        spec = pretrained.spec
        tokenizer = checkpoint_tokenizer(pretrained, config, "a corpus")
        context = pretrained.context
        seq_len = config.seq_len or min(HUB_SEQ_LEN, context or HUB_SEQ_LEN)
        if context is not None and seq_len > context:
            raise ConfigError(
                f"--seq-len {seq_len}: {spec} ({pretrained.model_type}) takes at most "
                f"{context} positions (its config.json); give --seq-len {context} or less"
            )
        source = str(pretrained.tokenizer_file)
        options = dataclasses.replace(config, tokenizer=source, seq_len=seq_len)
        prep, notes = self.plan_text(
            run_data.splits.train, run_data.columns.inputs[0], None, "lm", options,
            eos_fallback=pretrained.eos_id, owner=f"--model {spec}",
        )  # fmt: skip
        eos = prep.text.get("eos_id")
        pad = (tokenizer.padding or {}).get("pad_id")
        if pad is None:
            pad = pretrained.pad_id
        if isinstance(pad, int):
            prep.text["pad_id"] = pad
        elif eos is not None:  # GPT-2 has no pad token: padded slots are masked anyway
            prep.text["pad_id"] = int(eos)
        notes = checkpoint_notes(notes, tokenizer)
        if config.seq_len is None:
            notes.append(
                f"--seq-len {seq_len}: the default for a causal LM (its context of {context} "
                f"positions, at most {HUB_SEQ_LEN})"
            )
        prep.text["pretrained"] = spec
        return prep, notes

    def describe(self, prep: Preprocessing, run_data: Any) -> str:
        return f"inputs: packed rows of {prep.input_shape[0]} token ids, target: the next token"

    # ------------------------------------------------------------------ loading
    def prepare(self, prep: Preprocessing, ds: Dataset) -> Dataset:
        """``ds`` tokenized whole (no label), the texts put end to end and cut into windows of
        ``--seq-len`` tokens unless each is its own segment (``--sample-by``)."""
        joined = prep.text.get("sample_by") == CONCAT
        tokens = tokenized(prep, ds, [], None, joined)
        if joined:
            return concatenate(tokens, int(prep.text["max_length"]), prep.text.get("separator"))
        return tokens

    def loader_options(self, prep: Preprocessing, train: bool) -> dict[str, Any]:
        """Rows packed to the run's length (evaluation packs alike)."""
        packing = Packing(
            length=int(prep.text["max_length"]),
            long_rows="split",
            pad_values={"input_ids": int(prep.text["pad_id"])},
            columns=["input_ids", "attention_mask"],
        )
        return {"packing": packing}

    def held_options(self, prep: Preprocessing, batches: int) -> dict[str, Any]:
        """Held-out rows packed as the train rows are (one length already)."""
        return self.loader_options(prep, False)

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return {"preprocess": None, "targets": None, "loss": LM_LOSS,
                "metrics": lm_metrics(config)}  # fmt: skip

    def open_served(self, prep: Preprocessing, run: Path) -> None:
        super().open_served(prep, run)
        raise ConfigError(
            f"{run} is a language model: it predicts tokens, not labels; use jaxfeed generate "
            f"{run} PROMPT, or jaxfeed eval {run} for its perplexity"
        )

    def check_generates(self, run: Path, task: str) -> None:
        """A language model generates."""

    def next_step(self, quoted_out: str) -> str:
        return f"generate:   jaxfeed generate {quoted_out} PROMPT"
