"""Paper-size data and weights from Hugging Face: datasets by name, the models' own
tokenizers and image processors, pretrained checkpoints. Not the default path.

Every name here is a hub id or a local directory: a dataset written with `save_to_disk`,
a tokenizer, image processor or model written with `save_pretrained`. Local directories
load offline; a hub id needs a network (or its copy in the local cache with
HF_HUB_OFFLINE=1), and fails at once with a message saying how to point to a local copy.

Each split becomes the dict of tensors an architecture makes of the embedded data, so the
training loop cannot tell them apart: ViT pixels through the image processor (224 x 224)
with class labels; text packed into full rows of `seq_len` tokens ([BOS] first), labels
shifted for Llama, BERT masking for ModernBERT; nanoVLM [BOS] <image> x n, question,
answer [EOS], with only the answer supervised. Only as many rows as a run needs are read
(streamed from the hub), so a 25-step run does not download a whole corpus.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np

from .shapes import DataShape, HubData
from .embedded import Vocabulary, pad_rows, shifted_labels

WIKITEXT = ("Salesforce/wikitext", "wikitext-103-raw-v1")  # the text architectures' default corpus
# The validation split is the dataset's own `validation` or `test` split; a dataset with neither
# keeps its first HELD_OUT training rows back.
VAL_SPLITS = ("validation", "test")
HELD_OUT = 512  # rows kept back for validation when a dataset has no validation split
HOW_DATASET = ("where it is reachable run datasets.load_dataset(NAME, SUBSET).save_to_disk(DIR), copy DIR here "
               "and pass dataset=DIR; or run with data='embedded'")
HOW_MODEL = ("where it is reachable run {cls}.from_pretrained(NAME).save_pretrained(DIR), copy DIR here and "
             "pass its path")


def source(arch, dataset: str | None = None, tokenizer: str | None = None,
           pretrained: str | None = None) -> HubData:
    """The architecture's default source with the run's overrides; `dataset` may be 'id:subset'.
    A pretrained checkpoint brings its own tokenizer (an image model: image processor) unless one is named."""
    base = arch.hub_data
    if dataset:
        name, _, subset = (dataset, "", "") if is_local(dataset) else dataset.partition(":")
        base = replace(base, dataset=name, subset=subset or None)
    processor = tokenizer or pretrained
    if processor:
        field = "tokenizer" if arch.reads_text else "image_processor"
        base = replace(base, **{field: processor})
    return base


# ------------------------------------------------------------------ reaching
def is_local(name: str) -> bool:
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") > 1


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP probe, so that offline machines fail at once instead of after minutes
    of retries. Offline mode means "use the cache": say yes."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _require_local_or_hub(name: str, what: str, how: str) -> Path | None:
    """The local directory `name` names, or None for a hub id the hub can serve; else a clear error."""
    path = Path(name).expanduser()
    if is_local(name):
        if not path.is_dir():
            raise RuntimeError(f"{what} {name!r} is not a local directory; {how}")
        return path
    if not hub_reachable():
        raise RuntimeError(f"{what} {name!r} is not a local directory and the Hugging Face hub is not reachable "
                           f"(set HF_HUB_OFFLINE=1 to use its local cache); {how}")
    return None


def open_dataset(name: str, subset: str | None = None) -> dict:
    """The dataset's splits: a local save_to_disk copy (a bare Dataset is the train split),
    or the hub's, streamed so that only the rows read are fetched."""
    path = _require_local_or_hub(name, "dataset", HOW_DATASET)
    try:
        import datasets
    except ImportError:
        raise RuntimeError("hub data needs the Hugging Face `datasets` package (pip install datasets); "
                           f"{HOW_DATASET}") from None
    if path is not None:
        ds = datasets.load_from_disk(str(path))
        return dict(ds) if isinstance(ds, datasets.DatasetDict) else {"train": ds}
    try:
        return dict(datasets.load_dataset(name, subset, streaming=True))
    except Exception as exc:  # unknown id, unknown subset, gated...
        raise RuntimeError(f"could not open dataset {name!r} ({subset or 'default'}) "
                           f"({type(exc).__name__}: {exc}); {HOW_DATASET}") from exc


def split_rows(splits: dict, split: str, limit: int | None):
    """Up to `limit` rows of the run's train or val split."""
    if "train" not in splits:
        raise ValueError(f"the dataset has no train split; it has {', '.join(splits)}")
    held = next((name for name in VAL_SPLITS if name in splits), None)
    if split == "val":
        if held is None:  # the held-out head only, whatever the limit: it must not reach the training rows
            return itertools.islice(splits["train"], HELD_OUT if limit is None else min(limit, HELD_OUT))
        return itertools.islice(splits[held], limit)
    skip = 0 if held else HELD_OUT
    return itertools.islice(splits["train"], skip, None if limit is None else skip + limit)


def _load_pretrained(loader, name: str, what: str, **options):
    path = _require_local_or_hub(name, what, HOW_MODEL.format(cls=loader.__name__))
    try:
        return loader.from_pretrained(str(path) if path else name, **options)
    except OSError as exc:  # gated, unknown id, not in the offline cache, an incomplete directory
        raise RuntimeError(f"could not load {what} {name!r} ({exc}); "
                           + HOW_MODEL.format(cls=loader.__name__)) from exc


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    return _load_pretrained(AutoTokenizer, name, "tokenizer")


def load_image_processor(name: str):
    from transformers import AutoImageProcessor

    return _load_pretrained(AutoImageProcessor, name, "image processor")


def load_model(model_class, name: str):
    import torch

    # float32 weights and optimizer state, as every run records (from_pretrained would keep the checkpoint's dtype)
    return _load_pretrained(model_class, name, "pretrained model", dtype=torch.float32)


# ------------------------------------------------------------------ encoding
def _column(row: dict, names: tuple, what: str):
    for name in names:
        if name in row:
            return row[name]
    raise ValueError(f"the dataset has no {what} column (looked for {', '.join(names)}; it has {', '.join(row)})")


def _pixels(processor, images: list, size: int):
    """Processor output as float32 (N, 3, size, size)."""
    rgb = [image.convert("RGB") for image in images]
    return processor(images=rgb, size={"height": size, "width": size}, return_tensors="pt")["pixel_values"].float()


def encode_images(rows, processor, shape: DataShape) -> dict:
    import torch

    rows = list(rows)
    images = [_column(r, ("img", "image"), "image") for r in rows]
    labels = [_column(r, ("label", "fine_label", "labels"), "label") for r in rows]
    return {"pixel_values": _pixels(processor, images, shape.image_size),
            "labels": torch.tensor(labels, dtype=torch.int64)}


def _token_rows(rows, tokenizer, seq_len: int, count: int) -> np.ndarray:
    """`count` rows of [BOS] + seq_len-1 tokens of the running text, documents joined by [EOS]."""
    need, stream = count * (seq_len - 1), []
    for row in rows:
        text = _column(row, ("text", "content"), "text").strip()
        if text:
            stream += tokenizer(text, add_special_tokens=False)["input_ids"] + [_end_id(tokenizer)]
        if len(stream) >= need:
            break
    count = min(count, len(stream) // (seq_len - 1))
    if count == 0:
        raise ValueError(f"the dataset holds fewer than {seq_len - 1} tokens of text")
    body = np.asarray(stream[: count * (seq_len - 1)], dtype=np.int64).reshape(count, seq_len - 1)
    return np.concatenate([np.full((count, 1), _start_id(tokenizer), dtype=np.int64), body], axis=1)


def _start_id(tokenizer) -> int:
    """[BOS], or a BERT tokenizer's [CLS]."""
    return next(i for i in (tokenizer.bos_token_id, tokenizer.cls_token_id, tokenizer.eos_token_id) if i is not None)


def _end_id(tokenizer) -> int:
    """[EOS], or a BERT tokenizer's [SEP]."""
    return next(i for i in (tokenizer.eos_token_id, tokenizer.sep_token_id) if i is not None)


def encode_text(rows, tokenizer, causal: bool, shape: DataShape, count: int) -> dict:
    import torch

    ids = _token_rows(rows, tokenizer, shape.seq_len, count)
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.ones(ids.shape, dtype=torch.int64)}
    if causal:  # rows are full: every next token is a target
        batch["labels"] = torch.from_numpy(shifted_labels(ids, np.ones_like(ids, dtype=bool)))
    return batch


def both_splits(train_count: int, val_count: int, encode) -> tuple:
    """(train, val): what `encode(split name, count)` makes of each split."""
    return encode("train", train_count), encode("val", val_count)


def vocabulary(tokenizer) -> Vocabulary:
    if tokenizer.mask_token_id is None:
        raise ValueError("masked language modelling needs a tokenizer with a mask token")
    return Vocabulary(tokenizer.mask_token_id, tuple(tokenizer.all_special_ids), 0, len(tokenizer))


def _question_answer(row: dict) -> tuple:
    """(image, question, answer) from a flat row or The Cauldron's images/texts lists."""
    if "texts" in row:
        turn = row["texts"][0]
        return row["images"][0], turn["user"], turn["assistant"]
    return (_column(row, ("image", "img"), "image"), _column(row, ("question",), "question"),
            _column(row, ("answer", "multiple_choice_answer"), "answer"))


def encode_vqa(rows, tokenizer, processor, shape: DataShape, image_token_id: int) -> dict:
    import torch

    images, ids, starts = [], [], []  # starts: where each answer begins
    prefix = [_start_id(tokenizer)] + [image_token_id] * shape.image_seq_len
    for row in rows:
        image, question, answer = _question_answer(row)
        asked = tokenizer(" " + question.strip(), add_special_tokens=False)["input_ids"]
        said = tokenizer(" " + answer.strip(), add_special_tokens=False)["input_ids"] + [_end_id(tokenizer)]
        tokens = (prefix + asked + said)[: shape.seq_len]  # a long question loses its answer's tail
        images.append(image)
        ids.append(tokens)
        starts.append(len(prefix) + len(asked))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    full = pad_rows(ids, shape.seq_len, pad)
    positions, lengths = np.arange(shape.seq_len), np.array([len(tokens) for tokens in ids])[:, None]
    answer = (positions >= np.array(starts)[:, None]) & (positions < lengths)
    labels, mask = shifted_labels(full, answer), (positions < lengths).astype(np.int64)
    return {"pixel_values": _pixels(processor, images, shape.image_size).unsqueeze(1),
            "input_ids": torch.from_numpy(full), "attention_mask": torch.from_numpy(mask),
            "labels": torch.from_numpy(labels)}


# ------------------------------------------------------------------- a run's
def load_splits(arch, src: HubData, shape: DataShape, model_config, train_samples: int, val_samples: int):
    """(train split, val split, masking vocabulary or None), each a dict of tensors like the embedded data's."""
    tokenizer = load_tokenizer(src.tokenizer) if src.tokenizer else None
    processor = load_image_processor(src.image_processor) if src.image_processor else None
    _check_vocabulary(tokenizer, model_config)
    splits = open_dataset(src.dataset, src.subset)
    return arch.encode_hub(splits, tokenizer, processor, shape, model_config, train_samples, val_samples)


def _check_vocabulary(tokenizer, model_config) -> None:
    if tokenizer is None:
        return
    text = getattr(model_config, "text_config", model_config)
    if len(tokenizer) > text.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary is "
                         f"{text.vocab_size}: use the tokenizer of the model (or its pretrained checkpoint)")
