"""What the two language models share: rows of the novel, the tiny shape, text from the hub."""

from . import embedded
from .base import Architecture, DataShape, HubData
from .hub import both_splits, encode_text, split_rows

# The tiny text model: a few layers at hidden 128 over the embedded tokenizer's vocabulary.
TINY_TEXT = dict(
    vocab_size=embedded.VOCAB_SIZE,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    pad_token_id=embedded.PAD_ID,
    bos_token_id=embedded.BOS_ID,
    eos_token_id=embedded.EOS_ID,
)
WIKITEXT = ("Salesforce/wikitext", "wikitext-103-raw-v1")


def wikitext(tokenizer: str) -> HubData:
    """WikiText-103, read with the model's own tokenizer."""
    return HubData(*WIKITEXT, tokenizer, None)


class TextModel(Architecture):
    kind = "language"
    tiny_shape = DataShape(seq_len=64)
    paper_shape = DataShape(seq_len=256)
    causal: bool  # next-token labels on every real token (else the batches are masked)

    def relevant_shape(self, shape: DataShape) -> DataShape:
        return DataShape(seq_len=shape.seq_len)

    def build_split(self, split: str, shape: DataShape) -> dict:
        return embedded.text_split(split, shape.seq_len, self.causal)

    def encode_text(self, splits, tokenizer, shape, rows, eval_rows) -> tuple:
        """(train, val): text rows are read until `count` full rows of tokens are packed."""
        return both_splits(rows, eval_rows, lambda split, count: encode_text(
            split_rows(splits, split, None), tokenizer, self.causal, shape, count))
