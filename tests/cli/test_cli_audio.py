"""``jaxfeed train`` on an audio folder end to end: one run per module (stopped by SIGTERM and
resumed), then eval, predict and the export in this process; bad clips refused up front."""

import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest
import soundfile

from audio_clips import CLASSES, clip, make_folder, write_wav
from cli_helpers import jaxfeed, run_main
from jaxfeed import load_exported

TRAIN = ["--sample-rate", "8000", "--clip-seconds", "0.3", "--val-split", "0.25", "--epochs", "8",
         "--batch-size", "16", "--lr", "0.003"]  # fmt: skip


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """3 classes x 20 clips of 0.25-0.35 s: falling and rising chirps, steady tones; a quarter of
    them at 16 kHz (resampled to the run's 8 kHz)."""
    return make_folder(tmp_path_factory.mktemp("clips"), per_class=20)


@pytest.fixture(scope="module")
def audio_run(clips, tmp_path_factory):
    """Train, stop it with SIGTERM after epoch 2, resume it to epoch 8."""
    out = tmp_path_factory.mktemp("runs") / "audio"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "jaxfeed.cli", "train", "--data", str(clips), *TRAIN,
            "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)  # fmt: skip
    first = []
    try:
        for line in proc.stdout:
            first.append(line)
            if line.startswith("epoch 2/8"):
                proc.send_signal(signal.SIGTERM)
                break
        rest, err = proc.communicate(timeout=300)
    finally:  # whatever happened, nothing of the run is left behind
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    first = "".join(first) + rest
    assert proc.returncode == 143, first + err[-3000:]
    stopped = [line for line in err.splitlines() if line.strip()]
    resumed = jaxfeed("train", "--out", str(out), "--resume", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return out, first, stopped, resumed.stdout


def test_train_on_an_audio_folder_then_sigterm_and_resume(clips, audio_run):
    out, first, stopped, resumed = audio_run
    assert f"data {clips}: detected audio folder" in first
    assert (
        "audio: 60 clips of 0.2" in first and "at 8,000, 16,000 Hz; resampled to 8,000 Hz" in first
    )
    assert "clips: 0.3 s (--clip-seconds);" in first and "cropped (at random in training" in first
    assert (
        "features: log-mel, 64 bins, 400-sample windows every 160 samples: 16 frames x 64" in first
    )
    assert "45 train / 15 validation rows; inputs [16, 64], label 'label' (3 classes)" in first
    assert "model audio_cnn(momentum=0.5) (nnx), 8 epochs" in first  # the budget's momentum
    assert len(stopped) == 1 and stopped[0].startswith("SIGTERM: stopped after step "), stopped
    assert f"resume with: jaxfeed train --out {out} --resume" in stopped[0]
    assert "preprocessing: as saved in the run" in resumed and "epoch 8/8" in resumed
    assert "epoch 1/8" not in resumed
    saved = json.loads((out / "config.json").read_text())
    assert saved["options"]["sample_rate"] == 8000 and saved["options"]["clip_seconds"] == 0.3
    assert saved["options"]["model"] == {"class_path": "audio_cnn", "init_args": {"momentum": 0.5}}
    assert saved["labels"] == list(CLASSES)
    assert saved["preprocess"]["kind"] == "audio" and saved["preprocess"]["input_shape"] == [16, 64]
    assert saved["preprocess"]["audio"]["sample_rate"] == 8000
    best = re.search(r"^(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", resumed, flags=re.M)
    assert best is not None and float(best.group(4)) >= 0.9, resumed  # validation accuracy
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert sorted(x["epoch"] for x in lines if "eval_loss" in x) == list(range(1, 9))


def test_eval_predict_and_the_export_agree_on_raw_waveforms(clips, audio_run, capsys, tmp_path):
    out = audio_run[0]
    status, stdout, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    report = json.loads(stdout)
    assert report["split"] == "validation" and report["rows"] == 15
    assert report["accuracy"] >= 0.9 and set(report["per_class"]) == set(CLASSES)
    # a clip at 22.05 kHz and longer than the run's 0.3 s, and a folder of clips
    odd = tmp_path / "odd rising.wav"
    write_wav(odd, clip("rising", np.random.default_rng(5), 22050, 0.5), 22050)
    status, stdout, err = run_main(
        capsys, "predict", str(out), str(odd), str(clips / "steady"), "--json"
    )
    assert status == 0, err
    note = r"note: resampled 6 of 21 clips to 8000 Hz; cropped \d+ to 0.3 s \(the centre\); padded"
    assert re.search(note, err) and err.count("(as in training)") == 1, err
    predictions = json.loads(stdout)
    names = [p["input"] for p in predictions]
    assert names == [str(odd), *sorted(str(p) for p in (clips / "steady").glob("*.wav"))]
    assert sum(p["label"] == "steady" for p in predictions[1:]) >= 18
    served = load_exported(out / "model")
    raw = []
    for name in names:
        array, rate = soundfile.read(name, dtype="float32")
        raw.append({"array": array, "sampling_rate": rate})
    printed = [{t["label"]: t["probability"] for t in p["top"]} for p in predictions]
    np.testing.assert_allclose(
        served(raw), [[row[c] for c in served.spec.labels] for row in printed], atol=1e-6
    )
    assert served.predict(raw)[0] == [p["label"] for p in predictions]
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF....WAVEnot audio")
    status, _, err = run_main(capsys, "predict", str(out), str(broken))
    assert status == 2 and f"cannot decode audio {broken}: " in err and "Traceback" not in err
    # the checkpoint path (no export) gives the same probabilities
    status, stdout, err = run_main(
        capsys, "predict", str(out), str(odd), "--checkpoint", "last", "--json"
    )
    assert status == 0, err
    last = json.loads(stdout)[0]
    assert (
        last["checkpoint"]["epoch"] == 8
        and abs(sum(t["probability"] for t in last["top"]) - 1) < 1e-3
    )


def _wav_with_rate_zero(path):
    write_wav(path, np.zeros(800), 8000)
    data = bytearray(path.read_bytes())
    struct.pack_into("<II", data, 24, 0, 0)  # sample rate and byte rate of the fmt chunk
    path.write_bytes(bytes(data))


def _flat_folder(root, metadata):
    rng = np.random.default_rng(0)
    root.mkdir()
    for i in range(9):
        write_wav(root / f"{i}.wav", clip(CLASSES[i % 3], rng, 8000, 0.3), 8000)
    (root / "metadata.csv").write_text(metadata)
    return root


@pytest.mark.parametrize(
    "case", ["garbage", "rate zero header", "rate zero metadata", "no label", "image flag"]
)
def test_bad_clips_are_one_error_before_anything_is_written(clips, case, tmp_path, capsys):
    data, extra = tmp_path / "data", []
    if case == "image flag":
        data, extra = clips, ["--image-size", "32"]
        message = "--image-size: the input column holds audio, not images"
    elif case == "garbage":
        shutil.copytree(clips, data)
        (data / "rising" / "broken.wav").write_bytes(b"RIFF not really a wav file")
        message = f"({data / 'rising' / 'broken.wav'}): Error opening"
    elif case == "rate zero header":
        shutil.copytree(clips, data)
        _wav_with_rate_zero(data / "steady" / "3.wav")
        message = f"({data / 'steady' / '3.wav'}): its header declares a sample rate of 0 Hz"
    elif case == "rate zero metadata":
        rates = ["8000"] * 9
        rates[4] = "0"
        rows = "".join(f"{i}.wav,{CLASSES[i % 3]},{rates[i]}\n" for i in range(9))
        _flat_folder(data, "file_name,label,sampling_rate\n" + rows)
        message = (
            f"the metadata column 'sampling_rate' is 0 at split 'train', row 4 ({data / '4.wav'})"
        )
    else:
        labels = [CLASSES[i % 3] for i in range(9)]
        labels[7] = ""
        rows = "".join(f"{i}.wav,{labels[i]}\n" for i in range(9))
        _flat_folder(data, "file_name,label\n" + rows)
        message = "the label column 'label' is empty at row 7; fill or drop such rows"
    out = tmp_path / "run"
    status, _, err = run_main(capsys, "train", "--data", str(data), "--out", str(out), *extra)
    lines = err.strip().splitlines()
    assert status == 2 and message in lines[-1] and "Traceback" not in err, err
    assert not out.exists() or not any(out.iterdir())
