"""nanoVLM: visual question answering, a SigLIP vision tower + pixel-shuffle projector + SmolLM2-style
text model, as `SmolVLMForConditionalGeneration` with a llama text config (nanoVLM-222M at paper size).

The embedded task: a 2x2 grid of Fashion-MNIST items and "what is in the top left?" -> "sneaker";
only the answer (and [EOS]) is supervised.
"""

import numpy as np

from . import embedded
from .base import Architecture, DataShape, HubData, device_of, image_mosaic, image_tokens, validation_for_look
from .hub import both_splits, encode_vqa, split_rows
from .text import TINY_TEXT

# One question per grid cell in row-major order.
QUESTIONS = ("what is in the top left?", "what is in the top right?",
             "what is in the bottom left?", "what is in the bottom right?")
GRID_SEED = 1234  # fixed: the grids are part of the dataset


def answer_text(label: str) -> str:
    """The answer string; the leading space joins it to the question."""
    return " " + label


class NanoVLM(Architecture):
    name = "nanovlm"
    title = "nanoVLM"
    kind = "vision"
    task = "visual question answering"
    model_class_name = "SmolVLMForConditionalGeneration"
    published_as = "lusxvr/nanoVLM-222M"
    paper_parameters_m = 222.1
    tiny_shape = DataShape(image_size=56, channels=3, seq_len=48, image_seq_len=image_tokens(56, 7))
    paper_shape = DataShape(image_size=224, channels=3, seq_len=96, image_seq_len=image_tokens(224, 16))
    # VQAv2 as packaged in The Cauldron (what nanoVLM trained on): a train split only.
    hub_data = HubData("HuggingFaceM4/the_cauldron", "vqav2", "HuggingFaceTB/SmolLM2-135M",
                       "google/siglip-base-patch16-224")

    @staticmethod
    def _config(vision: dict, text: dict):
        from transformers import SmolVLMConfig

        # SmolVLM with a llama text config is exactly nanoVLM's design.
        return SmolVLMConfig(
            vision_config=dict(hidden_act="gelu_pytorch_tanh", **vision),
            text_config=dict(model_type="llama", tie_word_embeddings=True, **text),
            scale_factor=2, image_token_id=embedded.IMAGE_ID, tie_word_embeddings=True,
            pad_token_id=embedded.PAD_ID,
        )

    def tiny_config(self):
        vision = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                      image_size=56, patch_size=7)
        return self._config(vision, dict(TINY_TEXT, num_key_value_heads=2))

    def paper_config(self):
        siglip_b16 = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                          image_size=224, patch_size=16)
        smollm2_135m = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                            num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                            rope_theta=100000.0, rms_norm_eps=1e-5)
        return self._config(siglip_b16, smollm2_135m)

    def relevant_shape(self, shape: DataShape) -> DataShape:
        return DataShape(image_size=shape.image_size, seq_len=shape.seq_len, image_seq_len=shape.image_seq_len)

    def describe_input(self, shape: DataShape) -> str:
        return (f"{shape.image_size}x{shape.image_size}x{shape.channels}, "
                f"{shape.seq_len} tokens ({shape.image_seq_len} image)")

    def build_split(self, split: str, shape: DataShape) -> dict:
        import torch

        images, labels = embedded.images(split)
        cells, asked = grid_items(split, len(images))
        n = len(cells)
        grid = images[cells].reshape(n, 2, 2, 28, 28).transpose(0, 1, 3, 2, 4).reshape(n, 56, 56)
        ids, lab = _tokens(asked, labels[cells[np.arange(n), asked]], shape)
        return {"pixel_values": embedded.to_pixels(grid, shape.image_size, 3).unsqueeze(1),
                "input_ids": torch.from_numpy(ids),
                "attention_mask": torch.from_numpy((ids != embedded.PAD_ID).astype(np.int64)),
                "labels": torch.from_numpy(lab)}

    def hub_shape(self, model_config, base: DataShape) -> DataShape:
        """The image size and <image> count the model's own config implies (pretrained ones differ)."""
        from dataclasses import replace

        vision = model_config.vision_config
        tokens = image_tokens(vision.image_size, vision.patch_size, model_config.scale_factor)
        return replace(base, image_size=vision.image_size, image_seq_len=tokens)

    def encode_hub(self, splits, tokenizer, processor, shape, model_config, rows, eval_rows):
        train, val = both_splits(rows, eval_rows, lambda split, count: encode_vqa(
            split_rows(splits, split, count), tokenizer, processor, shape, model_config.image_token_id))
        return train, val, None

    def look(self, model, config, count: int = 4):
        """Each grid with its question, the model's generated answer and the truth."""
        import torch

        batch = validation_for_look(self, model, config, count)
        if batch is None:
            return None
        device, image_count = device_of(model), self.shape(config.size).image_seq_len
        titles, colors = [], []
        for i in range(count):
            labels = batch["labels"][i]
            answer_start = int(torch.nonzero(labels != embedded.IGNORE_INDEX)[0]) + 1
            prompt = batch["input_ids"][i : i + 1, :answer_start].to(device)
            output = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                    pixel_values=batch["pixel_values"][i : i + 1].to(device), max_new_tokens=6,
                                    do_sample=False, pad_token_id=embedded.PAD_ID, eos_token_id=embedded.EOS_ID)
            question = embedded.decode(prompt[0, 1 + image_count:])
            truth = embedded.decode(labels[labels != embedded.IGNORE_INDEX])
            answer = embedded.decode(output[0, answer_start:])
            titles.append(f"{question}\nmodel: {answer}\ntruth: {truth}")
            colors.append("tab:green" if answer == truth else "tab:red")
        return image_mosaic([batch["pixel_values"][i, 0, 0] for i in range(count)], titles, colors, columns=count,
                            title_lines=3, panel_inches=3.0)


def grid_items(split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Which image fills each of a grid's four cells (N x 4 indices) and which cell is asked about.

    As many grids as images, every image once in every cell. The held-out split is cut by image
    before tiling, in the halves `base.halves` cuts its grids into: its validation grids are tiled
    from the first half of its images only, its test grids from the second, so no image is in both."""
    rng = np.random.default_rng([GRID_SEED, embedded.SPLITS.index(split)])
    parts = [np.arange(n)] if split == "train" else np.split(np.arange(n), [n - n // 2])
    cells = np.concatenate([np.stack([rng.permutation(part) for _ in range(4)], axis=1) for part in parts])
    return cells, rng.integers(0, 4, size=n)


def _tokens(asked: np.ndarray, labels: np.ndarray, shape: DataShape):
    """[BOS] <image> x n, the question asked, the answer [EOS]; labels on the answer only."""
    questions = [embedded.encode(q) for q in QUESTIONS]
    answers = [embedded.encode(answer_text(name)) + [embedded.EOS_ID] for name in embedded.FASHION_LABELS]
    prefix = [embedded.BOS_ID] + [embedded.IMAGE_ID] * shape.image_seq_len
    rows, target = [], np.zeros((len(asked), shape.seq_len), dtype=bool)
    for i, (q, c) in enumerate(zip(asked, labels)):
        start = len(prefix) + len(questions[q])
        rows.append(prefix + questions[q] + answers[c])
        if len(rows[-1]) > shape.seq_len:
            raise ValueError(f"nanovlm prompt needs seq_len >= {len(rows[-1])}, got {shape.seq_len}")
        target[i, start : len(rows[-1])] = True
    ids = embedded.pad_rows(rows, shape.seq_len)
    return ids, embedded.shifted_labels(ids, target)


ARCHITECTURE = NanoVLM()
