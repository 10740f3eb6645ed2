"""Real, tiny datasets shipped in ``gum_utils/assets/``, batched per architecture.

* ``vit``        Fashion-MNIST classification.
* ``modernbert`` masked LM on *Pride and Prejudice* (BERT 80/10/10 masking).
* ``llama``      causal LM on the same text, labels pre-shifted.
* ``nanovlm``    a 2x2 grid of Fashion-MNIST items + "what is in the top left?"
                 -> "sneaker"; only the answer (and [EOS]) is supervised.

Every batch is a dict of tensors: the model inputs plus ``labels`` (-100 =
ignored), so one loss works for all: ``cross_entropy(logits.reshape(-1, V),
labels.reshape(-1), ignore_index=-100, reduction="sum") / count_items(batch)``.
Nothing is downloaded; ``scripts/make_assets.py`` documents and rebuilds the
assets.  torch is imported lazily so the constants stay cheap to import.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tokenizers
    import torch

ASSETS = Path(__file__).with_name("assets")
FASHION_FILE = "fashion_mnist_subset.npz"
CORPUS_FILE = "pride_and_prejudice.txt"
TOKENIZER_FILE = "tokenizer.json"

VOCAB_SIZE = 2048
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[MASK]", "<image>")
PAD_ID, UNK_ID, BOS_ID, EOS_ID, MASK_ID, IMAGE_ID = range(len(SPECIAL_TOKENS))
IGNORE_INDEX = -100

# Fashion-MNIST class names, index = label (lower-case; they are the answers).
FASHION_LABELS = ("t-shirt/top", "trouser", "pullover", "dress", "coat",
                  "sandal", "shirt", "sneaker", "bag", "ankle boot")
# nanovlm questions, one per grid cell in row-major order.
QUESTIONS = ("what is in the top left?", "what is in the top right?",
             "what is in the bottom left?", "what is in the bottom right?")

ARCHS = ("vit", "modernbert", "llama", "nanovlm")
SPLITS = ("train", "val")
VAL_FRACTION = 0.1  # last 10% of the novel (by characters) is validation
MIN_CHUNK = 8  # shortest text chunk in tokens (tiny paragraphs run on)
MLM_PROB = 0.15
GRID_SEED = 1234  # fixed: the nanovlm grids are part of the dataset


def answer_text(label: str) -> str:
    """The nanovlm answer string; the leading space joins it to the question."""
    return " " + label


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


# --------------------------------------------------------------------- tokens
@functools.lru_cache(maxsize=None)
def tokenizer() -> "tokenizers.Tokenizer":
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ASSETS / TOKENIZER_FILE))
    # The id constants above are plain ints; fail loudly if the file disagrees.
    ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
    if tok.get_vocab_size() != VOCAB_SIZE or ids != list(range(len(SPECIAL_TOKENS))):
        raise RuntimeError(f"{TOKENIZER_FILE} does not match the constants in data.py")
    return tok


def _encode(text: str) -> list[int]:
    return tokenizer().encode(text, add_special_tokens=False).ids


# --------------------------------------------------------------------- images
@functools.lru_cache(maxsize=None)
def _fashion() -> dict[str, np.ndarray]:
    with np.load(ASSETS / FASHION_FILE) as z:
        return {k: z[k] for k in z.files}


def _images(split: str) -> tuple[np.ndarray, np.ndarray]:
    f = _fashion()
    return f[f"{split}_images"], f[f"{split}_labels"].astype(np.int64)


@functools.lru_cache(maxsize=None)
def _pixel_stats() -> tuple[float, float]:
    x = _fashion()["train_images"] / 255.0  # training statistics only
    return float(x.mean()), float(x.std())


def _to_pixels(images: np.ndarray, size: int, channels: int) -> "torch.Tensor":
    """uint8 (N, H, W) -> normalised float32 (N, channels, size, size)."""
    import torch
    import torch.nn.functional as F

    mean, std = _pixel_stats()
    x = torch.from_numpy(images).unsqueeze(1).float().div_(255.0).sub_(mean).div_(std)
    if x.shape[-1] != size:  # bilinear is linear, so normalising first is exact
        out = torch.empty(len(x), 1, size, size)
        for i in range(0, len(x), 256):  # chunks bound the temporary memory
            out[i : i + 256] = F.interpolate(x[i : i + 256], size=(size, size),
                                             mode="bilinear", align_corners=False)
        x = out
    # Grey replicated as a stride-0 view: 3 channels cost no extra memory.
    return x.expand(-1, channels, -1, -1)


# ----------------------------------------------------------------------- text
@functools.lru_cache(maxsize=None)
def _paragraphs(split: str) -> tuple[str, ...]:
    paras = (ASSETS / CORPUS_FILE).read_text(encoding="utf-8").splitlines()
    ends = np.cumsum([len(p) for p in paras])
    cut = int(np.searchsorted(ends, (1 - VAL_FRACTION) * ends[-1]))
    return tuple(paras[:cut] if split == "train" else paras[cut:])


# Break points after . ! ? (or ." etc.), not after Mr. / Mrs. / Dr. / St.
_SENTENCE_BREAK = re.compile(
    r"(?<!Mr\.)(?<!Mrs\.)(?<!Dr\.)(?<!St\.)(?<=[.!?])\s+|(?<=[.!?][\"'])\s+")


@functools.lru_cache(maxsize=None)
def _sentence_tokens(split: str) -> tuple[tuple[list[int], ...], ...]:
    """Per paragraph, its sentences' token ids (the corpus is tokenised once)."""
    pieces, owner = [], []
    for i, para in enumerate(_paragraphs(split)):
        for sentence in _SENTENCE_BREAK.split(para):
            pieces.append(" " + sentence)  # leading space: pieces concatenate cleanly
            owner.append(i)
    encoded = tokenizer().encode_batch(pieces, add_special_tokens=False)
    paras: list[list[list[int]]] = [[] for _ in _paragraphs(split)]
    for i, enc in zip(owner, encoded):
        paras[i].append(enc.ids)
    return tuple(tuple(p) for p in paras)


@functools.lru_cache(maxsize=None)
def _word_start() -> np.ndarray:
    """Per token id: does it begin with a space (a clean place to cut)?"""
    tok = tokenizer()
    return np.array([(tok.id_to_token(i) or "").startswith("\u0120") for i in range(VOCAB_SIZE)])


def _pack(split: str, max_tokens: int) -> list[list[int]]:
    """Chunks of at most max_tokens, cut at sentence ends where possible, else
    at a word start. A paragraph remainder shorter than MIN_CHUNK runs into
    the next paragraph. Chunks follow the text, so lengths (and padding) vary."""
    word_start, chunks, toks, breaks = _word_start(), [], [], []
    for para in _sentence_tokens(split):
        for sent in para:
            toks += sent
            breaks.append(len(toks))
        s = 0
        while len(toks) - s > max_tokens:
            lim = s + max_tokens
            fits = [b for b in breaks if s + MIN_CHUNK <= b <= lim]
            e = fits[-1] if fits else next(
                (i for i in range(lim, s + MIN_CHUNK - 1, -1) if word_start[toks[i]]), lim)
            chunks.append(toks[s:e])
            s = e
        if len(toks) - s >= MIN_CHUNK:
            chunks.append(toks[s:])
            toks, breaks = [], []
        else:
            toks, breaks = toks[s:], [b - s for b in breaks if b > s]
    return chunks + ([toks] if toks else [])


@functools.lru_cache(maxsize=16)
def _text_ids(split: str, seq_len: int) -> np.ndarray:
    """[BOS] chunk [EOS] [PAD]... as int64 (N, seq_len)."""
    if seq_len < MIN_CHUNK + 2:
        raise ValueError(f"seq_len must be >= {MIN_CHUNK + 2} for text, got {seq_len}")
    chunks = _pack(split, seq_len - 2)
    if split == "val":  # an exact repeat of a training chunk would not be held out
        seen = {tuple(c) for c in _pack("train", seq_len - 2)}
        chunks = [c for c in chunks if tuple(c) not in seen]
    return pad_rows([[BOS_ID, *c, EOS_ID] for c in chunks], seq_len)


def pad_rows(rows: list[list[int]], seq_len: int, pad: int = PAD_ID) -> np.ndarray:
    out = np.full((len(rows), seq_len), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def shifted_labels(ids: np.ndarray, target: np.ndarray) -> np.ndarray:
    """labels[t] = ids[t+1] where position t+1 is a target, else -100."""
    labels = np.full_like(ids, IGNORE_INDEX)
    labels[:, :-1] = np.where(target[:, 1:], ids[:, 1:], IGNORE_INDEX)
    return labels


def _mask_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, 1])  # independent of the order stream


@dataclass(frozen=True)
class Vocabulary:
    """What BERT masking needs of a tokenizer: the [MASK] id, the special ids (never
    targets) and the range random replacements are drawn from."""

    mask_id: int
    special_ids: tuple
    random_low: int
    random_high: int


EMBEDDED_VOCABULARY = Vocabulary(MASK_ID, tuple(range(len(SPECIAL_TOKENS))), len(SPECIAL_TOKENS), VOCAB_SIZE)


def _mlm_mask(batch: dict, rng: np.random.Generator, vocab: Vocabulary = EMBEDDED_VOCABULARY) -> dict:
    """BERT corruption of the real tokens: 15% targets, 80/10/10 mask/random/keep."""
    import torch

    ids = batch["input_ids"].numpy()
    real = ~np.isin(ids, vocab.special_ids)
    picked = (rng.random(ids.shape) < MLM_PROB) & real
    for r in np.flatnonzero(~picked.any(1) & real.any(1)):  # no empty loss rows
        picked[r, rng.choice(np.flatnonzero(real[r]))] = True
    u = rng.random(ids.shape)
    corrupted = np.where(picked & (u < 0.8), vocab.mask_id, ids)
    rand = picked & (u >= 0.8) & (u < 0.9)
    corrupted[rand] = rng.integers(vocab.random_low, vocab.random_high, size=int(rand.sum()))
    return {**batch, "input_ids": torch.from_numpy(corrupted),
            "labels": torch.from_numpy(np.where(picked, ids, IGNORE_INDEX))}


def mask_for_evaluation(split: dict, vocab: Vocabulary = EMBEDDED_VOCABULARY) -> dict:
    """A masked LM's held-out split, masked once with a fixed seed so every run sees the same targets."""
    return _mlm_mask(split, _mask_rng(0), vocab)


# -------------------------------------------------------------------- nanovlm
def _vlm_tokens(asked: np.ndarray, labels: np.ndarray, shape: DataShape):
    questions = [_encode(q) for q in QUESTIONS]
    answers = [_encode(answer_text(name)) + [EOS_ID] for name in FASHION_LABELS]
    prefix = [BOS_ID] + [IMAGE_ID] * shape.image_seq_len
    rows, target = [], np.zeros((len(asked), shape.seq_len), dtype=bool)
    for i, (q, c) in enumerate(zip(asked, labels)):
        start = len(prefix) + len(questions[q])
        rows.append(prefix + questions[q] + answers[c])
        if len(rows[-1]) > shape.seq_len:
            raise ValueError(f"nanovlm prompt needs seq_len >= {len(rows[-1])}, got {shape.seq_len}")
        target[i, start : len(rows[-1])] = True
    ids = pad_rows(rows, shape.seq_len)
    return ids, shifted_labels(ids, target)


def _nanovlm(split: str, shape: DataShape) -> dict:
    import torch

    images, labels = _images(split)
    rng = np.random.default_rng([GRID_SEED, SPLITS.index(split)])
    n = len(images)  # as many grids as images: every image once in every cell
    cells = np.stack([rng.permutation(n) for _ in range(4)], axis=1)
    asked = rng.integers(0, 4, size=n)
    grid = images[cells].reshape(n, 2, 2, 28, 28).transpose(0, 1, 3, 2, 4).reshape(n, 56, 56)
    ids, lab = _vlm_tokens(asked, labels[cells[np.arange(n), asked]], shape)
    return {"pixel_values": _to_pixels(grid, shape.image_size, 3).unsqueeze(1),
            "input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy((ids != PAD_ID).astype(np.int64)),
            "labels": torch.from_numpy(lab)}


# ---------------------------------------------------------------- the splits
def _check(arch: str, split: str, shape: DataShape) -> None:
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; valid choices: {', '.join(ARCHS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid choices: {', '.join(SPLITS)}")
    if not isinstance(shape, DataShape):
        raise TypeError(f"shape must be a DataShape, got {type(shape).__name__}")


def _relevant(arch: str, shape: DataShape) -> DataShape:
    """Keep only the fields the arch uses, so the caches are not split needlessly."""
    base = DataShape()
    if arch == "vit":
        return replace(base, image_size=shape.image_size, channels=shape.channels)
    if arch == "nanovlm":
        return replace(shape, channels=base.channels)
    return replace(base, seq_len=shape.seq_len)


@functools.lru_cache(maxsize=8)
def _clean(arch: str, split: str, shape: DataShape) -> dict:
    """The split before any MLM masking (BatchStream masks per batch)."""
    import torch

    if arch == "vit":
        images, labels = _images(split)
        return {"pixel_values": _to_pixels(images, shape.image_size, shape.channels),
                "labels": torch.from_numpy(labels)}
    if arch == "nanovlm":
        return _nanovlm(split, shape)
    ids = _text_ids(split, shape.seq_len)
    real = ids != PAD_ID
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(real.astype(np.int64))}
    if arch == "llama":
        batch["labels"] = torch.from_numpy(shifted_labels(ids, real))
    return batch


@functools.lru_cache(maxsize=8)
def _load(arch: str, split: str, shape: DataShape) -> dict:
    data = _clean(arch, split, shape)
    return mask_for_evaluation(data) if arch == "modernbert" else data


def load_split(arch: str, split: str, shape: DataShape = DataShape()) -> dict[str, "torch.Tensor"]:
    """The whole split (first dim N), cached: treat the tensors as read-only.
    modernbert comes with the fixed seed-0 masking used for evaluation."""
    _check(arch, split, shape)
    return _load(arch, split, _relevant(arch, shape))


class BatchStream:
    """Infinite seeded batches: a fresh permutation every epoch; batches are
    always full (the last one of an epoch is topped up from the next).

    `split` is a prepared split (e.g. from `gum_utils.hub`) to draw from instead of the
    embedded one, with the `vocab` its masked-LM batches are masked with."""

    def __init__(self, arch: str, split: str, shape: DataShape = DataShape(),
                 batch_size: int = 32, seed: int = 0, prepared: dict | None = None,
                 vocab: Vocabulary = EMBEDDED_VOCABULARY):
        _check(arch, split, shape)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.arch, self.batch_size, self.seed, self.vocab = arch, batch_size, seed, vocab
        self._data = prepared if prepared is not None else _clean(arch, split, _relevant(arch, shape))
        self.epoch_size = split_size(self._data)
        self._row_items, self._row_tokens = _row_counts(self._data)
        self.last_counts = (0, 0, 0)
        self._order_rng, self._mask_rng = np.random.default_rng(seed), _mask_rng(seed)
        self._order, self._pos, self.epoch = np.empty(0, dtype=np.int64), 0, 0

    def to(self, device) -> "BatchStream":
        """Keep the split on `device`: each batch is then gathered there, with no copy from the host.
        Not for a masked LM, whose masking runs on the host."""
        if self.arch == "modernbert":
            raise ValueError("modernbert batches are masked on the host; keep its split there")
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
        if self.arch == "modernbert":
            batch = _mlm_mask(batch, self._mask_rng, self.vocab)
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


def val_batches(arch: str, shape: DataShape = DataShape(), batch_size: int = 32,
                limit: int | None = None, prepared: dict | None = None) -> list[dict[str, "torch.Tensor"]]:
    """Validation in fixed order with fixed (seed 0) masking; limit caps samples.
    `prepared` is a held-out split made elsewhere (already masked for a masked LM)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    data = load_split(arch, "val", shape) if prepared is None else prepared
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
