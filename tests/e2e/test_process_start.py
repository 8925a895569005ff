"""Starting worker processes never hangs: when a child dies before taking its work (a script
without its main guard, an import error in the child, a killed child) the parent raises a clear
error within seconds, whatever the size of the work sent to it (shards of 500 KB, a 1 MiB loader
transform: more than a pipe holds). DataLoader workers do not run the main script again (its
functions reach them by value), so an unguarded script works with them, and they die at start
only while reading the loader's functions. One script runs every case (one interpreter and JAX
start)."""

import re
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    CASE = os.environ.get("CASE", "works")  # set by the parent for its children, case by case
    if __name__ == "__mp_main__":  # a spawned child re-running this script
        if CASE == "import":
            raise ImportError("No module named 'only_in_the_parent'")
        if CASE == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
    import numpy as np
    from jaxfeed import Dataset  # DataLoader, which imports JAX, is imported where a loader starts:
    # the map and filter workers that run this script again stop before it (1 CPU s each)

    def double(batch):  # defined in __main__: sent to the workers by value
        return {"y": [2 * v for v in batch["x"]]}

    big = np.random.default_rng(0).random(1 << 17)  # 1 MiB, sent with the loader's transform
    ds = Dataset.from_dict({"x": np.arange(10_000), "s": [f"row {i} " * 15 for i in range(10_000)]})

    def explode(case):  # a DataLoader worker reading the loader's transform: dies as CASE says
        import multiprocessing, signal
        if multiprocessing.parent_process() is not None:
            if case == "import":
                raise ImportError("No module named 'only_in_the_parent'")
            if case == "killed":
                os.kill(os.getpid(), signal.SIGKILL)

    class Bomb:
        def __reduce__(self):
            return explode, (os.environ.get("CASE", "works"),)

    bomb = Bomb()

    def shift(batch):
        assert bomb is not None
        return {"x": batch["x"] + big[:1]}

    def loader(*args, **kwargs):
        from jaxfeed import DataLoader
        return DataLoader(*args, **kwargs)

    starters = {
        "map": lambda: ds.map(lambda r: {"y": r["x"] * 2}, num_proc=2),
        "filter": lambda: ds.filter(lambda r: r["x"] % 2 == 0, num_proc=2),
        "loader": lambda: list(loader(ds, batch_size=1000, num_workers=2, transform=shift)),
    }
    if __name__ == "__main__":  # guarded: works (its children skip the rest, CASE == "works")
        small = Dataset.from_dict({"x": list(range(10))})
        print(list(small.map(double, batched=True, batch_size=3, num_proc=2)["y"]))
        try:  # a worker's exception is raised here with its own type
            small.map(lambda b: {"y": [1 // (v - 7) for v in b["x"]]}, batched=True, batch_size=5, num_proc=2)
        except ZeroDivisionError:
            print("ZeroDivisionError")
    def mark(case):  # splits the parent's stderr by case
        if __name__ == "__main__":
            print(f"CASE {case}", file=sys.stderr, flush=True)

    if CASE != "works" or __name__ == "__main__":  # unguarded: children come here too
        for case, names in (("guard", "map filter"), ("import", "map loader"), ("killed", "map loader")):
            os.environ["CASE"] = case  # what the children see
            mark(case)
            for name in names.split():
                began = time.monotonic()
                try:
                    starters[name]()
                    outcome = "no error"
                except Exception as err:
                    if type(err).__name__ == "ParallelWorkerError":  # datasets' words; cause: who
                        assert str(err).startswith("One of the subprocesses has abruptly died")
                        err = err.__cause__
                    outcome = f"{type(err).__name__}: {err}"
                print(f"RESULT {case} {name} {time.monotonic() - began:.1f} {outcome!r}", flush=True)
        os.environ["CASE"] = "guard"
        mark("final")
        starters["loader"]()  # unguarded, and fine: the loader's workers skip the script
        print("RESULT final loader 0 'no error'", flush=True)
    """
)


def test_a_child_that_dies_at_start_gives_a_clear_error_within_seconds(tmp_path):
    """With its main guard, functions of the main script reach the workers and a worker's error
    comes back with its type; without it, each way of dying early gets its clear error."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400)
    lines = out.stdout.strip().splitlines()
    assert lines[:2] == [str([2 * i for i in range(10)]), "ZeroDivisionError"], out.stderr[-3000:]
    results = {}
    for line in lines:
        if line.startswith("RESULT "):
            _, case, name, seconds, outcome = line.split(" ", 4)
            results[case, name] = (float(seconds), eval(outcome))  # a repr we printed
    assert len(results) == 7, out.stdout + out.stderr[-3000:]
    for (case, name), (seconds, outcome) in results.items():
        assert seconds < 60, (case, name, seconds)  # seconds, not a hang (a loaded machine)
        if case == "final":
            assert outcome == "no error"
            continue
        if name == "loader" and case == "import":
            assert outcome.startswith("WorkerError: DataLoader worker 0 could not load the "), (
                outcome
            )
            assert "ImportError: No module named 'only_in_the_parent'" in outcome, outcome
            continue
        if case == "guard":
            assert outcome.startswith(f"MainGuardError: Dataset.{name}(num_proc=...) starts worker")
            assert 'if __name__ == "__main__":' in outcome and "train.py" in outcome, outcome
            assert "(or use num_proc=None)" in outcome
            continue
        who = "DataLoader worker" if name == "loader" else f"{name} worker"
        error = "WorkerError" if name == "loader" else "ParallelWorkerError"
        how = "exited (1)" if case == "import" else "was killed by signal 9"
        assert re.match(rf"{error}: {who} \d \(pid \d+\) {re.escape(how)} ", outcome), outcome
        if name == "loader":
            assert outcome.endswith("while starting"), outcome
        if case == "import":
            assert outcome.endswith("(what it printed on stderr says why)"), outcome
    # stderr by case (a child is killed once its sibling's death is reported: it may be cut off)
    parts = dict(part.split("\n", 1) for part in out.stderr.split("CASE ")[1:])
    assert list(parts) == ["guard", "import", "killed", "final"], out.stderr[-3000:]
    assert parts["guard"] == parts["killed"] == ""  # no traceback from a guarded-out child
    assert "ImportError: No module named 'only_in_the_parent'" in parts["import"]  # says why
    # the unguarded DataLoader at the end works: its workers never ran the script
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in parts["final"], parts["final"]
