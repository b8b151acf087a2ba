"""Images on the fly: real Pillow output, decoded again and measured."""

import io

import pytest
from PIL import Image

from contentnode.core import images
from contentnode.core.images import ImageError, Variant


def encode(img, fmt="PNG", **options):
    out = io.BytesIO()
    img.save(out, format=fmt, **options)
    return out.getvalue()


def decode(data):
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


@pytest.fixture(scope="module")
def photo():
    """An 800 x 600 JPEG with detail, so quality changes the size."""
    img = Image.effect_mandelbrot((800, 600), (-2.0, -1.2, 1.0, 1.2), 60).convert("RGB")
    return encode(img, "JPEG", quality=95)


def test_available_with_pillow_installed():
    assert images.available() is True


def test_contain_width_keeps_aspect(photo):
    data, ctype = images.transform(photo, images.parse({"w": "200"}))
    out = decode(data)
    assert (out.format, out.size, ctype) == ("JPEG", (200, 150), "image/jpeg")


def test_contain_box_fits_inside_and_never_enlarges(photo):
    out = decode(images.transform(photo, images.parse({"w": "300", "h": "300"}))[0])
    assert out.size == (300, 225)
    out = decode(images.transform(photo, images.parse({"w": "2000"}))[0])
    assert out.size == (800, 600)


def test_cover_is_exact(photo):
    out = decode(images.transform(photo, images.parse({"w": "100", "h": "100", "fit": "cover"}))[0])
    assert out.size == (100, 100)
    out = decode(images.transform(photo, images.parse({"w": "1000", "h": "50", "fit": "cover"}))[0])
    assert out.size == (1000, 50)


@pytest.mark.parametrize("fmt,pil_name,ctype", [("webp", "WEBP", "image/webp"),
                                                 ("png", "PNG", "image/png"),
                                                 ("jpeg", "JPEG", "image/jpeg")])
def test_format_conversion(photo, fmt, pil_name, ctype):
    data, got = images.transform(photo, images.parse({"w": "64", "format": fmt}))
    out = decode(data)
    assert (out.format, got, out.size) == (pil_name, ctype, (64, 48))


def test_quality_changes_size(photo):
    low = images.transform(photo, images.parse({"q": "10"}))[0]
    high = images.transform(photo, images.parse({"q": "95"}))[0]
    assert len(low) < len(high) * 0.6
    assert decode(low).size == decode(high).size == (800, 600)


def test_alpha_to_jpeg_is_flattened_on_white_and_webp_keeps_alpha():
    img = Image.new("RGBA", (40, 40), (255, 0, 0, 255))
    img.paste((0, 0, 0, 0), (0, 0, 20, 40))          # left half transparent
    src = encode(img)
    jpeg = decode(images.transform(src, images.parse({"format": "jpeg"}))[0])
    assert jpeg.mode == "RGB"
    assert all(c > 240 for c in jpeg.getpixel((5, 20)))        # white where it was transparent
    r, g, b = jpeg.getpixel((35, 20))
    assert r > 200 and g < 60 and b < 60
    webp = decode(images.transform(src, images.parse({"format": "webp"}))[0])
    assert webp.mode == "RGBA" and webp.getpixel((5, 20))[3] == 0


def test_palette_gif_source_becomes_png_by_default():
    gif = encode(Image.new("P", (30, 10), 3), "GIF")
    data, ctype = images.transform(gif, images.parse({"w": "15"}))
    out = decode(data)
    assert (ctype, out.format, out.size) == ("image/png", "PNG", (15, 5))


def test_output_is_capped_at_4096_a_side():
    wide = encode(Image.new("L", (5000, 100), 128))
    out = decode(images.transform(wide, Variant(format="png"))[0])
    assert out.size == (4096, 82)


def test_source_over_50_megapixels_is_refused_before_decoding():
    bomb = encode(Image.new("1", (10_000, 6_000)))    # 60 MP, a few KB on the wire
    assert len(bomb) < 200_000
    with pytest.raises(ImageError, match="pixels"):
        images.transform(bomb, images.parse({"w": "10"}))


def test_not_an_image_is_refused():
    with pytest.raises(ImageError, match="not an image"):
        images.transform(b"<html>hello</html>", images.parse({"w": "10"}))


def test_truncated_image_is_refused(photo):
    with pytest.raises(ImageError):
        images.transform(photo[: len(photo) // 3], images.parse({"w": "10"}))


@pytest.mark.parametrize("query,field", [
    ({"w": "0"}, "w"), ({"w": "4097"}, "w"), ({"h": "-1"}, "h"), ({"w": "1.5"}, "w"),
    ({"q": "0"}, "q"), ({"q": "101"}, "q"), ({"fit": "stretch"}, "fit"),
    ({"format": "gif"}, "format"), ({"w": "10", "fit": "cover"}, "fit"),
    ({"w": "10", "blur": "3"}, "blur"),
])
def test_bad_parameters_name_the_field(query, field):
    with pytest.raises(ImageError) as err:
        images.parse(query)
    assert err.value.field == field


def test_parse_and_variant_keys():
    assert images.parse({}) is None
    a = images.parse({"w": "100", "format": "webp"})
    b = images.parse({"format": "webp", "w": "100"})
    assert a == b and a.key() == b.key() == "w=100&fit=contain&format=webp"
    assert images.parse({"w": "100", "h": "50", "fit": "cover", "q": "70"}).key() == \
        "w=100&h=50&fit=cover&q=70"


class RecordingBudget(images.Budget):
    """A budget that remembers the pixels each transform held (what it decoded)."""

    def __init__(self):
        super().__init__(10 ** 9, 2)
        self.held = []

    def hold(self, pixels):
        self.held.append(pixels)
        return super().hold(pixels)


def big_jpeg(width=3000, height=2000, orientation=None):
    img = Image.radial_gradient("L").resize((width, height)).convert("RGB")
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    return encode(img, "JPEG", quality=90, exif=exif.tobytes())


def test_a_large_jpeg_is_shrunk_on_load_to_the_smallest_scale_still_covering_the_output():
    budget = RecordingBudget()
    data, ctype = images.transform(big_jpeg(), images.parse({"w": "320", "format": "webp", "q": "80"}), budget)
    assert ctype == "image/webp" and decode(data).size == (320, 213)
    assert budget.held == [375 * 250]   # decoded at 1/8 scale, not 3000x2000
    budget.held.clear()
    images.transform(big_jpeg(), images.parse({"w": "200", "h": "200", "fit": "cover"}), budget)
    assert budget.held == [375 * 250]   # cover: the short side (250) still covers 200


def test_exif_rotation_is_applied_to_the_output_and_its_size():
    budget = RecordingBudget()
    out = decode(images.transform(big_jpeg(orientation=6), images.parse({"w": "100"}), budget)[0])
    assert out.size == (100, 150)     # shown upright: 2000 wide, 3000 high
    assert budget.held == [375 * 250]
    cover = decode(images.transform(big_jpeg(orientation=8), images.parse({"w": "90", "h": "40", "fit": "cover"}))[0])
    assert cover.size == (90, 40)


def test_pixel_budget_bounds_what_runs_at_once():
    import threading
    import time

    budget = images.Budget(100, 2)
    order = []

    def run(name, pixels, seconds):
        with budget.hold(pixels):
            order.append(("start", name))
            time.sleep(seconds)
            order.append(("end", name))

    first = threading.Thread(target=run, args=("a", 80, 0.3))
    first.start()
    time.sleep(0.05)
    second = threading.Thread(target=run, args=("b", 50, 0))   # 80 + 50 > 100: waits for a
    second.start()
    second.join(5)
    first.join(5)
    assert order == [("start", "a"), ("end", "a"), ("start", "b"), ("end", "b")]
    with budget.hold(500):   # larger than the whole budget: runs alone rather than never
        pass
