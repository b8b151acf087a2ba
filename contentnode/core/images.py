"""Images on the fly: resize, crop and convert with Pillow.

Pillow is the optional extra `contentnode[images]`, so it is imported only
when a transform runs; `available()` lets the rules API refuse to enable
images on a node without it. The limits keep one request from eating the
node: the source is at most 50 megapixels (checked from the header, before
any pixel is decoded, so decompression bombs never expand) and the output at
most 4096 pixels a side.
"""

import importlib
import io
import math
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from contentnode.core.text import whole_number

PARAMS = ("w", "h", "fit", "format", "q")
FITS = ("contain", "cover")
FORMATS = {"jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp"}
MAX_SIDE = 4096
MAX_SOURCE_PIXELS = 50_000_000
DEFAULT_QUALITY = 85
EXTRA = "contentnode[images]"


class ImageError(ValueError):
    """A bad parameter (field names it) or an image that cannot be transformed."""

    def __init__(self, message, field=None):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Variant:
    w: int | None = None
    h: int | None = None
    fit: str = "contain"
    format: str | None = None   # None: keep the source's format when it is one of FORMATS
    q: int | None = None

    def key(self) -> str:
        """Canonical text naming this variant in the cache (same parameters, same entry)."""
        parts = [(name, getattr(self, name)) for name in PARAMS]
        return "&".join(f"{name}={value}" for name, value in parts if value is not None)


def available() -> bool:
    """Pillow is installed and importable (the images extra)."""
    try:
        importlib.import_module("PIL.Image")
    except ImportError:
        return False
    return True


def _int_param(query, name, low, high):
    raw = query[name]
    number = whole_number(raw)
    if number is None or not low <= number <= high:
        raise ImageError(f"{name} must be an integer from {low} to {high}", field=name)
    return number


def parse(query: dict) -> Variant | None:
    """The variant the query asks for, or None when it asks for the original.

    Only image parameters may be present (the caller removes the signature's);
    anything else is refused so arbitrary query strings never multiply cache entries.
    """
    unknown = sorted(set(query) - set(PARAMS))
    if unknown:
        raise ImageError(f"unknown image parameter {unknown[0]!r}; allowed: "
                         + ", ".join(PARAMS), field=unknown[0])
    if not query:
        return None
    w = _int_param(query, "w", 1, MAX_SIDE) if "w" in query else None
    h = _int_param(query, "h", 1, MAX_SIDE) if "h" in query else None
    q = _int_param(query, "q", 1, 100) if "q" in query else None
    fit = query.get("fit", "contain")
    if fit not in FITS:
        raise ImageError("fit must be contain or cover", field="fit")
    fmt = query.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise ImageError("format must be jpeg, png or webp", field="format")
    if fit == "cover" and (w is None or h is None):
        raise ImageError("fit=cover needs both w and h", field="fit")
    return Variant(w, h, fit, fmt, q)


def _target_size(src_w, src_h, v: Variant):
    """Output size: cover is exactly w x h; contain fits the box and never enlarges."""
    if v.fit == "cover":
        return v.w, v.h
    box_w, box_h = min(v.w or MAX_SIDE, MAX_SIDE), min(v.h or MAX_SIDE, MAX_SIDE)
    scale = min(box_w / src_w, box_h / src_h, 1.0)
    return max(1, round(src_w * scale)), max(1, round(src_h * scale))


class Budget:
    """Bounds what the transforms running at once in one process hold.

    A holder takes `amount` units (decoded pixels; bytes of a source read into
    memory) for as long as it runs; it waits while `slots` holders run or
    while its amount does not fit beside the others'. One larger than the
    whole budget runs alone rather than never. For pixels: Pillow keeps about
    4 bytes a pixel, so the budget times 4 (plus the small output) bounds the
    decoded memory.
    """

    def __init__(self, amount: int, slots: int):
        self.amount, self.slots = amount, slots
        self._used = self._running = 0
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, amount: int):
        with self._changed:
            while self._running >= self.slots or (self._running and self._used + amount > self.amount):
                self._changed.wait()
            self._used += amount
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._used -= amount
                self._running -= 1
                self._changed.notify_all()


# EXIF orientation -> the transpose that shows the image upright (orientations 5-8 swap the sides)
_UPRIGHT = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE", 6: "ROTATE_270",
            7: "TRANSVERSE", 8: "ROTATE_90"}
_EXIF_ORIENTATION = 0x0112
REDUCING_GAP = 2.0   # resample from at most twice the output size; reduce() by whole factors before


def transform(data: bytes, v: Variant, budget: Budget | None = None) -> tuple[bytes, str]:
    """(encoded bytes, content type) of the variant of the image in `data`.

    The work is sized to the output, not the source: a JPEG is decoded at the
    smallest DCT scale (1/2, 1/4, 1/8) still at least the output size
    (shrink-on-load, Image.draft), the rest is reduced by whole factors before
    the Lanczos resample (reducing_gap), and the EXIF rotation is applied to
    the small result. A 3000x2000 JPEG to 320 px WebP decodes 375x250 pixels.
    """
    from PIL import Image

    try:
        img: Image.Image = Image.open(io.BytesIO(data))
        orientation = img.getexif().get(_EXIF_ORIENTATION, 1)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise ImageError("the source is not an image this node can read") from None
    if img.width * img.height > MAX_SOURCE_PIXELS:
        raise ImageError(f"the source has more than {MAX_SOURCE_PIXELS:,} pixels")
    fmt = v.format or {"JPEG": "jpeg", "PNG": "png", "WEBP": "webp"}.get(img.format or "", "png")
    sideways = orientation in (5, 6, 7, 8)
    try:
        upright_w, upright_h = (img.height, img.width) if sideways else img.size
        out_w, out_h = _target_size(upright_w, upright_h, v)
        size = (out_h, out_w) if sideways else (out_w, out_h)   # in the source's own orientation
        scale = (max if v.fit == "cover" else min)(size[0] / img.width, size[1] / img.height)
        if img.format == "JPEG" and scale < 1:
            img.draft(img.mode if img.mode in ("RGB", "L") else None,
                      (math.ceil(img.width * scale), math.ceil(img.height * scale)))
        with budget.hold(img.width * img.height) if budget else nullcontext():
            img = _resized(img, size, v.fit == "cover")
            if orientation in _UPRIGHT:
                img = img.transpose(getattr(Image.Transpose, _UPRIGHT[orientation]))
            img = _for_format(img, fmt)
            out = io.BytesIO()
            options = {"optimize": True} if fmt == "png" else {"quality": v.q or DEFAULT_QUALITY}
            img.save(out, format=fmt.upper(), **options)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise ImageError("the source image could not be decoded") from None
    return out.getvalue(), FORMATS[fmt]


def _resized(img, size: tuple, cover: bool):
    """`img` at `size`: for cover, the centred crop of the source's aspect first (as ImageOps.fit)."""
    from PIL import Image

    box = None
    if cover:
        want = size[0] / size[1]
        if img.width / img.height > want:
            crop_w = img.height * want
            box = ((img.width - crop_w) / 2, 0, (img.width + crop_w) / 2, img.height)
        else:
            crop_h = img.width / want
            box = (0, (img.height - crop_h) / 2, img.width, (img.height + crop_h) / 2)
    elif size == img.size:
        return img
    return img.resize(size, Image.Resampling.LANCZOS, box=box, reducing_gap=REDUCING_GAP)


def _for_format(img, fmt):
    """Convert the pixel mode to one the output format stores (JPEG has no alpha)."""
    from PIL import Image

    has_alpha = img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info)
    if fmt == "jpeg":
        if has_alpha:
            rgba = img.convert("RGBA")
            flat = Image.new("RGB", rgba.size, (255, 255, 255))
            flat.paste(rgba, mask=rgba.getchannel("A"))
            return flat
        return img if img.mode in ("RGB", "L") else img.convert("RGB")
    if img.mode in ("RGB", "RGBA", "L", "LA") or (fmt == "png" and img.mode == "P"):
        return img
    return img.convert("RGBA" if has_alpha else "RGB")
