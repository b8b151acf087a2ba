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


def transform(data: bytes, v: Variant) -> tuple[bytes, str]:
    """(encoded bytes, content type) of the variant of the image in `data`."""
    from PIL import Image, ImageOps

    try:
        img: Image.Image = Image.open(io.BytesIO(data))
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise ImageError("the source is not an image this node can read") from None
    if img.width * img.height > MAX_SOURCE_PIXELS:
        raise ImageError(f"the source has more than {MAX_SOURCE_PIXELS:,} pixels")
    fmt = v.format or {"JPEG": "jpeg", "PNG": "png", "WEBP": "webp"}.get(img.format or "", "png")
    try:
        img = ImageOps.exif_transpose(img)
        size = _target_size(img.width, img.height, v)
        if v.fit == "cover":
            img = ImageOps.fit(img, size, Image.Resampling.LANCZOS)
        elif size != img.size:
            img = img.resize(size, Image.Resampling.LANCZOS)
        img = _for_format(img, fmt)
        out = io.BytesIO()
        options = {"optimize": True} if fmt == "png" else {"quality": v.q or DEFAULT_QUALITY}
        img.save(out, format=fmt.upper(), **options)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise ImageError("the source image could not be decoded") from None
    return out.getvalue(), FORMATS[fmt]


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
