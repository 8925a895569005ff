"""The commands: each turns parsed flags into a recipe call and prints its result.

The recipes are imported inside the commands: they import JAX, which ``jaxfeed --help`` must not
wait for.
"""

from __future__ import annotations

import argparse
import json
import sys

from jaxfeed.cli.options import parse_train, print_config, train_parser
from jaxfeed.recipes.config import ConfigError


def _say(*args: object, **kwargs: object) -> None:
    print(*args, **kwargs, flush=True)


def train(args: argparse.Namespace) -> int:
    flags = parse_train(args.train_argv)
    if flags.help:
        from jaxfeed.cli import EXAMPLES

        print(train_parser(EXAMPLES["train"]).format_help())
        return 0
    from jaxfeed.recipes.interrupt import safe_interrupts
    from jaxfeed.recipes.train import configure
    from jaxfeed.recipes.train import train as run_training

    config = configure(flags.options, flags.config)
    if flags.print_config:
        print(print_config(config), end="")
        return 0
    with safe_interrupts():
        try:
            run_training(config, say=_say)
        except KeyboardInterrupt:
            return 130
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from jaxfeed.recipes.evaluate import evaluate as run_eval
    from jaxfeed.recipes.evaluate import format_evaluation

    result = run_eval(
        args.run_dir,
        checkpoint=args.checkpoint,
        split=args.split,
        data=args.data,
        data_dir=args.data_dir,
        plot=not args.json,
    )
    print(json.dumps(result, indent=2) if args.json else format_evaluation(result))
    return 0


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
    from jaxfeed.recipes.evaluate import predict as run_predict

    results, notes = run_predict(args.run_dir, inputs, checkpoint=args.checkpoint, top_k=args.top_k)
    if notes:
        print("note: " + "; ".join(notes) + " (as in training)", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        if "prediction" in r:
            print(f"{r['input']}: {r['prediction']:.6g}")
        else:
            print(
                f"{r['input']}: "
                + ", ".join(f"{t['label']} ({t['probability']:.3f})" for t in r["top"])
            )
    return 0


def info(args: argparse.Namespace) -> int:
    from jaxfeed.recipes.info import describe_dataset

    print(describe_dataset(args.dataset, args.data_dir, args.split, args.rows, verify=args.verify))
    return 0


def bench(args: argparse.Namespace) -> int:
    from jaxfeed.bench.runner import run_benchmarks

    return run_benchmarks(args.which, quick=args.quick)


def launch(args: argparse.Namespace) -> int:
    from jaxfeed.launch import launch as run_launch

    try:
        return run_launch(
            args.cmd,
            args.num_processes,
            port=args.port,
            devices_per_process=args.devices_per_process,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from err
