"""Hub ids (``hf:org/name``, ``org/name``) through ``huggingface_hub`` against a fake Hub on
127.0.0.1 (``hub_server.FakeModelHub``, reached through ``HF_ENDPOINT``'s constants): the revision
resolves to a commit and every file comes from it, only config/safetensors/tokenizer files are
fetched, a second run without the server uses the cache, ``HF_HUB_OFFLINE=1`` is honoured."""

import numpy as np
import pytest

pytest.importorskip("torch")
hub_constants = pytest.importorskip("huggingface_hub.constants")

from hub_checkpoints import save_checkpoint  # noqa: E402
from hub_server import FakeModelHub  # noqa: E402
from jaxfeed.models import from_pretrained, preprocessor  # noqa: E402
from jaxfeed.models.hub import CheckpointNotCachedError  # noqa: E402
from jaxfeed.models.hub.files import resolve  # noqa: E402
from remote_servers import closed_port, serve  # noqa: E402

OLD, NEW = "1" * 40, "2" * 40


def files(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A fake Hub with org/tiny at two commits (main -> NEW, tag v1 -> OLD), an empty cache."""
    save_checkpoint(tmp_path / "old", "bert", "sequence-classification", seed=1)
    save_checkpoint(tmp_path / "new", "bert", "sequence-classification", seed=2)
    new = files(tmp_path / "new")
    new["pytorch_model.bin"] = b"\x80\x04 pickled: never downloaded"
    new["modeling_evil.py"] = b"raise SystemExit"
    fake = FakeModelHub({"org/tiny": {OLD: files(tmp_path / "old"), NEW: new}},
                        refs={"org/tiny": {"v1": OLD}})  # fmt: skip
    cache = tmp_path / "cache"
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def point(url):
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setattr(hub_constants, "ENDPOINT", url)
        monkeypatch.setattr(hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            url + "/{repo_id}/resolve/{revision}/{filename}")  # fmt: skip

    return fake, point, tmp_path


def logits(model):
    return np.asarray(model(input_ids=np.array([[2, 7, 9, 3, 0]]),
                            attention_mask=np.array([[1, 1, 1, 1, 0]])))  # fmt: skip


def test_download_cache_and_offline(hub, monkeypatch):
    fake, point, _ = hub
    with serve(fake) as url:
        point(url)
        first = resolve("hf:org/tiny")
        assert first.repo_id == "org/tiny" and first.commit == NEW
        assert first.folder.name == NEW and (first.folder / "config.json").is_file()
        assert not (first.folder / "pytorch_model.bin").exists()  # only the allowed patterns
        assert not (first.folder / "modeling_evil.py").exists()
        fetched = {p for m, p in fake.log.requests if "/resolve/" in p}
        assert fetched and all(
            f"/resolve/{NEW}/" in p for p in fetched
        )  # pinned to the resolved commit
        online = logits(from_pretrained("org/tiny"))
        tagged = resolve("hf:org/tiny", revision="v1")
        assert tagged.commit == OLD
        assert preprocessor("hf:org/tiny").encode("w1").ids[0] == 2
    # the server is gone: the cache answers, for main and for the tag
    point(f"http://127.0.0.1:{closed_port()}")
    again = resolve("hf:org/tiny")
    assert again.folder == first.folder and again.commit == NEW
    np.testing.assert_array_equal(logits(from_pretrained("hf:org/tiny")), online)
    assert resolve("org/tiny", revision="v1").commit == OLD
    # offline mode: no request at all, even with a server up
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with serve(fake) as url:
        point(url)
        fake.log.reset_counts()
        assert resolve("hf:org/tiny").folder == first.folder
        assert fake.log.requests == []
        with pytest.raises(
            CheckpointNotCachedError,
            match=r"'org/other' .*not in the local cache .*HF_HUB_OFFLINE=1",
        ):
            resolve("hf:org/other")


def test_unknown_repo_and_revision(hub):
    fake, point, _ = hub
    with serve(fake) as url:
        point(url)
        with pytest.raises(
            FileNotFoundError, match=r"model 'org/missing' was not found on the Hub"
        ):
            from_pretrained("hf:org/missing")
        with pytest.raises(
            FileNotFoundError, match=r"revision 'v9' of the Hub model 'org/tiny' does not exist"
        ):
            resolve("hf:org/tiny", revision="v9")


def test_unreachable_hub_without_cache(hub):
    _, point, _ = hub
    point(f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(
        CheckpointNotCachedError,
        match=r"'org/tiny' is not in the local cache .*could not be reached",
    ):
        resolve("hf:org/tiny")
