"""The four architectures: real `transformers` classes, randomly initialised, at two sizes.

`tiny` is a few layers at hidden 128, fast on two CPU cores; `paper` is the published shape
(parameter counts in PAPER_PARAMETERS, checked by the tests on the meta device).
Adding an architecture is one `Architecture` entry here plus its data in `data.py`.
"""

from dataclasses import dataclass
from typing import Callable

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    PretrainedConfig,
    SmolVLMConfig,
    SmolVLMForConditionalGeneration,
    ViTConfig,
    ViTForImageClassification,
)

from . import ARCHITECTURES, SIZES, data
from .choices import check_choice
from .data import DataShape

# Millions of parameters of the published models whose shapes `paper` copies.
PAPER_PARAMETERS = {"vit": 86.6, "modernbert": 149.7, "llama": 1235.8, "nanovlm": 222.1}

TINY_TEXT = dict(
    vocab_size=data.VOCAB_SIZE,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    pad_token_id=data.PAD_ID,
    bos_token_id=data.BOS_ID,
    eos_token_id=data.EOS_ID,
)


def for_training(config: PretrainedConfig) -> PretrainedConfig:
    """The settings every run trains with, on built and pretrained models alike."""
    config._attn_implementation = "sdpa"  # fast on CPU and GPU, and deterministic on CPU
    for part in (config, getattr(config, "text_config", None)):
        if part is not None and hasattr(part, "use_cache"):
            part.use_cache = False  # training needs no KV cache (and checkpointing refuses one)
    return config


@dataclass(frozen=True)
class Architecture:
    name: str
    task: str
    model_class: type
    tiny_config: Callable[[], PretrainedConfig]
    paper_config: Callable[[], PretrainedConfig]
    tiny_shape: DataShape
    paper_shape: DataShape
    published_as: str  # the model whose shape `paper` reproduces

    def config(self, size: str) -> PretrainedConfig:
        check_choice("size", size, SIZES)
        return for_training(self.tiny_config() if size == "tiny" else self.paper_config())

    def shape(self, size: str) -> DataShape:
        check_choice("size", size, SIZES)
        return self.tiny_shape if size == "tiny" else self.paper_shape


def _vit_tiny() -> ViTConfig:
    return ViTConfig(
        image_size=28, patch_size=4, num_channels=1, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_labels=len(data.FASHION_LABELS),
    )


def _vit_paper() -> ViTConfig:
    # google/vit-base-patch16-224: the ViTConfig defaults, with its 1000-class head.
    return ViTConfig(image_size=224, patch_size=16, num_labels=1000)


def _modernbert_tiny() -> ModernBertConfig:
    return ModernBertConfig(
        **TINY_TEXT, cls_token_id=data.BOS_ID, sep_token_id=data.EOS_ID,
        global_attn_every_n_layers=2, local_attention=32,
    )


def _modernbert_paper() -> ModernBertConfig:
    return ModernBertConfig()  # the defaults are ModernBERT-base


def _llama_tiny() -> LlamaConfig:
    return LlamaConfig(**TINY_TEXT, num_key_value_heads=2, tie_word_embeddings=True)


def _llama_paper() -> LlamaConfig:
    # Llama-3.2-1B: GQA with 8 KV heads, llama3 rope scaling, tied embeddings.
    return LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
        rope_scaling={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
        },
    )


def _nanovlm(vision: dict, text: dict) -> SmolVLMConfig:
    # nanoVLM = SigLIP vision tower + llama-style text model + pixel-shuffle projector:
    # SmolVLM with a llama text config is exactly that design.
    return SmolVLMConfig(
        vision_config=dict(hidden_act="gelu_pytorch_tanh", **vision),
        text_config=dict(model_type="llama", tie_word_embeddings=True, **text),
        scale_factor=2, image_token_id=data.IMAGE_ID, tie_word_embeddings=True,
        pad_token_id=data.PAD_ID,
    )


def _nanovlm_tiny() -> SmolVLMConfig:
    vision = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  image_size=56, patch_size=7)
    return _nanovlm(vision, dict(TINY_TEXT, num_key_value_heads=2))


def _nanovlm_paper() -> SmolVLMConfig:
    siglip_b16 = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                      image_size=224, patch_size=16)
    smollm2_135m = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                        rope_theta=100000.0, rms_norm_eps=1e-5)
    return _nanovlm(siglip_b16, smollm2_135m)


def image_tokens(image_size: int, patch_size: int, scale_factor: int = 2) -> int:
    return (image_size // patch_size) ** 2 // scale_factor**2


REGISTRY = {
    "vit": Architecture(
        "vit", "image classification", ViTForImageClassification, _vit_tiny, _vit_paper,
        DataShape(image_size=28, channels=1), DataShape(image_size=224, channels=3),
        "google/vit-base-patch16-224",
    ),
    "modernbert": Architecture(
        "modernbert", "masked language modelling", ModernBertForMaskedLM, _modernbert_tiny, _modernbert_paper,
        DataShape(seq_len=64), DataShape(seq_len=256), "answerdotai/ModernBERT-base",
    ),
    "llama": Architecture(
        "llama", "causal language modelling", LlamaForCausalLM, _llama_tiny, _llama_paper,
        DataShape(seq_len=64), DataShape(seq_len=256), "meta-llama/Llama-3.2-1B",
    ),
    "nanovlm": Architecture(
        "nanovlm", "visual question answering", SmolVLMForConditionalGeneration, _nanovlm_tiny, _nanovlm_paper,
        DataShape(image_size=56, channels=3, seq_len=48, image_seq_len=image_tokens(56, 7)),
        DataShape(image_size=224, channels=3, seq_len=96, image_seq_len=image_tokens(224, 16)),
        "lusxvr/nanoVLM-222M",
    ),
}
assert tuple(REGISTRY) == ARCHITECTURES


def architecture(arch: str) -> Architecture:
    check_choice("architecture", arch, ARCHITECTURES)
    return REGISTRY[arch]


def build_model(arch: str, size: str = "tiny", pretrained: str | None = None) -> torch.nn.Module:
    """A randomly initialised model; inside `with torch.device("meta")` nothing is allocated.

    `pretrained` (a hub id or a save_pretrained directory) loads that checkpoint instead,
    for fine-tuning; see `gum_utils.hub` for how a missing one is reported.
    """
    spec = architecture(arch)
    if pretrained is None:
        return spec.model_class(spec.config(size))
    from .hub import load_model

    model = load_model(spec.model_class, pretrained)
    for_training(model.config)
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters: tied embeddings count once, as in the published figures."""
    return sum(p.numel() for p in model.parameters())
