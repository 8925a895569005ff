"""``python benchmarks/log_mel.py``: log-mel spectrograms per second, jaxfeed against its peers.

Every implementation computes the same features of the same clips (``--seconds`` s at 16 kHz,
64 mel bins, 25 ms Hann windows every 10 ms, power spectrum, centred frames): jaxfeed's
``log_mel`` (``scipy.fft.rfft`` in float32 on strided frames and one matrix product with the
filterbank), the same with ``numpy.fft.rfft``, ``scipy.signal.stft`` with the same filterbank, and
librosa's ``feature.melspectrogram`` (skipped when librosa is not installed: it is not a jaxfeed
dependency). Resampling (a 44.1 kHz clip to 16 kHz) compares soxr, which jaxfeed uses, with
``scipy.signal.resample_poly``. Each row is checked against jaxfeed's output before it is timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

import numpy as np

from jaxfeed.bench._common import median_seconds
from jaxfeed.loading.spectrogram import LOG_FLOOR, log_mel

RATE, MELS, N_FFT, HOP = 16000, 64, 400, 160


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    clips = rng.normal(size=(args.clips, int(args.seconds * RATE))).astype(np.float32) * 0.1
    ours = log_mel(RATE, MELS, n_fft=N_FFT, hop_length=HOP)
    bank, window = ours._bank, ours._window
    reference = [ours(c) for c in clips[:4]]

    def numpy_fft(clip: np.ndarray) -> np.ndarray:
        padded = np.pad(clip, (N_FFT // 2, N_FFT // 2))
        frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
        spectrum = np.fft.rfft(frames * window, axis=-1)
        power = spectrum.real**2 + spectrum.imag**2
        return np.log(power @ bank + np.float32(LOG_FLOOR))

    def scipy_stft(clip: np.ndarray) -> np.ndarray:
        import scipy.signal

        _, _, z = scipy.signal.stft(clip, window=window, nperseg=N_FFT, noverlap=N_FFT - HOP,
                                    boundary="zeros", padded=False, scaling="spectrum", detrend=False,
                                    return_onesided=True)  # fmt: skip
        power = (np.abs(z * window.sum()) ** 2).T  # undo the "spectrum" scaling (1 / sum(win))
        return np.log(power.astype(np.float32) @ bank + np.float32(LOG_FLOOR))

    peers = {"jaxfeed log_mel (scipy.fft.rfft)": ours, "the same with numpy.fft.rfft": numpy_fft}
    peers["scipy.signal.stft + the filterbank"] = scipy_stft
    if importlib.util.find_spec("librosa") is not None:
        import librosa

        def with_librosa(clip: np.ndarray) -> np.ndarray:
            mel = librosa.feature.melspectrogram(
                y=clip, sr=RATE, n_fft=N_FFT, hop_length=HOP, n_mels=MELS, htk=True, norm=None,
                center=True, pad_mode="constant", power=2.0,
            )  # fmt: skip
            return np.log(mel.T + np.float32(LOG_FLOOR))

        peers[f"librosa {librosa.__version__} melspectrogram"] = with_librosa
    else:
        print("librosa is not installed: its row is skipped (pip install librosa to add it)")

    for name, fn in peers.items():
        for clip, want in zip(clips[:4], reference, strict=False):
            got = fn(clip)
            if got.shape != want.shape or not np.allclose(got, want, atol=1e-2, rtol=1e-3):
                gap = np.abs(got - want).max() if got.shape == want.shape else got.shape
                print(f"note: {name} differs from jaxfeed's features (max gap {gap})")
                break
    # interleaved sweeps (one of each implementation per repeat): load on a shared machine
    # drifts, and each implementation sees the same drift; the median sweep of each is shown
    times: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(args.repeats):
        for name, fn in peers.items():
            start = time.perf_counter()
            for c in clips:
                fn(c)
            times[name].append(time.perf_counter() - start)
    rows = [(name, args.clips / statistics.median(t)) for name, t in times.items()]
    best_peer = max(rate for name, rate in rows[1:])
    print(
        f"\nlog-mel of {args.clips} clips of {args.seconds:g} s at {RATE} Hz, {MELS} mels, "
        f"n_fft {N_FFT}, hop {HOP}: clips/s (median of {args.repeats} interleaved sweeps)"
    )
    print(f"{'implementation':<40}{'clips/s':>10}{'x best peer':>13}")
    for name, rate in rows:
        print(f"{name:<40}{rate:>10,.0f}{rate / best_peer:>12.2f}x")

    source = rng.normal(size=int(args.seconds * 44100)).astype(np.float32)
    resamplers = {}
    if importlib.util.find_spec("soxr") is not None:
        import soxr

        resamplers["soxr (jaxfeed)"] = lambda: soxr.resample(source, 44100, RATE)
    import scipy.signal

    resamplers["scipy.signal.resample_poly"] = lambda: scipy.signal.resample_poly(source, 160, 441)
    print(f"\nresampling one {args.seconds:g} s clip from 44,100 to {RATE} Hz: ms (median)")
    for name, fn in resamplers.items():
        fn()
        print(f"{name:<40}{median_seconds(fn, 20) * 1e3:>10.3f}")


if __name__ == "__main__":
    main()
