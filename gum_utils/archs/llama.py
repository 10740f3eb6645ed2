"""Llama: causal language modelling, `LlamaForCausalLM` (the Llama-3.2-1B shape at paper size)."""

from . import embedded
from .base import device_of, validation_for_look
from .text import TINY_TEXT, TextModel, wikitext


class Llama(TextModel):
    name = "llama"
    title = "Llama"
    task = "causal language modelling"
    model_class_name = "LlamaForCausalLM"
    published_as = "meta-llama/Llama-3.2-1B"
    paper_parameters_m = 1235.8
    hub_data = wikitext("meta-llama/Llama-3.2-1B")
    causal = True

    def tiny_config(self):
        from transformers import LlamaConfig

        return LlamaConfig(**TINY_TEXT, num_key_value_heads=2, tie_word_embeddings=True)

    def paper_config(self):
        from transformers import LlamaConfig

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

    def encode_hub(self, splits, tokenizer, processor, shape, model_config, rows, eval_rows):
        return (*self.encode_text(splits, tokenizer, shape, rows, eval_rows), None)

    def look(self, model, config, prompt_tokens: int = 12, new_tokens: int = 24):
        """A held-out prompt, the model's greedy continuation, and what the text says."""
        import pandas as pd
        import torch

        batch = validation_for_look(self, model, config, 1)
        if batch is None:
            return None
        ids = batch["input_ids"][:, :prompt_tokens].to(device_of(model))
        output = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                max_new_tokens=new_tokens, do_sample=False, pad_token_id=embedded.PAD_ID,
                                eos_token_id=embedded.EOS_ID, use_cache=True)
        real = int(batch["attention_mask"][0].sum())
        return pd.DataFrame({"text": {
            "prompt (held out)": embedded.decode(ids[0]),
            "model's greedy continuation": embedded.decode(output[0, prompt_tokens:]),
            "what the text says": embedded.decode(batch["input_ids"][0, prompt_tokens:real]),
        }})


ARCHITECTURE = Llama()
