"""``jaxfeed generate`` in its own process, as a shell runs it: a prompt or ``--stop`` that is
not UTF-8 is one line naming it (exit 2), and Ctrl-C at any moment ends it with 130: never a
lost interrupt (exit 0 after "Exception ignored"), a wrapped one (exit 1) or a crash (139)."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import forkserver
from models.hub.lm_checkpoints import save_checkpoint, word_tokenizer


@pytest.fixture(scope="module")
def lm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub") / "tiny-llama"
    save_checkpoint("llama", folder)
    word_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def command(*args) -> list:
    return [sys.executable, "-m", "jaxfeed.cli", "generate", *args]


ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def test_a_prompt_or_stop_that_is_not_utf8_is_named(lm_folder):
    for args, name in [((b"t5 \xff t6",), "PROMPT 1"), (("t5", b"t6\xe9"), "PROMPT 2"),
                       (("t5", "--stop", b"\xfe"), "--stop")]:  # fmt: skip
        done = forkserver.run(command(str(lm_folder), *args, "--max-new-tokens", "2"),
                              env=ENV, timeout=300, text=False)  # fmt: skip
        err = done.stderr.decode("utf-8", "replace")
        assert done.returncode == 2 and len(err.strip().splitlines()) == 1, err
        assert f"error: {name} is not UTF-8 text (byte 0x" in err and "Traceback" not in err


def test_ctrl_c_always_ends_with_130(lm_folder):
    # the import, the checkpoint's loading, the compilation and the decoding loop
    for delay in (1.5, 3.0, 4.5, 6.0):
        proc = subprocess.Popen(command(str(lm_folder), "t5 t6", "--max-new-tokens", "120"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)  # fmt: skip
        time.sleep(delay)
        if proc.poll() is not None:  # finished before the signal (a fast machine): no case
            proc.communicate()
            continue
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        err = err.decode("utf-8", "replace")
        if proc.returncode == 0:  # done between poll and signal: it must end cleanly all the same
            assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]
            continue
        assert proc.returncode == 130, f"after {delay} s: exit {proc.returncode}: {err[-2000:]}"
        assert err.strip().splitlines()[-1] == "jaxfeed generate: interrupted", err[-2000:]


LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
# `jaxfeed generate` with the chat template's time limit at 1 s, not 10: the same command in its
# own process (exit status, stderr), without 9 s of a template spinning a core at each run
SHORT_LIMIT = (
    "import sys; from jaxfeed.recipes.serving import hub_generate; hub_generate.RENDER_SECONDS = 1.0; "
    "from jaxfeed.cli import main; sys.exit(main(sys.argv[1:]))"
)


def rendering(proc: subprocess.Popen, timeout: float = 120) -> bool:
    """Whether ``proc`` started its chat template's rendering process (``chat_sandbox.py``)
    within ``timeout`` seconds: its children are polled every 50 ms (without /proc: 6 s, by
    when the import, a few seconds, is over)."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    if not children.exists():
        time.sleep(6)
        return proc.poll() is None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for child in children.read_text().split():
            with contextlib.suppress(OSError):
                if b"chat_sandbox" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return True
        time.sleep(0.05)
    return False


def test_a_chat_template_that_never_ends_is_refused_or_stopped_by_ctrl_c(lm_folder, tmp_path):
    from jaxfeed.recipes.serving import hub_generate
    from models.hub.chat_templates import checkpoint

    assert hub_generate.RENDER_SECONDS == 10.0  # the command's limit; 1 s in the first run below
    folder = tmp_path / "loops"
    shutil.copytree(lm_folder, folder)
    checkpoint(folder, LOOPS)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SHORT_LIMIT, "generate", str(folder), "t5",
                           "--chat"], capture_output=True, text=True, env=ENV, timeout=120)  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"the chat template of {folder} took more than 1 s to render" in done.stderr
    assert time.monotonic() - start < 60
    proc = subprocess.Popen(command(str(folder), "t5", "--chat"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
    assert rendering(proc), proc.communicate()  # Ctrl-C once the template renders
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "jaxfeed generate: interrupted"
    assert time.monotonic() - start < 5
