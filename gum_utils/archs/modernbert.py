"""ModernBERT: masked language modelling, `ModernBertForMaskedLM` (ModernBERT-base at paper size).

Its batches are masked as they are drawn (BERT's 80/10/10), on the host; its held-out split is
masked once with a fixed seed, so every run is judged on the same targets.
"""

from . import embedded
from .base import device_of, validation_for_look
from .hub import vocabulary
from .text import TINY_TEXT, TextModel, wikitext


class ModernBert(TextModel):
    name = "modernbert"
    title = "ModernBERT"
    task = "masked language modelling"
    model_class_name = "ModernBertForMaskedLM"
    published_as = "answerdotai/ModernBERT-base"
    paper_parameters_m = 149.7
    hub_data = wikitext("answerdotai/ModernBERT-base")
    causal = False
    masks_batches = True

    def tiny_config(self):
        from transformers import ModernBertConfig

        return ModernBertConfig(**TINY_TEXT, cls_token_id=embedded.BOS_ID, sep_token_id=embedded.EOS_ID,
                                global_attn_every_n_layers=2, local_attention=32)

    def paper_config(self):
        from transformers import ModernBertConfig

        return ModernBertConfig()  # the defaults are ModernBERT-base

    def held_out(self, split: dict) -> dict:
        return embedded.mask_for_evaluation(split)

    def prepare_batch(self, batch: dict, rng, vocab) -> dict:
        return embedded.mlm_mask(batch, rng, vocab)

    def encode_hub(self, splits, tokenizer, processor, shape, model_config, rows, eval_rows):
        train, val = self.encode_text(splits, tokenizer, shape, rows, eval_rows)
        vocab = vocabulary(tokenizer)
        return train, embedded.mask_for_evaluation(val, vocab), vocab

    def look(self, model, config, top_k: int = 3):
        """The first validation sequence with its masked positions, the truth and the model's top guesses."""
        import pandas as pd
        import torch

        batch = validation_for_look(self, model, config, 1)
        if batch is None:
            return None
        device = device_of(model)
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"].to(device),
                           attention_mask=batch["attention_mask"].to(device)).logits
        labels, tok = batch["labels"][0], embedded.tokenizer()
        rows = []
        for position in torch.nonzero(labels != embedded.IGNORE_INDEX).flatten().tolist():
            guesses = logits[0, position].topk(top_k).indices.tolist()
            truth = tok.id_to_token(int(labels[position]))
            rows.append({"position": position,
                         "shown to the model": tok.id_to_token(int(batch["input_ids"][0, position])),
                         "truth": truth, f"top {top_k} guesses": ", ".join(tok.id_to_token(g) for g in guesses),
                         "right": tok.id_to_token(guesses[0]) == truth})
        shown = [int(i) for i, m in zip(batch["input_ids"][0], batch["attention_mask"][0]) if m]
        print("Masked input:", tok.decode(shown, skip_special_tokens=False))
        return pd.DataFrame(rows)


ARCHITECTURE = ModernBert()
