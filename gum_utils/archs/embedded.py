"""The data shipped in ``gum_utils/assets/``: Fashion-MNIST images, *Pride and Prejudice*, a tokenizer.

The pieces every architecture builds its embedded splits from: pixels, packed text rows, shifted
labels, BERT masking. Nothing is downloaded; ``scripts/make_assets.py`` documents and rebuilds the
assets. torch is imported lazily so the constants stay cheap to import.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tokenizers
    import torch

ASSETS = Path(__file__).resolve().parent.parent / "assets"
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
SPLITS = ("train", "val")
VAL_FRACTION = 0.1  # last 10% of the novel (by characters) is validation
MIN_CHUNK = 8  # shortest text chunk in tokens (tiny paragraphs run on)
MLM_PROB = 0.15


# --------------------------------------------------------------------- tokens
@functools.lru_cache(maxsize=None)
def tokenizer() -> "tokenizers.Tokenizer":
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ASSETS / TOKENIZER_FILE))
    # The id constants above are plain ints; fail loudly if the file disagrees.
    ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
    if tok.get_vocab_size() != VOCAB_SIZE or ids != list(range(len(SPECIAL_TOKENS))):
        raise RuntimeError(f"{TOKENIZER_FILE} does not match the constants in embedded.py")
    return tok


def encode(text: str) -> list[int]:
    return tokenizer().encode(text, add_special_tokens=False).ids


def decode(ids) -> str:
    return tokenizer().decode([int(i) for i in ids], skip_special_tokens=True).strip()


# --------------------------------------------------------------------- images
@functools.lru_cache(maxsize=None)
def _fashion() -> dict[str, np.ndarray]:
    with np.load(ASSETS / FASHION_FILE) as z:
        return {k: z[k] for k in z.files}


def images(split: str) -> tuple[np.ndarray, np.ndarray]:
    f = _fashion()
    return f[f"{split}_images"], f[f"{split}_labels"].astype(np.int64)


@functools.lru_cache(maxsize=None)
def _pixel_stats() -> tuple[float, float]:
    x = _fashion()["train_images"] / 255.0  # training statistics only
    return float(x.mean()), float(x.std())


def to_pixels(images: np.ndarray, size: int, channels: int) -> "torch.Tensor":
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
def text_ids(split: str, seq_len: int) -> np.ndarray:
    """[BOS] chunk [EOS] [PAD]... as int64 (N, seq_len)."""
    if seq_len < MIN_CHUNK + 2:
        raise ValueError(f"seq_len must be >= {MIN_CHUNK + 2} for text, got {seq_len}")
    chunks = _pack(split, seq_len - 2)
    if split == "val":  # an exact repeat of a training chunk would not be held out
        seen = {tuple(c) for c in _pack("train", seq_len - 2)}
        chunks = [c for c in chunks if tuple(c) not in seen]
    return pad_rows([[BOS_ID, *c, EOS_ID] for c in chunks], seq_len)


def text_split(split: str, seq_len: int, causal: bool) -> dict:
    """The novel as padded rows with their attention mask; a causal LM also gets next-token labels."""
    import torch

    ids = text_ids(split, seq_len)
    real = ids != PAD_ID
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(real.astype(np.int64))}
    if causal:
        batch["labels"] = torch.from_numpy(shifted_labels(ids, real))
    return batch


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


# -------------------------------------------------------------------- masking
def mask_rng(seed: int) -> np.random.Generator:
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


def mlm_mask(batch: dict, rng: np.random.Generator, vocab: Vocabulary = EMBEDDED_VOCABULARY) -> dict:
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
    return mlm_mask(split, mask_rng(0), vocab)
