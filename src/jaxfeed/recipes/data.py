"""Data for a run: what ``--data PATH`` is, its splits, its labels and its task.

:func:`detect` names the kind of source (image or audio folder, a data file, a ``save_to_disk``
folder, a Hub-layout folder, a built-in name, a cached Hub id) and loads it; :func:`choose_splits`
picks the train and eval splits (split expressions such as ``train[:80%]`` work, and a stratified
validation split is carved when the data has none); :func:`infer_task` decides what is learned
(the columns: :mod:`jaxfeed.recipes.columns`); :func:`encode_labels` turns string or integer
class values into class ids with names.

>>> source = detect("digits")
>>> source.kind, sorted(source.data)
('built-in dataset', ['test', 'train'])
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.dataset import Dataset, DatasetDict
from jaxfeed.data.features import ClassLabel, Features, Value
from jaxfeed.data.formats.files import file_format
from jaxfeed.data.load import load_dataset
from jaxfeed.data.load.builtin import BUILTIN
from jaxfeed.data.load.folder import load_text_folder
from jaxfeed.data.load.load import pick_split  # the split-expression grammar of load_dataset
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.folders import folder_kind
from jaxfeed.recipes.text.corpus import CORPUS_SUFFIXES
from jaxfeed.recipes.text.corpus_reader import read_corpus

EVAL_SPLITS = ("test", "validation")
DEFAULT_VAL_SPLIT = 0.1
MAX_CLASSES_OF_INTS = 20  # integer labels with at most this many values are classes


@dataclass
class Source:
    """A loaded ``--data``: ``kind`` says what it was detected as."""

    path: str
    kind: str
    data: DatasetDict
    notes: list[str] = field(default_factory=list)  # the files of a folder it does not read
    unread_classes: str | None = None  # a folder's class sub-folders with no file it reads
    text_column: str | None = None  # the text column of a folder of texts by class

    @property
    def text_why(self) -> str | None:
        """Why :attr:`text_column` is text, for the run's line."""
        return "one text per file, labelled by its sub-folder" if self.text_column else None


PATH_HINTS = (".csv", ".tsv", ".parquet", ".json", ".jsonl", ".arrow", ".txt", ".zip", ".gz")


def looks_local(text: str) -> bool:
    """A ``--data`` that can only mean a local path (not a built-in name or a Hub id): absolute,
    relative with ``./`` or ``~``, a data file's suffix, or under an existing local folder.

    >>> looks_local("nonexist.csv"), looks_local("/data/x"), looks_local("user/dataset")
    (True, True, False)
    """
    if "://" in text:
        return False
    if text.startswith(("/", "./", "../", "~", ".\\")) or text.lower().endswith(PATH_HINTS):
        return True
    parent = Path(text).expanduser().parent
    return str(parent) not in ("", ".") and parent.is_dir()


def exists_or_named(text: str) -> bool:
    """``text`` is an existing path, or a name that is no local path (built-in, Hub id, URL)."""
    return text in BUILTIN or not looks_local(text) or Path(text).expanduser().exists()


def no_such_path(text: str) -> str:
    """ "no such file or folder: X", with the nearest existing name beside it when there is one.

    >>> no_such_path("/nonexistent-folder/x.csv")
    'no such file or folder: /nonexistent-folder/x.csv'
    """
    import difflib

    path = Path(text).expanduser()
    parent = path.parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    try:
        names = [p.name for p in parent.iterdir()][:10_000] if parent.is_dir() else []
    except OSError:
        names = []
    wanted = path.name if path.parent == parent else path.relative_to(parent).parts[0]
    close = difflib.get_close_matches(wanted, names, n=1, cutoff=0.6)
    if not close and not looks_local(text):
        close = difflib.get_close_matches(text, list(BUILTIN), n=1, cutoff=0.6)
        if close:
            return f"no such file or folder: {text} (the built-in {close[0]!r}?)"
    if close:
        nearest = parent / close[0] if str(parent) not in ("", ".") else Path(close[0])
        return f"no such file or folder: {text} (nearest: {nearest})"
    return f"no such file or folder: {text}"


def data_fingerprint(path: str) -> dict[str, list[int | str]] | None:
    """``{file: [size, sha256]}`` of the local data ``path`` (a file, or every file of a folder
    but hidden ones, named relative to it); None for a built-in or Hub dataset. A run records it
    so that ``--resume --data NEWPATH`` can tell the same data moved from other data.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.csv").write_text("x,y\\n1,2\\n")
    >>> data_fingerprint(str(folder / "a.csv"))["a.csv"][0], data_fingerprint("digits")
    (8, None)
    """
    import hashlib

    root = Path(path).expanduser()
    if path in BUILTIN or not root.exists():
        return None
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )  # fmt: skip
    out: dict[str, list[int | str]] = {}
    for file in files:
        with open(file, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        name = file.name if root.is_file() else file.relative_to(root).as_posix()
        out[name] = [file.stat().st_size, digest]
    return out


def fingerprint_changes(saved: dict[str, Any], new: dict[str, Any] | None) -> list[str]:
    """What differs between two :func:`data_fingerprint` records, named file by file.

    >>> fingerprint_changes({"a": [10, "x"], "b": [2, "y"]}, {"a": [10, "z"], "c": [2, "y"]})
    ['a: content differs (same size, 10 bytes)', 'b: missing', "c: not in the run's data"]
    """
    if new is None:
        return ["not a local file or folder"]
    changes = []
    for name in sorted(set(saved) | set(new)):
        if name not in new:
            changes.append(f"{name}: missing")
        elif name not in saved:
            changes.append(f"{name}: not in the run's data")
        elif list(saved[name]) != list(new[name]):
            was, now = saved[name][0], new[name][0]
            changes.append(
                f"{name}: size {was:,} -> {now:,} bytes"
                if was != now
                else f"{name}: content differs (same size, {now:,} bytes)"
            )
    return changes


def detect(path: str, data_dir: str | None = None, corpus: str = "line") -> Source:
    """Find out what ``path`` is and load it as a ``DatasetDict`` (a ``.txt`` corpus read as
    ``corpus`` says: see :func:`jaxfeed.recipes.text.corpus_reader.read_corpus`)."""
    local = Path(path).expanduser()
    notes, unread = [], None
    if path not in BUILTIN and not local.exists() and looks_local(path):
        raise ConfigError(f"--data {no_such_path(path)}")
    if path in BUILTIN:
        kind, loader = "built-in dataset", path
    elif local.is_file() and local.suffix.lower() in CORPUS_SUFFIXES:
        return Source(path, "text file", DatasetDict({"train": read_corpus(local, corpus)}))
    elif local.is_file():
        fmt = file_format(local)
        if fmt is None:
            raise ConfigError(
                f"--data {path}: not a data file jaxfeed reads (.csv, .tsv, .parquet, .json, .jsonl, "
                ".arrow, a .txt corpus); for images give their folder"
            )
        kind, loader = f"{_FORMAT_NAMES[fmt]} file", str(local)
    elif local.is_dir():
        folder = folder_kind(local)
        kind, loader, notes, unread = (
            folder.kind,
            folder.loader,
            folder.notes,
            folder.unread_classes,
        )
    else:
        kind, loader = "cached Hub dataset", path
    try:
        with warnings.catch_warnings():  # the run's preprocessing says which mode it decodes in
            warnings.filterwarnings("ignore", message=r"imagefolder .* mix modes")
            if loader == "textfolder":
                data = DatasetDict(load_text_folder(local))
            elif loader in ("imagefolder", "audiofolder"):
                data = load_dataset(loader, data_dir=str(local))
            else:
                data = load_dataset(loader, data_dir=data_dir)
    except (FileNotFoundError, ValueError) as err:
        first = str(err).splitlines()[0]
        if kind == "cached Hub dataset":  # not a local path either: say that first
            raise ConfigError(f"--data {no_such_path(path)}; as a Hub dataset id: {first}") from err
        raise ConfigError(f"--data {path}: {first}") from err
    except ImportError as err:  # an optional part (the Hub client, an audio decoder)
        if kind == "cached Hub dataset":
            raise ConfigError(f"--data {no_such_path(path)}; as a Hub dataset id: {err}") from err
        raise ConfigError(f"--data {path}: {err}") from err
    if not isinstance(data, DatasetDict):
        data = DatasetDict({"train": data})
    text = "text" if loader == "textfolder" else None
    return Source(path, kind, data, notes, unread, text)


_FORMAT_NAMES = {"csv": "CSV", "parquet": "Parquet", "json": "JSON Lines", "arrow": "Arrow"}


def describe(source: Source) -> str:
    """One line: what was detected and its splits.

    >>> describe(detect("digits"))
    'digits: built-in dataset; splits train (1,437 rows), test (360 rows)'
    """
    splits = ", ".join(f"{k} ({v.num_rows:,} rows)" for k, v in source.data.items())
    return f"{source.path}: {source.kind}; splits {splits}"


# ---------------------------------------------------------------------------------- splits
def select_split(data: DatasetDict, expression: str, flag: str) -> Dataset:
    """A split or split expression (``train``, ``train[:80%]``, ``train+validation``)."""
    try:
        picked = pick_split(data, expression)
    except ValueError as err:
        raise ConfigError(f"{flag} {expression!r}: {err}") from err
    if picked.num_rows == 0:  # train[50%:10%]: nothing to train on or to evaluate
        sizes = ", ".join(f"{name} {part.num_rows:,}" for name, part in data.items())
        raise ConfigError(
            f"{flag} {expression!r} selects no rows (rows: {sizes}); give a split or a slice "
            "with rows, e.g. train[:80%]"
        )
    return picked


@dataclass
class Splits:
    """The splits of a run: ``train``; ``eval``, the validation split model selection reads (None
    with ``--val-split 0``: no selection, the last epoch is kept); ``test``, read once at the end
    on the chosen checkpoint (None when the data has no test split)."""

    train: Dataset
    eval: Dataset | None
    eval_name: str | None
    note: str | None = None
    test: Dataset | None = None
    test_name: str | None = None
    # the row of the data (as read, counting from 0) of each row of ``train``, when a validation
    # split was carved from it (None: the train split is the data's, in its order)
    train_rows: np.ndarray | None = None
    eval_rows: np.ndarray | None = None  # the same for ``eval``, when carved from the data

    def data_row(self, row: int, part: str = "train") -> str:
        """Where row ``row`` of ``train`` (``part="eval"``: of ``eval``) is in the data: what
        an error names.

        >>> Splits(None, None, None, train_rows=np.array([4, 0, 2])).data_row(0)
        'row 4 of the data (counting from 0, in its files)'
        """
        rows = self.train_rows if part == "train" else self.eval_rows
        if rows is not None:
            row = int(rows[row])
        elif part != "train":
            return f"row {row} of the {self.eval_name} split (counting from 0)"
        return f"row {row} of the data (counting from 0, in its files)"


TEST_SPLIT = "test"


def _named_in(name: str, expression: str) -> bool:
    """Whether split ``name`` is part of a split expression (``train+test[:10%]``)."""
    return any(part.split("[")[0].strip() == name for part in expression.split("+"))


def _too_few(rows: int, fraction: float, in_order: bool) -> str:
    """Why no validation split can be carved from ``rows`` train rows, and what to do.

    >>> _too_few(1, 0.1, True)[:96]
    '--val-split 0.1: the train split has 1 row (a line of the corpus), too few to carve a validation'
    """
    unit = f"{rows} {'row' if rows == 1 else 'rows'}"
    if in_order:
        unit += f" ({'a line' if rows == 1 else 'lines'} of the corpus)"
    smaller = " a smaller --val-split, or" if rows >= 2 else ""
    lines = (" or put the corpus on more lines (the validation split takes whole lines)" if in_order
             else "")  # fmt: skip
    return (
        f"--val-split {fraction}: the train split has {unit}, too few to carve a validation split "
        f"from: give{smaller} --val-split 0 (no validation split: the last epoch is kept){lines}"
    )


def choose_splits(
    data: DatasetDict,
    split_train: str,
    split_eval: str | None,
    val_split: float | None,
    stratify: str | None,
    seed: int,
    in_order: bool = False,
) -> Splits:
    """The train, validation and test splits. Model selection never sees the test split:

    * ``split_eval`` given: it is the validation split;
    * ``val_split == 0``: no validation split (no selection);
    * otherwise the data's ``validation`` split, or (when it has none, or ``val_split`` is given)
      a ``val_split`` fraction of train (default 0.1), stratified by ``stratify``, seeded;
      ``in_order`` (a corpus put end to end): blocks of consecutive rows, both parts keeping the
      rows' order (:func:`block_split`).

    The data's ``test`` split, unless train or validation use it, is the test split.

    >>> data = DatasetDict({"train": Dataset.from_dict({"y": [0, 1] * 10}),
    ...                     "test": Dataset.from_dict({"y": [0, 1]})})
    >>> s = choose_splits(data, "train", None, None, None, 0)
    >>> s.train.num_rows, s.eval_name, s.eval.num_rows, s.test_name, s.test.num_rows
    (18, 'validation', 2, 'test', 2)
    """
    train = select_split(data, split_train, "--split-train")
    if split_eval is not None and val_split is not None:
        raise ConfigError("give --split-eval or --val-split, not both")
    test_name = (
        TEST_SPLIT if TEST_SPLIT in data and not _named_in(TEST_SPLIT, split_train) else None
    )
    if split_eval is not None:
        if test_name is not None and _named_in(test_name, split_eval):
            test_name = None  # the user chose to select on it: it is no longer held out
        return Splits(
            train,
            select_split(data, split_eval, "--split-eval"),
            split_eval,
            test=data[test_name] if test_name else None,
            test_name=test_name,
        )
    test = data[test_name] if test_name else None
    if val_split == 0:
        note = "--val-split 0: no validation split; no model selection, the last epoch is kept"
        return Splits(train, None, None, note, test, test_name)
    if "validation" in data and val_split is None and not _named_in("validation", split_train):
        return Splits(train, data["validation"], "validation", None, test, test_name)
    fraction = DEFAULT_VAL_SPLIT if val_split is None else val_split
    n_val = int(np.ceil(fraction * train.num_rows))
    if train.num_rows < 2 or n_val >= train.num_rows:
        raise ConfigError(_too_few(train.num_rows, fraction, in_order))
    column, counts, how = stratify, None, "at random"
    if stratify is not None:
        counts = np.bincount(np.asarray(train.with_format("numpy")[stratify]).astype(np.int64))
        stratify, how = _stratified(train, stratify, n_val)
    if in_order:
        parts, how = block_split(train, n_val, seed)
    else:
        parts = train.train_test_split(test_size=fraction, seed=seed, stratify_by_column=stratify)
    why = "the model is selected on it" + (f", {test_name} is held out" if test_name else "")
    held = parts["test"].num_rows
    share = "" if held <= 1.5 * fraction * train.num_rows else f" of {train.num_rows:,}, rounded up"
    note = (
        f"validation split: {fraction:g} of {split_train} ({held:,} row{'s' * (held != 1)}{share}, {how}, "
        f"seed {seed}); {why}" + ("" if val_split is not None else " (--val-split to choose)")
    )
    if counts is not None and column is not None:
        note += _missing_classes(counts, parts["train"], column)
    rows = _part_rows(train, fraction, seed, stratify, n_val if in_order else None)
    return Splits(parts["train"], parts["test"], "validation", note, test, test_name, *rows)


def _part_rows(train: Dataset, fraction: float, seed: int, stratify: str | None,
               blocks: int | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The rows of ``train`` that its split's train and test parts hold, in those parts' order:
    the same split made on the row numbers alone (and the class column it is stratified by), or
    with ``blocks`` (the validation rows of a corpus) the same :func:`block_split`.

    >>> ds = Dataset.from_dict({"y": list(range(10))})
    >>> list(_part_rows(ds, 0.2, 0, None)[0]) == ds.train_test_split(0.2, seed=0)["train"]["y"]
    True
    """
    columns: dict[str, Any] = {"row": np.arange(train.num_rows)}
    features: dict[str, Any] = {"row": Value("int64")}
    if stratify is not None:
        columns[stratify] = np.asarray(train.with_format("numpy")[stratify])
        features[stratify] = train.features[stratify]
    numbered = Dataset.from_dict(columns, features=Features(features))
    if blocks is not None:
        part = block_split(numbered, blocks, seed)[0]
    else:
        part = numbered.train_test_split(test_size=fraction, seed=seed, stratify_by_column=stratify)
    return tuple(np.asarray(part[k].with_format("numpy")["row"]) for k in ("train", "test"))  # type: ignore[return-value]


def _missing_classes(counts: np.ndarray, train: Dataset, column: str) -> str:
    """A warning for the split's note when the train part lacks classes the data has (they
    went to validation whole): the model is never shown them.

    >>> _missing_classes(np.array([1, 1]), Dataset.from_dict({"y": [0]}), "y")[:72]
    '; warning: the train part holds 1 of the 2 classes (1 only in validation'
    """
    kept = np.bincount(np.asarray(train.with_format("numpy")[column]).astype(np.int64),
                       minlength=len(counts))  # fmt: skip
    missing = [int(i) for i in np.flatnonzero(counts > 0) if kept[i] == 0]
    if not missing:
        return ""
    feature = train.features.get(column)
    names = feature.names if isinstance(feature, ClassLabel) else None
    shown = ", ".join(repr(names[i]) if names and i < len(names) else str(i) for i in missing[:5])
    return (
        f"; warning: the train part holds {int((kept > 0).sum())} of the {int((counts > 0).sum())} "
        f"classes ({shown}{', ...' if len(missing) > 5 else ''} only in validation): the model "
        "never sees them; give more rows, or --val-split 0 to train on all of them"
    )


def _stratified(train: Dataset, label: str, n_val: int) -> tuple[str | None, str]:
    """``label`` when every class has two rows and the split one row per class, else None (a
    random split); and how the split is made, saying why it is not stratified."""
    counts = np.bincount(np.asarray(train.with_format("numpy")[label]).astype(np.int64))
    present = counts[counts > 0]
    if present.min() >= 2 and n_val >= len(present):
        return label, "stratified by class"
    if present.min() < 2:
        single = int((present < 2).sum())
        why = f"{single} class{'es have' if single > 1 else ' has'} a single row"
    else:
        why = f"fewer validation rows than the {len(present)} classes"
    return None, f"at random, not stratified: {why}"


BLOCKS = 100  # a corpus's validation split: this many blocks of consecutive rows, at most


def block_split(train: Dataset, n_val: int, seed: int) -> tuple[dict[str, Dataset], str]:
    """At least ``n_val`` rows of ``train`` as validation, in whole blocks of consecutive rows
    (``train`` cut into :data:`BLOCKS` blocks, picked at random), both parts keeping the rows'
    order: a corpus put end to end stays in its order, as run_clm groups a corpus after
    concatenating it.

    >>> parts, how = block_split(Dataset.from_dict({"t": list(range(1000))}), 20, 0)
    >>> held = parts["test"]["t"][:]
    >>> held[:3], held[-3:], parts["train"]["t"][358:362], how
    ([360, 361, 362], [827, 828, 829], [358, 359, 370, 371], 'in 2 blocks of consecutive rows, the order kept')
    """
    n = train.num_rows
    blocks = min(n, BLOCKS)
    edges = np.linspace(0, n, blocks + 1).round().astype(np.int64)
    held = np.zeros(n, bool)
    chosen = 0
    for b in np.random.default_rng(seed).permutation(blocks):
        if held.sum() >= n_val:
            break
        held[edges[b] : edges[b + 1]] = True
        chosen += 1
    if held.all():  # never every row: the train split keeps one block
        held[edges[b] : edges[b + 1]] = False
        chosen -= 1
    parts = {
        "train": train.select(np.flatnonzero(~held)),
        "test": train.select(np.flatnonzero(held)),
    }
    return (
        parts,
        f"in {chosen} block{'s' if chosen != 1 else ''} of consecutive rows, the order kept",
    )


def infer_task(ds: Dataset, label: str, task: str | None) -> str:
    """``classification`` for class labels, strings and integers with few values; ``regression``
    for floats (and integers with many values); a given ``task`` is checked against the column."""
    feature = ds.features[label]
    if isinstance(feature, ClassLabel) or (
        isinstance(feature, Value) and feature.dtype in ("string", "large_string", "bool")
    ):
        kind = "classes"
    elif isinstance(feature, Value) and feature.dtype.startswith(("int", "uint")):
        values = np.unique(_label_values(ds, label))
        kind = "classes" if len(values) <= MAX_CLASSES_OF_INTS else "numbers"
    elif isinstance(feature, Value) and feature.dtype.startswith("float"):
        kind = "floats"
    else:
        raise ConfigError(
            f"--label-column {label!r} is {feature!r}; a label must be a class label, a string, an "
            "integer or a number"
        )
    if task is None:
        return "classification" if kind == "classes" else "regression"
    if task == "regression" and (
        isinstance(feature, ClassLabel) or feature.dtype in ("string", "large_string")
    ):
        raise ConfigError(
            f"--task regression: the label column {label!r} holds classes ({feature!r}), not numbers"
        )
    if task == "classification" and kind == "floats":
        values = _label_values(ds, label)
        if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
            raise ConfigError(
                f"--task classification: the label column {label!r} holds non-integer floats "
                "(e.g. 2.7); give --task regression, or class values"
            )
    return task


def _label_values(ds: Dataset, label: str) -> np.ndarray:
    ds = ds.select_columns([label]).flatten_indices()  # the rows the indices mapping selects
    column = ds.select_columns([label]).data.column(label)
    empty = column.is_null()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        empty = pc.or_(empty, pc.equal(pc.utf8_trim_whitespace(column), ""))  # a CSV's blank cell
    if pc.any(empty).as_py():
        row = int(np.flatnonzero(np.asarray(empty.fill_null(True)))[0])
        raise ConfigError(
            f"the label column {label!r} is empty at row {row}; fill or drop such rows"
        )
    return np.asarray(column.to_numpy(zero_copy_only=False))


def encode_labels(
    data: dict[str, Dataset],
    label: str,
    names: list[str] | None = None,
    *,
    vocabulary: Dataset | None = None,
) -> tuple[dict[str, Dataset], list[str]]:
    """Class ids and names for every split: ``ClassLabel`` columns as they are; strings and
    integers become ids of ``names``, by default the sorted distinct values of ``vocabulary``
    (the rows the model trains on; default the ``train`` split, or the only split). The other
    splits are never read for the names: a value of theirs outside them is refused, naming the
    split, row and value.

    >>> ds = Dataset.from_dict({"y": ["cat", "dog", "cat"]})
    >>> out, names = encode_labels({"train": ds, "test": ds.select([0, 2])}, "y")
    >>> names, out["train"][:3]["y"], out["test"][:2]["y"]
    (['cat', 'dog'], [0, 1, 0], [0, 0])
    >>> encode_labels({"train": ds.select([0]), "test": ds}, "y")
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: split 'test', row 1: label 'dog' of column 'y' is not one of the classes of the train split (['cat']); the class names come from the train rows only: drop such rows, or add examples of 'dog' to train
    """
    first = next(iter(data.values()))
    feature = first.features[label]
    for split, ds in data.items():
        if ds.features[label] != feature:
            raise ConfigError(
                f"the label column {label!r} is {ds.features[label]!r} in split {split!r} but "
                f"{feature!r} in split {next(iter(data))!r}"
            )
    if isinstance(feature, ClassLabel):
        _check_class_labels(data, label, feature, names, vocabulary)
        return data, list(feature.names)
    given = names is not None
    if names is None:
        values = _label_values(_vocabulary(data, vocabulary, label), label)
        if values.dtype.kind in "iub":
            names = [str(v) for v in np.unique(values)]
        elif values.dtype.kind == "f":
            names = [str(int(v)) for v in np.unique(values)]
        else:
            names = sorted({str(v) for v in values})
    out = {}
    for split, ds in data.items():
        raw = _label_values(ds, label)
        text = [str(int(v)) if raw.dtype.kind == "f" else str(v) for v in raw.tolist()]
        known = set(names)
        unknown = next((i for i, t in enumerate(text) if t not in known), None)
        if unknown is not None:
            shown = f"{names[:10]}{'...' if len(names) > 10 else ''}"
            raise ConfigError(
                f"split {split!r}, row {unknown}: label {text[unknown]!r} of column {label!r} is not "
                + (
                    f"one of the classes ({shown})"
                    if given
                    else f"one of the classes of the train split ({shown}); the class names come "
                    f"from the train rows only: drop such rows, or add examples of "
                    f"{text[unknown]!r} to train"
                )
            )
        index = {n: i for i, n in enumerate(names)}
        ids = pa.array([index[t] for t in text], pa.int64())
        out[split] = _replace_column(ds, label, ids, ClassLabel(names=names))
    return out, names


def _check_class_labels(
    data: dict[str, Dataset],
    label: str,
    feature: ClassLabel,
    names: list[str] | None,
    vocabulary: Dataset | None,
) -> None:
    """Refuse ``ClassLabel`` labels whose classes are not the run's ``names``, or (no names
    given) a class a split uses that never occurs in the vocabulary rows."""
    if names is not None and list(feature.names) != list(names):
        raise ConfigError(
            f"the label column {label!r} has classes {feature.names[:10]}, the run was trained on "
            f"{names[:10]}"
        )
    if names is None:  # every class a split uses must occur in train
        trained = set(np.unique(_label_values(_vocabulary(data, vocabulary, label), label)))
        for split, ds in data.items():
            ids = _label_values(ds, label)
            unseen = np.flatnonzero(~np.isin(ids, list(trained)) & (ids >= 0))
            if len(unseen):
                row = int(unseen[0])
                raise ConfigError(
                    f"split {split!r}, row {row}: label {feature.names[ids[row]]!r} of column "
                    f"{label!r} never occurs in the train split: the model could not learn "
                    "it (the classes come from the train rows only); drop such rows, or add "
                    "examples of it to train"
                )


def _vocabulary(data: dict[str, Dataset], vocabulary: Dataset | None, label: str) -> Dataset:
    """The rows the class names come from: ``vocabulary``, else the train split (or the only
    split)."""
    if vocabulary is not None:
        return vocabulary
    if "train" not in data and len(data) != 1:
        raise ConfigError(
            f"the data has the splits {sorted(data)} and no train split to take the classes of "
            f"{label!r} from"
        )
    return data.get("train", next(iter(data.values())))


def _replace_column(ds: Dataset, column: str, values: pa.Array, feature: Any) -> Dataset:
    flat = ds.flatten_indices()
    table = flat.data
    table = table.set_column(table.schema.get_field_index(column), column, values)
    features = {**flat.features, column: feature}
    return Dataset.from_arrow(table.replace_schema_metadata(None), Features(features))
