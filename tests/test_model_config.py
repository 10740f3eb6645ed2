"""A reader's own config.json: its task from transformers' auto-model mappings (so a hub page's
GPT-2 plans), and every way the file can be wrong in one line that names it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gum_utils.planner import trace as planner
from gum_utils.planner.model_config import ModelConfigError, load_model_config, plan_model_config

ROOT = Path(__file__).resolve().parent.parent

# GPT-2's config.json as its hub page publishes it (124,439,808 parameters, the embedding tied).
GPT2 = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
        "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "vocab_size": 50257}


def _write(folder: Path, values) -> Path:
    file = folder / "config.json"
    file.write_text(json.dumps(values))
    return file


def test_gpt2_as_published_plans_as_a_causal_lm_with_its_124m_parameters(tmp_path):
    config, model_class, arch = load_model_config(str(_write(tmp_path, GPT2)))
    assert (model_class.__name__, arch) == ("GPT2LMHeadModel", "llama")
    run, template, make = plan_model_config(str(tmp_path), seq_len=16, batch_size=1, optimizer="sgd")
    plan = planner.plan(run, template=template, make_model=make)
    with torch.device("meta"):
        model = model_class(config)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808
    assert plan.breakdown["params"] == sum(t.numel() * t.element_size()
                                           for t in [*model.parameters(), *model.buffers()])


def test_the_task_comes_from_the_model_types_classes_when_architectures_is_absent(tmp_path):
    values = {key: value for key, value in GPT2.items() if key != "architectures"}
    assert load_model_config(str(_write(tmp_path, values)))[1].__name__ == "GPT2LMHeadModel"
    bert = {"model_type": "bert", "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 64}  # a causal and a masked LM class: say which
    with pytest.raises(ModelConfigError, match=r"BertLMHeadModel \(causal LM\), BertForMaskedLM \(masked LM\)"):
        load_model_config(str(_write(tmp_path, bert)))
    assert load_model_config(str(_write(tmp_path, dict(bert, architectures=["BertForMaskedLM"]))))[2] == "modernbert"


BAD_FILES = {
    "missing": (None, "no such file"),
    "folder": ("folder", "the folder holds no config.json"),
    "not json": ("{model_type: llama", "not JSON"),
    "array": ([{"model_type": "llama"}], "one JSON object, got a list"),
    "no model_type": ({"architectures": ["LlamaForCausalLM"]}, "no 'model_type'"),
    "unknown model_type": ({"model_type": "no-such-model"}, "model_type 'no-such-model' is not one"),
    "another model's class": ({"model_type": "bert", "architectures": ["LlamaForCausalLM"]},
                              "names LlamaForCausalLM; model_type 'bert' offers"),
    "negative size": (dict(GPT2, n_layer=1, n_embd=-64), "transformers cannot build GPT2LMHeadModel from it"),
}


def _bad_path(tmp_path: Path, content) -> Path:
    if content is None:
        return tmp_path / "nowhere" / "config.json"
    if content == "folder":
        return tmp_path
    file = tmp_path / "config.json"
    file.write_text(content if isinstance(content, str) else json.dumps(content))
    return file


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_bad_config_file_is_one_line_naming_the_file_and_what_is_wrong(case, tmp_path):
    content, expected = BAD_FILES[case]
    path = _bad_path(tmp_path, content)
    with pytest.raises(ModelConfigError) as raised:
        load_model_config(str(path))
    message = str(raised.value)
    assert message.startswith(str(path)) and expected in message and "\n" not in message, message


def test_the_command_line_says_it_in_one_line_and_exits_2(tmp_path):
    path = _bad_path(tmp_path, [1, 2])
    done = subprocess.run([sys.executable, "-m", "gum_utils.plan", "--model-config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"python -m gum_utils.plan: error: {path}: a config.json holds "
                                                "one JSON object, got a list"]


def test_an_own_model_that_does_not_fit_at_micro_batch_1_gets_the_single_changes_that_would(tmp_path, capsys):
    from gum_utils import plan as command

    tiny = dict(GPT2, n_layer=2, n_embd=64, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0)
    path = str(_write(tmp_path, tiny))
    peaks = {}
    for optimizer in ("adam", "sgd"):
        run, template, make = plan_model_config(path, seq_len=32, batch_size=1, optimizer=optimizer, device="cpu")
        peaks[optimizer] = planner.plan(run, template=template, make_model=make).peak_bytes
    assert peaks["sgd"] < peaks["adam"]
    budget = (peaks["sgd"] + peaks["adam"]) // 2
    assert command.main(["--model-config", path, "--optimizer", "adam", "--batch-size", "2", "--seq-len", "32",
                         "--device", "cpu", "--memory", str(budget), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["largest_micro_batch"].values()) == {None}
    advice = {json.dumps(option["change"]): option for option in result["what_would_fit"]}
    assert advice['{"optimizer": "sgd"}']["fits"] and advice['{"optimizer": "sgd"}']["peak_bytes"] == peaks["sgd"]


def _measured_two_steps(model_class, config, make_batch, loss_of) -> int:
    """Two real Adam steps of the reader's model on a batch, peak live tensor bytes (the profiler's);
    the batch is made inside, as the plan counts it."""
    from gum_utils.core import measure
    from gum_utils.core.trainer import forward_backward

    def two_steps():
        torch.manual_seed(0)
        model = model_class(config).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        batch = make_batch()
        for _ in range(2):
            def closure():
                optimizer.zero_grad(set_to_none=True)
                return forward_backward(model, [batch], int(batch["labels"].numel()), loss_of=loss_of)
            optimizer.step(closure)
    return measure.tensor_peak_bytes(two_steps)


def test_a_readers_step_and_batch_are_planned_as_they_are_fed(tmp_path):
    """Unpadded by default, padded when told (transformers skips the causal mask of a real all-ones
    mask, never of a fake one: the trace took the padded path, +7 % on this Qwen2), and a Trainer's
    step by default, the study's with step="gum": each planned to the byte of the profiler's measure."""
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, architectures=["Qwen2ForCausalLM"]).save_pretrained(tmp_path)
    config, model_class, _ = load_model_config(str(tmp_path))
    def batch(padded: bool) -> dict:
        ids = torch.randint(0, 1000, (4, 128), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        if padded:
            mask[:, -10:] = 0
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}

    from gum_utils.planner.model_config import labels_path_loss
    from gum_utils.core.trainer import summed_loss

    found = {}
    for padded, step in ((False, "trainer"), (True, "trainer"), (False, "gum")):
        run, template, make = plan_model_config(str(tmp_path), seq_len=128, padded=padded, step=step, batch_size=4,
                                                optimizer="adam", device="cpu")
        planned = planner.plan(run, template=template, make_model=make).peak_bytes
        loss_of = labels_path_loss if step == "trainer" else summed_loss
        found[padded, step] = measured = _measured_two_steps(model_class, config, lambda: batch(padded), loss_of)
        assert planned == measured, (padded, step, planned, measured)
    assert found[True, "trainer"] > found[False, "trainer"]  # the mask built in full


def _bert(path):
    from transformers import BertConfig
    BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               max_position_embeddings=128, architectures=["BertForMaskedLM"]).save_pretrained(path)
    return lambda: {"input_ids": torch.randint(0, 1000, (4, 64)), "attention_mask": torch.ones(4, 64, dtype=torch.int64),
                    "labels": torch.randint(0, 1000, (4, 64))}


def _deit(path):
    from transformers import DeiTConfig
    DeiTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=128, num_labels=10, architectures=["DeiTForImageClassification"]).save_pretrained(path)
    return lambda: {"pixel_values": torch.randn(4, 3, 32, 32), "labels": torch.randint(0, 10, (4,))}


def _gpt2(path):
    (Path(path) / "config.json").write_text(json.dumps(dict(GPT2, n_layer=2, n_embd=64, n_head=4, vocab_size=1000,
                                                             n_positions=128, bos_token_id=0, eos_token_id=0)))
    return lambda: {"input_ids": (ids := torch.randint(0, 1000, (4, 64))),
                    "attention_mask": torch.ones(4, 64, dtype=torch.int64), "labels": ids.clone()}


@pytest.mark.parametrize("family", [_gpt2, _bert, _deit], ids=["gpt2-causal-lm", "bert-masked-lm", "deit-image-classifier"])
def test_families_the_study_does_not_use_are_planned_to_the_measured_peak_of_their_trainer_step(family, tmp_path):
    """GPT-2 as its hub page publishes it (GPT2LMHeadModel, made small), a BERT masked LM and a DeiT
    image classifier, planned as a Trainer steps them (the loss from the labels path), against the
    profiler's measure of two real Adam steps of the same model and batch: BERT and DeiT equal to the
    byte, GPT-2 48 bytes short of 10,858,156 (with the Qwen2 above, four families the study does not use)."""
    from gum_utils.planner.model_config import labels_path_loss

    make_batch = family(tmp_path)
    config, model_class, _ = load_model_config(str(tmp_path))
    run, template, make = plan_model_config(str(tmp_path), seq_len=64, batch_size=4, optimizer="adam", device="cpu")
    planned = planner.plan(run, template=template, make_model=make).peak_bytes
    measured = _measured_two_steps(model_class, config, make_batch, labels_path_loss)
    assert abs(planned - measured) <= 64  # bytes: a few scalars at most
