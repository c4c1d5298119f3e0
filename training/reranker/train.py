"""Train kb's cross-encoder reranker (seeded, CPU, 2 threads) and export it for the runtime.

Model: BertForSequenceClassification (num_labels=1) whose embeddings, first --layers encoder
layers and pooler are all-MiniLM-L6-v2's (Apache-2.0, fetched torch-free by
kb.builder.embedders.fetch_minilm); the classifier head is fresh. Word embeddings are frozen (they
are most of the parameters and most of the optimizer time; the other weights adapt around them).

Input: groups from prepare.py (query, one positive, n negatives). A pair is tokenized exactly as
kb.runtime.cross_encoder.CT2CrossEncoder does at query time: [CLS] query [SEP] passage [SEP], the query
capped at half the window, only the passage truncated to --max-len.
Loss per group: softmax cross-entropy of the positive among the group (ranking) + binary
cross-entropy of every pair (keeps sigmoid(logit) usable as the probability kb blends with).

    python train.py --pairs pairs.jsonl --out OUT [--layers 2] [--max-len 192] [--epochs 1]
        [--groups-per-batch 6] [--lr 7e-5] [--seed 13] [--export models/reranker]

Writes OUT/hf (model.safetensors, config.json, tokenizer.json), OUT/train_log.json and, with
--export DIR, the int8 CTranslate2 files from kb.models.convert.convert_bert into DIR.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

MODEL_NAME_FMT = "kb-reranker-minilm-l{layers}"


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class PairEncoder:
    """The runtime's pair encoding (kb.runtime.cross_encoder.CT2CrossEncoder._encode_pairs), for training."""

    def __init__(self, tokenizer_json: Path, max_len: int):
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(tokenizer_json))
        self.tok.no_padding()
        self.tok.no_truncation()
        self.n_special = self.tok.num_special_tokens_to_add(True)
        self.max_len = max_len
        self.query_cap = (max_len - self.n_special) // 2
        self.pad_id = self.tok.token_to_id("[PAD]") or 0

    def encode(self, query: str, passages: list[str]) -> tuple[list[list[int]], list[list[int]]]:
        q = self.tok.encode(query, add_special_tokens=False)
        if len(q.ids) > self.query_cap:
            q.truncate(self.query_cap)
        room = self.max_len - self.n_special - len(q.ids)
        ids, types = [], []
        for p in self.tok.encode_batch(list(passages), add_special_tokens=False):
            if len(p.ids) > room:
                p.truncate(room)
            e = self.tok.post_process(q, p, add_special_tokens=True)
            ids.append(e.ids)
            types.append(e.type_ids)
        return ids, types

    def batch(self, groups: list[dict]) -> dict[str, torch.Tensor]:
        all_ids, all_types = [], []
        for g in groups:
            ids, types = self.encode(g["query"], [g["pos"]] + g["negs"])
            all_ids += ids
            all_types += types
        n = max(len(x) for x in all_ids)
        input_ids = torch.full((len(all_ids), n), self.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((len(all_ids), n), dtype=torch.long)
        mask = torch.zeros((len(all_ids), n), dtype=torch.long)
        for i, (a, t) in enumerate(zip(all_ids, all_types)):
            input_ids[i, : len(a)] = torch.tensor(a)
            token_type_ids[i, : len(t)] = torch.tensor(t)
            mask[i, : len(a)] = 1
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": mask}


def init_model(src: Path, layers: int, seed: int, fresh_pooler: bool = False):
    from safetensors.torch import load_file
    from transformers import BertConfig, BertForSequenceClassification

    cfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    n_src = int(cfg["num_hidden_layers"])
    if not 1 <= layers <= n_src:
        sys.exit(f"--layers must be within 1..{n_src}")
    keep = {k: v for k, v in cfg.items() if not k.startswith("_") and k not in ("architectures", "transformers_version", "gradient_checkpointing", "use_cache")}
    keep.update(num_hidden_layers=layers, num_labels=1, architectures=["BertForSequenceClassification"])
    config = BertConfig(**keep)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    w = load_file(str(src / "model.safetensors"))
    state = {}
    for k, v in w.items():
        if k == "embeddings.position_ids":
            continue
        if k.startswith("encoder.layer.") and int(k.split(".")[2]) >= layers:
            continue
        if fresh_pooler and k.startswith("pooler."):
            continue
        state["bert." + k] = v
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("classifier.") and not m.endswith("position_ids") and not (fresh_pooler and m.startswith("bert.pooler."))]
    if missing or unexpected:
        sys.exit(f"weight mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model


@torch.no_grad()
def dev_eval(model, enc, dev: list[dict]) -> dict:
    """MRR of the positive within each held-out group, and pairwise pos > neg accuracy."""
    model.eval()
    rr, acc = [], []
    for s in range(0, len(dev), 8):
        gs = dev[s : s + 8]
        n = 1 + len(gs[0]["negs"])
        lg = model(**enc.batch(gs)).logits.view(len(gs), n)
        rank = (lg[:, 1:] >= lg[:, :1]).sum(1) + 1
        rr += (1.0 / rank.float()).tolist()
        acc += (lg[:, :1] > lg[:, 1:]).float().mean(1).tolist()
    return {"mrr": round(float(np.mean(rr)), 4), "pair_acc": round(float(np.mean(acc)), 4)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=192)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--groups-per-batch", type=int, default=6)
    ap.add_argument("--lr", type=float, default=7e-5)
    ap.add_argument("--head-lr", type=float, default=0.0, help="learning rate of pooler + classifier (default: --lr)")
    ap.add_argument("--fresh-pooler", action="store_true", help="initialise the pooler like BERT (normal 0.02) instead of MiniLM's near-zero one")
    ap.add_argument("--warmup", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--bce-weight", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N groups (smoke test)")
    ap.add_argument("--dev", type=int, default=0, help="hold out N groups (seeded) and report their MRR (tuning runs only)")
    ap.add_argument("--dev-every", type=int, default=0, help="evaluate the dev groups every N steps")
    ap.add_argument("--export", type=Path, default=None, help="write the int8 CTranslate2 files here")
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    set_seed(a.seed)

    from kb.builder.embedders import fetch_minilm

    src = fetch_minilm()
    groups = [json.loads(l) for l in a.pairs.read_text(encoding="utf-8").splitlines() if l.strip()]
    if a.limit:
        groups = groups[: a.limit]
    dev: list[dict] = []
    if a.dev:
        perm = list(range(len(groups)))
        random.Random(f"dev:{a.seed}").shuffle(perm)
        dev = [groups[i] for i in perm[: a.dev]]
        groups = [groups[i] for i in sorted(perm[a.dev :])]
    enc = PairEncoder(src / "tokenizer.json", a.max_len)
    model = init_model(src, a.layers, a.seed, fresh_pooler=a.fresh_pooler)
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    model.train()

    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    no_decay = ("bias", "LayerNorm.weight")
    head = ("classifier.", "bert.pooler.")
    head_lr = a.head_lr or a.lr
    opt = torch.optim.AdamW(
        [
            {"params": [p for n, p in params if not n.endswith(no_decay) and not n.startswith(head)], "weight_decay": a.weight_decay},
            {"params": [p for n, p in params if n.endswith(no_decay) and not n.startswith(head)], "weight_decay": 0.0},
            {"params": [p for n, p in params if n.startswith(head)], "weight_decay": 0.0, "lr": head_lr},
        ],
        lr=a.lr,
    )
    gpb = a.groups_per_batch
    steps_per_epoch = (len(groups) + gpb - 1) // gpb
    total = max(1, int(round(steps_per_epoch * a.epochs)))
    warm = max(1, int(total * a.warmup))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))

    rng = random.Random(a.seed)
    log = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}, "groups": len(groups),
           "pairs": sum(1 + len(g["negs"]) for g in groups), "steps": total, "loss": []}
    print(f"{len(groups)} groups, {log['pairs']} pairs, {total} steps, L{a.layers}, max_len {a.max_len}", file=sys.stderr, flush=True)
    t0 = time.time()
    step, running = 0, []
    while step < total:
        order = list(range(len(groups)))
        rng.shuffle(order)
        for s in range(0, len(order), gpb):
            if step >= total:
                break
            batch_groups = [groups[i] for i in order[s : s + gpb]]
            n_per = 1 + len(batch_groups[0]["negs"])
            if any(1 + len(g["negs"]) != n_per for g in batch_groups):
                sys.exit("all groups need the same number of negatives")
            b = enc.batch(batch_groups)
            logits = model(**b).logits.view(len(batch_groups), n_per)
            target = torch.zeros(len(batch_groups), dtype=torch.long)
            ce = F.cross_entropy(logits, target)
            labels = torch.zeros_like(logits)
            labels[:, 0] = 1.0
            bce = F.binary_cross_entropy_with_logits(logits, labels)
            loss = ce + a.bce_weight * bce
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            running.append((float(ce.detach()), float(bce.detach()), float((logits.detach()[:, 0:1] > logits.detach()[:, 1:]).float().mean())))
            if dev and (step == total or (a.dev_every and step % a.dev_every == 0)):
                log.setdefault("dev", []).append({"step": step} | dev_eval(model, enc, dev))
                print(f"dev @ {step}: {log['dev'][-1]}", file=sys.stderr, flush=True)
                model.train()
            if step % 25 == 0 or step == total:
                m = np.mean(running, axis=0)
                running = []
                el = time.time() - t0
                log["loss"].append({"step": step, "ce": round(float(m[0]), 4), "bce": round(float(m[1]), 4), "pair_acc": round(float(m[2]), 4), "seconds": round(el, 1)})
                print(f"step {step}/{total} ce {m[0]:.4f} bce {m[1]:.4f} pos>neg {m[2]:.3f} {el:.0f}s (eta {el / step * (total - step):.0f}s)", file=sys.stderr, flush=True)
    log["train_seconds"] = round(time.time() - t0, 1)

    model.eval()
    hf = a.out / "hf"
    if hf.exists():
        shutil.rmtree(hf)
    model.save_pretrained(str(hf), safe_serialization=True)
    shutil.copy(src / "tokenizer.json", hf / "tokenizer.json")
    # a sanity score with torch, compared after export with the CTranslate2 int8 model
    with torch.no_grad():
        g = groups[0]
        probe = enc.batch([g])
        log["probe_torch_logits"] = [round(float(x), 4) for x in model(**probe).logits.view(-1)]

    if a.export:
        from kb.models.convert import convert_bert

        files = convert_bert(hf, "int8", name=MODEL_NAME_FMT.format(layers=a.layers), max_tokens=a.max_len)
        a.export.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (a.export / name).write_bytes(data)
        log["export"] = {"dir": str(a.export), "bytes": sum(len(v) for v in files.values()), "files": sorted(files)}
        from kb.runtime.cross_encoder import load_reranker

        rr = load_reranker(files, device="cpu")
        log["probe_ct2_int8_logits"] = [round(float(x), 4) for x in rr.score(g["query"], [g["pos"]] + g["negs"])]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: log[k] for k in ("groups", "pairs", "steps", "train_seconds") if k in log} | {"probe_torch": log["probe_torch_logits"], "probe_ct2": log.get("probe_ct2_int8_logits")}), file=sys.stderr)


if __name__ == "__main__":
    main()
