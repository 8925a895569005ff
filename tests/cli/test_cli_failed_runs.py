"""A run that fails before its first checkpoint leaves no run folder behind (issue 52, item 25):
the folder it made is removed, an empty folder it was given is emptied again."""

from cli_helpers import run_main

BROKEN = '''
from flax import nnx


class Net(nnx.Module):
    """A user's model that fails at its first step."""

    def __init__(self, num_classes, input_shape, *, rngs):
        self.out = nnx.Linear(64, num_classes, rngs=rngs)

    def __call__(self, x):
        raise RuntimeError("broken on purpose")
'''


def test_a_run_failing_before_its_first_checkpoint_leaves_no_folder(tmp_path, capsys):
    (tmp_path / "broken.py").write_text(BROKEN)
    model = f"{tmp_path / 'broken.py'}:Net"
    made = tmp_path / "runs" / "new"
    status, _, err = run_main(capsys, "train", "--data", "digits", "--model", model,
                              "--epochs", "1", "--out", str(made))  # fmt: skip
    assert status != 0 and "broken on purpose" in err, err[-3000:]
    assert not made.exists(), sorted(p.name for p in made.iterdir())
    given = tmp_path / "given"
    given.mkdir()
    status, _, err = run_main(capsys, "train", "--data", "digits", "--model", model,
                              "--epochs", "1", "--out", str(given))  # fmt: skip
    assert status != 0 and "broken on purpose" in err, err
    assert given.is_dir() and not any(given.iterdir()), sorted(p.name for p in given.iterdir())
