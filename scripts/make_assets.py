"""Regenerate the data files in ``gum_utils/assets/`` from Debian packages.

Nothing here runs at training time: the assets are committed, and
``gum_utils.archs.embedded`` only reads them.  This script documents where they came
from and rebuilds them byte for byte (fixed seeds, sorted inputs).

Sources (install as root, after ``apt-get update``):

    apt-get install dataset-fashion-mnist
        Fashion-MNIST idx files (Zalando SE, MIT/Expat licence) in
        /usr/share/datasets/fashion-mnist/.
    apt-get install --no-install-recommends r-cran-janeaustenr
        Jane Austen's novels from Project Gutenberg, packaged as an R data
        package (MIT licence for the packaging, the 1813 text is public
        domain).  R itself is NOT needed to run this script: the R
        lazy-load database is decoded below.  Without R, the files alone can
        be had with ``apt-get download r-cran-janeaustenr`` and
        ``dpkg -x r-cran-janeaustenr_*.deb /tmp/ja``, then pass
        ``--janeaustenr-dir /tmp/ja/usr/lib/R/site-library/janeaustenr``.

Python needs only numpy and tokenizers (already in the project's venv):

    .venv/bin/python scripts/make_assets.py [--check]

``--check`` builds everything into a temporary folder and compares it with the
committed files instead of overwriting them.
"""
from __future__ import annotations

import argparse
import bz2
import filecmp
import gzip
import hashlib
import io
import lzma
import re
import struct
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gum_utils.core import batches as data  # noqa: E402  (constants only; torch is not needed)

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
JANEAUSTENR_DIR = Path("/usr/lib/R/site-library/janeaustenr")
TRAIN_PER_CLASS = 300  # 3000 training images
VAL_PER_CLASS = 60  # 600 validation images
SEED = 20240601


# --------------------------------------------------------------------------
# Fashion-MNIST
# --------------------------------------------------------------------------
def read_idx(path: Path) -> np.ndarray:
    """Read an idx file (the MNIST container format): magic, dims, bytes."""
    raw = gzip.decompress(path.read_bytes())
    _zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if dtype_code != 0x08:  # unsigned byte
        raise ValueError(f"{path}: unexpected idx dtype {dtype_code:#x}")
    dims = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw[4 + 4 * ndim :], dtype=np.uint8).reshape(dims)


def balanced_subset(labels, per_class, rng, banned=frozenset(), images=None):
    """Seeded class-balanced pick; skips images whose bytes are in ``banned``."""
    chosen = []
    for c in range(10):
        candidates = rng.permutation(np.flatnonzero(labels == c))
        picked, seen = [], set()
        for i in candidates:
            key = hashlib.sha1(images[i].tobytes()).digest()
            if key in banned or key in seen:  # exact duplicates would leak
                continue
            seen.add(key)
            picked.append(i)
            if len(picked) == per_class:
                break
        chosen.extend(picked)
    # Shuffle so that any prefix (val_batches(limit=...)) is roughly balanced.
    return rng.permutation(np.array(chosen, dtype=np.int64))


def make_fashion(src: Path, out: Path) -> None:
    tr_x = read_idx(src / "train-images-idx3-ubyte.gz")
    tr_y = read_idx(src / "train-labels-idx1-ubyte.gz")
    te_x = read_idx(src / "t10k-images-idx3-ubyte.gz")
    te_y = read_idx(src / "t10k-labels-idx1-ubyte.gz")
    rng = np.random.default_rng(SEED)
    train_idx = balanced_subset(tr_y, TRAIN_PER_CLASS, rng, images=tr_x)
    # Validation comes from the original test file, minus any image that
    # also occurs (byte-identical) anywhere in the original training file.
    train_hashes = frozenset(hashlib.sha1(x.tobytes()).digest() for x in tr_x)
    val_idx = balanced_subset(te_y, VAL_PER_CLASS, rng, train_hashes, te_x)
    # np.savez_compressed stamps zip entries with the current time; write the
    # archive ourselves with a fixed timestamp so reruns are byte-identical.
    arrays = {
        "train_images": tr_x[train_idx],
        "train_labels": tr_y[train_idx].astype(np.uint8),
        "train_source_index": train_idx.astype(np.int32),
        "val_images": te_x[val_idx],
        "val_labels": te_y[val_idx].astype(np.uint8),
        "val_source_index": val_idx.astype(np.int32),
    }
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue(), compresslevel=9)


# --------------------------------------------------------------------------
# R lazy-load database (just enough of R's XDR serialisation for the
# character vectors that janeaustenr stores)
# --------------------------------------------------------------------------
class _RReader:
    NIL, REF, SYM, LIST, CHAR, LGL, INT, REAL, STR, VEC = 254, 255, 1, 2, 9, 10, 13, 14, 16, 19

    def __init__(self, buf: bytes):
        if buf[:2] != b"X\n":
            raise ValueError("not an XDR-serialised R object")
        self.buf, self.pos, self.refs = buf, 2, []
        version = self._int()
        self._int(), self._int()  # writer version, minimal reader version
        if version == 3:
            n = self._int()  # length of the native encoding name
            self.pos += n

    def _int(self) -> int:
        (v,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return v

    def item(self):
        flags = self._int()
        kind = flags & 0xFF
        if kind == self.NIL:
            return None
        if kind == self.REF:
            idx = flags >> 8 or self._int()
            return self.refs[idx - 1]
        if kind == self.SYM:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == self.LIST:  # pairlist: (attr) (tag) car cdr
            out = {}
            while kind == self.LIST:
                if flags & (1 << 9):
                    self.item()
                tag = self.item() if flags & (1 << 10) else None
                out[tag] = self.item()
                flags = self._int()
                kind = flags & 0xFF
            if kind != self.NIL:
                raise ValueError("improper pairlist")
            return out
        if kind == self.CHAR:
            n = self._int()
            if n == -1:
                return None
            s = self.buf[self.pos : self.pos + n].decode("utf-8")
            self.pos += n
            return s
        n = self._int()
        if kind in (self.LGL, self.INT):
            value = list(struct.unpack_from(f">{n}i", self.buf, self.pos))
            self.pos += 4 * n
        elif kind == self.REAL:
            value = list(struct.unpack_from(f">{n}d", self.buf, self.pos))
            self.pos += 8 * n
        elif kind in (self.STR, self.VEC):
            value = [self.item() for _ in range(n)]
        else:
            raise ValueError(f"R type {kind} not supported by this small reader")
        attrs = self.item() if flags & (1 << 9) else None
        if attrs and "names" in attrs:
            return dict(zip(attrs["names"], value))
        return value


def read_r_lazyload(db_stem: Path) -> dict:
    """Objects of an R lazy-load database (``<stem>.rdx`` index + ``.rdb``)."""
    index = _RReader(gzip.decompress(db_stem.with_suffix(".rdx").read_bytes())).item()
    blob = db_stem.with_suffix(".rdb").read_bytes()
    out = {}
    for name, (offset, length) in sorted(index["variables"].items()):
        chunk = blob[offset : offset + length]
        method = index["compressed"][0]
        body = chunk[4:]
        if method in (2, 3):  # one type byte precedes the stream
            method, body = {b"Z": 1, b"2": 2, b"X": 3, b"0": 0}[chunk[4:5]], chunk[5:]
        raw = {0: bytes, 1: zlib.decompress, 2: bz2.decompress, 3: lzma.decompress}[method](body)
        out[name] = _RReader(raw).item()
    return out


# --------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------
def make_corpus(janeaustenr_dir: Path, out: Path) -> list[str]:
    """Pride and Prejudice, one paragraph per line, italics markers removed."""
    lines = read_r_lazyload(janeaustenr_dir / "data" / "Rdata")["prideprejudice"]
    paragraphs, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            text = " ".join(current).replace("_", "")  # _word_ marks italics
            paragraphs.append(re.sub(r"\s+", " ", text).strip())
            current = []
    out.write_text("\n".join(paragraphs) + "\n", encoding="utf-8")
    return paragraphs


# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------
def task_strings() -> list[str]:
    """The nanovlm prompt vocabulary, so questions/answers tokenise compactly."""
    return [q + data.answer_text(label) for q in data.QUESTIONS for label in data.FASHION_LABELS]


def make_tokenizer(paragraphs: list[str], out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    # Byte-level: every string is encodable (no [UNK] in practice) and the
    # ByteLevel decoder gives decode(encode(s)) == s exactly.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=data.VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(data.SPECIAL_TOKENS),  # ids 0..5 in this order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Task strings are repeated so their words become single tokens.
    tok.train_from_iterator(paragraphs + task_strings() * 20, trainer=trainer)
    for i, name in enumerate(data.SPECIAL_TOKENS):
        assert tok.token_to_id(name) == i, name
    assert tok.get_vocab_size() == data.VOCAB_SIZE
    tok.save(str(out))


def build(dest: Path, fashion_dir: Path, janeaustenr_dir: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    make_fashion(fashion_dir, dest / data.FASHION_FILE)
    paragraphs = make_corpus(janeaustenr_dir, dest / data.CORPUS_FILE)
    make_tokenizer(paragraphs, dest / data.TOKENIZER_FILE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fashion-dir", type=Path, default=FASHION_DIR)
    ap.add_argument("--janeaustenr-dir", type=Path, default=JANEAUSTENR_DIR)
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    names = (data.FASHION_FILE, data.CORPUS_FILE, data.TOKENIZER_FILE)
    if not args.check:
        build(data.ASSETS, args.fashion_dir, args.janeaustenr_dir)
        for n in names:
            print(f"wrote {data.ASSETS / n} ({(data.ASSETS / n).stat().st_size} bytes)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp), args.fashion_dir, args.janeaustenr_dir)
        bad = [n for n in names if not filecmp.cmp(Path(tmp) / n, data.ASSETS / n, shallow=False)]
    print("assets match" if not bad else f"assets differ: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
