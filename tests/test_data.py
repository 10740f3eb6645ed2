"""The shipped datasets: shapes, label conventions, masking, determinism, splits."""

import json
import subprocess
import sys
import time

import pytest
import torch

from gum_utils.archs import ARCHITECTURES, DataShape, architecture, embedded as E
from gum_utils.archs.nanovlm import QUESTIONS
from gum_utils.core import batches as B

TINY = {
    "vit": DataShape(28, 1, 64, 16),
    "modernbert": DataShape(28, 1, 64, 16),
    "llama": DataShape(28, 1, 64, 16),
    "nanovlm": DataShape(56, 3, 48, 16),
}


def new_stream(arch: str, *args, **kwargs) -> B.BatchStream:
    return B.BatchStream(architecture(arch), *args, **kwargs)


def load_split(arch: str, split: str, shape: DataShape) -> dict:
    return architecture(arch).load_split(split, shape)


def first(arch, split="train", shape=None, batch_size=16, seed=0):
    return next(new_stream(arch, split, shape or TINY[arch], batch_size, seed))


# ----------------------------------------------------------------- shapes
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_batch_shapes_and_dtypes(arch):
    shape = TINY[arch]
    b = first(arch, batch_size=8)
    assert b["labels"].dtype == torch.int64
    if arch == "vit":
        assert set(b) == {"pixel_values", "labels"}
        assert b["pixel_values"].shape == (8, 1, 28, 28) and b["pixel_values"].dtype == torch.float32
        assert b["labels"].shape == (8,) and 0 <= b["labels"].min() and b["labels"].max() < 10
        return
    assert b["input_ids"].shape == b["attention_mask"].shape == b["labels"].shape == (8, shape.seq_len)
    assert b["input_ids"].dtype == b["attention_mask"].dtype == torch.int64
    assert (b["input_ids"][:, 0] == E.BOS_ID).all()
    assert int(b["input_ids"].max()) < E.VOCAB_SIZE
    assert torch.equal(b["attention_mask"], (b["input_ids"] != E.PAD_ID).long())
    if arch == "nanovlm":
        assert b["pixel_values"].shape == (8, 1, 3, 56, 56) and b["pixel_values"].dtype == torch.float32
        assert (b["input_ids"][:, 1 : 1 + shape.image_seq_len] == E.IMAGE_ID).all()
        assert ((b["input_ids"] == E.IMAGE_ID).sum(1) == shape.image_seq_len).all()


def test_vit_paper_shape_and_normalisation():
    shape = DataShape(224, 3)
    x = load_split("vit", "val", shape)["pixel_values"]
    assert x.shape == (300, 3, 224, 224) and x.dtype == torch.float32
    assert torch.equal(x[:, 0], x[:, 2])  # grey replicated
    b = first("vit", "val", shape, batch_size=4)
    assert b["pixel_values"].shape == (4, 3, 224, 224) and b["pixel_values"].is_contiguous()
    tiny = load_split("vit", "train", TINY["vit"])["pixel_values"]
    assert abs(float(tiny.mean())) < 1e-3 and abs(float(tiny.std()) - 1) < 1e-3


def test_nanovlm_paper_shape():
    shape = DataShape(224, 3, 96, 49)
    b = B.val_batches(architecture("nanovlm"), shape, batch_size=4, limit=4)[0]
    assert b["pixel_values"].shape == (4, 1, 3, 224, 224)
    assert ((b["input_ids"] == E.IMAGE_ID).sum(1) == 49).all()


# ----------------------------------------------------------------- labels
def test_llama_labels_are_pre_shifted_and_padding_occurs():
    b = first("llama", batch_size=64)
    ids, labels, mask = b["input_ids"], b["labels"], b["attention_mask"]
    valid = mask[:, 1:].bool()
    assert torch.equal(labels[:, :-1][valid], ids[:, 1:][valid])
    assert (labels[:, :-1][~valid] == -100).all() and (labels[:, -1] == -100).all()
    assert (mask == 0).any(), "no padding in 64 sequences"
    lengths = mask.sum(1)
    assert lengths.min() >= E.MIN_CHUNK and lengths.unique().numel() > 10
    # [EOS] closes every sequence (it always fits), and nothing follows it.
    eos_at = lengths - 1
    assert (ids[torch.arange(len(ids)), eos_at] == E.EOS_ID).all()
    assert B.count_items(b) == int(mask.sum() - len(ids))


def test_modernbert_masking():
    b = first("modernbert", batch_size=256)
    original = torch.where(b["labels"] != -100, b["labels"], b["input_ids"])
    real = original >= len(E.SPECIAL_TOKENS)
    target = b["labels"] != -100
    assert not (target & ~real).any(), "special or pad positions are never targets"
    assert target.any(1).all(), "every sequence has a target"
    frac = target.sum() / real.sum()
    assert 0.13 < frac < 0.18, frac
    ids_t = b["input_ids"][target]
    masked = (ids_t == E.MASK_ID).float().mean()
    kept = (ids_t == b["labels"][target]).float().mean()
    assert 0.75 < masked < 0.85 and 0.06 < kept < 0.15, (masked, kept)
    assert torch.equal(b["input_ids"][~target], original[~target])
    # BOS ... EOS framing
    assert (b["input_ids"][:, 0] == E.BOS_ID).all()
    assert (original[torch.arange(len(original)), b["attention_mask"].sum(1) - 1] == E.EOS_ID).all()


def test_nanovlm_supervises_only_the_answer():
    tok = E.tokenizer()
    b = first("nanovlm", batch_size=32)
    for ids, labels in zip(b["input_ids"].tolist(), b["labels"].tolist()):
        targets = [t for t, l in enumerate(labels) if l != -100]
        assert targets == list(range(targets[0], targets[-1] + 1))  # one contiguous span
        assert all(labels[t] == ids[t + 1] for t in targets)
        assert labels[targets[-1]] == E.EOS_ID
        answer = tok.decode([labels[t] for t in targets[:-1]]).strip()
        assert answer in E.FASHION_LABELS
        question = tok.decode(ids[1 + 16 : targets[0] + 1])
        assert question in QUESTIONS


def test_nanovlm_answer_matches_the_asked_cell():
    """The answer is the label of the image in the cell the question names."""
    images, labels = E.images("val")
    shape = TINY["nanovlm"]
    data = load_split("nanovlm", "val", shape)
    mean, std = E._pixel_stats()
    tok, lookup = E.tokenizer(), {im.tobytes(): int(c) for im, c in zip(images, labels)}
    for i in range(20):
        grid = (data["pixel_values"][i, 0, 0] * std + mean) * 255
        ids, labels = data["input_ids"][i].tolist(), data["labels"][i].tolist()
        targets = [t for t, l in enumerate(labels) if l != -100]
        question = tok.decode(ids[1 + shape.image_seq_len : targets[0] + 1])
        answer = tok.decode([labels[t] for t in targets[:-1]]).strip()
        r, c = divmod(QUESTIONS.index(question), 2)
        cell = grid[28 * r : 28 * r + 28, 28 * c : 28 * c + 28].round().clamp(0, 255).to(torch.uint8)
        assert answer == E.FASHION_LABELS[lookup[cell.numpy().tobytes()]]


# ------------------------------------------------------------ determinism
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_same_seed_same_batches_different_seed_differs(arch):
    a, b, c = (new_stream(arch, "train", TINY[arch], 8, s) for s in (3, 3, 4))
    for _ in range(3):
        x, y, z = next(a), next(b), next(c)
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert not torch.equal(x["labels"], z["labels"])


def test_epochs_reshuffle_and_cover_the_split():
    s = new_stream("vit", "val", TINY["vit"], 100, 0)
    assert s.epoch_size == 600
    # A fingerprint per image: its pixel sum is (almost surely) unique enough.
    epoch1 = torch.cat([next(s)["pixel_values"].sum((1, 2, 3)) for _ in range(6)])
    epoch2 = torch.cat([next(s)["pixel_values"].sum((1, 2, 3)) for _ in range(6)])
    assert torch.equal(epoch1.sort().values, epoch2.sort().values)
    assert not torch.equal(epoch1, epoch2)
    odd = new_stream("vit", "val", TINY["vit"], 7, 0)
    assert all(len(next(odd)["labels"]) == 7 for _ in range(200))  # always full


def test_val_batches_are_fixed():
    a = B.val_batches(architecture("modernbert"), TINY["modernbert"], 32, limit=100)
    b = B.val_batches(architecture("modernbert"), TINY["modernbert"], 50)
    assert [len(x["labels"]) for x in a] == [32, 32, 32, 4]
    assert torch.equal(torch.cat([x["input_ids"] for x in a]), torch.cat([x["input_ids"] for x in b])[:100])
    assert torch.equal(a[0]["labels"], load_split("modernbert", "val", TINY["modernbert"])["labels"][:32])


# ----------------------------------------------------------------- splits
def test_train_and_val_are_disjoint():
    tr, va = E.images("train")[0], E.images("val")[0]
    assert len(tr) == 3000 and len(va) == 600
    assert not {x.tobytes() for x in tr} & {x.tobytes() for x in va}
    for arch in ("vit", "nanovlm"):
        sizes = {s: len(load_split(arch, s, TINY[arch])["labels"]) for s in ("train", "val", "test")}
        assert sizes == {"train": 3000, "val": 300, "test": 300}
    # Text: val is the end of the novel; no chunk of it occurs in train.
    train = {tuple(r) for r in load_split("llama", "train", TINY["llama"])["input_ids"].tolist()}
    val, test = ([tuple(r) for r in load_split("llama", split, TINY["llama"])["input_ids"].tolist()]
                 for split in ("val", "test"))
    assert len(val) > 200 and len(test) > 200 and not train & set(val) and not train & set(test)
    assert E._paragraphs("train")[-1] != E._paragraphs("val")[0]
    shared = set(E._paragraphs("val")) & set(E._paragraphs("train"))
    assert shared <= {"* * * * *"}  # only the section-break line recurs


def test_bad_arch_or_split_names_the_choices():
    with pytest.raises(ValueError, match="vit, modernbert, llama, nanovlm"):
        load_split("gpt", "train", DataShape())
    with pytest.raises(ValueError, match="train, val"):
        new_stream("vit", "test", DataShape(), 4, 0)
    with pytest.raises(ValueError, match="seq_len"):
        load_split("nanovlm", "val", DataShape(56, 3, 20, 16))


# ----------------------------------------------------------------- counts
def test_split_batch_and_counts():
    b = first("llama", batch_size=10)
    parts = B.split_batch(b, 4)
    assert [len(p["input_ids"]) for p in parts] == [4, 4, 2]
    assert sum(B.count_items(p) for p in parts) == B.count_items(b)
    assert sum(B.count_tokens(p) for p in parts) == B.count_tokens(b) == int(b["attention_mask"].sum())
    assert torch.equal(torch.cat([p["labels"] for p in parts]), b["labels"])
    v = first("vit", batch_size=6)
    assert B.count_items(v) == 6 and B.count_tokens(v) == 0
    with pytest.raises(ValueError):
        B.split_batch(b, 0)


# -------------------------------------------------------------- tokenizer
def test_tokenizer_round_trip_and_constants():
    tok = E.tokenizer()
    text = 'It is a truth universally acknowledged, that a "single" man -- 42 cafés!'
    assert tok.decode(tok.encode(text).ids) == text
    assert E.UNK_ID not in tok.encode(text).ids
    spec = json.loads((E.ASSETS / E.TOKENIZER_FILE).read_text())
    added = {t["content"]: t["id"] for t in spec["added_tokens"]}
    assert added == dict(zip(E.SPECIAL_TOKENS, range(6)))
    assert (E.PAD_ID, E.UNK_ID, E.BOS_ID, E.EOS_ID, E.MASK_ID, E.IMAGE_ID) == tuple(
        added[t] for t in ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[MASK]", "<image>"))
    assert len(spec["model"]["vocab"]) == E.VOCAB_SIZE == tok.get_vocab_size() == 2048
    assert len(E.FASHION_LABELS) == 10


def test_constants_import_without_torch():
    code = ("import sys, gum_utils; before = 'torch' in sys.modules; "
            "from gum_utils.archs.embedded import VOCAB_SIZE, PAD_ID, FASHION_LABELS; "
            "assert before or 'torch' not in sys.modules, 'embedded.py imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_assets_are_small_and_documented():
    files = {p.name: p.stat().st_size for p in E.ASSETS.iterdir()}
    assert sum(files.values()) < 3_000_000
    assert {E.FASHION_FILE, E.CORPUS_FILE, E.TOKENIZER_FILE, "FASHION_MNIST_LICENSE.txt",
            "CORPUS_LICENSE.txt", "README.md"} <= set(files)
    assert 300_000 < files[E.CORPUS_FILE] < 1_000_000


def test_warm_load_is_fast():
    load_split("llama", "train", TINY["llama"])
    t = time.perf_counter()
    for arch in ARCHITECTURES:
        load_split(arch, "train", TINY[arch])
    assert time.perf_counter() - t < 1.0


def test_a_stream_kept_on_a_device_gathers_its_batches_there():
    stream = new_stream("vit", "train", TINY["vit"], batch_size=4, seed=0)
    expected = next(new_stream("vit", "train", TINY["vit"], batch_size=4, seed=0))
    batch = next(stream.to(torch.device("meta")))
    assert all(v.is_meta for v in batch.values())
    assert {k: v.shape for k, v in batch.items()} == {k: v.shape for k, v in expected.items()}
    with pytest.raises(ValueError, match="masked on the host"):
        new_stream("modernbert", "train", TINY["modernbert"]).to(torch.device("meta"))


def test_the_training_split_goes_to_the_gpu_only_where_it_fits():
    from gum_utils.core.trainer import keeps_split_on_device

    stream = new_stream("llama", "train", TINY["llama"], batch_size=4)
    cuda, free = torch.device("cuda"), 4 * stream.nbytes
    assert keeps_split_on_device(stream, cuda, free_bytes=free)
    assert not keeps_split_on_device(stream, cuda, free_bytes=free - 8)
    assert not keeps_split_on_device(stream, torch.device("cpu"), free_bytes=free)
    masked = new_stream("modernbert", "train", TINY["modernbert"], batch_size=4)
    assert not keeps_split_on_device(masked, cuda, free_bytes=10**12)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_streams_host_side_counts_equal_the_batch_counted(arch):
    stream = new_stream(arch, "train", TINY[arch], batch_size=5, seed=3)
    for _ in range(3):
        batch = next(stream)
        assert stream.last_counts == (B.count_items(batch), 5, B.count_tokens(batch))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_val_and_test_are_the_two_halves_of_the_held_out_data(arch):
    """Tuning reads val, the verdicts test: disjoint rows, together the whole held-out split, val first."""
    spec = architecture(arch)
    whole = spec.held_out(spec.clean_split("val", TINY[arch]))
    val, test = (load_split(arch, split, TINY[arch]) for split in ("val", "test"))
    for key in whole:
        assert torch.equal(torch.cat([val[key], test[key]]), whole[key])
    assert len(val["input_ids" if "input_ids" in val else "labels"]) - len(test["input_ids" if "input_ids" in test
                                                                                else "labels"]) in (0, 1)


def _tiles(pixel_values: torch.Tensor) -> set:
    """The 28 x 28 images a batch of nanoVLM grids is tiled from, as bytes (one channel of the grid)."""
    grids = pixel_values[:, 0, 0]
    return {grids[i, 28 * r : 28 * r + 28, 28 * c : 28 * c + 28].numpy().tobytes()
            for i in range(len(grids)) for r in (0, 1) for c in (0, 1)}


def test_nanovlm_validation_and_test_grids_share_no_image():
    """The held-out images are split before tiling: no test grid shows an image a validation grid shows."""
    val, test = (load_split("nanovlm", split, TINY["nanovlm"])["pixel_values"] for split in ("val", "test"))
    val_images, test_images = _tiles(val), _tiles(test)
    held_out = len(E.images("val")[0])
    assert len(val_images) == held_out - held_out // 2 and len(test_images) == held_out // 2  # each image in both
    assert not val_images & test_images
