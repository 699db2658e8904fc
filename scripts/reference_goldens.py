#!/usr/bin/env python3
"""Reference outputs from HuggingFace transformers, with the reference's own selections.

Runs where torch and transformers (>= 5.17) are installed (the GPU machine; no network):

  # goldens for an existing checkpoint, on the prompts of an earlier golden file
  python3 scripts/reference_goldens.py --model DIR --prompts-from DIR/golden.safetensors --out OUT
  # a new random checkpoint (a base config.json with overrides), with prompts of given lengths
  python3 scripts/reference_goldens.py --base-config C.json --set index_kpool=8 --set num_hidden_layers=12 \
      --weights-seed 3 --lengths 61,200 --out OUT

OUT/golden.safetensors is what `ferry check-golden` reads (model/golden/golden.h):
  pK.ids I32 [n], pK.greedy I32 [G] (generate(use_cache=True): prefill, then the decode path),
  pK.logits F32 [n + G, vocab] (one teacher-forced forward of prompt + greedy, no cache),
  pK.hidden.L F32 (prompt p1 only; transformers' hidden_states convention),
and, from that same teacher-forced forward, the discrete choices the logits depend on, per layer L
that makes them and per position t:
  pK.select.L.indexer I32 [n + G, W]: the keys the lightning indexer keeps for position t, in the
      engine's decision format: ascending ids, -1 padding. glm_moe_dsa: token positions,
      W = index_topk; glm5_next: pool ids (pool p = tokens p*kpool .. p*kpool + kpool - 1; the
      unscored tail is implied), W = index_topk / index_kpool. Layers that reuse another's
      selection (shared indexer layers) and layers without MLA have none.
  pK.select.L.indexer_margin F32 [n + G]: how near that choice was to another: (s_k - s_k+1) /
      |s_k| over the row's sorted scores (s_k the last kept); +inf when every candidate is kept.
  pK.select.L.experts I32 [n + G, top_k], pK.select.L.experts_margin F32: the same for the MoE
      router (scores sigmoid(logits) + bias within the chosen groups; the group choice's own
      margin counts when smaller).
Everything is computed in float32 from the bf16 weights (on the CPU unless --device cuda, with
TF32 off), so the selections are the ones the recorded logits came from.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file


def model_class(model_type):
    import transformers
    return {"glm_moe_dsa": transformers.GlmMoeDsaForCausalLM,
            "glm5_next": transformers.Glm5NextForConditionalGeneration}[model_type]


def text_config(cfg):
    return cfg.get_text_config()


# ---- a random checkpoint -------------------------------------------------------------------------

PER_LAYER_LISTS = ("layer_types", "mlp_layer_types", "indexer_types", "index_topk_pattern")


def build_config(base_path, overrides):
    """The base config.json with key=value overrides (values are JSON) on its text config."""
    with open(base_path) as f:
        raw = json.load(f)
    text = raw["text_config"] if "text_config" in raw else raw
    if "num_hidden_layers" in overrides:  # the per-layer lists follow the new depth unless given
        for k in PER_LAYER_LISTS:
            if k not in overrides:
                text.pop(k, None)
    text.update(overrides)
    from transformers import AutoConfig
    cls = AutoConfig.for_model(raw["model_type"]).__class__
    for k in ("architectures", "transformers_version", "dtype", "torch_dtype"):
        raw.pop(k, None)
    return cls(**{k: v for k, v in raw.items() if k != "model_type"})


def randomize(model, seed):
    """Every parameter random, the ones a zero or one init would hide (norm weights, biases,
    decay gates, hyper-connection scales) included, at scales that keep activations O(1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            rnd = torch.randn(p.shape, generator=g)
            last = name.rsplit(".", 1)[-1]
            if "visual" in name:
                p.copy_(0.02 * rnd)
            elif last == "weight" and p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.1 * rnd)
            elif last == "A_log":
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif last == "dt_bias":
                p.copy_(0.5 * rnd - 2.0)
            elif last == "e_score_correction_bias":
                p.copy_(0.05 * rnd)
            elif last == "scale":
                p.copy_(1.0 + 0.2 * rnd)
            elif last in ("base", "bias"):
                p.copy_(0.2 * rnd)
            else:
                fan_in = p.shape[-1] if p.dim() >= 2 else 1
                if "experts" in name and p.dim() == 3:
                    fan_in = min(p.shape[1], p.shape[2])
                p.copy_(rnd * (1.5 / math.sqrt(max(fan_in, 1))))


def make_checkpoint(base_config, overrides, seed, out):
    cfg = build_config(base_config, overrides)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_class(cfg.model_type)(cfg).float().eval()
    randomize(model, seed)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


# ---- recording the selections --------------------------------------------------------------------

def relative_margin(sorted_desc, k, valid):
    """(s_k - s_k+1) / |s_k| per row; +inf where a row has at most k valid candidates."""
    rows = sorted_desc.shape[0]
    out = torch.full((rows,), math.inf)
    if sorted_desc.shape[1] <= k:
        return out
    last, nxt = sorted_desc[:, k - 1].double(), sorted_desc[:, k].double()
    rel = (last - nxt) / last.abs().clamp_min(1e-30)
    more = valid > k
    out[more] = rel[more].float()
    return out


class Recorder:
    """Forward hooks on every indexer and router of the text model, for one forward at a time."""

    def __init__(self, model):
        self.tcfg = text_config(model.config)
        self.family = model.config.model_type
        self.entries = {}      # (layer, "indexer" | "experts") -> (ids, margin)
        self._layer = None     # the indexer running now
        self._scores = None    # its last top-k's input and k
        self._handles = []
        for name, mod in model.named_modules():
            cls = type(mod).__name__
            if "visual" in name or "vision" in name:
                continue
            if cls.endswith("Indexer"):
                self._handles.append(mod.register_forward_pre_hook(self._indexer_begins))
                self._handles.append(mod.register_forward_hook(self._indexer_ends))
            elif cls.endswith("TopkRouter"):
                layer = int(name.split("layers.")[1].split(".")[0])
                self._handles.append(mod.register_forward_hook(
                    lambda m, args, out, layer=layer: self._routed(layer, m, out)))
        self._topk = torch.Tensor.topk
        recorder = self

        def topk(t, k, *args, **kwargs):
            if recorder._layer is not None and t.dim() == 3:
                recorder._scores = (t.detach().float().clone(), k)
            return recorder._topk(t, k, *args, **kwargs)
        torch.Tensor.topk = topk

    def close(self):
        torch.Tensor.topk = self._topk
        for h in self._handles:
            h.remove()

    def _indexer_begins(self, mod, args):
        self._layer = mod.layer_idx
        self._scores = None

    def _indexer_ends(self, mod, args, out):
        layer, self._layer = self._layer, None
        if self._scores is None:
            raise RuntimeError(f"layer {layer}: the indexer made no top-k this script can see")
        scores, k = self._scores
        scores = scores[0]  # [T, candidates]
        T = scores.shape[0]
        # Candidates the row cannot see carry -inf or the dtype's lowest value (an additive mask).
        valid_mask = scores > -1e30
        if self.family == "glm_moe_dsa":
            width = self.tcfg.index_topk
        else:
            kpool = self.tcfg.index_kpool
            width = self.tcfg.index_topk // kpool
        valid = valid_mask.sum(-1)
        picked = scores.topk(min(k, scores.shape[1]), dim=-1).indices  # same ties as the model's
        ids = torch.full((T, width), -1, dtype=torch.int32)
        for t in range(T):
            keep = sorted(i for i in picked[t].tolist() if valid_mask[t, i])
            ids[t, :len(keep)] = torch.tensor(keep, dtype=torch.int32)
        if self.family != "glm_moe_dsa":
            check_pools(out[0], ids, kpool, layer)
        sorted_desc = scores.masked_fill(~valid_mask, -math.inf).sort(dim=-1, descending=True).values
        self.entries[(layer, "indexer")] = (ids, relative_margin(sorted_desc, width, valid))

    def _routed(self, layer, mod, out):
        logits, _, topk = out
        scores = logits.float().sigmoid() + mod.e_score_correction_bias.float()
        T, E = scores.shape
        G, TG = mod.num_group, mod.topk_group
        per = E // G
        group_scores = scores.view(T, G, per).topk(min(2, per), dim=-1).values.sum(-1)
        chosen_groups = group_scores.topk(TG, dim=-1).indices
        allowed = torch.zeros(T, G, dtype=torch.bool).scatter_(1, chosen_groups, True)
        masked = scores.masked_fill(~allowed.repeat_interleave(per, dim=1), -math.inf)
        margin = relative_margin(masked.sort(dim=-1, descending=True).values, mod.top_k,
                                 torch.isfinite(masked).sum(-1))
        if TG < G:
            margin = torch.minimum(margin, relative_margin(group_scores.sort(dim=-1, descending=True).values,
                                                           TG, torch.full((T,), G)))
        ids = topk.to(torch.int32).sort(dim=-1).values
        self.entries[(layer, "experts")] = (ids.contiguous(), margin)


def check_pools(expanded, pool_ids, kpool, layer):
    """The model's expanded token selection holds exactly the recorded pools' tokens (plus its
    unscored tail, which is not a choice)."""
    for t in range(expanded.shape[0]):
        tokens = set(i for i in expanded[t].tolist() if i >= 0)
        for p in pool_ids[t].tolist():
            if p < 0:
                continue
            want = set(range(p * kpool, p * kpool + kpool))
            if not want <= tokens:
                raise RuntimeError(f"layer {layer} position {t}: pool {p} is recorded but not all its tokens are "
                                   "in the model's selection")


# ---- the goldens ---------------------------------------------------------------------------------

def prompts(args, vocab):
    if args.prompts_from:
        old = load_file(args.prompts_from)
        out, k = [], 0
        while f"p{k}.ids" in old:
            out.append(old[f"p{k}.ids"].long()[None])
            k += 1
        return out, old
    g = torch.Generator().manual_seed(args.prompt_seed)
    lengths = [int(x) for x in args.lengths.split(",")]
    return [torch.randint(2, vocab - 2, (1, n), generator=g) for n in lengths], None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="an existing checkpoint directory")
    ap.add_argument("--base-config", help="make a random checkpoint from this config.json (with --set)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="a text config override")
    ap.add_argument("--weights-seed", type=int, default=1)
    ap.add_argument("--prompts-from", help="reuse the prompts of this golden.safetensors (and compare)")
    ap.add_argument("--lengths", default="5,37,90")
    ap.add_argument("--prompt-seed", type=int, default=7)
    ap.add_argument("--new-tokens", type=int, default=12)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)

    model_dir = args.model
    if args.base_config:
        overrides = {}
        for kv in args.set:
            k, v = kv.split("=", 1)
            overrides[k] = json.loads(v)
        make_checkpoint(args.base_config, overrides, args.weights_seed, args.out)
        model_dir = args.out
    if not model_dir:
        sys.exit("give --model DIR or --base-config FILE")
    with open(os.path.join(model_dir, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    model = model_class(model_type).from_pretrained(model_dir, dtype=torch.float32,
                                                    attn_implementation="eager").eval().to(args.device)
    vocab = text_config(model.config).vocab_size
    prompt_ids, old = prompts(args, vocab)

    tensors, meta = {}, {"model_type": model_type, "prompts": [],
                         "made_by": "scripts/reference_goldens.py", "device": args.device,
                         "torch": torch.__version__, "transformers": __import__("transformers").__version__}
    for i, ids in enumerate(prompt_ids):
        n = ids.shape[1]
        ids = ids.to(args.device)
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False, use_cache=True,
                                 pad_token_id=0, eos_token_id=None)
            rec = Recorder(model)
            try:
                full = model(gen, use_cache=False, output_hidden_states=(i == 1))
            finally:
                rec.close()
        logits = full.logits[0].float().cpu()
        top2 = logits.topk(2, dim=-1).values
        p = f"p{i}"
        tensors[f"{p}.ids"] = ids[0].cpu().to(torch.int32)
        tensors[f"{p}.greedy"] = gen[0, n:].cpu().to(torch.int32)
        tensors[f"{p}.logits"] = logits.contiguous()
        if i == 1:
            for L, h in enumerate(full.hidden_states):
                tensors[f"{p}.hidden.{L}"] = h[0].float().cpu().contiguous()
        smallest = {}
        for (layer, site), (sel, margin) in sorted(rec.entries.items()):
            tensors[f"{p}.select.{layer}.{site}"] = sel.contiguous()
            tensors[f"{p}.select.{layer}.{site}_margin"] = margin.contiguous()
            smallest[site] = min(smallest.get(site, math.inf), margin.min().item())
        info = {"len": n, "greedy_min_margin": (top2[:, 0] - top2[:, 1])[n - 1:].min().item(),
                "smallest_selection_margin": smallest}
        if old is not None:
            info["greedy_equal_to_given"] = bool(torch.equal(old[f"{p}.greedy"], tensors[f"{p}.greedy"]))
            if f"{p}.logits" in old and old[f"{p}.logits"].shape == logits.shape:
                info["max_logit_difference_to_given"] = (old[f"{p}.logits"] - logits).abs().max().item()
        meta["prompts"].append(info)
        print(p, json.dumps(info), flush=True)
    save_file(tensors, os.path.join(args.out, "golden.safetensors"), metadata={"meta": json.dumps(meta)})


if __name__ == "__main__":
    main()
