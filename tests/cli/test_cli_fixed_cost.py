"""Issue 64, the fixed cost of every run: ``curves.png`` (about 0.85 CPU s, half of it
matplotlib's import) is drawn by a process of its own while the command exports and reads the
test split, and is there when the command exits; the matmul the budget's expected cost rests on
is timed once a day per machine, not in every run."""

import json
import sys
import time

import PIL.Image
import pytest

from cli_helpers import jaxfeed
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.config import budget as budgetmod
from jaxfeed.recipes.config.rate_cache import FILE, machine_key
from jaxfeed.recipes.train.opening import open_run
from jaxfeed.recipes.train.plan import plan

# imported first by every Python process of the run (PYTHONPATH): at exit, what it had imported
SITECUSTOMIZE = """
import atexit, os, sys

def _said():
    name = "main" if sys.argv and sys.argv[0].endswith(os.path.join("cli", "__main__.py")) else "other"
    with open(os.environ["IMPORTED_LOG"], "a") as f:
        f.write(f"{name} {os.getpid()} {int('matplotlib' in sys.modules)} {int('jax' in sys.modules)}\\n")

atexit.register(_said)
"""


def test_curves_are_drawn_beside_the_export_by_a_process_without_jax(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log, out = tmp_path / "imported.log", tmp_path / "run"
    env = {"PYTHONPATH": f"{hook}:{':'.join(p for p in sys.path if p)}", "IMPORTED_LOG": str(log)}
    done = jaxfeed("train", "--data", "digits", "--model", "mlp", "--epochs", "1", "--out",
                   str(out), env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    with PIL.Image.open(out / "curves.png") as image:  # there when the command exits
        assert image.format == "PNG" and image.size[0] > 800
    assert "curves.png" in done.stdout and "note: curves.png" not in done.stdout
    rows = [line.split() for line in log.read_text().splitlines()]
    main = [r for r in rows if r[0] == "main"]
    drew = [r for r in rows if r[0] == "other" and r[2] == "1"]  # the process that drew
    assert len(main) == 1 and main[0][2:] == ["0", "1"], rows  # the command: JAX, no matplotlib
    assert len(drew) == 1 and drew[0][3] == "0", rows  # matplotlib without JAX


@pytest.fixture
def text_csv(tmp_path):
    rows = ["text,label"] + [f"w{i % 7} w{i % 5} k{i % 2} w{i % 3},c{i % 2}" for i in range(80)]
    path = tmp_path / "texts.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_budget_reads_this_machine_s_matmul_rate_from_the_cache(text_csv, tmp_path,
                                                                     monkeypatch):  # fmt: skip
    """A text run's budget says its expected cost from a matmul rate: read from
    ``<cache>/machine/matmul_rate.json`` when timed there within a day (it was timed in every
    run: 0.27 s), else timed and written there."""
    pytest.importorskip("tokenizers")
    cache = tmp_path / "cache"
    monkeypatch.setenv("JAXFEED_CACHE", str(cache))
    config = RunConfig(data=str(text_csv), model="transformer", epochs=1, vocab_size=300)

    def planned(name: str) -> dict:
        with open_run(RunConfig(**{**vars(config), "out": str(tmp_path / name)}),
                      lambda *a: None, 0) as run:  # fmt: skip
            plan(run)
            return run.budget

    first = planned("first")  # timed, then kept
    saved = json.loads((cache / FILE).read_text())[machine_key()]
    assert first["matmul_rate"] == saved["rate"] > 1e8 and time.time() - saved["timed"] < 600

    def not_again() -> float:
        raise AssertionError("timed again")

    monkeypatch.setattr(budgetmod, "matmul_rate", not_again)
    assert planned("second")["matmul_rate"] == saved["rate"]
    (cache / FILE).write_text(json.dumps({machine_key(): {**saved, "timed": time.time() - 2e5}}))
    monkeypatch.setattr(budgetmod, "matmul_rate", lambda: 1.5e11)  # a day old: timed again
    assert planned("third")["matmul_rate"] == 1.5e11


def test_curves_are_drawn_here_where_matplotlib_is_already_imported(tmp_path, monkeypatch):
    """A process that already imported matplotlib's figure and Agg canvas (a notebook, the
    tests' fork server) draws curves.png itself: no Python process starts to import it again;
    one that did not starts the drawing process."""
    import subprocess

    import matplotlib.backends.backend_agg
    import matplotlib.figure

    assert matplotlib.figure and matplotlib.backends.backend_agg  # the modules the rule looks for

    from jaxfeed._base import curves

    started = []
    real = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: started.append(a) or real(*a, **kw))
    history = [{"epoch": e, "train_loss": 1 / e, "eval_loss": 1.1 / e} for e in (1, 2, 3)]
    job = curves.CurvesInBackground(history, tmp_path / "here.png", best=2)
    assert not started
    with PIL.Image.open(job.result()) as image:
        assert image.format == "PNG" and image.size[0] > 800
    monkeypatch.setattr(curves, "_DRAWING_MODULES", ("a_module_nobody_imported",))
    job = curves.CurvesInBackground(history, tmp_path / "there.png", best=2)
    assert len(started) == 1
    with PIL.Image.open(job.result()) as image:
        assert image.format == "PNG"
