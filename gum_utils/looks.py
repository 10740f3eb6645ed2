"""Each architecture's own look at a trained model, shown at the end of its notebook.

ViT: validation images with predicted labels. ModernBERT: masked tokens and the model's
guesses. Llama: a greedy continuation of a held-out prompt. nanoVLM: a grid image, the
question and the generated answer. All read the validation split, never training data.
"""

import pandas as pd
import torch

from . import data
from .models import architecture


def _validation(model, arch: str, config, count: int) -> dict | None:
    """The first `count` validation samples, with the model in eval mode; None if there is no model."""
    if model is None:
        print("The run built no model, so there is nothing to show.")
        return None
    if config.data != "embedded":  # the looks decode with the embedded tokenizer and labels
        print(f"This look reads the embedded data; the model trained on {config.data} data, with another "
              "tokenizer and labels.")
        return None
    model.eval()
    shape = architecture(arch).shape(config.size)
    return data.val_batches(arch, shape, batch_size=count, limit=count)[0]


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


def _decode(ids) -> str:
    return data.tokenizer().decode([int(i) for i in ids], skip_special_tokens=True).strip()


@torch.no_grad()
def vit_predictions(model, config, count: int = 12):
    import matplotlib.pyplot as plt

    batch = _validation(model, "vit", config, count)
    if batch is None:
        return None
    predicted = model(pixel_values=batch["pixel_values"].to(_device_of(model))).logits.argmax(-1).cpu()
    fig, axes = plt.subplots(2, (count + 1) // 2, figsize=(1.6 * ((count + 1) // 2), 4))
    for ax, image, guess, truth in zip(axes.flat, batch["pixel_values"], predicted, batch["labels"]):
        ax.imshow(image[0], cmap="gray")
        right = bool(guess == truth)
        ax.set_title(f"{data.FASHION_LABELS[guess]}\n({data.FASHION_LABELS[truth]})", fontsize=8,
                     color="tab:green" if right else "tab:red")
        ax.axis("off")
    fig.suptitle(f"predicted (true) label: {int((predicted == batch['labels']).sum())}/{count} right")
    fig.tight_layout()
    return fig


@torch.no_grad()
def modernbert_fill_masks(model, config, top_k: int = 3):
    """The first validation sequence with its masked positions, the truth and the model's top guesses."""
    batch = _validation(model, "modernbert", config, 1)
    if batch is None:
        return None
    device = _device_of(model)
    logits = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)).logits
    labels = batch["labels"][0]
    tok = data.tokenizer()
    rows = []
    for position in torch.nonzero(labels != data.IGNORE_INDEX).flatten().tolist():
        guesses = logits[0, position].topk(top_k).indices.tolist()
        rows.append({"position": position, "shown to the model": tok.id_to_token(int(batch["input_ids"][0, position])),
                     "truth": tok.id_to_token(int(labels[position])),
                     f"top {top_k} guesses": ", ".join(tok.id_to_token(g) for g in guesses),
                     "right": tok.id_to_token(guesses[0]) == tok.id_to_token(int(labels[position]))})
    print("Masked input:", _decode_with_masks(batch["input_ids"][0], batch["attention_mask"][0]))
    return pd.DataFrame(rows)


def _decode_with_masks(ids, mask) -> str:
    tok = data.tokenizer()
    return tok.decode([int(i) for i, m in zip(ids, mask) if m], skip_special_tokens=False)


@torch.no_grad()
def llama_continuation(model, config, prompt_tokens: int = 12, new_tokens: int = 24):
    batch = _validation(model, "llama", config, 1)
    if batch is None:
        return None
    ids = batch["input_ids"][:, :prompt_tokens].to(_device_of(model))
    output = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                            max_new_tokens=new_tokens, do_sample=False, pad_token_id=data.PAD_ID,
                            eos_token_id=data.EOS_ID, use_cache=True)
    real = int(batch["attention_mask"][0].sum())
    return pd.DataFrame({"text": {
        "prompt (held out)": _decode(ids[0]),
        "model's greedy continuation": _decode(output[0, prompt_tokens:]),
        "what the text says": _decode(batch["input_ids"][0, prompt_tokens:real]),
    }})


@torch.no_grad()
def nanovlm_answers(model, config, count: int = 4):
    import matplotlib.pyplot as plt

    batch = _validation(model, "nanovlm", config, count)
    if batch is None:
        return None
    device = _device_of(model)
    image_tokens = architecture("nanovlm").shape(config.size).image_seq_len
    fig, axes = plt.subplots(1, count, figsize=(3 * count, 3.4))
    for i, ax in enumerate(axes):
        labels = batch["labels"][i]
        answer_start = int(torch.nonzero(labels != data.IGNORE_INDEX)[0]) + 1
        prompt = batch["input_ids"][i : i + 1, :answer_start].to(device)
        output = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                pixel_values=batch["pixel_values"][i : i + 1].to(device), max_new_tokens=6,
                                do_sample=False, pad_token_id=data.PAD_ID, eos_token_id=data.EOS_ID)
        question = _decode(prompt[0, 1 + image_tokens:])
        truth = _decode(labels[labels != data.IGNORE_INDEX])
        answer = _decode(output[0, answer_start:])
        ax.imshow(batch["pixel_values"][i, 0, 0], cmap="gray")
        ax.set_title(f"{question}\nmodel: {answer}\ntruth: {truth}", fontsize=8,
                     color="tab:green" if answer == truth else "tab:red")
        ax.axis("off")
    fig.tight_layout()
    return fig

