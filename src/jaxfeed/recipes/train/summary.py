"""A finished run's summary: the chosen checkpoint's figures in a table (each with the split it
comes from), what was chosen and why, the run folder and the commands that use it.

>>> _figure(0.75, "classification"), _figure(1, "classification"), _figure(5.96496, "regression")
('0.7500', '1.0000', '5.965')
>>> size_text(1536)
'1.5 KB'
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from jaxfeed.recipes.train import candidates
from jaxfeed.recipes.train.record import Run


def summary(
    run: Run, history: Any, best: dict, test: dict | None, seconds: float, state: str = ""
) -> None:
    """Say the chosen checkpoint, and each figure with the split it comes from (an MSE's root
    is added to ``best`` and ``test``, in the label's units)."""
    say, splits, out = run.say, run.splits, run.out
    columns = _columns(run, history, best, test, seconds)
    rows = [[v for _, v in columns], *_baseline_rows(run, [h for h, _ in columns])]
    widths = [max(len(h), *(len(r[i]) for r in rows)) + 2 for i, (h, _) in enumerate(columns)]
    say("\n" + "".join(f"{h:<{w}}" for (h, _), w in zip(columns, widths, strict=True)).rstrip())
    for row in rows:
        say("".join(f"{v:<{w}}" for v, w in zip(row, widths, strict=True)).rstrip())
    if chosen := candidates.chosen_linear(run):
        what = f"(the {chosen} model, chosen on the {splits.eval_name} split"
    elif run.best_metric:
        metric, mode = run.best_metric, run.best_mode
        what = (
            f"(best: the checkpoint of {'lowest' if mode == 'min' else 'highest'} {metric} on the "
            f"{splits.eval_name} split, the earliest on ties"
        )
    else:
        what = "(no validation split: the last checkpoint is kept"
    if test is not None:
        what += f"; {splits.test_name} was read once, on it"
    say(what + "; eval and predict use it)")
    assert run.model_source is not None  # a fine-tuned language model: what it gained
    for line in run.model_source.summary_lines(run.pretrained_eval, best, splits.eval_name):
        say(line)
    if state:
        say(f"model and optimizer state: {state}")
    if "epoch_in_progress" in best:
        say(
            f"(the run stopped at step {best['step']}, inside epoch {best['epoch_in_progress']}: "
            "its last state was evaluated and is a candidate like each epoch's end)"
        )
    files = ("config.json", "metrics.jsonl", "history.csv", "curves.png", "checkpoints", "model")
    found = [f"{n}/" if (out / n).is_dir() else n for n in files if (out / n).exists()]
    say(f"\nrun folder: {out}  ({', '.join(found)})")
    quoted = shlex.join([str(out)])  # pasted into a shell: spaces and quotes survive
    assert run.kind is not None
    prog = command_prefix()  # the next steps run as printed, jaxfeed on PATH or not
    step = run.kind.next_step(quoted).replace(" jaxfeed ", f" {prog} ", 1)
    say(f"evaluate:   {prog} eval {quoted} --json\n{step}")


def command_prefix(argv0: str | None = None, path: str | None = None) -> str:
    """How the printed next steps call the command: ``jaxfeed`` when the shell finds it on
    ``PATH`` (``path``, default the environment's), else the script that runs now (relative to
    the current folder when under it: ``.venv/bin/jaxfeed``, as after ``make demo``), else this
    Python with ``-m jaxfeed.cli``.

    >>> command_prefix(path="/usr/bin:/bin" + os.pathsep + os.path.dirname(sys.executable))
    'jaxfeed'
    >>> "jaxfeed" in command_prefix(path="")  # a path to it, or python -m jaxfeed.cli
    True
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    found = shutil.which("jaxfeed", path=path)
    if found is not None:
        return "jaxfeed"
    script = (
        Path(argv0) if Path(argv0).name == "jaxfeed" else Path(sys.executable).with_name("jaxfeed")
    )
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m jaxfeed.cli"
    script = script.absolute()
    try:
        shown = str(script.relative_to(Path.cwd()))
    except ValueError:
        shown = str(script)
    return shlex.quote(shown if os.sep in shown else os.path.join(".", shown))


def _columns(
    run: Run, history: Any, best: dict, test: dict | None, seconds: float
) -> list[tuple[str, str]]:
    """The summary table's ``(heading, value)`` columns."""
    task, splits = run.task, run.splits
    epochs = [h for h in history if "seconds" in h and "rows_per_second" in h]
    rows = sum(h["rows_per_second"] * h["seconds"] for h in epochs) / max(
        sum(h["seconds"] for h in epochs), 1e-9
    )
    figure, shown = {
        "classification": ("accuracy", "accuracy"),
        "lm": ("perplexity", "perplexity"),
    }.get(task, ("rmse", "RMSE"))
    for row in (best, test or {}):  # label units (mse per example in the label's units)
        for split in ("eval", "test"):
            if f"{split}_mse" in row and f"{split}_rmse" not in row:
                row[f"{split}_rmse"] = row[f"{split}_mse"] ** 0.5
    shown_epoch = f"{best['epoch']}"
    if "epoch_in_progress" in best:  # a checkpoint inside an epoch: where the run stopped
        shown_epoch = f"{best['epoch_in_progress']} (part)"
    columns = [("best epoch" if run.best_metric else "last epoch", shown_epoch)]
    columns.append(("step", f"{best['step']}"))
    if chosen := candidates.chosen_linear(run):  # no epoch of its own: fitted beside the model
        columns = [("model", chosen)]
    if splits.eval is not None:
        loss = "loss (standardised)" if task == "regression" else "loss"
        columns.append((f"{splits.eval_name} {loss}", f"{best['eval_loss']:.4f}"))
        if f"eval_{figure}" in best:
            columns.append((f"{splits.eval_name} {shown}", _figure(best[f"eval_{figure}"], task)))
        monitored = run.best_metric
        if monitored and monitored not in ("eval_loss", f"eval_{figure}") and monitored in best:
            name = monitored.removeprefix("eval_").replace("_", " ")
            columns.append((f"{splits.eval_name} {name}", f"{best[monitored]:.4f}"))
    else:
        columns.append(("train loss", f"{best.get('train_loss', float('nan')):.4f}"))
    if test is not None:
        if f"test_{figure}" in test:
            columns.append((f"{splits.test_name} {shown}", _figure(test[f"test_{figure}"], task)))
        else:
            columns.append((f"{splits.test_name} loss", f"{test['test_loss']:.4f}"))
    if run.class_weights is not None:  # the loss as trained and selected on: say so
        columns = [(f"{h} (class-weighted)" if h.endswith(" loss") else h, v) for h, v in columns]
    return columns + [("time", f"{seconds:.1f}")] + ([("rows/s", f"{rows:,.0f}")] if epochs else [])


def _baseline_rows(run: Run, headings: list[str]) -> list[list[str]]:
    """The baselines' rows of the summary table: each figure under its column's heading
    (validation and test loss and accuracy, or RMSE), the label in the first column."""
    splits, task = run.splits, run.task
    shown = {"classification": "accuracy", "lm": "perplexity"}.get(task, "RMSE")
    names = {splits.eval_name: "eval", splits.test_name: "test"}
    rows = []
    for label, found in candidates.summary_rows(run):
        row = [label]
        for heading in headings[1:]:
            split, _, what = heading.removesuffix(" (class-weighted)").partition(" ")
            key = f"{names.get(split)}_{'loss' if what.startswith('loss') else what.lower()}"
            loss = what.startswith("loss")
            value = found.get(key) if loss or what == shown else None
            row.append("" if value is None else f"{value:.4f}" if loss else _figure(value, task))
        rows.append(row)
    return rows


def _figure(value: float, task: str) -> str:
    """A summary figure: accuracy and perplexity to 4 decimals (``0.7500``, ``1.0000``), an RMSE
    in the label's units to 4 significant digits."""
    return f"{value:.4g}" if task == "regression" else f"{value:.4f}"


def size_text(n: float) -> str:
    """Bytes for people: ``size_text(1536)`` is ``'1.5 KB'``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
