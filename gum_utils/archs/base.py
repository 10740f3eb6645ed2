"""The contract every architecture fulfils: one `Architecture` object per file of this folder.

An architecture knows its model (a real `transformers` class at two sizes: `tiny`, a few layers
at hidden 128 for two CPU cores, and `paper`, the published shape), its embedded data and how a
batch of it is prepared, its data on the hub, its learning rates where they differ from the
optimizer's default, its kind and title, and what its notebook shows of a trained model.
Importing an architecture imports neither torch nor transformers: the report reads titles here.
"""
from __future__ import annotations

import functools

from ..choices import check_choice
from . import hub
from .embedded import SPLITS as BUILT_SPLITS
from .shapes import DataShape, HubData

SIZES = ("tiny", "paper")
# The held-out data in two halves: tuning and the figures read val, the tuned regime's verdicts test.
SPLITS = ("train", "val", "test")


def for_training(config):
    """The settings every run trains with, on built and pretrained models alike."""
    config._attn_implementation = "sdpa"  # fast on CPU and GPU, and deterministic on CPU
    for part in (config, getattr(config, "text_config", None)):
        if part is not None and hasattr(part, "use_cache"):
            part.use_cache = False  # training needs no KV cache (and checkpointing refuses one)
    return config


class Architecture:
    """One architecture of the study. Subclasses set the class attributes and the methods marked so."""

    name: str
    title: str  # as the book writes it
    kind: str  # "vision" or "language": what the paper groups utilization by
    task: str
    model_class_name: str  # a class of `transformers`
    published_as: str  # the model whose shape `paper` reproduces
    paper_parameters_m: float  # millions of parameters of that model (tests check the built one)
    tiny_shape: DataShape
    paper_shape: DataShape
    hub_data: HubData
    lr_overrides: dict = {}  # optimizer -> learning rate, where the optimizer's own default does not suit
    reads_text: bool = True  # a pretrained checkpoint then needs the model's own tokenizer
    masks_batches: bool = False  # batches are masked on the host as they are drawn (a masked LM)

    # --- the model -------------------------------------------------------------------------
    def tiny_config(self):  # subclass
        raise NotImplementedError

    def paper_config(self):  # subclass
        raise NotImplementedError

    def config(self, size: str):
        check_choice("size", size, SIZES)
        return for_training(self.tiny_config() if size == "tiny" else self.paper_config())

    def shape(self, size: str) -> DataShape:
        check_choice("size", size, SIZES)
        return self.tiny_shape if size == "tiny" else self.paper_shape

    @property
    def model_class(self) -> type:
        import transformers

        return getattr(transformers, self.model_class_name)

    def build_model(self, size: str = "tiny", pretrained: str | None = None):
        """A randomly initialised model; inside `with torch.device("meta")` nothing is allocated.

        `pretrained` (a hub id or a save_pretrained directory) loads that checkpoint instead, for fine-tuning.
        """
        if pretrained is None:
            return self.model_class(self.config(size))
        model = hub.load_model(self.model_class, pretrained)
        for_training(model.config)
        return model

    # --- the embedded data -----------------------------------------------------------------
    def build_split(self, split: str, shape: DataShape) -> dict:  # subclass
        """The whole split as a dict of tensors (first dim N), before any per-batch masking."""
        raise NotImplementedError

    def relevant_shape(self, shape: DataShape) -> DataShape:  # subclass
        """Only the fields this architecture uses, so the split caches are not split needlessly."""
        raise NotImplementedError

    def clean_split(self, split: str, shape: DataShape) -> dict:
        """The training form of a split (train, or the whole held-out val), cached: treat as read-only."""
        _check_split(split, shape, BUILT_SPLITS)
        return _clean(self, split, self.relevant_shape(shape))

    def held_out(self, split: dict) -> dict:
        """A split as evaluation sees it (a masked LM masks it once, with a fixed seed)."""
        return split

    def load_split(self, split: str, shape: DataShape | None = None) -> dict:
        """A split as evaluation and the looks read it (val, test: halves of the held-out data), cached:
        treat the tensors as read-only."""
        shape = shape or DataShape()
        _check_split(split, shape, SPLITS)
        if split == "train":
            return _held_out(self, split, self.relevant_shape(shape))
        return halves(_held_out(self, "val", self.relevant_shape(shape)))[split]

    def prepare_batch(self, batch: dict, rng, vocab) -> dict:
        """A training batch as drawn (a masked LM masks it here, with the stream's own generator)."""
        return batch

    def describe_input(self, shape: DataShape) -> str:
        """The model's input at `shape`, in words for the methods page."""
        return f"{shape.seq_len} tokens"

    # --- the hub's data (paper size) -------------------------------------------------------
    def hub_shape(self, model_config, base: DataShape) -> DataShape:
        """The data shape a (pretrained) model's own config implies."""
        return base

    def encode_hub(self, splits: dict, tokenizer, processor, shape: DataShape, model_config, rows: int,
                   eval_rows: int) -> tuple:  # subclass
        """(train split, val split, masking vocabulary or None) from a hub dataset's splits (see `hub`)."""
        raise NotImplementedError

    # --- what the notebook shows -----------------------------------------------------------
    def look(self, model, config):  # subclass
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<architecture {self.name}>"


def halves(split: dict) -> dict:
    """{"val": the first half, "test": the second} of a held-out split's rows: never trained on, and
    the test half never read by tuning either."""
    rows = len(next(iter(split.values())))
    cut = rows - rows // 2
    return {"val": {key: value[:cut] for key, value in split.items()},
            "test": {key: value[cut:] for key, value in split.items()}}


def _check_split(split: str, shape: DataShape, valid: tuple) -> None:
    check_choice("split", split, valid)
    if not isinstance(shape, DataShape):
        raise TypeError(f"shape must be a DataShape, got {type(shape).__name__}")


@functools.lru_cache(maxsize=8)
def _clean(arch: Architecture, split: str, shape: DataShape) -> dict:
    return arch.build_split(split, shape)


@functools.lru_cache(maxsize=8)
def _held_out(arch: Architecture, split: str, shape: DataShape) -> dict:
    return arch.held_out(_clean(arch, split, shape))


def count_parameters(model) -> int:
    """Distinct parameters: tied embeddings count once, as in the published figures."""
    return sum(p.numel() for p in model.parameters())


def image_tokens(image_size: int, patch_size: int, scale_factor: int = 2) -> int:
    return (image_size // patch_size) ** 2 // scale_factor**2


# --- what every look shares --------------------------------------------------------------
def validation_for_look(arch: Architecture, model, config, count: int) -> dict | None:
    """The first `count` validation samples, with the model in eval mode; None if there is nothing to show."""
    if model is None:
        print("The run built no model, so there is nothing to show.")
        return None
    if config.data != "embedded":  # the looks decode with the embedded tokenizer and labels
        print(f"This look reads the embedded data; the model trained on {config.data} data, with another "
              "tokenizer and labels.")
        return None
    model.eval()
    split = arch.load_split("val", arch.shape(config.size))
    return {key: value[:count].contiguous() for key, value in split.items()}


def device_of(model):
    return next(model.parameters()).device


def image_mosaic(images, titles, colors, columns: int, suptitle: str | None = None, title_lines: int = 2,
                 panel_inches: float = 1.6):
    """Gray images in one axes, tiled `columns` to a row, each under its coloured title: a look's figure.

    One axes and one image draw in a third of the time of an axes per image (each axes lays out
    its own title and frame): about 0.1 s against 0.34 s for twelve images, every grid cell."""
    import math

    import matplotlib.pyplot as plt
    import numpy as np

    images = [np.asarray(image, dtype=float) for image in images]
    height, width = images[0].shape
    gap = width // 6 + 1
    pixels_per_inch = (width + gap) / panel_inches
    caption = math.ceil(title_lines * 0.15 * pixels_per_inch) + 2  # 8-point lines above each image
    rows = -(-len(images) // columns)
    canvas = np.full((rows * (caption + height + gap), columns * (width + gap)), np.nan)  # NaN: the background
    corners = [((i // columns) * (caption + height + gap) + caption, (i % columns) * (width + gap))
               for i in range(len(images))]
    for image, (top, left) in zip(images, corners):
        canvas[top : top + height, left : left + width] = image
    axes_inches = (columns * panel_inches, columns * panel_inches * canvas.shape[0] / canvas.shape[1])
    fig = plt.figure(figsize=(axes_inches[0], axes_inches[1] + (0.4 if suptitle else 0.0)))
    ax = fig.add_axes((0, 0, 1, axes_inches[1] / fig.get_figheight()))
    ax.imshow(canvas, cmap="gray")
    for (top, left), title, color in zip(corners, titles, colors):
        ax.text(left + width / 2, top - 1, title, ha="center", va="bottom", fontsize=8, color=color)
    ax.axis("off")
    if suptitle:
        fig.suptitle(suptitle, y=1 - 0.12 / fig.get_figheight(), va="top")
    return fig
