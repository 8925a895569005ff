"""Image decoders side by side: Pillow against libjpeg-turbo bindings, JPEG and PNG.

Photo-like RGB images (smooth gradients plus noise; JPEG quality 90) at 256x256 and 1024x1024,
decoded to a uint8 RGB array; "JPEG 1/4" asks for a quarter-size result, which the JPEG decoders
produce inside the decoder (Pillow ``draft``, simplejpeg ``min_height``/``min_width``,
PyTurboJPEG ``scaling_factor``, OpenCV ``IMREAD_REDUCED_COLOR_4``). Decoders that are not
installed are skipped (simplejpeg is a jaxfeed dependency; ``pip install pyturbojpeg<2`` (needs the
system libturbojpeg) and ``opencv-python-headless`` for the others). Medians of 5 runs, one core.

Run: ``python benchmarks/decode.py``.
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable

import numpy as np
import PIL.Image


def photo(side: int, rng: np.random.Generator) -> np.ndarray:
    y, x = np.mgrid[0:side, 0:side].astype(np.float32)
    base = np.stack(
        [np.sin(x / (9 + 7 * c)) * 60 + np.cos(y / (13 + 5 * c)) * 60 for c in range(3)], axis=-1
    )
    return np.clip(base + 128 + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)


def encode(array: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    PIL.Image.fromarray(array).save(
        buffer, format=fmt, **({"quality": 90} if fmt == "JPEG" else {})
    )
    return buffer.getvalue()


def us_per_image(fn: Callable[[bytes], np.ndarray], data: bytes, n: int) -> float:
    fn(data)
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn(data)
        runs.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(runs)


def decoders() -> dict[str, dict[str, Callable]]:
    def pil(data: bytes, quarter: bool = False) -> np.ndarray:
        image = PIL.Image.open(io.BytesIO(data))
        if quarter:
            image.draft("RGB", (image.size[0] // 4, image.size[1] // 4))
        return np.asarray(image.convert("RGB"))

    out: dict[str, dict[str, Callable]] = {
        "Pillow": {"JPEG": pil, "JPEG 1/4": lambda d: pil(d, True), "PNG": pil}
    }
    try:
        import simplejpeg

        def sj(data: bytes, quarter: bool = False) -> np.ndarray:
            if not quarter:
                return simplejpeg.decode_jpeg(data, "RGB")
            h, w, _, _ = simplejpeg.decode_jpeg_header(data)
            return simplejpeg.decode_jpeg(data, "RGB", min_height=h // 4, min_width=w // 4)

        out["simplejpeg"] = {"JPEG": sj, "JPEG 1/4": lambda d: sj(d, True)}
    except ImportError:
        pass
    try:
        import turbojpeg

        tj = turbojpeg.TurboJPEG()
        out["PyTurboJPEG"] = {
            "JPEG": lambda d: tj.decode(d, pixel_format=turbojpeg.TJPF_RGB),
            "JPEG 1/4": lambda d: tj.decode(
                d, pixel_format=turbojpeg.TJPF_RGB, scaling_factor=(1, 4)
            ),
        }
    except (ImportError, OSError, RuntimeError):
        pass
    try:
        import cv2

        cv2.setNumThreads(1)

        def cv(data: bytes, flag: int) -> np.ndarray:
            return cv2.cvtColor(
                cv2.imdecode(np.frombuffer(data, np.uint8), flag), cv2.COLOR_BGR2RGB
            )

        out[f"OpenCV {cv2.__version__}"] = {
            "JPEG": lambda d: cv(d, cv2.IMREAD_COLOR),
            "JPEG 1/4": lambda d: cv(d, cv2.IMREAD_REDUCED_COLOR_4),
            "PNG": lambda d: cv(d, cv2.IMREAD_COLOR),
        }
    except ImportError:
        pass
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    table = decoders()
    print(f"{'image':<16}{'decoder':<22}{'us/image':>10}{'Pillow / this':>15}")
    for side in (256, 1024):
        pixels = photo(side, rng)
        data = {"JPEG": encode(pixels, "JPEG"), "PNG": encode(pixels, "PNG")}
        data["JPEG 1/4"] = data["JPEG"]
        n = 200 if side == 256 else 20
        for case in ("JPEG", "JPEG 1/4", "PNG"):
            reference = us_per_image(table["Pillow"][case], data[case], n)
            for name, fns in table.items():
                if case in fns:
                    t = reference if name == "Pillow" else us_per_image(fns[case], data[case], n)
                    print(f"{case + f' {side}':<16}{name:<22}{t:>10,.0f}{reference / t:>14.2f}x")


if __name__ == "__main__":
    main()
