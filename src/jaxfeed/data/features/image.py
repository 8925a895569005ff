"""`Image`: encoded image files (PNG, JPEG, ...) decoded to uint8 arrays.

JPEGs decode with simplejpeg (libjpeg-turbo) when it is installed and the image needs nothing it
lacks (CMYK, EXIF rotation, a luma conversion): 1.3-1.5x faster than Pillow here, pixel for pixel
the same. Everything else, and every JPEG when simplejpeg is missing, decodes with Pillow.
``decode_array(..., min_size=(h, w))`` decodes a JPEG at 1/2, 1/4 or 1/8 scale inside the decoder
when the result is still at least that big (the same scale and pixels with either decoder).
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from jaxfeed.data.features._nested import stack_if_same
from jaxfeed.data.features.media import DecodeError, MediaFeature, read_source

try:  # the fast JPEG decoder (a core dependency; Pillow is the fallback)
    import simplejpeg
except ImportError:  # pragma: no cover - exercised by the fallback test
    simplejpeg = None


@dataclass(frozen=True)
class Image(MediaFeature):
    """An image per row, stored as file bytes or a path.

    Values may be file paths, bytes, PIL images, numpy arrays (uint8 or uint16, (H, W) or
    (H, W, C)) or ``{"bytes", "path"}`` dicts. The python format decodes to ``PIL.Image.Image``; the
    numpy and jax formats to ``uint8`` arrays of shape (H, W, C), or (H, W) for single-channel
    images, stacked into (N, H, W, C) when a batch's images share a shape. 16-bit greyscale PNGs
    keep their 16 bits (``uint16`` arrays) unless ``mode`` asks for 8 bits: then pixels are
    scaled (``round(v / 257)``), not clipped. ``mode`` ("RGB", "L", ...) converts on decode;
    ``decode=False`` returns the stored dicts.

    >>> import numpy as np
    >>> from jaxfeed import Dataset, Features, Image
    >>> pixels = np.zeros((2, 4, 4, 3), dtype=np.uint8)
    >>> ds = Dataset.from_dict({"img": list(pixels)}, features=Features({"img": Image()}))
    >>> ds.with_format("numpy")[:2]["img"].shape
    (2, 4, 4, 3)
    """

    mode: str | None = None
    decode: bool = True
    id: str | None = None
    _type: ClassVar[str] = "Image"
    dtype: ClassVar[str] = "PIL.Image.Image"  # what decoding returns, as `datasets` names it

    def __repr__(self) -> str:
        args = [f"mode={self.mode!r}"] if self.mode else []
        if not self.decode:
            args.append("decode=False")
        return f"Image({', '.join(args)})"

    def encode_one(self, value: Any) -> dict[str, Any]:
        import PIL.Image  # noqa: PLC0415 (import cost: Pillow, only when an image is encoded)

        if isinstance(value, str | os.PathLike):
            return {"bytes": None, "path": os.fspath(value)}
        if isinstance(value, bytes | bytearray | memoryview):
            return {"bytes": bytes(value), "path": None}
        if isinstance(value, dict):
            return {"bytes": value.get("bytes"), "path": value.get("path")}
        if isinstance(value, PIL.Image.Image):
            filename = getattr(value, "filename", "")
            if filename and os.path.isfile(filename):
                # Opened from a file: keep its path and its original bytes (no re-encoding).
                with open(filename, "rb") as f:
                    return {"bytes": f.read(), "path": os.fspath(filename)}
            return {"bytes": _encode_pil(value), "path": None}
        if isinstance(value, np.ndarray):
            return {"bytes": _encode_pil(_array_to_pil(value)), "path": None}
        raise TypeError(f"cannot store a {type(value).__name__} as an image")

    def _what(self) -> str:
        return "an image (a path, bytes, a PIL image, a uint8 array or a {'bytes', 'path'} dict)"

    def decode_one(self, data: bytes | None, path: str | None) -> Any:
        import PIL.Image  # noqa: PLC0415 (import cost: Pillow, only when an image is decoded)

        source = read_source(data, path)
        image = PIL.Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
        if isinstance(source, bytes) and path and not image.filename and os.path.isfile(path):
            # the bytes of a file stored with its path: the image names that file, as an image
            # `datasets` opens from the path does
            image.filename = path
        return self._finish(image)

    def _finish(self, image: Any) -> Any:
        import PIL.ImageOps  # noqa: PLC0415 (import cost: Pillow, only when an image is decoded)

        image.load()
        # EXIF orientation: only formats that carry EXIF are asked (getexif costs ~5 us an image)
        if (image.format in _EXIF_FORMATS or "exif" in image.info) and image.getexif().get(0x0112):
            image = PIL.ImageOps.exif_transpose(image)
        if self.mode and image.mode != self.mode:
            if self.mode in _EIGHT_BIT and _sixteen_bit(image):
                image = _scale_to_8_bits(image)  # Pillow's convert would clip at 255
            if image.mode != self.mode:
                image = image.convert(self.mode)
        return image

    def to_numpy(self, array: pa.Array) -> np.ndarray | list:
        if not self.decode:
            return self.to_python(array)
        return stack_if_same(
            [self.decode_value(s, i) for i, s in enumerate(self.iter_stored(array))]
        )

    def decode_value(
        self, stored: tuple[bytes | None, str | None] | None, row: int
    ) -> np.ndarray | None:
        return self.decode_array(stored, row)

    def decode_array(
        self,
        stored: tuple[bytes | None, str | None] | None,
        row: int,
        min_size: tuple[int, int] | None = None,
        decoder: str = "auto",
    ) -> np.ndarray | None:
        """One stored image as a uint8 array; ``min_size=(h, w)`` lets a JPEG decode at the
        smallest of 1/2, 1/4, 1/8 scale that keeps both sides at least that big; ``decoder``:
        "auto" (simplejpeg for JPEG when it can, else Pillow) or "pillow"."""
        import PIL.Image  # noqa: PLC0415 (import cost: Pillow, only when an image is decoded)

        if stored is None:
            return None
        data, path = stored
        try:
            source = read_source(data, path)
            if isinstance(source, str):
                with open(source, "rb") as f:
                    source = f.read()
            if decoder == "auto":
                fast = _decode_jpeg(source, self.mode, min_size)
                if fast is not None:
                    return fast
            image = PIL.Image.open(io.BytesIO(source))
            if min_size is not None and image.format == "JPEG":
                k = _jpeg_scale(image.size[1], image.size[0], min_size)
                if k > 1:
                    image.draft(image.mode, (image.size[0] // k, image.size[1] // k))
            return pil_to_array(self._finish(image))
        except DecodeError as err:
            if err.row is not None:
                raise
            raise DecodeError(None, row, err.path or path, err.reason) from err
        except Exception as err:
            raise DecodeError(None, row, path, f"{type(err).__name__}: {err}") from err

    @property
    def keeps_dtype(self) -> bool:
        return True  # the jax format keeps images uint8, as `datasets` does

    def to_dict(self) -> dict:
        """`datasets`' layout: the arguments that differ from their defaults, and ``_type``."""
        out = {k: getattr(self, k) for k in ("mode", "decode", "id")}
        defaults = {"mode": None, "decode": True, "id": None}
        return {**{k: v for k, v in out.items() if v != defaults[k]}, "_type": "Image"}


_EXIF_FORMATS = {"JPEG", "MPO", "TIFF", "WEBP", "HEIF", "AVIF"}
_EIGHT_BIT = {"L", "LA", "RGB", "RGBA", "P", "1", "CMYK", "YCbCr"}
_SIXTEEN_BIT = {"I;16", "I;16B", "I;16L", "I;16N"}


def _sixteen_bit(image: Any) -> bool:
    """A 16-bit greyscale image (``I;16*``, or ``I`` as Pillow opens 16-bit PNGs)."""
    return image.mode in _SIXTEEN_BIT or (image.mode == "I" and image.format == "PNG")


def _scale_to_8_bits(image: Any) -> Any:
    """0..65535 to 0..255, rounded (``v / 257``): a 16-bit image converted to an 8-bit mode keeps
    its contrast instead of Pillow's clipping (which turned 99% of a real 16-bit PNG white)."""
    import PIL.Image  # noqa: PLC0415 (import cost: Pillow, only for a 16-bit image)

    values = np.asarray(image, dtype=np.uint32)
    return PIL.Image.fromarray(((values + 128) // 257).astype(np.uint8), mode="L")


def _jpeg_scale(height: int, width: int, min_size: tuple[int, int]) -> int:
    """The largest k in 8, 4, 2 (else 1) whose 1/k-scale decode is at least ``min_size``."""
    for k in (8, 4, 2):
        if -(-height // k) >= min_size[0] and -(-width // k) >= min_size[1]:
            return k
    return 1


def _decode_jpeg(data: bytes, mode: str | None, min_size: tuple[int, int] | None) -> Any:
    """A JPEG decoded by simplejpeg, or None when Pillow must do it."""
    if simplejpeg is None or not data.startswith(b"\xff\xd8") or mode not in (None, "RGB", "L"):
        return None
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    gray = colorspace == "Gray"
    if colorspace not in ("Gray", "YCbCr", "RGB") or (mode == "L" and not gray):
        return None
    if b"Exif" in data[:65536]:  # honour an EXIF rotation as the Pillow path does
        import PIL.Image  # noqa: PLC0415 (import cost: Pillow, only for a JPEG with EXIF)

        orientation = PIL.Image.open(io.BytesIO(data)).getexif().get(0x0112)
        if orientation not in (None, 1):
            return None
    k = 1 if min_size is None else _jpeg_scale(height, width, min_size)
    out = simplejpeg.decode_jpeg(
        data,
        colorspace="GRAY" if gray and mode != "RGB" else "RGB",
        min_height=-(-height // k),
        min_width=-(-width // k),
    )
    return out[:, :, 0] if out.shape[2] == 1 else out


_CHANNELS = {"L": 0, "P": 0, "RGB": 3, "RGBA": 4, "CMYK": 4, "LA": 2}


def pil_to_array(image: Any) -> np.ndarray:
    """A decoded PIL image as an array of (H, W) or (H, W, C).

    8-bit modes go through ``tobytes`` + ``frombuffer``, a third cheaper than ``np.asarray``.
    """
    channels = _CHANNELS.get(image.mode)
    if channels is None:
        if image.mode == "I" and _sixteen_bit(image):
            return np.asarray(image).astype(np.uint16)  # Pillow 10.0 opens 16-bit PNGs as "I"
        return np.asarray(image)
    width, height = image.size
    shape = (height, width, channels) if channels else (height, width)
    return np.frombuffer(image.tobytes(), dtype=np.uint8).reshape(shape)


def _array_to_pil(array: np.ndarray) -> Any:
    import PIL.Image  # noqa: PLC0415 (import cost: Pillow, only when an array is stored)

    lossless_2d = (np.dtype(bool), np.dtype(np.int32), np.dtype(np.uint16), np.dtype(np.float32))
    narrower = None  # as `datasets`: int64 (H, W) pixels go to int32, integer (H, W, C) to uint8
    if array.dtype.kind in "iu" and array.ndim == 3 and array.dtype != np.uint8:
        narrower = np.dtype(np.uint8)
    elif array.dtype in (np.dtype(np.int64), np.dtype(np.uint32)) and array.ndim == 2:
        narrower = np.dtype(np.int32)
    if narrower is not None and array.size:
        info = np.iinfo(narrower)
        low, high = array.min(), array.max()
        if low < info.min or high > info.max:
            raise TypeError(
                f"{array.dtype} pixels in [{low}, {high}] do not fit {narrower} (the image dtype "
                f"they are stored as); `datasets` would wrap them around"
            )
    if narrower is not None:
        warnings.warn(
            f"Downcasting array dtype {array.dtype} to {narrower} to be compatible with 'Pillow'",
            UserWarning,
            stacklevel=4,
        )  # the warning `datasets` gives (its values fit: checked above)
        array = array.astype(narrower)
    if array.dtype != np.uint8 and not (array.dtype in lossless_2d and array.ndim == 2):
        raise TypeError(
            "image arrays must be uint8 (H, W) or (H, W, C), or bool, uint16, int32 or float32 "
            f"(H, W); got {array.dtype} with shape {array.shape} (other dtypes would change value)"
        )
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ValueError(
            f"image arrays must have shape (H, W), (H, W, 3) or (H, W, 4), got {array.shape}"
        )
    return PIL.Image.fromarray(array)


def _encode_pil(image: Any) -> bytes:
    buffer = io.BytesIO()
    fmt = image.format if image.format in ("PNG", "JPEG", "TIFF", "WEBP", "GIF", "BMP") else None
    if fmt is None:
        # As `datasets`: PNG for the 8-bit modes, TIFF (lossless for 16/32-bit pixels) otherwise.
        fmt = "PNG" if image.mode in ("1", "L", "LA", "RGB", "RGBA") else "TIFF"
    image.save(buffer, format=fmt)
    return buffer.getvalue()
