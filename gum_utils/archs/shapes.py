"""The shapes of an architecture's data and where its paper-size data comes from: plain values."""

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class DataShape:
    """What the model expects. image_seq_len = number of <image> tokens."""

    image_size: int = 28
    channels: int = 1
    seq_len: int = 64
    image_seq_len: int = 16

    def __post_init__(self):
        for f in fields(self):
            if not isinstance(getattr(self, f.name), int) or getattr(self, f.name) < 1:
                raise ValueError(f"DataShape.{f.name} must be a positive int")


@dataclass(frozen=True)
class HubData:
    """Where a paper-size run's data comes from by default (see `gum_utils.archs.hub`)."""

    dataset: str  # hub id or save_to_disk directory
    subset: str | None  # the dataset's configuration name
    tokenizer: str | None  # text archs and nanoVLM
    image_processor: str | None  # image archs
