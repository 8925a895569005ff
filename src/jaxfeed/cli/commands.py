"""The commands: each turns parsed flags into a recipe call and prints its result.

The recipes are imported inside the commands: they import JAX, which ``jaxfeed --help`` must not
wait for.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from jaxfeed._base.files import atomic_write
from jaxfeed.bench.runner import run_benchmarks
from jaxfeed.cli.examples import EXAMPLES
from jaxfeed.cli.launch import launch as run_launch
from jaxfeed.cli.options import parse_train, print_config, train_parser
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.interrupt import safe_interrupts


def _say(*args: object, **kwargs: object) -> None:
    print(*args, **kwargs, flush=True)


def _compile_cache(enabled: bool) -> None:
    """JAX's persistent compilation cache in jaxfeed's cache folder, or off (--no-compile-cache)."""
    from jaxfeed.recipes.compile_cache import command_compile_cache  # import cost: JAX

    command_compile_cache(enabled)


def train(args: argparse.Namespace) -> int:
    flags = parse_train(args.train_argv)
    if flags.help:
        print(train_parser(EXAMPLES["train"]).format_help())
        return 0
    from jaxfeed.recipes.configure import configure  # import cost: JAX and pyarrow (not --help)
    from jaxfeed.recipes.train import train as run_training  # import cost: JAX and pyarrow

    config = configure(flags.options, flags.config)
    if flags.print_config:
        print(print_config(config), end="")
        return 0
    _compile_cache(config.compile_cache)
    with safe_interrupts(ignore_after=getattr(args, "entry", False)):
        try:
            run_training(config, say=_say, own_process=getattr(args, "entry", False))
        except KeyboardInterrupt as stop:
            if not getattr(stop, "reported", False):  # before fit: nothing saved, nothing said
                print("jaxfeed train: interrupted before training started", file=sys.stderr)
            return 130
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from jaxfeed.recipes.serving.evaluate import (
        evaluate as run_eval,  # import cost: JAX and pyarrow
    )
    from jaxfeed.recipes.serving.evaluate import format_evaluation  # import cost: JAX and pyarrow

    _compile_cache(args.compile_cache)
    result = run_eval(
        args.run_dir,
        checkpoint=args.checkpoint,
        split=args.split,
        data=args.data,
        data_dir=args.data_dir,
        plot=not args.json,
        trust_code=args.trust_code,
    )
    print(json.dumps(result, indent=2) if args.json else format_evaluation(result))
    return 0


OUTPUT_KINDS = (".csv", ".jsonl")


def predict(args: argparse.Namespace) -> int:
    inputs = list(args.inputs)
    if "-" in inputs:
        if len(inputs) > 1:
            raise ConfigError(
                "give - alone (paths on stdin, one a line) or file paths, not both: "
                f"got - with {len(inputs) - 1} file(s)"
            )
        inputs = [line.strip() for line in sys.stdin if line.strip()]
        if not inputs:
            raise ConfigError("- read no paths from stdin")
    empty = [i for i, text in enumerate(inputs) if not text.strip()]
    if empty:
        raise ConfigError(
            f"INPUT {empty[0] + 1} is empty ({inputs[empty[0]]!r}): give a file, a folder, a text, "
            "or - to read paths from stdin"
        )
    output = args.output
    if output is not None and not output.lower().endswith(OUTPUT_KINDS):
        raise ConfigError(f"--output {output}: give a .csv or .jsonl file")
    from jaxfeed.recipes.serving.evaluate import (  # import cost: JAX and pyarrow
        UNSEEN,
        iter_predictions,
    )
    from jaxfeed.recipes.serving.text_serve import shown_input  # import cost: JAX and pyarrow

    _compile_cache(args.compile_cache)
    notes: list[str] = []
    results = iter_predictions(
        args.run_dir, inputs, checkpoint=args.checkpoint, top_k=args.top_k,
        trust_code=args.trust_code, notes=notes, strict=args.strict,
    )  # fmt: skip
    if output is not None:
        rows = write_predictions(output, results)
        print(f"wrote {rows:,} prediction{'' if rows == 1 else 's'} to {output}", flush=True)
    elif args.json:
        print(json.dumps(list(results), indent=2), flush=True)
    else:
        for r in results:
            if "prediction" in r:
                print(f"{shown_input(r['input'])}: {r['prediction']:.6g}", flush=True)
            else:
                shown = ", ".join(f"{t['label']} ({t['probability']:.3f})" for t in r["top"])
                print(f"{shown_input(r['input'])}: {shown}", flush=True)
    said = [n for n in notes if n.startswith(UNSEEN)]  # a choice of predict's own
    notes = [n for n in notes if not n.startswith(UNSEEN)]
    if notes:
        print("note: " + "; ".join(notes) + " (as in training)", file=sys.stderr)
    for note in said:
        print(f"note: {note}", file=sys.stderr)
    return 0


def write_predictions(path: str, results: Any) -> int:
    """One row per input (``input``, then ``label`` and ``score``, or ``prediction``) to a CSV
    or JSON Lines file, written through a temporary file and a rename."""
    import csv
    import io

    rows = [_flat(r) for r in results]
    if path.lower().endswith(".jsonl"):
        text = "".join(json.dumps(r) + "\n" for r in rows)
    else:
        buffer = io.StringIO()
        fields = list(rows[0]) if rows else ["input", "label", "score"]
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buffer.getvalue()
    atomic_write(path, text)
    return len(rows)


def _flat(result: dict[str, Any]) -> dict[str, Any]:
    if "prediction" in result:
        return {"input": result["input"], "prediction": result["prediction"]}
    return {"input": result["input"], "label": result["label"], "score": result["score"]}


def generate(args: argparse.Namespace) -> int:
    """``jaxfeed generate``: Ctrl-C is raised only at a safe point (never inside JAX's garbage
    collection callback, where it was dropped, or a teardown, where it could crash the exit)."""
    with safe_interrupts(ignore_after=getattr(args, "entry", False)):
        return _generate(args)


def _generate(args: argparse.Namespace) -> int:
    for i, prompt in enumerate(args.prompts):
        _check_utf8(prompt, f"PROMPT {i + 1}")
    for text in args.stop or []:
        _check_utf8(text, "--stop")
    from jaxfeed.recipes.serving.generate import (
        generate as run_generate,  # import cost: JAX, pyarrow
    )
    from jaxfeed.recipes.serving.hub_generate import (  # import cost
        generate_pretrained,
        is_pretrained,
    )

    _compile_cache(args.compile_cache)
    if is_pretrained(args.run_dir):  # hf:ORG/NAME or a Hub-format folder: no run
        texts = generate_pretrained(
            args.run_dir, args.prompts, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
            stop=args.stop, chat=args.chat,
        )  # fmt: skip
    else:
        texts = run_generate(
            args.run_dir, args.prompts, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
            checkpoint=args.checkpoint, trust_code=args.trust_code, stop=args.stop, chat=args.chat,
        )  # fmt: skip
    if args.json:
        rows = [{"prompt": p, "text": t} for p, t in zip(args.prompts, texts, strict=True)]
        print(json.dumps(rows, indent=2), flush=True)
    else:
        for prompt, continuation in zip(args.prompts, texts, strict=True):
            # the prompt, continued; --chat: the reply alone
            print(continuation if args.chat else prompt + continuation, flush=True)
    return 0


def _check_utf8(text: str, name: str) -> None:
    """Refuse an argument that is not UTF-8: Python keeps such bytes as lone surrogates, which
    no tokenizer encodes.

    >>> try:
    ...     _check_utf8("t5 \\udcff", "PROMPT 1")
    ... except ConfigError as err:
    ...     print(str(err)[:54])
    PROMPT 1 is not UTF-8 text (byte 0xff at character 3):
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(text[err.start])
        shown = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise ConfigError(
            f"{name} is not UTF-8 text ({shown} at character {err.start}): give it in UTF-8 "
            "(iconv -t UTF-8 converts it)"
        ) from None


def export(args: argparse.Namespace) -> int:
    from jaxfeed.recipes.serving.hub_export import (
        export_hf,  # import cost: JAX, flax and the Hub layer
    )

    out = export_hf(args.run_dir, args.out, args.checkpoint, merge=getattr(args, "merge", False))
    how = (
        f"peft.PeftModel.from_pretrained(base, {str(out)!r})"
        if (out / "adapter_config.json").is_file()
        else f"transformers.AutoModel*.from_pretrained({str(out)!r})"
    )
    print(f"wrote {out} ({', '.join(sorted(p.name for p in out.iterdir()))}); load it with {how}")
    return 0


def info(args: argparse.Namespace) -> int:
    from jaxfeed.recipes.info import describe_dataset  # import cost: pyarrow

    print(describe_dataset(args.dataset, args.data_dir, args.split, args.rows, verify=args.verify))
    return 0


def bench(args: argparse.Namespace) -> int:
    return run_benchmarks(args.which, quick=args.quick, plot=args.plot)


def launch(args: argparse.Namespace) -> int:
    try:
        return run_launch(
            args.cmd,
            args.num_processes,
            port=args.port,
            devices_per_process=args.devices_per_process,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from err
