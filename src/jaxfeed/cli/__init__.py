"""The ``jaxfeed`` command: train, eval, predict, generate, info, bench, cache, launch.

Each command is thin: parse the flags, build the run configuration, call a recipe
(:mod:`jaxfeed.recipes`). Parsing and ``--help`` import neither JAX nor pyarrow; the recipes are
imported when a command runs. Usage errors (a wrong path, column, flag or config value) print one
line on stderr and exit with 2; other failures exit with 1; Ctrl-C exits with 130. ``--debug``
shows the Python traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from jaxfeed import __version__
from jaxfeed.cli import cache, commands
from jaxfeed.cli.examples import EXAMPLES
from jaxfeed.recipes.config import ConfigError

COMPILE_CACHE_HELP = (
    "compile every program afresh: no persistent compilation cache (default: compiled programs "
    "are kept in $JAXFEED_CACHE/xla, else ~/.cache/jaxfeed/xla)"
)
TRUST_HELP = (
    "import the run's model file (only for another --checkpoint than best, or a run without "
    "model/): it is code, for run folders you trust"
)


_FORMATTER = argparse.RawDescriptionHelpFormatter


class UsageError(ConfigError):
    """A wrong name, path, column or flag value: exit status 2."""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (and exit status 2), pointing at --help."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _step(text: str) -> str:
    if text in ("best", "last", "latest") or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"expected best, last or a step number, got {text!r}")


def _count(text: str, low: int, high: int = 2**31 - 1) -> int:
    """An integer in ``[low, high]`` (every count has a bound: past it, memory or time run out)."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
    if value > high:
        raise argparse.ArgumentTypeError(f"expected an integer <= {high:,}, got {text!r}")
    return value


def _positive(text: str) -> int:
    return _count(text, 1)


def _non_negative(text: str) -> int:
    return _count(text, 0)


def _bounded(low: int, high: int) -> Any:
    """An argparse type: an integer in ``[low, high]``."""

    def parse(text: str) -> int:
        return _count(text, low, high)

    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxfeed`` command's parser: one subcommand each, examples in its ``--help``.

    >>> args = build_parser().parse_args(["info", "digits"])
    >>> args.command, args.rows, args.split
    ('info', 3, None)
    """
    parser = _Parser(
        prog="jaxfeed",
        description="Datasets in Apache Arrow as jax.Array, a fast loader, and Flax training.",
        epilog="run 'jaxfeed COMMAND --help' for a command's flags and examples",
        formatter_class=_FORMATTER,
    )
    parser.add_argument("--version", action="version", version=f"jaxfeed {__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    # train's flags are RunConfig's jsonargparse parser (jaxfeed.cli.options): main passes them on
    p = sub.add_parser(
        "train",
        help="train a model on your data and write a run folder",
        add_help=False,
        prefix_chars="\0",
    )
    p.set_defaults(run=commands.train)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show Python tracebacks on errors",
    )
    for name, summary, add_arguments in _COMMANDS:
        add_arguments(
            sub.add_parser(
                name,
                parents=[debug],
                help=summary,
                epilog=EXAMPLES[name],
                formatter_class=_FORMATTER,
            )
        )
    return parser


def _eval_arguments(p: argparse.ArgumentParser) -> None:
    """``jaxfeed eval``'s arguments."""
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "--checkpoint", type=_step, default="best", help="best, last or a step (default: best)"
    )
    p.add_argument("--split", help="split or split expression (default: the run's eval split)")
    p.add_argument("--data", help="other data with the run's columns (default: the run's)")
    p.add_argument("--data-dir", help="folder of the dataset's files (default: the run's)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    p.add_argument(
        "--no-compile-cache", dest="compile_cache", action="store_false", help=COMPILE_CACHE_HELP
    )
    p.set_defaults(run=commands.evaluate)


def _predict_arguments(p: argparse.ArgumentParser) -> None:
    """``jaxfeed predict``'s arguments."""
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="image files, folders (recursively, sorted) or tables; - alone reads paths from stdin",
    )
    p.add_argument(
        "--checkpoint", type=_step, default="best", help="best, last or a step (default: best)"
    )
    p.add_argument(
        "--top-k", type=_positive, default=3, help="classes to show per input (default: 3)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--output", metavar="FILE.csv|FILE.jsonl", help="write one row per input to a file"
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse a table's category unseen in training (default: predicted as unknown, "
        "counted per column in a note)",
    )
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    p.add_argument(
        "--no-compile-cache", dest="compile_cache", action="store_false", help=COMPILE_CACHE_HELP
    )
    p.set_defaults(run=commands.predict)


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    """``jaxfeed generate``'s arguments."""
    p.add_argument("run_dir", metavar="RUN_DIR|hf:ORG/NAME|FOLDER",
                   help="a run, or a pretrained causal LM: a Hub id or a Hub-format folder")  # fmt: skip
    p.add_argument("prompts", nargs="+", metavar="PROMPT", help="texts to continue")
    p.add_argument(
        "--max-new-tokens",
        type=_bounded(1, 1 << 20),
        default=50,
        help="tokens to add (default: 50)",
    )
    p.add_argument(
        "--temperature",
        type=_non_negative_float,
        default=1.0,
        help="sampling temperature; 0: greedy (default: 1.0)",
    )
    p.add_argument("--top-k", type=_positive, help="sample among the K likeliest tokens")
    p.add_argument("--top-p", type=_probability, help="sample among the likeliest tokens of mass P")
    p.add_argument(
        "--seed", type=_bounded(0, 2**32 - 1), default=0, help="sampling seed (default: 0)"
    )
    p.add_argument(
        "--checkpoint", type=_step, default="best", help="best, last or a step (default: best)"
    )
    p.add_argument(
        "--stop",
        action="append",
        metavar="TEXT",
        type=_stop_text,
        help='end a continuation before TEXT (repeatable; "\\n" is a line break); a row stops '
        "decoding once its text holds one (default: a Hub checkpoint's stop_strings, else only "
        "the end-of-sequence token or --max-new-tokens)",
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="each PROMPT is a user message in the checkpoint's chat template (its "
        "tokenizer_config.json chat_template), and the reply is printed (a Hub model or a run "
        "fine-tuned from one; needs jinja2)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    p.add_argument(
        "--no-compile-cache", dest="compile_cache", action="store_false", help=COMPILE_CACHE_HELP
    )
    p.set_defaults(run=commands.generate)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    """``jaxfeed export``'s arguments."""
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "--format",
        choices=["hf"],
        default="hf",
        help="hf (the default, the only one): config.json, model.safetensors and the tokenizer "
        "or preprocessor files, as transformers' save_pretrained writes them (a run fine-tuned "
        "from a Hub model; every run's model/ folder already is its StableHLO export)",
    )
    p.add_argument("--out", help="the folder to write (new, or empty); needed for --format hf")
    p.add_argument("--checkpoint", default="best", help="best (default), last, or a step number")
    p.add_argument(
        "--merge",
        action="store_true",
        help="a --lora run: the full checkpoint with the adapters merged in (default: the PEFT "
        "adapter folder, adapter_config.json and adapter_model.safetensors)",
    )
    p.set_defaults(run=commands.export)


def _info_arguments(p: argparse.ArgumentParser) -> None:
    """``jaxfeed info``'s arguments."""
    p.add_argument("dataset", metavar="DATASET")
    p.add_argument("--data-dir")
    p.add_argument("--split", help="show only this split")
    p.add_argument(
        "--rows", type=_non_negative, default=3, help="example rows per split (default: 3)"
    )
    p.add_argument(
        "--verify", action="store_true", help="check a save_to_disk folder's recorded checksums"
    )
    p.set_defaults(run=commands.info)


def _bench_arguments(p: argparse.ArgumentParser) -> None:
    """``jaxfeed bench``'s arguments."""
    p.add_argument(
        "which",
        nargs="?",
        default="all",
        help="formatting, media, loader, train, checkpoint, accelerator (by name only) or all",
    )
    p.add_argument("--quick", action="store_true", help="smaller data, fewer repeats")
    p.add_argument(
        "--plot",
        metavar="DIR",
        help="write each benchmark's JSON results and a chart of them (PNG) into DIR",
    )
    p.set_defaults(run=commands.bench)


def _launch_arguments(p: argparse.ArgumentParser) -> None:
    """``jaxfeed launch``'s arguments."""
    p.add_argument(
        "--num-processes", type=_bounded(1, 1024), required=True, help="processes to start"
    )
    p.add_argument(
        "--port",
        type=_bounded(0, 65535),
        default=0,
        help="coordinator port on 127.0.0.1 (default: a free one)",
    )
    p.add_argument(
        "--devices-per-process",
        type=_bounded(1, 4096),
        help="fake CPU devices per process (to try it on one machine)",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the command, e.g. jaxfeed train ...",
    )
    p.set_defaults(run=commands.launch)


def _cache_arguments(p: argparse.ArgumentParser) -> None:
    """``jaxfeed cache``'s arguments."""
    cache.add_arguments(p)
    p.set_defaults(run=cache.run)


# The subcommands after train, in the order --help lists them: name, help, arguments.
_COMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None]], ...] = (
    (
        "eval",
        "evaluate a run: loss, accuracy, per-class metrics, confusion matrix",
        _eval_arguments,
    ),
    ("predict", "predict images or table rows with a run's model", _predict_arguments),
    (
        "generate",
        "continue prompts with a run's language model (--task lm) or a Hub one",
        _generate_arguments,
    ),
    (
        "export",
        "write a run's model in another format (hf: a Hub-format folder)",
        _export_arguments,
    ),
    ("info", "splits, rows, features, size and example rows of a dataset", _info_arguments),
    ("bench", "run the benchmarks and print their tables", _bench_arguments),
    (
        "cache",
        "list the Arrow cache's entries, or remove them (all, or unused ones)",
        _cache_arguments,
    ),
    (
        "launch",
        "start N local processes of a command as one multi-process JAX job",
        _launch_arguments,
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``jaxfeed`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    entry = argv is None  # the process's command (not a caller's main([...])): it ends after this
    if entry:  # quiet XLA's C++ start-up logs; a caller's main([...]) keeps its environment
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = sys.argv[1:] if argv is None else list(argv)
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if rest and args.command != "train":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.train_argv = rest
    args.entry = entry
    if args.command == "train":
        args.debug = args.debug or "--debug" in rest
    shown = warnings.showwarning
    if not args.debug:
        _quiet_stray_async_errors()
        logging.getLogger("absl").setLevel(logging.CRITICAL)  # Orbax's: jaxfeed says what failed
        warnings.showwarning = _warning_line(args.command)  # --debug: Python's, with the source
    try:
        status = args.run(args)
        if entry and status in (130, 143):  # stopped: nothing but the exit is left
            _stopping()
        if entry:  # done too: a Ctrl-C in the interpreter's teardown would print a traceback
            _exit_now(args, status)
        return status
    except SystemExit as stop:  # a run stopped by a signal (Preempted: 130 or 143), or argparse
        if entry and stop.code in (130, 143):
            _stopping()
        raise
    except ConfigError as err:
        if args.debug:
            raise
        print(f"jaxfeed {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted_status(args, entry)
    except BrokenPipeError as err:
        if _stdout_closed():  # the reader went away (| head): end quietly, as SIGPIPE would
            _quiet_stdout()
            return 141
        if args.debug:  # another pipe (a worker's, a socket): an error like any other
            raise
        return _report(args.command, err)
    except Exception as err:
        if _interrupted(err):  # Ctrl-C that Python wrapped (in a class's __set_name__, ...)
            return _interrupted_status(args, entry)
        if args.debug:
            raise
        return _report(args.command, err)
    finally:
        warnings.showwarning = shown


def _warning_line(command: str) -> Callable[..., None]:
    """``warnings.showwarning`` for a command: each warning one line on stderr, ``jaxfeed
    COMMAND: warning: MESSAGE`` (its lines joined), as errors are; not Python's two lines naming
    the source file, the line number and the code line that warned (``--debug`` keeps those).

    >>> import io
    >>> err = io.StringIO()
    >>> _warning_line("train")("a folder\\ncannot be written", RuntimeWarning, "/x/y.py", 3, err)
    >>> err.getvalue()
    'jaxfeed train: warning: a folder cannot be written\\n'
    """

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: Any = None) -> None:  # fmt: skip
        text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
        with contextlib.suppress(OSError, ValueError):  # stderr closed: never a reason to fail
            print(f"jaxfeed {command}: warning: {text}", file=file or sys.stderr, flush=True)

    return show


def _interrupted_status(args: Any, entry: bool) -> int:
    """A command stopped by Ctrl-C: say so and give 130 (the process's own command stops
    listening for another Ctrl-C first, and a :data:`_ENDS_AT_ONCE` one ends here)."""
    if entry:
        _stopping()
    print(f"jaxfeed {args.command}: interrupted", file=sys.stderr)
    if entry:
        _exit_now(args, 130)
    return 130


def _interrupted(err: BaseException) -> bool:
    """Whether ``err`` was caused by a Ctrl-C: Python 3.11 turns a ``KeyboardInterrupt`` raised
    while a class is built (in ``__set_name__``, as a dataclass field's) into a
    ``RuntimeError`` whose cause it is.

    >>> try:
    ...     raise RuntimeError("Error calling __set_name__") from KeyboardInterrupt()
    ... except RuntimeError as err:
    ...     _interrupted(err), _interrupted(ValueError())
    (True, False)
    """
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _report(command: str, err: BaseException) -> int:
    """Print ``err`` as the command's one-line error; the exit status (1)."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    print(
        f"jaxfeed {command}: error: {type(err).__name__}: {message} (--debug shows the traceback)",
        file=sys.stderr,
    )
    return 1


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (only then is a ``BrokenPipeError`` the
    ``| head`` case; one from a worker's pipe is an error to report)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):  # captured, closed, or no poll (Windows)
        return sys.stdout is None or getattr(sys.stdout, "closed", False)
    return any(e & (select.POLLERR | select.POLLHUP) for _, e in events)


def _is_closed_loop_noise(kind: type[BaseException] | None, value: object) -> bool:
    return (
        kind is not None
        and issubclass(kind, RuntimeError)
        and str(value) in ("Event loop is closed", "no running event loop")
    )


def _stop_text(value: str) -> str:
    """A ``--stop`` text, its escapes read (``"\\n"`` typed in a shell is a line break).

    >>> _stop_text("\\\\n"), _stop_text("END")
    ('\\n', 'END')
    """
    if not value:
        raise argparse.ArgumentTypeError("an empty --stop would end every continuation at once")
    return value.replace("\\r", "\r").replace("\\n", "\n").replace("\\t", "\t")


def _quiet_stray_async_errors() -> None:
    """Silence what a failed checkpoint read leaves behind: TensorStore reads still in flight
    complete on Orbax's closed event loop and print "Event loop is closed" (or "Exception ignored
    in: <coroutine ...>") once per array, thousands of lines after the one-line error. Only those
    are silenced; ``--debug`` shows them."""
    hook, unraisable = sys.excepthook, sys.unraisablehook
    if getattr(hook, "jaxfeed_quiet", False):  # installed by an earlier main() in this process
        return

    def excepthook(kind: Any, value: Any, tb: Any) -> None:
        if not _is_closed_loop_noise(kind, value):
            hook(kind, value, tb)

    def unraisablehook(info: Any) -> None:
        coroutine = type(info.object).__name__ in ("coroutine", "Task", "Future")
        if not (coroutine or _is_closed_loop_noise(info.exc_type, info.exc_value)):
            unraisable(info)

    excepthook.jaxfeed_quiet = True  # type: ignore[attr-defined]
    sys.excepthook, sys.unraisablehook = excepthook, unraisablehook


# commands whose work is in flight on XLA's threads when Ctrl-C lands and that keep nothing to
# finish: they end at once, stopped or done (no interpreter teardown under running computations,
# which segfaulted `generate` in about half the tries, and none for a late Ctrl-C to land in: it
# printed JAX's atexit traceback and exit 0); train, eval and the others unwind and close files
_ENDS_AT_ONCE = ("generate",)


def _exit_now(args: Any, status: int) -> None:
    """End a :data:`_ENDS_AT_ONCE` command (stopped or done) now with ``status``, its output flushed."""
    if args.command not in _ENDS_AT_ONCE:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _stopping() -> None:
    """The command was stopped by Ctrl-C (or SIGTERM) and now only exits: ignore Ctrl-C from here.

    Python restores its own SIGINT handler when a block that handled Ctrl-C ends, so another
    one (a second press, or one not yet handled when that block ends) arriving while the
    command unwinds raised ``KeyboardInterrupt`` outside every handler, and once Python resets
    the handlers it installed at exit, ended the process by SIGINT (-2) instead of 130. An
    ignored SIGINT stays ignored through the interpreter's exit.

    It also clears CPython's "unhandled KeyboardInterrupt" flag. A Ctrl-C that lands inside a
    builtin ``exec`` of a string (``dataclasses`` and ``namedtuple`` build their methods that
    way, so any import in flight can be one) sets that flag as the interrupt leaves the
    ``exec``, even though the command catches it further up; ``python -m jaxfeed.cli`` then
    ended by SIGINT (-2) at exit instead of with its status. Each ``exec`` of a string resets
    the flag before it runs, so an empty one clears it (CPython 3.11 to 3.13 alike).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exec("pass")  # a constant: resets the flag described above


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of a closed pipe is
    silent (the recipe of Python's signal documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor (captured)
        pass


__all__ = ["UsageError", "build_parser", "main"]
