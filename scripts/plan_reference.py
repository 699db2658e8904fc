#!/usr/bin/env python3
"""An independent reckoning of what `ferry plan` prints for a glm5_next (GLM-5.3-Flash) config,
written from the config and the rules kvpool/plan.h states, sharing no code with Ferry: the
weights a rank holds (every text-model tensor, split over the ranks as the loaders split it,
NVFP4 where the config's ModelOpt quantization_config quantizes it), the room a rank's memory
leaves, the page plan with the latent split, what it means for the lanes at once, and the longest
window that fits. The figures in tests/CMakeLists.txt's cli.plan.glm53_flash_nvfp4_* tests,
tests/model/weight_bytes_test.cc and tests/kvpool/plan_fit_test.cc come from it:

    scripts/plan_reference.py tests/data/configs/glm-5.3-flash-nvfp4.config.json \\
        --ranks 2 --memory-gib 128 --reserve-gib 28 --context 1048576 --parallel 8
"""
import argparse
import fnmatch
import json
import math

GIB = 1 << 30
PAGE = 512


def cdiv(a, b):
    return -(-a // b)


def text_tensors(t):
    """(name, shape, split axis or None, split units, whether a Linear module's weight)."""
    D, H, L, N, V = t["hidden_size"], t["num_attention_heads"], t["kv_lora_rank"], t["qk_nope_head_dim"], t["v_head_dim"]
    QL, S, Hl, d = t["q_lora_rank"], t["hc_mult"], t["linear_num_heads"], t["linear_head_dim"]
    M, C, K, Di = (2 + S) * S, Hl * d, t["linear_conv_kernel_dim"], t["index_head_dim"]
    top = "model.language_model."
    yield top + "embed_tokens.weight", (t["vocab_size"], D), None, 0, False
    yield top + "norm.weight", (D,), None, 0, False
    yield "lm_head.weight", (t["vocab_size"], D), None, 0, True
    for i in range(t["num_hidden_layers"]):
        p = f"{top}layers.{i}."
        for site in ("hc_attn", "hc_ffn"):
            yield p + site + "_fn", (M, S * D), None, 0, False
            yield p + site + "_base", (M,), None, 0, False
            yield p + site + "_scale", (3,), None, 0, False
        yield p + "input_layernorm.weight", (D,), None, 0, False
        yield p + "post_attention_layernorm.weight", (D,), None, 0, False
        a = p + "self_attn."
        if t["layer_types"][i] == "linear_attention":
            for x in "qkv":
                yield a + x + "_proj.weight", (C, D), 0, Hl, True
                yield a + x + "_conv1d.weight", (C, 1, K), 0, Hl, False
            for x in "fg":
                yield a + x + "_a_proj.weight", (d, D), None, 0, True
                yield a + x + "_b_proj.weight", (C, d), 0, Hl, True
            yield a + "b_proj.weight", (Hl, D), 0, Hl, True
            yield a + "A_log", (Hl,), 0, Hl, False
            yield a + "dt_bias", (C,), 0, Hl, False
            yield a + "o_norm.weight", (d,), None, 0, False
            yield a + "o_proj.weight", (D, C), 1, Hl, True
        else:
            yield a + "q_a_proj.weight", (QL, D), None, 0, True
            yield a + "q_a_layernorm.weight", (QL,), None, 0, False
            yield a + "q_b_proj.weight", (H * N, QL), 0, H, True
            yield a + "kv_a_proj_with_mqa.weight", (L, D), None, 0, True
            yield a + "kv_a_layernorm.weight", (L,), None, 0, False
            yield a + "kv_b_proj.weight", (H * (N + V), L), 0, H, True
            yield a + "o_proj.weight", (D, H * V), 1, H, True
            if t["indexer_types"][i] == "full":
                x = a + "indexer."
                yield x + "wq_b.weight", (t["index_n_heads"] * Di, QL), None, 0, True
                yield x + "wk.weight", (Di, D), None, 0, True
                yield x + "k_norm.weight", (Di,), None, 0, False
                yield x + "k_norm.bias", (Di,), None, 0, False
                yield x + "weights_proj.weight", (t["index_n_heads"], D), None, 0, True
                yield x + "index_kpool_compress_gate", (Di, D), None, 0, False
                yield x + "index_kpool_compress_ape", (t["index_kpool"], Di), None, 0, False
        yield from mlp_tensors(t, i, p + "mlp.")


def mlp_tensors(t, i, m):
    """Layer i's MLP tensors under prefix m (both families): a dense SwiGLU, or the router, the
    routed experts and the shared expert. (name, shape, split axis, split units, is a Linear)."""
    D = t["hidden_size"]

    def mlp(q, inter):
        yield q + "gate_proj.weight", (inter, D), 0, inter, True
        yield q + "up_proj.weight", (inter, D), 0, inter, True
        yield q + "down_proj.weight", (D, inter), 1, inter, True

    if t["mlp_layer_types"][i] == "dense":
        yield from mlp(m, t["intermediate_size"])
    else:
        yield m + "gate.weight", (t["n_routed_experts"], D), None, 0, False  # a parameter, not a Linear
        yield m + "gate.e_score_correction_bias", (t["n_routed_experts"],), None, 0, False
        for e in range(t["n_routed_experts"]):
            yield from mlp(f"{m}experts.{e}.", t["moe_intermediate_size"])
        yield from mlp(m + "shared_experts.", t["moe_intermediate_size"] * t["n_shared_experts"])


def weights_per_rank(cfg, ranks):
    t, q = cfg["text_config"], cfg.get("quantization_config") or {}
    nvfp4 = q.get("quant_algo") == "NVFP4"
    ignore = q.get("ignore", []) + q.get("exclude_modules", [])
    static_in = any(g.get("input_activations", {}).get("dynamic") is False for g in q.get("config_groups", {}).values())
    out = dict(bytes=0, replicated=0, values=0, nvfp4=0, nvfp4_bytes=0, bf16=0)
    for name, shape, axis, units, linear in text_tensors(t):
        shape = list(shape)
        if axis is not None and ranks > 1:
            assert units % ranks == 0, name
            shape[axis] //= ranks
        n = math.prod(shape)
        module = name[: -len(".weight")]
        parents = [".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 2)]
        quantized = (nvfp4 and linear and name.endswith(".weight") and shape[1] % 16 == 0
                     and not any(fnmatch.fnmatchcase(m, pat) for pat in ignore for m in parents))
        b = n // 2 + n // 16 + 4 + (4 if static_in else 0) if quantized else 2 * n
        out["bytes"] += b
        out["values"] += n
        out["replicated"] += b if axis is None or ranks == 1 else 0
        out["nvfp4" if quantized else "bf16"] += 1
        out["nvfp4_bytes"] += b if quantized else 0
    return out


def plan_pages(room, bpt, fixed, lanes, ctx, budget):
    """Steps 1-6 of the page plan (kvpool/plan.h); None when steps 1 and 3 do not fit."""
    pb, wp = PAGE * bpt, cdiv(ctx, PAGE) + 1
    window, least = wp * pb, wp * pb + (lanes - 1) * (pb + fixed)
    if window > room or least > room:
        return None
    rows = ctx * bpt
    would_hold = 0 if rows > room else min(lanes, 1 + (room - rows) // (rows + fixed))
    n = min(lanes, 1 + (room - window) // (window + fixed), 1 + (room - least) // ((wp - 1) * pb))
    have, fixed_total = n * wp + lanes - n, (lanes - 1) * fixed
    rest = room - have * pb - fixed_total
    floor = max(0, min(cdiv(would_hold * ctx, PAGE) - have, rest // pb))
    rest -= floor * pb
    cache = min(rest, budget)
    shared = (rest - cache) // pb
    return dict(n=n, wp=wp, pb=pb, pages=have + floor + shared, floor=floor, shared=shared, cache=cache,
                unused=rest - cache - shared * pb, fixed=fixed_total)


def plan_split(room, latent, replicated, fixed, lanes, ctx, budget, w):
    """The page plan at the average cost of a token, then the arenas cut; None when refused."""
    p = plan_pages(room, replicated + cdiv(latent, w), fixed, lanes, ctx, budget)
    if p is None:
        return None
    kb, lb, bud = PAGE * replicated, PAGE * latent, p["pages"] * p["pb"] + p["unused"]
    k = p["pages"]
    lp = max(cdiv(k, w), p["wp"])
    while k > 0 and k * kb + lp * lb > bud:
        k = (min(k - 1, (bud - lp * lb) // kb) if kb > 0 else k - 1) if lp > cdiv(k, w) else k - 1
        lp = max(cdiv(k, w), p["wp"])
    if k < p["wp"] + lanes - p["n"] or k * kb + lp * lb > bud:
        return None
    whole = min(lanes, k // p["wp"], w * (lp // p["wp"]))
    each = min(k // lanes, lp // cdiv(lanes, w))
    return dict(p, keys=k, latent_pages=lp, tokens=k * PAGE, whole=whole, even=max(0, min(ctx, (each - 1) * PAGE)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--memory-gib", type=float, default=128)
    ap.add_argument("--reserve-gib", type=float, default=28)
    ap.add_argument("--context", type=int, default=1048576)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--prompt-cache-gib", type=float, default=16)
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    t, w = cfg["text_config"], a.ranks
    wb = weights_per_rank(cfg, w)
    print(f"weights a rank: {wb['bytes']} bytes ({wb['bytes'] / GIB:.2f} GiB), {wb['replicated']} replicated, "
          f"{wb['values']} values; {wb['nvfp4']} nvfp4 tensors ({wb['nvfp4_bytes']} bytes), {wb['bf16']} bf16")
    room = round(a.memory_gib * GIB) - round(a.reserve_gib * GIB) - wb["bytes"]
    print(f"room a rank: {room} bytes ({room / GIB:.2f} GiB)")
    mla = [i for i, x in enumerate(t["layer_types"]) if x != "linear_attention"]
    latent = len(mla) * t["kv_lora_rank"] * 2
    replicated = sum(t["indexer_types"][i] == "full" for i in mla) * t["index_head_dim"] * 2 // t["index_kpool"]
    heads, d = cdiv(t["linear_num_heads"], w), t["linear_head_dim"]
    kda = sum(x == "linear_attention" for x in t["layer_types"])
    fixed = kda * (heads * d * d * 4 + (t["linear_conv_kernel_dim"] - 1) * 3 * heads * d * 4)
    budget = round(a.prompt_cache_gib * GIB)
    print(f"bytes a token a rank: {latent + replicated} = {latent} + {replicated}; fixed a stream: {fixed}")
    p = plan_split(room, latent, replicated, fixed, a.parallel, a.context, budget, w)
    if p is None:
        lo, hi = 0, a.context
        while lo < hi:
            mid = lo + (hi - lo + 1) // 2
            lo, hi = (mid, hi) if plan_split(room, latent, replicated, fixed, a.parallel, mid, budget, w) else (lo, mid - 1)
        print(f"refused at {a.context}; the longest window that fits: {lo} tokens")
        p = plan_split(room, latent, replicated, fixed, a.parallel, lo, budget, w) if lo else None
        if p is None:
            return
    print(f"pages {p['pages']} (floor {p['floor']}, shared {p['shared']}), key pages {p['keys']}, latent pages "
          f"{p['latent_pages']}, tokens {p['tokens']}; whole windows at once {p['whole']}, each of the lanes "
          f"{p['even']} tokens")


if __name__ == "__main__":
    main()
