"""Batches for training and validation, drawn from an architecture's split.

Every batch is a dict of tensors: the model inputs plus ``labels`` (-100 = ignored), so one loss
works for all: ``cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100,
reduction="sum") / count_items(batch)``. torch is imported lazily.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..archs.base import Architecture, DataShape
from ..archs.embedded import EMBEDDED_VOCABULARY, IGNORE_INDEX, Vocabulary, mask_rng

if TYPE_CHECKING:
    import torch


class BatchStream:
    """Infinite seeded batches: a fresh permutation every epoch; batches are
    always full (the last one of an epoch is topped up from the next).

    `split` is a prepared split (e.g. from `gum_utils.archs.hub`) to draw from instead of the
    embedded one, with the `vocab` its masked-LM batches are masked with."""

    def __init__(self, arch: Architecture, split: str, shape: DataShape = DataShape(),
                 batch_size: int = 32, seed: int = 0, prepared: dict | None = None,
                 vocab: Vocabulary = EMBEDDED_VOCABULARY):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.arch, self.batch_size, self.seed, self.vocab = arch, batch_size, seed, vocab
        self._data = prepared if prepared is not None else arch.clean_split(split, shape)
        self.epoch_size = split_size(self._data)
        self._row_items, self._row_tokens = _row_counts(self._data)
        self.last_counts = (0, 0, 0)
        self._order_rng, self._mask_rng = np.random.default_rng(seed), mask_rng(seed)
        self._order, self._pos, self.epoch = np.empty(0, dtype=np.int64), 0, 0

    def to(self, device) -> "BatchStream":
        """Keep the split on `device`: each batch is then gathered there, with no copy from the host.
        Not for a masked LM, whose masking runs on the host."""
        if self.arch.masks_batches:
            raise ValueError(f"{self.arch.name} batches are masked on the host; keep its split there")
        self._data = {key: value.to(device) for key, value in self._data.items()}
        return self

    @property
    def nbytes(self) -> int:
        """What the split would take on a device (a stride-0 view becomes a full copy there)."""
        return sum(value.numel() * value.element_size() for value in self._data.values())

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> dict[str, "torch.Tensor"]:
        import torch

        parts, need = [], self.batch_size
        while need:
            if self._pos == len(self._order):
                self._order, self._pos = self._order_rng.permutation(self.epoch_size), 0
                self.epoch += 1
            take = self._order[self._pos : self._pos + need]
            self._pos, need = self._pos + len(take), need - len(take)
            parts.append(take)
        order = np.concatenate(parts)
        idx, device = torch.from_numpy(order), next(iter(self._data.values())).device
        if device.type == "cuda":  # from pinned memory: the copy does not wait for the running step
            idx = idx.pin_memory().to(device, non_blocking=True)
        batch = {k: v[idx] for k, v in self._data.items()}  # indexing copies
        batch = self.arch.prepare_batch(batch, self._mask_rng, self.vocab)
        self.last_counts = self._counts(order, batch)
        return batch

    def _counts(self, order: np.ndarray, batch: dict) -> tuple:
        """(supervised items, samples, tokens) of the batch, counted on the host: reading them off
        a batch on the GPU would make the host wait for the step in flight."""
        items = count_items(batch) if self._row_items is None else int(self._row_items[order].sum())
        tokens = int(self._row_tokens[order].sum()) if self._row_tokens is not None else 0
        return items, len(order), tokens


def _row_counts(split: dict) -> tuple:
    """Per row, its supervised items and tokens (None where masking draws the targets per batch)."""
    tokens = split["attention_mask"].sum(1).numpy() if "attention_mask" in split else None
    if "labels" not in split:
        return None, tokens
    labels = split["labels"]
    return (labels != IGNORE_INDEX).reshape(len(labels), -1).sum(1).numpy(), tokens


def split_size(split: dict) -> int:
    return len(split["labels"] if "labels" in split else split["input_ids"])


def val_batches(arch: Architecture, shape: DataShape = DataShape(), batch_size: int = 32,
                limit: int | None = None, prepared: dict | None = None, split: str = "val") -> list[dict]:
    """Held-out batches (`split` val or test) in fixed order with fixed (seed 0) masking; limit caps samples.
    `prepared` is a held-out split made elsewhere (already masked for a masked LM)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    data = arch.load_split(split, shape) if prepared is None else prepared
    n = split_size(data) if limit is None else min(split_size(data), limit)
    return [{k: v[i : min(i + batch_size, n)].contiguous() for k, v in data.items()}
            for i in range(0, n, batch_size)]


def count_items(batch: dict) -> int:
    """What the summed loss is divided by: the supervised positions."""
    return int((batch["labels"] != IGNORE_INDEX).sum())


def count_tokens(batch: dict) -> int:
    return int(batch["attention_mask"].sum()) if "attention_mask" in batch else 0


def split_batch(batch: dict, micro_batch_size: int) -> list[dict]:
    """Micro-batches for gradient accumulation (views along dim 0)."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    n = len(next(iter(batch.values())))
    return [{k: v[i : i + micro_batch_size] for k, v in batch.items()}
            for i in range(0, n, micro_batch_size)]
