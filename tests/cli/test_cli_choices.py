"""What a new user trips on (issue 41), the command side: a run resumed after its data moved,
and the choices the command makes said aloud. One small table run, shared by the module."""

import json
import shutil
import sys

import jax
import pytest

from cli_helpers import jaxfeed, run_main

TINY = ["--model", "mlp", "--epochs", "2", "--batch-size", "16", "--lr", "0.05", "--metrics",
        "accuracy,f1", "--monitor", "eval_f1"]  # fmt: skip


def houses(path, rows=80):
    lines = ["city,rooms,area,price"]
    for i in range(rows):
        city = ("rome", "oslo", "lima")[i % 3]
        lines.append(f"{city},{1 + i % 4},{40 + 7 * (i % 11)},{'high' if i % 4 > 1 else 'low'}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("choices")
    data = houses(root / "houses.csv")
    out = root / "run"
    result = jaxfeed("train", "--data", str(data), "--label-column", "price", "--out", str(out),
                     *TINY)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return data, out, result.stdout


def test_resume_accepts_the_same_data_moved_and_refuses_other_data(table_run, tmp_path, capsys):
    data, out, _ = table_run
    saved = json.loads((out / "config.json").read_text())
    assert list(saved["data_fingerprint"]) == ["houses.csv"]
    run = tmp_path / "run"
    shutil.copytree(out, run)
    moved = tmp_path / "elsewhere" / "houses.csv"
    moved.parent.mkdir()
    shutil.copy(data, moved)
    changed = tmp_path / "changed.csv"
    changed.write_text(data.read_text().replace("rome,", "roma,", 1))
    # the refusals run in this process (cheaper); the resume that trains in a process of its own
    status, _, err = run_main(
        capsys, "train", "--out", str(run), "--resume", "--data", str(changed)
    )
    assert status == 2, err
    assert f"--data {changed} is not the data the run was trained on ({data})" in err
    assert "changed.csv: not in the run's data; houses.csv: missing" in err
    same_name = tmp_path / "other" / "houses.csv"
    same_name.parent.mkdir()
    same_name.write_text(data.read_text().replace("rome,", "roma,", 1))
    status, _, err = run_main(
        capsys, "train", "--out", str(run), "--resume", "--data", str(same_name)
    )
    assert status == 2 and "houses.csv: content differs (same size" in err, err
    result = jaxfeed("train", "--out", str(run), "--resume", "--data", str(moved), "--epochs", "3")
    assert result.returncode == 0, result.stderr
    assert "epoch 3/3" in result.stdout and "epoch 2/3" not in result.stdout
    assert json.loads((run / "config.json").read_text())["options"]["data"] == str(moved)


def test_unseen_categories_are_counted_per_column_and_strict_refuses_them(
    table_run, tmp_path, capsys
):
    _, out, _ = table_run
    new = tmp_path / "new.csv"
    new.write_text("city,rooms,area\nparis,2,50\nrome,9,60\nparis,7,70\noslo,1,80\n")
    status, shown, err = run_main(capsys, "predict", str(out), str(new), "--json")  # cheaper here
    assert status == 0, err
    assert len(json.loads(shown)) == 4
    assert (
        "note: unseen in training, predicted as unknown (--strict refuses them): 'city' 2 rows "
        "('paris' 2); 'rooms' 2 rows ('9' 1, '7' 1)" in err
    )
    seen = tmp_path / "seen.csv"
    seen.write_text("city,rooms,area\nrome,2,50\n")
    status, _, err = run_main(capsys, "predict", str(out), str(seen))
    assert status == 0 and "unseen" not in err, err
    status, _, err = run_main(capsys, "predict", str(out), str(new), "--strict")
    assert status == 2, err
    assert f"{new}:0: column 'city' has 'paris', a category unseen in training" in err


def test_the_summary_shows_the_monitored_metric_and_four_decimals(table_run):
    _, _, stdout = table_run
    header, values = stdout.split("\nbest epoch")[1].splitlines()[:2]
    header = "best epoch" + header
    columns = [h.strip() for h in header.split("  ") if h.strip()]
    assert "validation accuracy" in columns and "validation f1" in columns, header
    figures = values.split()
    at = columns.index("validation f1")
    assert len(figures[at].split(".")[1]) == 4, values  # 0.7500, not 0.75
    assert len(figures[columns.index("validation accuracy")].split(".")[1]) == 4, values
    assert "highest eval_f1 on the validation split" in stdout


def test_mesh_axes_left_unused_are_named_and_a_bad_mesh_is_refused_first(
    table_run, tmp_path, capsys
):
    data, _, _ = table_run
    assert jax.device_count() == 8  # this process has 8 fake CPU devices (conftest.py)
    args = ["train", "--data", str(data), "--label-column", "price", *TINY, "--epochs", "1"]
    status, shown, err = run_main(capsys, *args, "--out", str(tmp_path / "r"), "--mesh",
                                  "data=4,model=2", "--sharding", "fsdp")  # fmt: skip
    assert status == 0, err
    assert "8 CPU devices in 1 process (mesh data=4,model=2" in shown
    assert "note: mesh axis model=2 is used by nothing" in shown
    # a mesh the devices cannot make is refused before the data is read (a bad label here)
    bad = [*args[:3], "--label-column", "nonesuch", *args[5:]]
    status, _, err = run_main(capsys, *bad, "--out", str(tmp_path / "b"), "--mesh", "data=16")
    assert status == 2 and "--mesh data=16" in err, err
    assert "nonesuch" not in err and not (tmp_path / "b").exists()


def test_a_missing_tokenizers_install_leaves_no_run_folder(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "site"
    (fake / "tokenizers").mkdir(parents=True)  # `import tokenizers` fails as when not installed
    (fake / "tokenizers" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tokenizers'\", name='tokenizers')\n"
    )
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line number {i} of the corpus\n" for i in range(40)))
    out = tmp_path / "run"
    # in this process (one JAX start fewer): the fake first on the path, the real one's modules
    # out of sys.modules until the test ends (monkeypatch puts them back)
    monkeypatch.syspath_prepend(str(fake))
    for name in [m for m in sys.modules if m == "tokenizers" or m.startswith("tokenizers.")]:
        monkeypatch.delitem(sys.modules, name)
    status, _, err = run_main(capsys, "train", "--task", "lm", "--data", str(corpus), "--out",
                              str(out))  # fmt: skip
    assert status == 2, err
    assert err.startswith("jaxfeed train: error: ") and "tokenizers" in err
    assert "Error:" not in err  # no class name before the message
    assert not out.exists()
