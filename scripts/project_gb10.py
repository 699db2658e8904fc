#!/usr/bin/env python3
"""A projection (not a measurement) of Ferry's decode speed on two GB10 boxes (DGX Spark) at
tensor parallel W = 2 over one 200 Gb/s RoCE link, from the message sizes Ferry measured on one
H200 (bench/results/h200-owner-split-exchange.md) and the bytes a decode step reads, reckoned from
the models' config.json files. See docs/gb10-projection.md for the inputs, the method and what is
not modelled.

Model of a decode step (per rank; the ranks run in lockstep, so the busier rank sets the step):
  memory time  = bytes the rank reads (and writes back: KDA state) / (fraction x 273 GB/s)
  network time = network operations x latency + bytes on the link's critical path / 24 GB/s
  step time    = memory time + network time (no overlap of the two is assumed)
Kernel compute time, launch and host overheads are not modelled.

    python3 scripts/project_gb10.py            # the tables (Markdown)
    python3 scripts/project_gb10.py --check    # the same, then assert internal consistency

Standard library only. Reuses scripts/plan_reference.py's tensor list and per-rank weight bytes
for the glm5_next configs.
"""
import argparse
import fnmatch
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # leave no __pycache__ in scripts/
import plan_reference  # noqa: E402  (text_tensors, weights_per_rank: the glm5_next tensor list)

# ---- The target deployment ------------------------------------------------------------------
W = 2  # ranks: two GB10 boxes, one GPU each (docs/deploy.md)
MEM_BW = 273e9  # B/s: GB10 LPDDR5x bandwidth, NVIDIA's DGX Spark specification (273 GB/s)
MEM_FRACTION = 0.80  # of MEM_BW achieved by the decode kernels: an assumption (--fraction)
MEM_FRACTION_LOW = 0.60  # sensitivity: Ferry's NVFP4 expert GEMVs reach 48-63% of read
#                          bandwidth on H200 today (bench/results/h200-nvfp4-experts.md)
MEMORY_GIB = 128  # GiB a box: unified memory shared by CPU and GPU (DGX Spark specification)
RESERVE_GIB = 28  # GiB kept from weights and caches: `ferry plan`'s default reserve (docs/deploy.md)
NET_LATENCY = 30e-6  # s a small NCCL operation between two GB10s over RoCE: all_reduce_perf, 8-16 KiB
#                      float sums, 30.3-35.2 us (github.com/NVIDIA/dgx-spark-playbooks pull 103)
NET_BW = 24e9  # B/s for large messages: all_gather_perf busbw 23.74 GB/s, two GB10s, one QSFP
#                cable, both RoCE halves in NCCL_IB_HCA, NCCL 2.28.9 (the same pull request)
OPS_PER_REDUCTION = 2  # Ferry's fixed-order reduction: reduce-scatter by grouped send/recv, then
#                        all-gather (docs/backends.md, "Next" 3); each counted as one operation
#                        at NET_LATENCY. --ops-per-reduction 1 models one ncclAllReduce instead.
REDUCTIONS_PER_LAYER = 2  # after attention and after the FFN, every layer (float32)
OPS_PER_SPLIT_LAYER = 2  # owner split: the query exchange and the attended-latent exchange a
#                          MLA layer (docs/owner-split.md, "One layer of a step")
BATCHES = (1, 8)  # decode rows a step: one stream, and eight streams of one row each
CONTEXTS = (32768, 131072)  # tokens of context of every stream (32k, 128k)
NVFP4_BYTES_PER_WEIGHT = 0.5625  # 4-bit code + one E4M3 scale a group of 16 (+ 8 bytes a tensor)
BF16 = 2  # bytes: weights outside NVFP4, the KV cache (`ferry plan`: "bf16 cache"), activations
F32 = 4  # bytes: the reductions' values, the KDA state

# ---- What Ferry measured (bench/results/h200-owner-split-exchange.md, 0e83de6, 2026-12-04) ----
# Bytes a rank sent a decode step at W = 2, in KiB: the reductions a layer, and the split's
# queries + attended latents a MLA layer, by (model, batch) -> {rank: KiB}. --check holds the
# formulas below to them.
MEASURED_REDUCTION_KIB_A_LAYER = {("flash", 1): 32.0, ("flash", 8): 256.0, ("glm52", 1): 48.0, ("glm52", 8): 384.0}
MEASURED_SPLIT_KIB_A_MLA_LAYER = {("flash", 1): {0: 32.0, 1: 32.0}, ("flash", 8): {0: 256.0, 1: 256.0},
                                  ("glm52", 1): {0: 32.0, 1: 36.0}, ("glm52", 8): {0: 272.0, 1: 272.0}}
# `ferry plan` (commit 2236576) and scripts/plan_reference.py: weights a rank at W = 2.
PLAN_WEIGHTS_A_RANK = {"flash": 95774088260, "glm52_bf16": 746853648384}

CONFIGS = {
    "flash": "tests/data/configs/glm-5.3-flash-nvfp4.config.json",
    "glm52": "tests/data/configs/glm-5.2.config.json",
}
GIB = 1 << 30


def dsa_tensors(t):
    """glm_moe_dsa's text-model tensors as model/checkpoint/tensor_list.cc (DsaTensors) lists them:
    (name, shape, split axis or None, split units, whether a Linear module's weight)."""
    D, H, L, N, P, V = (t["hidden_size"], t["num_attention_heads"], t["kv_lora_rank"], t["qk_nope_head_dim"],
                        t["qk_rope_head_dim"], t["v_head_dim"])
    QL, Di, Hi = t["q_lora_rank"], t["index_head_dim"], t["index_n_heads"]
    yield "model.embed_tokens.weight", (t["vocab_size"], D), None, 0, False
    yield "model.norm.weight", (D,), None, 0, False
    yield "lm_head.weight", (t["vocab_size"], D), None, 0, True
    for i in range(t["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (D,), None, 0, False
        yield p + "post_attention_layernorm.weight", (D,), None, 0, False
        a = p + "self_attn."
        yield a + "q_a_proj.weight", (QL, D), None, 0, True
        yield a + "q_a_layernorm.weight", (QL,), None, 0, False
        yield a + "q_b_proj.weight", (H * (N + P), QL), 0, H, True
        yield a + "kv_a_proj_with_mqa.weight", (L + P, D), None, 0, True
        yield a + "kv_a_layernorm.weight", (L,), None, 0, False
        yield a + "kv_b_proj.weight", (H * (N + V), L), 0, H, True
        yield a + "o_proj.weight", (D, H * V), 1, H, True
        if t["indexer_types"][i] == "full":
            yield a + "indexer.wq_b.weight", (Hi * Di, QL), None, 0, True
            yield a + "indexer.wk.weight", (Di, D), None, 0, True
            yield a + "indexer.k_norm.weight", (Di,), None, 0, False
            yield a + "indexer.k_norm.bias", (Di,), None, 0, False
            yield a + "indexer.weights_proj.weight", (Hi, D), None, 0, True
        yield from plan_reference.mlp_tensors(t, i, p + "mlp.")


def recipe_nvfp4(name, linear):
    """NVIDIA's GLM-5.3-Flash NVFP4 recipe (tests/data/configs/README.md): NVFP4 for the routed
    experts and the dense MLPs, bf16 for everything else. Used for GLM-5.2's hypothetical NVFP4
    checkpoint; --check holds it equal to the Flash release's own exclusion list."""
    return linear and ".mlp." in name and ".shared_experts." not in name and not name.endswith("mlp.gate.weight")


def config_nvfp4(q):
    """The tensors a ModelOpt quantization_config stores NVFP4 (as scripts/plan_reference.py decides)."""
    ignore = q.get("ignore", []) + q.get("exclude_modules", [])

    memo = {}

    def quantized(name, linear):
        key = (re.sub(r"\.experts\.\d+\.", ".experts.N.", name), linear)  # no pattern names an expert
        if key not in memo:
            memo[key] = decide(name, linear)
        return memo[key]

    def decide(name, linear):
        module = name[: -len(".weight")]
        parents = [".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 2)]
        return linear and name.endswith(".weight") and not any(
            fnmatch.fnmatchcase(m, pat) for pat in ignore for m in parents)
    return quantized


class Model:
    """The figures of one model a decode step needs, per rank at W ranks."""

    def __init__(self, key, nvfp4=True):
        cfg = json.load(open(os.path.join(ROOT, CONFIGS[key])))
        self.key, self.cfg = key, cfg
        t = self.t = cfg.get("text_config", cfg)
        self.family = cfg["model_type"]
        q = cfg.get("quantization_config") or {}
        if q.get("quant_algo") == "NVFP4":
            self.quantized, self.format = config_nvfp4(q), "NVFP4 as NVIDIA's release declares it"
            self.static_in = True
        elif nvfp4:
            self.quantized, self.format = recipe_nvfp4, "hypothetical NVFP4 by the Flash release's recipe"
            self.static_in = True
        else:
            self.quantized, self.format, self.static_in = (lambda name, linear: False), "bf16 as declared", False
        self.name = {"flash": "GLM-5.3-Flash", "glm52": "GLM-5.2"}[key]
        self.tensors = list(plan_reference.text_tensors(t) if self.family == "glm5_next" else dsa_tensors(t))
        self._weights()
        self._cache()

    def tensor_bytes(self, shape, axis, ranks, quantized):
        shape = list(shape)
        if axis is not None and ranks > 1:
            shape[axis] //= ranks
        n = math.prod(shape)
        if quantized:  # NVFP4_BYTES_PER_WEIGHT: 4-bit codes, an E4M3 scale a group of 16; a float32
            #            global scale (+ the static input scale) a tensor
            return n // 2 + n // 16 + 4 + (4 if self.static_in else 0)
        return BF16 * n

    def _weights(self):
        """Weights a rank holds, and what a decode step reads of them: every tensor but the routed
        experts and the embedding table once, plus the chosen experts' shards."""
        t, held, dense, embed, experts = self.t, 0, 0, 0, 0
        parts = self.dense_parts = {}  # what dense_read is made of
        for name, shape, axis, _units, linear in self.tensors:
            qz = self.quantized(name, linear) and shape[-1] % 16 == 0
            b = self.tensor_bytes(shape, axis, W, qz)
            held += b
            if ".mlp.experts." in name:
                if ".mlp.experts.0." in name:
                    experts += b  # expert 0's shard of every MoE layer (all experts are alike)
            elif name.endswith("embed_tokens.weight"):
                embed = b // t["vocab_size"]  # one row, which each rank holds whole
            else:
                dense += b
                part = ("lm_head" if name.startswith("lm_head") else self._attention_kind(name) if ".self_attn." in name
                        else "shared experts" if ".shared_experts." in name else "routers" if ".mlp.gate." in name
                        else "dense MLPs" if ".mlp." in name else "other")
                parts[part] = parts.get(part, 0) + b
        self.held = held
        self.dense_read = dense  # lm_head, routers, indexers and the replicated projections whole
        self.embed_row = embed
        self.moe_layers = sum(x == "sparse" for x in t["mlp_layer_types"])
        self.expert_shard = experts // self.moe_layers  # one chosen expert's shard in one layer

    def _attention_kind(self, name):
        i = int(name.split("layers.")[1].split(".")[0])
        return "KDA" if self.t["layer_types"][i] == "linear_attention" else "MLA and indexer"

    def _cache(self):
        """KV cache and fixed state (MODELS.md; kvpool's plan as scripts/plan_reference.py reckons it)."""
        t = self.t
        kinds = t["layer_types"]
        self.mla = [i for i, x in enumerate(kinds) if x != "linear_attention"]
        self.kda_layers = sum(x == "linear_attention" for x in kinds)
        self.layers = t["num_hidden_layers"]
        self.hidden = t["hidden_size"]
        L, P, H = t["kv_lora_rank"], t["qk_rope_head_dim"], t["num_attention_heads"]
        self.latent_row = BF16 * (L + P)  # bytes a token a MLA layer: c (+ k_pe)
        self.kpool = t.get("index_kpool", 1)  # glm5_next pools 4 tokens a key; glm_moe_dsa keys every token
        self.full_indexer = sum(t["indexer_types"][i] == "full" for i in self.mla)
        self.key_row = BF16 * t["index_head_dim"]  # bytes a (pooled) indexer key
        self.topk = t["index_topk"] + self.kpool - 1  # selected tokens: top-k (+ glm5_next's unscored tail)
        self.latent_a_token = len(self.mla) * self.latent_row
        self.keys_a_token = self.full_indexer * self.key_row // self.kpool
        if self.kda_layers:
            hl, d, k = t["linear_num_heads"] // W, t["linear_head_dim"], t["linear_conv_kernel_dim"]
            self.fixed = self.kda_layers * (hl * d * d * F32 + (k - 1) * 3 * hl * d * F32)  # S + conv tails
        else:
            self.fixed = 0
        # The split's messages a row a MLA layer (docs/owner-split.md): the peer's H/W heads'
        # absorbed queries (+ q_pe) to the owner, their attended latents back.
        self.query_bytes = BF16 * (H // W) * (L + P)
        self.result_bytes = BF16 * (H // W) * L

    def room(self):
        return MEMORY_GIB * GIB - RESERVE_GIB * GIB - self.held


def distinct_experts(e, k, b):
    """Expected experts chosen by at least one of b rows, each choosing k of e uniformly."""
    return e * (1 - (1 - k / e) ** b)


def project(m, batch, ctx, split, fraction, ops_per_reduction=OPS_PER_REDUCTION):
    """One row of the tables: a decode step of `batch` streams at `ctx` tokens, split on or off."""
    t = m.t
    own = math.ceil(batch / W)  # rows the busier owner holds (owners balanced, the first takes the odd one)
    r = {}
    # Memory: the busier rank's reads (and the KDA state's write-back).
    r["dense"] = m.dense_read + batch * m.embed_row
    r["experts"] = m.moe_layers * distinct_experts(t["n_routed_experts"], t["num_experts_per_tok"], batch) * m.expert_shard
    sel = min(ctx, m.topk)
    # Split off: every rank reads every row's selected latents once (its own heads). Split on: the
    # owner reads its rows twice (its heads, then the peers' heads, two launches: attend_split.cc).
    latent_rows = 2 * own if split else batch
    r["latent"] = len(m.mla) * latent_rows * sel * m.latent_row
    r["keys"] = m.full_indexer * batch * math.ceil(ctx / m.kpool) * m.key_row  # every rank selects
    r["state"] = 2 * batch * m.fixed  # KDA state read and written back
    r["read"] = sum(r[k] for k in ("dense", "experts", "latent", "keys", "state"))
    r["mem_ms"] = r["read"] / (fraction * MEM_BW) * 1e3
    # Capacity: rows and fixed state a rank holds for these streams (`ferry plan` is authoritative).
    latent_held = own if split else batch
    r["kv_gib"] = (batch * ctx * m.keys_a_token + latent_held * ctx * m.latent_a_token + batch * m.fixed) / GIB
    r["fits"] = m.room() > 0 and r["kv_gib"] * GIB <= m.room()
    # Network: the reductions every layer, and the split's two exchanges every MLA layer.
    red_ops = m.layers * REDUCTIONS_PER_LAYER * ops_per_reduction
    red_bytes = m.layers * REDUCTIONS_PER_LAYER * batch * m.hidden * F32  # a rank sends, both ways at once
    split_ops = len(m.mla) * OPS_PER_SPLIT_LAYER if split else 0
    # A rank sends the queries of the rows the peer owns and the results of the rows it owns; on the
    # link's busier direction each exchange carries the larger owner's rows.
    rank_split = len(m.mla) * ((batch - own) * m.query_bytes + own * m.result_bytes) if split else 0
    path_split = len(m.mla) * own * (m.query_bytes + m.result_bytes) if split else 0
    r["ops"] = red_ops + split_ops
    r["sent"] = red_bytes + rank_split  # bytes the busier-owner rank puts on the link a step
    r["net_ms"] = (r["ops"] * NET_LATENCY + (red_bytes + path_split) / NET_BW) * 1e3
    r["step_ms"] = r["mem_ms"] + r["net_ms"]
    r["tps"] = 1e3 / r["step_ms"]  # tokens/s of one stream
    r["tps_all"] = batch * r["tps"]  # tokens/s of all the step's streams together
    return r


def cases():
    for b in BATCHES:
        for c in CONTEXTS:
            for s in (False, True):
                yield b, c, s


def gb(x):
    return f"{x / 1e9:.2f}"


def table(m, fraction, low, ops):
    out = []
    fit = "fits" if m.room() > 0 else "DOES NOT FIT"
    out.append(f"### {m.name} ({m.format}), W = {W}: {fit}")
    out.append("")
    parts = ", ".join(f"{k} {gb(v)}" for k, v in sorted(m.dense_parts.items(), key=lambda kv: -kv[1]))
    room = f"room {m.room() / GIB:.2f} GiB" if m.room() > 0 else f"short by {-m.room() / GIB:.2f} GiB"
    if m.format.startswith("hypothetical"):
        room += f"; {Model(m.key, nvfp4=False).held / GIB:.2f} GiB a rank in bf16, as its config declares"
    out.append(f"Weights a rank: {m.held / GIB:.2f} GiB of {MEMORY_GIB} GiB less a {RESERVE_GIB} GiB reserve "
               f"({room}). A step reads {gb(m.dense_read)} GB of weights outside the "
               f"routed experts ({parts}), {m.expert_shard / 1e6:.2f} MB a chosen expert's shard, "
               f"{m.moe_layers} MoE layers ({distinct_experts(m.t['n_routed_experts'], m.t['num_experts_per_tok'], 8):.1f} "
               f"distinct experts of {m.t['n_routed_experts']} a layer at batch 8); "
               f"{len(m.mla)} MLA layers ({m.full_indexer} with indexer keys), {m.kda_layers} KDA layers; "
               f"{m.layers} layers x {REDUCTIONS_PER_LAYER} reductions.")
    if m.room() <= 0:
        out.append("")
        out.append("**Hypothetical: these weights do not fit two GB10s; the rows below cannot run.**")
    out.append("")
    out.append("| batch | context | split | GB read a rank (weights + experts + latents + keys + KDA state) "
               "| KV + state GiB a rank | fits | memory ms | net ops | KiB sent a rank | net ms | step ms "
               "| tok/s a stream | tok/s all streams "
               f"| step ms at {low:.2f} | tok/s a stream at {low:.2f} | tok/s all at {low:.2f} |")
    out.append("|" + "---|" * 16)
    for b, c, s in cases():
        r = project(m, b, c, s, fraction, ops)
        lo = project(m, b, c, s, low, ops)
        parts = " + ".join(gb(r[k]) for k in ("dense", "experts", "latent", "keys", "state"))
        out.append(f"| {b} | {c // 1024}k | {'on' if s else 'off'} | {gb(r['read'])} ({parts}) | {r['kv_gib']:.2f} "
                   f"| {'yes' if r['fits'] else 'no'} | {r['mem_ms']:.1f} | {r['ops']} | {r['sent'] / 1024:.0f} "
                   f"| {r['net_ms']:.2f} | {r['step_ms']:.1f} | {r['tps']:.1f} | {r['tps_all']:.1f} "
                   f"| {lo['step_ms']:.1f} | {lo['tps']:.1f} | {lo['tps_all']:.1f} |")
    return out


def check(models, fraction, low, ops):
    """Internal consistency; returns the failures."""
    bad = []

    def need(ok, what):
        if not ok:
            bad.append(what)

    flash, glm52 = models["flash"], models["glm52"]
    # The weights agree with `ferry plan` and plan_reference.py, and the recipe with the release.
    ref = plan_reference.weights_per_rank(flash.cfg, W)["bytes"]
    need(flash.held == ref == PLAN_WEIGHTS_A_RANK["flash"],
         f"Flash weights a rank {flash.held} != plan_reference {ref} / ferry plan {PLAN_WEIGHTS_A_RANK['flash']}")
    need(Model("glm52", nvfp4=False).held == PLAN_WEIGHTS_A_RANK["glm52_bf16"], "GLM-5.2 bf16 weights != ferry plan")
    differ = [n for n, _s, _a, _u, lin in flash.tensors if flash.quantized(n, lin) != recipe_nvfp4(n, lin)]
    need(not differ, f"the NVFP4 recipe differs from the Flash release on {differ[:3]}")
    need(flash.room() > 0 and glm52.room() <= 0, "Flash should fit two GB10s and GLM-5.2 should not")
    # The message sizes reproduce what Ferry measured (KiB a rank a step).
    for key, m in models.items():
        for b in BATCHES:
            red = REDUCTIONS_PER_LAYER * b * m.hidden * F32 / 1024
            need(red == MEASURED_REDUCTION_KIB_A_LAYER[(key, b)], f"{key} b{b}: reductions {red} KiB a layer")
            own = math.ceil(b / W)
            # At batch 1 the owner (rank 0 in the benchmark) sends results, the other rank queries.
            got = {0: (own * m.result_bytes + (b - own) * m.query_bytes) / 1024,
                   1: ((b - own) * m.result_bytes + own * m.query_bytes) / 1024}
            need(got == MEASURED_SPLIT_KIB_A_MLA_LAYER[(key, b)], f"{key} b{b}: split {got} KiB a MLA layer")
    # docs/backends.md's figure: Flash at batch 1 pays 2 x 2 x 30 us x 45 layers = 5.4 ms of latency.
    if ops == 2:
        r = project(flash, 1, CONTEXTS[0], False, fraction, ops)
        need(abs(r["ops"] * NET_LATENCY * 1e3 - 5.4) < 1e-9, "Flash b1 reduction latency != 5.4 ms")
    # An NVFP4 expert weighs 0.5625 bytes a weight (its 8 bytes of per-tensor scales aside).
    values = 3 * flash.t["moe_intermediate_size"] * flash.hidden // W
    need(abs(flash.expert_shard / values - NVFP4_BYTES_PER_WEIGHT) < 1e-5, "an NVFP4 expert is not 0.5625 B a weight")
    for m in models.values():
        for b, c, s in cases():
            r = project(m, b, c, s, fraction, ops)
            tag = f"{m.name} b{b} {c} split {'on' if s else 'off'}"
            need(all(r[k] >= 0 for k in ("dense", "experts", "latent", "keys", "state")), f"{tag}: negative bytes")
            need(r["dense"] + r["experts"] <= m.held, f"{tag}: a step reads more weights than a rank holds")
            need(abs(r["step_ms"] - r["mem_ms"] - r["net_ms"]) < 1e-9, f"{tag}: step != memory + network")
            need(low >= fraction or project(m, b, c, s, low, ops)["step_ms"] > r["step_ms"],
                 f"{tag}: a lower fraction is not slower")
            if s:
                off = project(m, b, c, False, fraction, ops)
                need(r["sent"] >= off["sent"], f"{tag}: the split sends fewer bytes than off")
                need(r["ops"] > off["ops"] and r["net_ms"] > off["net_ms"], f"{tag}: the split costs no network")
                need(r["read"] >= off["read"], f"{tag}: the split reads less than off")
                need(r["kv_gib"] <= off["kv_gib"], f"{tag}: the split holds more than off")
            if b == BATCHES[-1]:
                one = project(m, BATCHES[0], c, s, fraction, ops)
                need(r["tps_all"] >= one["tps_all"], f"{tag}: batch {b} gives fewer tokens/s than batch 1")
                need(r["tps"] <= one["tps"], f"{tag}: a stream is faster at batch {b} than alone")
            if c == CONTEXTS[-1]:
                need(r["tps"] <= project(m, b, CONTEXTS[0], s, fraction, ops)["tps"], f"{tag}: longer context faster")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fraction", type=float, default=MEM_FRACTION,
                    help=f"achieved fraction of {MEM_BW / 1e9:.0f} GB/s (default {MEM_FRACTION})")
    ap.add_argument("--low-fraction", type=float, default=MEM_FRACTION_LOW,
                    help=f"the sensitivity columns' fraction (default {MEM_FRACTION_LOW})")
    ap.add_argument("--ops-per-reduction", type=int, default=OPS_PER_REDUCTION,
                    help="network operations a reduction: 2 (Ferry's two phases, default) or 1 (ncclAllReduce)")
    ap.add_argument("--check", action="store_true", help="assert internal consistency; exit 1 on a failure")
    a = ap.parse_args()
    models = {"flash": Model("flash"), "glm52": Model("glm52")}
    print(f"Projection, not measurement: W = {W} GB10s, memory {MEM_BW / 1e9:.0f} GB/s x {a.fraction:.2f} "
          f"(sensitivity {a.low_fraction:.2f}), network {NET_LATENCY * 1e6:.0f} us an operation + bytes / "
          f"{NET_BW / 1e9:.0f} GB/s, {a.ops_per_reduction} operations a reduction, step = memory + network "
          f"(no overlap), compute and launch overheads not modelled. Distinct experts at batch b: "
          f"E (1 - (1 - k/E)^b).")
    print()
    for m in models.values():
        print("\n".join(table(m, a.fraction, a.low_fraction, a.ops_per_reduction)))
        print()
    if a.check:
        bad = check(models, a.fraction, a.low_fraction, a.ops_per_reduction)
        print()
        if bad:
            print(f"check: {len(bad)} FAILED")
            for b in bad:
                print("  " + b)
            sys.exit(1)
        print("check: all passed (weights = ferry plan and plan_reference.py; message sizes = the H200 "
              "measurement; split on >= off in bytes sent, operations and reads; batch 8 >= batch 1 in "
              "tokens/s; 128k no faster than 32k; step = memory + network)")


if __name__ == "__main__":
    main()
