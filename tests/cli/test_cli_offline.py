"""Issue 54, item 9: offline, ``generate hf:...`` of a checkpoint not in the cache is one clear
line with exit 2, as ``train --model hf:...`` says it (no exception class, nothing cut)."""

from __future__ import annotations

import pytest

from cli_helpers import jaxfeed


def test_generate_offline_without_the_checkpoint_is_one_clear_line(tmp_path):
    pytest.importorskip("huggingface_hub")
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache")}
    done = jaxfeed("generate", "hf:nobody/nothing", "hi", env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "jaxfeed generate: error: hf:nobody/nothing: model 'nobody/nothing' is not in the local "
        f"cache ({tmp_path / 'cache'}) and HF_HUB_OFFLINE=1 is set; connect once to download it, "
        "or give a local folder"
    ]
