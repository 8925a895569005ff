"""Every Python code block of the README and of the documentation pages runs.

Each page runs in its own namespace, its blocks in order, in a fresh working folder; a page is
self-contained (its first block imports and makes what the later ones use). Pages other
developers add under docs/ are picked up by the glob.
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]

# What a page must print (its outputs are shown in comments beside the code).
EXPECTED = {
    "README.md": ["(8, 8) ['0', '1', '2']", "eval accuracy 0.9", "(101, 64) (1, 3)", "(3, 2)"],
    "docs/guide/datasets.md": [
        "{'data': Array([1, 2], dtype=int32)}",
        "{'label': Array([0, 0, 1], dtype=int32)}",
    ],
    "docs/guide/training.md": [
        "['eval_accuracy', 'eval_loss', 'eval_same_parity', 'eval_top3_accuracy']",
        "['batch_stats', 'params']",
        "'train_loss', 'train_mae']",
        "(2,)",
    ],
    "docs/guide/checkpoints.md": ["(5, 10)"],
    "docs/guide/loader.md": [
        "[(8, 100), (8, 100)]",
        "31 50",
        "left [[2, 3, 4], [1, 1, 5]]",
        "[5, 6, 7]",
        "List(Value('bfloat16')) bfloat16",
    ],
    "docs/guide/long-runs.md": ["preempted: 143 50", "100 4"],
    "docs/guide/devices.md": ["P('data', 'model')"],
    "docs/guide/command-text.md": ["True False"],
    "docs/guide/hub-models.md": [
        "(4, 2)",
        "positive",
        "['adapter_config.json', 'adapter_model.safetensors'] ['q_lin', 'v_lin'] "
        "['classifier', 'pre_classifier']\nTrue",
        "(2, 3)",
        "(1, 4)",
    ],
    "docs/guide/text.md": [
        "1599 800",
        "'train_loss', 'train_perplexity', 'train_token_accuracy']",
        "[' five six seven eight nine ten', ' eight nine ten']\n2 True",
        "[' five six seven eight ', ' eight ']\nTrue",
        "(4, 2) [None, None]",
        "['adapter_config.json', 'adapter_model.safetensors'] True",
    ],
}


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# a page showing the README's tour again (getting-started.md) is not run twice
PAGES_WITH_CODE = [
    p
    for p in PAGES
    if python_blocks(p) and (p == README or python_blocks(p) != python_blocks(README)[:1])
]


def test_pages_with_expected_output_have_code():
    assert {name(p) for p in PAGES_WITH_CODE} >= set(EXPECTED)
    assert len(python_blocks(README)) == 2  # the tour, then text and audio
    assert python_blocks(ROOT / "docs" / "getting-started.md") == python_blocks(README)[:1]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=name)
def test_python_blocks_run(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_page"}
    for i, block in enumerate(python_blocks(page)):
        try:
            exec(compile(block, f"{name(page)} block {i}", "exec"), namespace)
        except ImportError as err:
            if importlib.util.find_spec("torch") is None and "torch" in str(err).lower():
                pytest.skip(f"{name(page)} block {i} needs torch (transformers' models)")
            raise AssertionError(
                f"{name(page)}: python block {i} failed: {err!r}\n{block}"
            ) from err
        except Exception as err:
            raise AssertionError(
                f"{name(page)}: python block {i} failed: {err!r}\n{block}"
            ) from err
    if page == README:
        # Issue 54, item 13: a second run of the tour in the same folder (as a reader pastes it
        # again) must not die on the first run's checkpoint folder. (Here, not in a test of its
        # own that ran the tour twice more: 2 CPU s a run.)
        tour = python_blocks(README)[0]
        exec(compile(tour, "README.md tour, run 1", "exec"), {"__name__": "docs_page"})
    out = capsys.readouterr().out
    for text in EXPECTED.get(name(page), []):
        assert text in out, f"{name(page)} should print {text!r}; it printed:\n{out}"
    if page == README:
        assert out.count("eval accuracy 0.9") == 2, out
        # issue 64, item 11: the comment beside the print is what it prints (it said 0.972 where
        # 0.967 came out), to one test image of 360 (another CPU may round one differently)
        said = float(re.search(r"# eval accuracy (0\.\d+)", README.read_text())[1])
        printed = [float(v) for v in re.findall(r"^eval accuracy (0\.\d+)$", out, flags=re.M)]
        assert all(abs(v - said) <= 1 / 360 + 1e-9 for v in printed), (said, printed)


def test_the_readme_says_how_to_run_what_make_demo_leaves_out():
    """Issue 54, items 6, 7 and 12: activating .venv, the extras of the text and audio block
    (said above it), and the Hub's language models with generate in "Fine-tune a Hub model"."""
    text = README.read_text()
    assert "source .venv/bin/activate" in text and ".venv/bin/jaxfeed" in text
    audio = text.index("## Text and audio")
    above = text[audio : text.index("```bash", audio)]
    assert "`text` extra" in above and "`audio` extra" in above and "make demo" in above
    hub = text[text.index("## Fine-tune a Hub model") : text.index("## Headline benchmarks")]
    for name in ("GPT-2", "Llama", "Mistral", "Qwen", "jaxfeed generate"):
        assert name in hub, name
    extras = (ROOT / "docs" / "getting-started.md").read_text()
    assert "`jaxfeed[text]`" in extras


def _demo_rows(text: str) -> list[list[str]]:
    """The best row of the summary table (its figures that do not vary with the machine's
    speed: epoch, step, losses and accuracies) in a text, and each epoch line's figures."""
    rows = []
    for line in text.splitlines():
        if re.match(r"^\d+ +\d+ +0\.\d{4} ", line):
            rows.append(line.split()[:5])
        elif line.startswith("epoch ") and "train_loss" in line:
            rows.append(line.split("  ")[:6])
    return rows


@pytest.mark.slow  # one `jaxfeed train` with its defaults: about 12 CPU seconds
def test_the_readme_shows_what_make_demo_prints(tmp_path):
    """Issue 64, item 11: `make demo` printed best epoch 9, step 189, 0.0517, 0.9792 where the
    README and the getting-started page showed 10, 210, 0.0468, 0.9722 (the defaults had
    changed since). The demo runs as a user's shell runs it: XLA's own options, one device."""
    env = {**os.environ, "XLA_FLAGS": "", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "jaxfeed.cli", "train"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    printed = _demo_rows(done.stdout)
    for page in (README, ROOT / "docs" / "getting-started.md"):
        shown = _demo_rows(page.read_text())
        assert shown and all(row in printed for row in shown), (name(page), shown, printed)


def test_the_front_pages_say_what_jaxfeed_does_beyond_the_tour():
    """Issue 64, item 7: the README, the docs' index and getting-started never mentioned LoRA,
    int8, Spark, Ray or accelerators, and the README's extras had no quant, spark or ray; the
    README stays at most 250 lines."""
    import tomllib

    for page in (README, ROOT / "docs" / "index.md", ROOT / "docs" / "getting-started.md"):
        text = page.read_text()
        missing = [w for w in ("LoRA", "int8", "Spark", "Ray", "TPU", "GPU") if w not in text]
        assert not missing, (name(page), missing)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    listed = set(re.findall(r"`jaxfeed\[(\w+)\]`", README.read_text()))
    assert set(extras) - {"dev"} <= listed, sorted(set(extras) - {"dev"} - listed)
    assert len(README.read_text().splitlines()) <= 250
