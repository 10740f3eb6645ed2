import pytest
import torch
import transformers

from gum_utils import ARCHITECTURES
from gum_utils.archs import architecture, build_model
from gum_utils.archs.base import count_parameters

EXPECTED_CLASSES = {
    "vit": transformers.ViTForImageClassification,
    "modernbert": transformers.ModernBertForMaskedLM,
    "llama": transformers.LlamaForCausalLM,
    "nanovlm": transformers.SmolVLMForConditionalGeneration,
}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_paper_size_matches_published_parameter_count(arch):
    with torch.device("meta"):
        model = build_model(arch, "paper")
    millions = count_parameters(model) / 1e6
    assert millions == pytest.approx(architecture(arch).paper_parameters_m, rel=0.01)
    assert all(p.device.type == "meta" for p in model.parameters())


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tiny_model_is_the_real_transformers_class(arch):
    model = build_model(arch)
    assert type(model) is EXPECTED_CLASSES[arch]
    config = model.config.text_config if arch == "nanovlm" else model.config
    assert config.hidden_size == 128
    assert count_parameters(model) < 3_000_000


def test_llama_paper_shape_is_llama_3_2_1b():
    config = architecture("llama").config("paper")
    assert config.tie_word_embeddings and config.num_key_value_heads == 8
    assert config.rope_parameters["rope_type"] == "llama3"


def test_nanovlm_paper_is_siglip_b16_plus_smollm2_135m():
    config = architecture("nanovlm").config("paper")
    assert (config.vision_config.hidden_size, config.vision_config.patch_size) == (768, 16)
    assert (config.text_config.hidden_size, config.text_config.num_hidden_layers) == (576, 30)
    assert config.scale_factor == 2


def test_random_init_depends_on_seed():
    torch.manual_seed(1)
    a = build_model("llama")
    torch.manual_seed(2)
    b = build_model("llama")
    assert not torch.equal(a.model.layers[0].mlp.up_proj.weight, b.model.layers[0].mlp.up_proj.weight)


@pytest.mark.parametrize("bad, message", [(("resnet",), "valid choices: vit, modernbert, llama, nanovlm"),
                                          (("vit", "huge"), "valid choices: tiny, paper")])
def test_bad_names_raise_with_the_valid_choices(bad, message):
    with pytest.raises(ValueError, match=message):
        build_model(*bad)
