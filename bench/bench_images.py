"""Images on the fly against their floor, measured side by side in one run.

A 3000x2000 JPEG photo-like source (a gradient under noise, quality 90) is
turned into about 320 px wide WebP at quality 80, each time a new variant
(w=320, 321, ... so nothing is answered from the cache), by:

- node: the daemon over HTTP, the source on SeaweedFS and already in the
  node's cache (as after the first variant); CPU is the daemon's user+system
  time over the variants, so it includes the HTTP request, the cache fill and
  the lookup of the cached source;
- pillow: Pillow alone in a fresh process, the best one can do with it:
  open, draft (shrink-on-load), resize to the width (Lanczos, reducing_gap 2),
  save WebP q80;
- vipsthumbnail: libvips' command-line tool (Debian libvips-tools), one
  process per variant, its start included.

Also the node's peak RSS (VmHWM) after CONCURRENT distinct variants requested
at once (its pixel budget bounds that), beside the peak RSS of the Pillow and
vipsthumbnail processes. Goal: node CPU per variant within 1.5 x Pillow's.

    python bench/bench_images.py [--variants 30] [--concurrent 8] [--json FILE]
"""

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from common import Daemon, cpu_seconds, http_request, install_cleanup, rss_kib, temp_dir  # noqa: E402

HOST = "images.bench.test"
WIDTH, HEIGHT = 3000, 2000
TARGET = 1.5
VIPSTHUMBNAIL = shutil.which("vipsthumbnail") or "/usr/bin/vipsthumbnail"


def source_jpeg() -> bytes:
    from PIL import Image

    gradient = Image.radial_gradient("L").resize((WIDTH, HEIGHT))
    noise = Image.effect_noise((WIDTH, HEIGHT), 40)
    img = Image.merge("RGB", (gradient, noise, Image.blend(gradient, noise, 0.5)))
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


def pillow_floor(path: str, count: int) -> None:
    """In its own process: `count` variants with Pillow alone; prints CPU s per variant and VmHWM KiB."""
    from PIL import Image

    started = time.process_time()
    for n in range(count):
        with Image.open(path) as img:
            width = 320 + n
            height = round(img.height * width / img.width)
            img.draft("RGB", (width, height))
            small = img.resize((width, height), Image.Resampling.LANCZOS, reducing_gap=2.0)
            small.save(io.BytesIO(), "WEBP", quality=80)
    print(json.dumps({"cpu_s": (time.process_time() - started) / count, "peak_kib": rss_kib(os.getpid(), "VmHWM")}))


def measure_pillow(path: str, count: int) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "floor", path, str(count)],
                         capture_output=True, check=True, timeout=600)
    return json.loads(out.stdout)


def measure_vips(path: str, workdir: str, count: int) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for n in range(count):
        subprocess.run([VIPSTHUMBNAIL, path, "--size", f"{320 + n}x", "-o",
                        os.path.join(workdir, f"v{n}.webp[Q=80]")], check=True, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": cpu / count, "peak_kib": after.ru_maxrss}


def api(daemon, method, path, obj=None):
    status, _, body = http_request(daemon.admin_port, method, path, obj, {"Cookie": daemon.cookie})
    if status not in (200, 201):
        raise RuntimeError(f"{method} {path} answered {status}: {body[:300]!r}")
    return json.loads(body)


def start_node(seaweed, source: bytes) -> Daemon:
    daemon = Daemon(temp_dir()).start()
    daemon.setup_admin()
    seaweed.create_bucket("images")
    seaweed.put_object("images", "photo.jpg", source, "image/jpeg")
    bucket = api(daemon, "POST", "/api/buckets", seaweed.bucket_definition("images", endpoint=seaweed.direct_endpoint))
    api(daemon, "POST", "/api/domains", {"host": HOST})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/img", "bucket": bucket["id"], "images": True})
    status, _, body = http_request(daemon.public_port, "GET", "/img/photo.jpg", headers={"Host": HOST})
    if status != 200 or body != source:
        raise RuntimeError(f"the source answered {status}")
    return daemon


def variant(daemon, width: int) -> float:
    started = time.monotonic()
    status, headers, body = http_request(daemon.public_port, "GET", f"/img/photo.jpg?w={width}&format=webp&q=80",
                                         headers={"Host": HOST}, timeout=120)
    if status != 200 or headers.get("x-cache") != "MISS" or not body.startswith(b"RIFF"):
        raise RuntimeError(f"variant w={width} answered {status} {headers.get('x-cache')}: {body[:200]!r}")
    return time.monotonic() - started


def measure_node(daemon, count: int, concurrent: int) -> dict:
    variant(daemon, 2000)   # warm-up: imports Pillow, first encoder set-up
    cpu0 = cpu_seconds(daemon.pid)
    walls = [variant(daemon, 320 + n) for n in range(count)]
    cpu = (cpu_seconds(daemon.pid) - cpu0) / count
    base = 1000
    with ThreadPoolExecutor(concurrent) as pool:
        list(pool.map(lambda n: variant(daemon, base + n), range(concurrent)))
    return {"cpu_s": cpu, "wall_s": sorted(walls)[len(walls) // 2], "peak_kib": rss_kib(daemon.pid, "VmHWM")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=30, help="new variants per contender (default 30)")
    parser.add_argument("--concurrent", type=int, default=8, help="distinct variants at once for the peak RSS")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    install_cleanup()
    from tests.peers.seaweed import SeaweedS3

    workdir = temp_dir("contentnode-bench-images-")
    source = source_jpeg()
    path = os.path.join(workdir, "photo.jpg")
    with open(path, "wb") as f:
        f.write(source)
    # vipsthumbnail first: its peak RSS is the largest of this process's reaped children so far
    figures = {"vipsthumbnail": measure_vips(path, workdir, args.variants),
               "pillow": measure_pillow(path, args.variants)}
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    try:
        daemon = start_node(seaweed, source)
        try:
            figures["node"] = measure_node(daemon, args.variants, args.concurrent)
        finally:
            daemon.stop()
    finally:
        seaweed.close()
    ratio = figures["node"]["cpu_s"] / figures["pillow"]["cpu_s"]
    print(f"{WIDTH}x{HEIGHT} JPEG ({len(source) // 1024} KiB) -> ~320 px WebP q80, {args.variants} new variants each; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    print(f"{'contender':<16}{'CPU ms/variant':>16}{'peak RSS MiB':>14}")
    for name, cell in figures.items():
        print(f"{name:<16}{cell['cpu_s'] * 1000:>16.1f}{cell['peak_kib'] / 1024:>14.1f}")
    print(f"node wall time per variant (median, one at a time): {figures['node']['wall_s'] * 1000:.1f} ms; "
          f"node peak RSS is after {args.concurrent} distinct variants at once")
    print(f"node / Pillow CPU per variant: {ratio:.2f} (target <= {TARGET:g}: {'met' if ratio <= TARGET else 'MISSED'})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"figures": figures, "ratio": ratio}, f, indent=2)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["floor"]:
        pillow_floor(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
