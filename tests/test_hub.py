"""The hub path against local files: datasets written with save_to_disk, a tokenizer and an
image processor written with save_pretrained, a pretrained checkpoint; and the offline errors."""

import sys
import time

import numpy as np
import pytest
import torch

from gum_utils.archs import embedded as data
from gum_utils.core.batches import BatchStream
from gum_utils.archs import hub
from gum_utils.archs.embedded import IGNORE_INDEX
from gum_utils.archs import DataShape
from gum_utils.archs import REGISTRY, architecture, build_model
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train

datasets = pytest.importorskip("datasets")
PIL = pytest.importorskip("PIL.Image")

SENTENCES = ["It is a truth universally acknowledged, that a single man in possession of a good fortune, "
             "must be in want of a wife.", "", "However little known the feelings or views of such a man may be "
             "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
             "surrounding families."] * 4


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """The embedded tokenizer saved as a transformers tokenizer: a stand-in for a model's own."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(data.ASSETS / data.TOKENIZER_FILE)),
                            pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]",
                            mask_token="[MASK]").save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def processor_dir(tmp_path_factory):
    from transformers import ViTImageProcessor

    path = tmp_path_factory.mktemp("processor")
    ViTImageProcessor(size={"height": 224, "width": 224}).save_pretrained(path)
    return str(path)


def _images(count: int) -> list:
    rng = np.random.default_rng(0)
    return [PIL.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)) for _ in range(count)]


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory):
    """A CIFAR-10 look-alike: img/label columns, train and test splits."""
    path = tmp_path_factory.mktemp("cifar")
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    split = lambda n: datasets.Dataset.from_dict({"img": _images(n), "label": [i % 10 for i in range(n)]},
                                                 features=features)
    datasets.DatasetDict({"train": split(12), "test": split(4)}).save_to_disk(str(path))
    return str(path)


@pytest.fixture(scope="module")
def text_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("wikitext")
    datasets.DatasetDict({name: datasets.Dataset.from_dict({"text": SENTENCES})
                          for name in ("train", "validation")}).save_to_disk(str(path))
    return str(path)


# ------------------------------------------------------------ the datasets
def test_a_local_dataset_opens_with_its_splits(text_dataset):
    splits = hub.open_dataset(text_dataset)
    assert set(splits) == {"train", "validation"}
    assert [row["text"] for row in hub.split_rows(splits, "val", 2)] == SENTENCES[:2]


def test_a_dataset_without_a_validation_split_holds_its_first_rows_back():
    rows = datasets.Dataset.from_dict({"text": [str(i) for i in range(hub.HELD_OUT + 3)]})
    splits = {"train": rows}
    held = [r["text"] for r in hub.split_rows(splits, "val", None)]
    trained = [r["text"] for r in hub.split_rows(splits, "train", None)]
    assert trained == ["512", "513", "514"] and len(held) == hub.HELD_OUT and not set(held) & set(trained)
    assert len(list(hub.split_rows(splits, "val", 10 * hub.HELD_OUT))) == hub.HELD_OUT  # never into training rows


def test_a_missing_local_dataset_fails_at_once_naming_the_fix(tmp_path):
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="not a local directory.*save_to_disk"):
        hub.open_dataset(str(tmp_path / "nope"))
    assert time.perf_counter() - started < 1.0  # no network attempt


def test_a_hub_dataset_offline_fails_at_once_naming_the_fix(monkeypatch):
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(RuntimeError, match="'someone/some-dataset' is not a local directory and the Hugging "
                                           "Face hub is not reachable.*save_to_disk.*data='embedded'"):
        hub.open_dataset("someone/some-dataset")


def test_without_the_datasets_package_the_error_says_how_to_install_it(monkeypatch, text_dataset):
    monkeypatch.setitem(sys.modules, "datasets", None)  # the import now fails
    with pytest.raises(RuntimeError, match="pip install datasets"):
        hub.open_dataset(text_dataset)


# ------------------------------------------------------------ the encoders
def test_text_is_packed_into_full_rows_with_shifted_labels(tokenizer_dir, text_dataset):
    tok = hub.load_tokenizer(tokenizer_dir)
    rows = hub.split_rows(hub.open_dataset(text_dataset), "train", None)
    batch = hub.encode_text(rows, tok, True, DataShape(seq_len=16), count=3)
    ids, labels = batch["input_ids"], batch["labels"]
    assert ids.shape == (3, 16) and bool((ids[:, 0] == data.BOS_ID).all()) and bool(batch["attention_mask"].all())
    assert torch.equal(labels[:, :-1], ids[:, 1:]) and bool((labels[:, -1] == IGNORE_INDEX).all())
    # The running text, documents joined by [EOS]: the rows are consecutive pieces of it.
    expected = tok(SENTENCES[0], add_special_tokens=False)["input_ids"]
    assert ids[0, 1:].tolist() == expected[:15] and ids[1, 1:].tolist() == expected[15:30]


def test_masked_lm_batches_mask_real_tokens_with_the_tokenizers_mask(tokenizer_dir, text_dataset):
    tok = hub.load_tokenizer(tokenizer_dir)
    vocab = hub.vocabulary(tok)
    assert vocab.mask_id == data.MASK_ID and set(vocab.special_ids) <= set(range(len(data.SPECIAL_TOKENS)))
    rows = hub.split_rows(hub.open_dataset(text_dataset), "train", None)
    split = hub.encode_text(rows, tok, False, DataShape(seq_len=16), count=4)
    batch = next(BatchStream(architecture("modernbert"), "train", batch_size=4, prepared=split, vocab=vocab))
    targets = batch["labels"] != IGNORE_INDEX
    assert targets.any(1).all() and not bool(torch.isin(batch["labels"][targets], torch.tensor(vocab.special_ids)).any())


def test_images_go_through_the_image_processor_at_224(processor_dir, image_dataset):
    processor = hub.load_image_processor(processor_dir)
    rows = hub.split_rows(hub.open_dataset(image_dataset), "val", None)
    batch = hub.encode_images(rows, processor, DataShape(image_size=224, channels=3))
    assert batch["pixel_values"].shape == (4, 3, 224, 224) and batch["labels"].tolist() == [0, 1, 2, 3]
    assert -1.0 <= float(batch["pixel_values"].min()) < float(batch["pixel_values"].max()) <= 1.0


@pytest.mark.parametrize("layout", ["flat", "cauldron"])
def test_vqa_rows_supervise_only_the_answer(tokenizer_dir, processor_dir, layout):
    tok, processor = hub.load_tokenizer(tokenizer_dir), hub.load_image_processor(processor_dir)
    image = _images(1)[0]
    row = ({"image": image, "question": "what colour is it?", "answer": "red"} if layout == "flat" else
           {"images": [image], "texts": [{"user": "what colour is it?", "assistant": "red", "source": "x"}]})
    shape = DataShape(image_size=224, channels=3, seq_len=32, image_seq_len=4)
    batch = hub.encode_vqa([row], tok, processor, shape, image_token_id=data.IMAGE_ID)
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    assert batch["pixel_values"].shape == (1, 1, 3, 224, 224)
    assert ids[:5].tolist() == [data.BOS_ID] + [data.IMAGE_ID] * 4
    answer = tok(" red", add_special_tokens=False)["input_ids"] + [data.EOS_ID]
    assert labels[labels != IGNORE_INDEX].tolist() == answer


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused(tokenizer_dir):
    from transformers import LlamaConfig

    with pytest.raises(ValueError, match="tokenizer has 2048 tokens but the model's vocabulary is 100"):
        hub._check_vocabulary(hub.load_tokenizer(tokenizer_dir), LlamaConfig(vocab_size=100))


def test_the_methods_page_names_every_default_dataset_and_tokenizer():
    from pathlib import Path

    methods = (Path(__file__).resolve().parent.parent / "book" / "methods.md").read_text()
    for source in (arch.hub_data for arch in REGISTRY.values()):
        for name in (source.dataset, source.subset, source.tokenizer, source.image_processor):
            assert name is None or f"`{name}`" in methods, name
    # the page's numbers are the code's: the held-out head and the text rows of the paper size
    assert f"first {hub.HELD_OUT} rows are held out" in methods
    assert f"full rows of {architecture('llama').shape('paper').seq_len} tokens" in methods


# ------------------------------------------------------------ weights
def test_a_pretrained_directory_loads_its_weights(tmp_path):
    saved = build_model("llama")
    saved.save_pretrained(tmp_path / "llama")
    loaded = build_model("llama", pretrained=str(tmp_path / "llama"))
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), loaded.state_dict().values()))
    assert loaded.config.use_cache is False


def test_a_missing_checkpoint_offline_names_the_fix(monkeypatch, tmp_path):
    with pytest.raises(RuntimeError, match="pretrained model .* is not a local directory.*save_pretrained"):
        build_model("vit", pretrained=str(tmp_path / "missing"))
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(RuntimeError, match="'google/vit-base-patch16-224' is not a local directory and the "
                                           "Hugging Face hub is not reachable.*from_pretrained"):
        build_model("vit", pretrained="google/vit-base-patch16-224")


# ------------------------------------------------------------ a run
@pytest.mark.parametrize("values, message", [
    ({"data": "web"}, "unknown data 'web'.*valid choices: embedded, hub"),
    ({"data": "hub"}, "needs size='paper'"),
    ({"dataset": "x/y"}, "dataset and tokenizer are for data='hub'"),
    ({"pretrained": "x/y"}, "use size='paper'"),
    ({"arch": "llama", "size": "paper", "pretrained": "x/y"}, "needs its own tokenizer: use data='hub'"),
])
def test_bad_data_settings_fail_with_a_clear_message(values, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**{"arch": "vit", **values})


def test_a_paper_size_vit_trains_on_a_local_hub_dataset(image_dataset, processor_dir):
    result = train(RunConfig(arch="vit", size="paper", data="hub", dataset=image_dataset, tokenizer=processor_dir,
                             optimizer="sgd", steps=2, batch_size=2, eval_samples=2))
    assert result.status == "ok", result.error
    assert len(result.records) == 2 and result.summary["val_loss"] > 0
    assert result.config["dataset"] == image_dataset
