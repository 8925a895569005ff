"""Every Python code block of the README runs, in order, in one namespace."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_blocks():
    assert len(python_blocks()) >= 6


def test_readme_python_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    for i, block in enumerate(python_blocks()):
        try:
            exec(compile(block, f"README.md block {i}", "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"README python block {i} failed: {err!r}\n{block}") from err
    out = capsys.readouterr().out
    assert "{'data': Array([1, 2], dtype=int32)}" in out
    assert "{'label': Array([0, 0, 1], dtype=int32)}" in out
    assert "['eval_accuracy', 'eval_loss', 'eval_same_parity', 'eval_top3_accuracy']" in out
    assert "['batch_stats', 'params']" in out
    assert "'train_loss', 'train_mae']" in out and "(2,)" in out
