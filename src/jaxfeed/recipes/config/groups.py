"""The options of ``jaxfeed train`` as typed sections: data, model, optimisation and run, and
this process; :class:`~jaxfeed.recipes.config.RunConfig` composes them into one flat config.

Each section is a dataclass of :func:`option` fields; a section is also the option's help group
(``jaxfeed train --help``). Also here: :class:`ConfigError`, the run folder's format and the task
and component names. This module imports neither JAX nor pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from jaxfeed.models.lora_settings import QUANTIZE

RUN_FORMAT = "jaxfeed-run"
RUN_VERSION = 2
TASKS = ("classification", "regression", "lm")
COMPONENTS = ("model", "optimizer", "schedule")  # fields that take {class_path, init_args}
# Upper bounds of numeric options, checked when the flags are read (before any data): a value
# past them asks for more memory or time than any run can have, or overflows a counter.
MAX_STEPS = 2**31 - 1  # steps are counted in int32 on the device
MAX_SEED = 2**32 - 1  # numpy's and JAX's seeds
MAX_BATCH = 2**20
MAX_WORKERS = 256
MAX_VOCAB = 2**20
MAX_SEQ_LEN = 32768
MAX_SAMPLE_RATE = 192_000  # the highest rate audio is commonly recorded at
MAX_CLIP_SECONDS = 600.0
MAX_IMAGE_SIDE = 8192


class ConfigError(ValueError):
    """A configuration value, file or flag is wrong; the message names it and what was expected.

    >>> from jaxfeed.recipes import RunConfig
    >>> try:
    ...     RunConfig.from_dict({"epochs": "many"}, where="run.yaml")
    ... except ConfigError as e:
    ...     print(type(e).__name__, "names", "epochs" in str(e) and "run.yaml" in str(e))
    ConfigError names True
    """


ConfigError.__module__ = "jaxfeed.recipes.config"  # where it is imported from (and tracebacks say)


def option(
    default: Any,
    help: str,
    *,
    minimum: float | None = None,
    exclusive: bool = False,
    below: float | None = None,
    maximum: float | None = None,
    metavar: str | None = None,
    saved: bool = True,
    resumable: bool = False,
) -> Any:
    """A :class:`~jaxfeed.recipes.config.RunConfig` field with what the command line and the
    checks need.

    ``minimum`` (with ``exclusive``: strictly above), ``below`` (strictly) and ``maximum`` bound
    numbers (every number has an upper bound: a value past it would exhaust memory or time);
    ``saved=False`` keeps the field out of ``config.json`` (where this process runs, not what it
    trains); ``resumable=True`` fields may differ from the saved ones on ``--resume`` (how long to
    train, how often to report).
    """
    meta = {
        "help": help,
        "minimum": minimum,
        "exclusive": exclusive,
        "below": below,
        "maximum": maximum,
        "metavar": metavar,
        "saved": saved,
        "resumable": resumable,
    }
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DataOptions:
    """What to learn from: the data, its splits and columns, and how inputs are read."""

    data: str = option(
        "digits",
        "an image or audio folder, a CSV/Parquet/JSON Lines/Arrow file, a save_to_disk folder, a "
        "Hub-layout folder, a built-in name (digits, mnist, fashion_mnist, cifar10) or a cached "
        "Hub id (default: digits)",
        metavar="PATH",
    )
    data_dir: str | None = option(None, "folder of the files of mnist, fashion_mnist or cifar10")
    split_train: str = option(
        "train", "split to train on; slices work: train[:80%] (default: train)"
    )
    split_eval: str | None = option(
        None,
        "the validation split the best checkpoint is chosen on; split expressions work "
        "(default: the data's validation split, else --val-split of train); the data's test "
        "split is held out and read once, at the end",
    )
    val_split: float | None = option(
        None,
        "carve this fraction of the train split (stratified by class) as the validation split "
        "the model is selected on, when the data has no validation split (default: 0.1 then); "
        "0: no validation split, no selection, the last epoch is kept",
        minimum=0.0,
        below=1.0,
        metavar="FRACTION",
    )
    input_columns: list[str] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "input column(s), comma-separated (default: the first image/array column, or every "
        "numeric column but the label of a table)",
        metavar="A,B,C",
    )
    label_column: str | None = option(
        None,
        "the target column (default: the first ClassLabel column, or a column named label/target)",
        metavar="NAME",
    )
    categorical_columns: list[str] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "table columns to one-hot encode as categories (default: text and bool columns, and "
        "integer columns of at most 10 values)",
        metavar="A,B,C",
    )
    missing: Literal["refuse", "impute"] = option(
        "refuse",
        "missing table cells: refuse them naming the column, or impute them (numbers: the "
        "train mean; categories: the unknown slot) (default: refuse)",
    )
    task: Literal["classification", "regression", "lm"] | None = option(
        None,
        "default: inferred from the label column (strings, class labels or few integers: "
        "classification; floats: regression); lm: a causal language model of a text column or "
        "a .txt corpus (no label)",
    )
    text_column: str | None = option(
        None,
        "the column of free text to learn from (default: a string column of free text, found "
        "and announced; a .txt corpus: its lines)",
        metavar="NAME",
    )
    tokenizer: str | None = option(
        None,
        "a tokenizer.json (the Hub's tokenizers format) for text (default: a byte-level BPE "
        "trained on the train split into the run folder)",
        metavar="FILE",
    )
    vocab_size: int = option(
        8000,
        "the trained tokenizer's vocabulary size (at most; default: 8000)",
        minimum=261,
        maximum=MAX_VOCAB,
    )
    seq_len: int | None = option(
        None,
        "tokens: --task lm: the packed row length (default 128; a Hub causal LM: its context, "
        "at most 1024); a text column: the longest "
        "text kept, longer ones cut (default: the longest train text, at most 512)",
        minimum=2,
        metavar="N",
        maximum=MAX_SEQ_LEN,
    )
    sample_by: Literal["line", "paragraph", "document"] | None = option(
        None,
        "--task lm: one text per line, per paragraph (blank-line separated) or per document of a "
        ".txt corpus, each its own segment (default: the corpus concatenated, line breaks kept, "
        "and cut into --seq-len windows, as run_clm)",
    )
    image_size: str | None = option(
        None,
        "resize images to N or HxW (default: the most common size of the first 64 images)",
        metavar="N|HxW",
    )
    augment: list[str] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "image inputs: random augmentations of the training batches, comma-separated: flip "
        "(left-right, half of them), crop (a random crop of the image's size after padding each "
        "side by an eighth), or none (default: flip,crop for a folder of fewer than 2,000 "
        "training images and a built-in model, else none)",
        metavar="flip,crop|none",
    )
    image_mode: Literal["L", "RGB", "RGBA", "same"] | None = option(
        None,
        "decode images as L (grey), RGB or RGBA (the alpha channel kept as a 4th input); same: "
        "the files' own mode (RGBA when they have transparency), refusing a folder of mixed "
        "modes (default: the widest of L and RGB among the images, said when they are mixed; "
        "transparency composited onto --image-background)",
    )
    image_background: str | None = option(
        None,
        "images with transparency (an alpha channel or a transparent colour) are composited "
        "onto this colour when the mode has no alpha: a name (white, black, ...), #RRGGBB or "
        "R,G,B (default: white)",
        metavar="COLOUR",
    )
    sample_rate: int | None = option(
        None,
        "audio: resample every clip to this rate in Hz before its log-mel features (default: "
        "16000)",
        minimum=1,
        metavar="HZ",
        maximum=MAX_SAMPLE_RATE,
    )
    clip_seconds: float | None = option(
        None,
        "audio: crop (at random in training, the centre in evaluation) or pad every clip to this "
        "many seconds (default: the longest clip of the train split, at most 30)",
        minimum=0.0,
        exclusive=True,
        metavar="SECONDS",
        maximum=MAX_CLIP_SECONDS,
    )


@dataclass
class ModelOptions:
    """The model."""

    model: str | dict[str, Any] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "cnn, mlp, audio_cnn, transformer, transformer_lm, linear, ngram, hf:ORG/NAME or a "
        "checkpoint folder "
        "(a Hub model, fine-tuned: an encoder on labelled data, a causal LM with --task lm), "
        "FILE.py:ClassName or "
        "package.module.ClassName (your own flax.nnx.Module), or {class_path: ..., init_args: "
        "{...}} with constructor arguments (also --model.init_args.NAME VALUE) (default: cnn for "
        "images, mlp for tables, audio_cnn for audio, transformer for text, each compared on "
        "validation with a linear model, ngram for text, which is kept when it does as well)",
        metavar="NAME|SPEC",
    )
    api: Literal["nnx", "linen"] = option("nnx", "Flax API of the built-in CNN (default: nnx)")
    lora: int | None = option(
        None,
        "train low-rank adapters (PEFT's LoRA) of this rank on the frozen weights of a Hub "
        "checkpoint (--model hf:ORG/NAME or a folder); export writes a PEFT adapter folder "
        "(default: off, every weight trains)",
        minimum=1,
        maximum=65536,
        metavar="RANK",
    )
    lora_alpha: float | None = option(
        None,
        "LoRA's alpha: the adapters' update is scaled by alpha / rank (default: twice the rank)",
        minimum=0.0,
        exclusive=True,
        maximum=1e6,
        metavar="A",
    )
    lora_targets: list[str] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "the checkpoint's module names that get adapters, comma-separated (q_proj,v_proj for "
        "Llama-like models; query,value,dense for BERT and ViT; c_attn,c_proj for GPT-2) "
        "(default: the family's query and value projections)",
        metavar="A,B",
    )
    lora_dropout: float = option(
        0.0,
        "dropout on the adapters' input in training (default: 0)",
        minimum=0.0,
        below=1.0,
        metavar="P",
    )
    quantize: Literal[QUANTIZE] | None = option(  # type: ignore[valid-type]
        None,
        "with --lora: store the frozen weights of the transformer blocks as int8 with one scale "
        "per output channel (weight-only; the adapters stay float32) (default: off)",
        metavar="int8",
    )


DEFAULT_LR = 1e-3  # --lr of the built-in models and your own (the Hub source has its own)


@dataclass
class OptimOptions:
    """Optimisation, checkpoint selection, logging and the device mesh (saved, like data and
    model)."""

    epochs: int | None = option(
        None,
        "epochs in total (default: from the data: 10, or as many as make 200 optimizer steps, "
        "with early stopping on the validation split; augmented images: as many as show 8,000 "
        "images, run to the end; the summary says what was chosen)",
        minimum=1,
        maximum=1_000_000,
        resumable=True,
        metavar="N",
    )
    batch_size: int | None = option(
        None,
        "rows per batch (default: from the data: a power of two near a tenth of the train rows, "
        "8 to 64)",
        minimum=1,
        maximum=MAX_BATCH,
        metavar="N",
    )
    optimizer: str | dict[str, Any] = option(  # noqa: RUF009 (option() returns a field)
        "adamw",
        "any optax optimizer by name (adamw, adam, sgd, lion, adafactor, ...), or {class_path: "
        "NAME, init_args: {...}} with its arguments (also --optimizer.init_args.NAME VALUE); it "
        "gets --lr as learning_rate and --weight-decay when it takes one (default: adamw)",
        metavar="NAME|SPEC",
    )
    lr: float | Literal["auto"] | None = option(
        None,
        "peak learning rate, or auto: a short learning-rate range test before training picks it "
        "(the choice and the curve go to RUN/lr_finder.json) (default: 1e-3 for the built-in "
        "models and your own; 5e-5 fine-tuning a Hub model and 2e-4 for its LoRA adapters, with "
        "--epochs 3 and a warmup over 10% of the steps)",
        minimum=0.0,
        exclusive=True,
        metavar="LR|auto",
    )
    weight_decay: float = option(
        1e-4, "decoupled weight decay (adamw; sgd: L2) (default: 1e-4)", minimum=0.0
    )
    schedule: str | dict[str, Any] = option(  # noqa: RUF009 (option() returns a field)
        "constant",
        "learning-rate schedule: constant, cosine, linear, or any optax schedule by name "
        "(cosine_decay_schedule, exponential_decay, warmup_cosine_decay_schedule, ...) or "
        "{class_path: NAME, init_args: {...}} with its arguments (also --schedule.init_args.NAME "
        "VALUE); --lr, the run's length and --warmup-steps fill the ones left out "
        "(default: constant)",
        metavar="NAME|SPEC",
    )
    loss: Literal["cross_entropy", "mse", "mae", "huber"] | None = option(
        None, "training loss (default: cross_entropy for classes, mse for regression)"
    )
    metrics: list[str] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "metrics besides the loss, comma-separated: accuracy, topK_accuracy, f1, precision, "
        "recall, auc (classification), mse, mae, rmse, r2 (regression); f1, precision, recall, "
        "auc, rmse and r2 over the whole split (default: accuracy for classes; mse, mae, rmse, r2 "
        "for regression)",
        metavar="A,B,C",
    )
    grad_clip: float | None = option(
        None,
        "clip gradients to this global norm (optax.clip_by_global_norm) (default: off)",
        minimum=0.0,
        exclusive=True,
        metavar="NORM",
    )
    class_weights: str | list[float] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "weigh the loss per class: balanced (rows / (classes x class rows) of the train split), "
        "or one weight per class, comma-separated (default: equal)",
        metavar="balanced|W1,W2,...",
    )
    warmup_steps: int = option(
        0, "optimizer steps of linear warmup from 0 (default: 0)", minimum=0, maximum=MAX_STEPS
    )
    grad_accum: int = option(
        1,
        "accumulate gradients over K batches per optimizer step (optax.MultiSteps) (default: 1)",
        minimum=1,
        metavar="K",
        maximum=4096,
    )
    precision: Literal["float32", "bfloat16"] = option(
        "float32",
        "compute dtype of forward and backward passes; parameters stay float32 (default: float32)",
    )
    monitor: str = option(
        "eval_loss",
        "the validation metric that chooses the best checkpoint (and --patience watches): "
        "eval_loss, eval_accuracy, eval_f1, eval_auc, eval_r2, ... (default: eval_loss)",
        metavar="METRIC",
    )
    monitor_mode: Literal["min", "max"] | None = option(
        None, "min or max (default: min for losses and errors, max otherwise)"
    )
    patience: int | None = option(
        None,
        "stop after P epochs without a better --monitor (default: a fifth of the epochs, at "
        "least 3, when the run's length is left to the data; off otherwise)",
        minimum=0,
        metavar="P",
        resumable=True,
        maximum=1_000_000,
    )
    max_steps: int | None = option(
        None,
        "stop after N optimizer steps in total, whichever of --epochs and --max-steps comes first "
        "(default: no step limit)",
        minimum=1,
        metavar="N",
        resumable=True,
        maximum=MAX_STEPS,
    )
    eval_every: int | None = option(
        None,
        "also evaluate every N steps (default: after each epoch only)",
        minimum=1,
        metavar="N",
        resumable=True,
        maximum=MAX_STEPS,
    )
    log_every: int | None = option(
        None,
        "also write a train row (loss, metrics, learning rate) every N steps to metrics.jsonl "
        "and TensorBoard (default: per epoch only)",
        minimum=1,
        metavar="N",
        resumable=True,
        maximum=MAX_STEPS,
    )
    checkpoint_every: int | None = option(
        None,
        "also checkpoint every N steps (default: after each epoch only)",
        minimum=1,
        metavar="N",
        resumable=True,
        maximum=MAX_STEPS,
    )
    tensorboard: bool = option(
        False,
        "write TensorBoard event files to RUN/tensorboard (needs: pip install 'jaxfeed[tensorboard]')",
        resumable=True,
    )
    seed: int = option(
        0, "seed of initialisation, shuffling and dropout (default: 0)", minimum=0, maximum=MAX_SEED
    )
    deterministic: bool = option(False, "bitwise-reproducible runs", resumable=True)
    num_workers: int = option(
        0,
        "image decoding processes (default: 0)",
        minimum=0,
        maximum=MAX_WORKERS,
        resumable=True,
    )
    mesh: str | None = option(
        None,
        "device mesh as NAME=SIZE pairs, e.g. data=4,model=2 (one size may be -1: the devices "
        "left); batches split over its data axis (default: one data axis over every device)",
        metavar="data=N,model=M",
        resumable=True,
    )
    sharding: str | dict[str, Any] = option(  # noqa: RUF009 (option() returns a field)
        "replicate",
        "how the model and optimizer state lie on the mesh: replicate, fsdp, or logical axis "
        'rules as JSON or in a --config file, e.g. {"mlp": "model", "fsdp": true} (default: '
        "replicate)",
        metavar="replicate|fsdp|RULES",
        resumable=True,
    )


@dataclass
class ProcessOptions:
    """Where and how this process runs: not saved in ``config.json``."""

    out: str | None = option(None, "run folder (default: runs/DATA-MODEL-TIME)", saved=False)
    resume: bool = option(
        False,
        "continue the run in --out from its latest checkpoint with its saved config.json",
        saved=False,
    )
    resume_step: int | None = option(
        None,
        "--resume: continue from this checkpoint step instead of the latest (when a later one is "
        "damaged); the later steps are set aside in RUN/set-aside/",
        minimum=0,
        maximum=MAX_STEPS,
        metavar="N",
        saved=False,
    )
    trust_code: bool = option(
        False,
        "--resume: import the run's own copy of a model file (code/) when the file the run "
        "names is gone; only for run folders you trust",
        saved=False,
    )
    num_processes: int | None = option(
        None,
        "processes of a multi-process run (or JAXFEED_NUM_PROCESSES)",
        minimum=1,
        saved=False,
        maximum=65536,
    )
    process_id: int | None = option(
        None,
        "this process's id, 0-based (or JAXFEED_PROCESS_ID)",
        minimum=0,
        saved=False,
        maximum=65535,
    )
    coordinator: str | None = option(
        None,
        "HOST:PORT of process 0's coordinator (or JAXFEED_COORDINATOR)",
        saved=False,
    )
    compile_cache: bool = option(
        True,
        "keep compiled programs in the cache folder ($JAXFEED_CACHE/xla, else "
        "~/.cache/jaxfeed/xla), so the same command started again reaches its first step sooner; "
        "--no-compile-cache compiles everything afresh (default: on)",
        saved=False,
    )


# the sections in the order of their fields in RunConfig, by help group (run_config.GROUPS)
SECTIONS = {
    "data": DataOptions,
    "model": ModelOptions,
    "run": OptimOptions,
    "process": ProcessOptions,
}
