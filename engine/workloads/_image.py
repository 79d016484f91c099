"""Image helpers shared by the `jpeg` and `folder` workloads: decode, augment, and synthesize.

The training transform is the usual ImageNet one, written with Pillow and torch only (torchvision is
not a dependency): random-resized-crop to `size`, random horizontal flip, ImageNet normalization.
`render_jpeg` draws a synthetic but structured picture (a gradient, shapes and grain whose colors and
kinds depend on a visual class) so that files compress and decode like small photos.
"""

from __future__ import annotations

import colorsys
import io
import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageChops, ImageDraw

__all__ = ["IMAGE_EXTENSIONS", "crop_box", "load_rgb", "render_jpeg", "to_normalized_tensor", "train_transform"]

IMAGE_EXTENSIONS = (".bmp", ".jpeg", ".jpg", ".png", ".webp")
_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)
_SCALE = 1.0 / (255.0 * _STD)  # x/255 then (x - mean)/std, folded into one multiply and one subtract
_OFFSET = _MEAN / _STD


def load_rgb(path: str | Path) -> Image.Image:
    """Open and fully decode an image as RGB. Raises OSError (PIL.UnidentifiedImageError included) if unreadable."""
    with Image.open(path) as img:
        return img.convert("RGB")  # convert() forces the decode, so a damaged file fails here, not later


def crop_box(
    w: int,
    h: int,
    rng: np.random.Generator,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box: 10 tries at a random area and aspect, else a center crop."""
    area = w * h
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            return x, y, x + cw, y + ch
    if w / h < ratio[0]:
        cw, ch = w, round(w / ratio[0])
    elif w / h > ratio[1]:
        cw, ch = round(h * ratio[1]), h
    else:
        cw, ch = w, h
    x, y = (w - cw) // 2, (h - ch) // 2
    return x, y, x + cw, y + ch


def to_normalized_tensor(img: Image.Image) -> torch.Tensor:
    """RGB PIL image -> float32 (3, H, W), ImageNet-normalized.

    NOTE: done in numpy, which is single-threaded for these ops. The same ops in torch fan out to the
    intra-op thread pool above 32k elements, which is much slower on busy cores.
    """
    hwc = np.asarray(img, dtype=np.uint8)  # (H, W, 3)
    x = hwc.transpose(2, 0, 1).astype(np.float32, order="C")  # (3, H, W), a fresh writable array
    x *= _SCALE
    x -= _OFFSET
    return torch.from_numpy(x)


def train_transform(img: Image.Image, size: int, rng: np.random.Generator) -> torch.Tensor:
    """Random-resized-crop to (size, size) with bilinear resampling, flip with p=0.5, normalize."""
    box = crop_box(img.width, img.height, rng)
    out = img.resize((size, size), Image.Resampling.BILINEAR, box=box)  # crop and resize in one pass
    if rng.random() < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return to_normalized_tensor(out)


def _rgb(h: float, s: float, v: float) -> tuple[int, int, int]:
    r, g, b = colorsys.hsv_to_rgb(h % 1.0, s, v)
    return round(r * 255), round(g * 255), round(b * 255)


def render_jpeg(seed: int, index: int, visual_class: int, side: int = 256, quality: int = 90) -> bytes:
    """Deterministic JPEG bytes for one synthetic image. The class fixes the palette and the shape kind."""
    rng = np.random.default_rng([seed, index, 0x1E6])
    hue = (visual_class * 0.618034) % 1.0  # golden-ratio spacing keeps neighbouring classes apart
    # background: 2x2 corner colors stretched bilinearly into a smooth gradient
    corners = [_rgb(hue + rng.uniform(-0.1, 0.25), rng.uniform(0.3, 0.8), rng.uniform(0.25, 0.95)) for _ in range(4)]
    img = Image.fromarray(np.array(corners, dtype=np.uint8).reshape(2, 2, 3))
    img = img.resize((side, side), Image.Resampling.BILINEAR)
    # texture: coarse random blotches, blended in
    blotches = Image.fromarray(rng.integers(0, 256, (side // 16, side // 16, 3), dtype=np.uint8))
    img = Image.blend(img, blotches.resize((side, side), Image.Resampling.BICUBIC), 0.2)
    draw = ImageDraw.Draw(img)
    kind = visual_class % 4
    for _ in range(3 + visual_class % 5):
        x0, y0 = (rng.uniform(-0.2, 0.9, 2) * side).tolist()
        w, h = (rng.uniform(0.1, 0.5, 2) * side).tolist()
        color = _rgb(hue + rng.uniform(-0.08, 0.08), rng.uniform(0.4, 1.0), rng.uniform(0.3, 1.0))
        if kind == 0:
            draw.ellipse([x0, y0, x0 + w, y0 + h], fill=color)
        elif kind == 1:
            draw.rectangle([x0, y0, x0 + w, y0 + h], fill=color)
        elif kind == 2:
            draw.polygon([(x0, y0 + h), (x0 + w / 2, y0), (x0 + w, y0 + h)], fill=color)
        else:
            draw.line([(x0, y0), (x0 + w, y0 + h)], fill=color, width=int(rng.integers(4, 16)))
    # grain: uniform noise in [-8, 7] per channel, like sensor noise; it is what makes the file photo-sized
    grain = np.frombuffer(rng.bytes(side * side * 3), dtype=np.uint8).reshape(side, side, 3) & 15
    img = ImageChops.add(img, Image.fromarray(grain), scale=1.0, offset=-8)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()
