// ferry-bench-roofline: decode and prefill of GLM-5.2 (glm_moe_dsa) and GLM-5.3-Flash
// (glm5_next) at their real widths on one GPU, with random weights, against the two ceilings
// (HBM read bandwidth, bf16 matrix rate) measured in the same run. bench/README.md says what
// each section measures and how its bytes and FLOPs are counted.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/random_checkpoint.h"
#include "bench/roofline_report.h"
#include "model/checkpoint/config.h"

namespace ferry::bench {

struct Options {
  bool smoke = false;  // small sizes and few repetitions: checks the program runs, measures nothing
  int warmup = 3;
  int reps = 10;
  std::vector<int64_t> batches{1, 8, 64};
  std::vector<int64_t> contexts{4096, 32768, 131072};  // components (attention, indexer)
  std::vector<int64_t> prefill_tokens{2048, 8192};
  std::vector<int64_t> decode_contexts{4096, 32768};  // whole decode steps (filled by prefill)
  int64_t prefill_chunk = 8192;                       // tokens a Forward when filling a context
  std::string dsa_config;                             // glm_moe_dsa config.json (GLM-5.2)
  std::string next_config;                            // glm5_next config.json (GLM-5.3-Flash)
  std::vector<int> dsa_layers{0, 6, 7};               // dense+full, MoE+full, MoE+shared
  std::vector<int> next_layers{0, 4, 3};              // KDA+dense, KDA+MoE, MLA+MoE
  bool components = true;
  bool moe_only = false;        // of the components, the prefill MoE (2c) alone
  bool attention_only = false;  // of the components, the attention side (2a, 2b) alone
  bool experts_only = false;    // of the components, the experts' GEMMs and the NVFP4 and decode products (2d, 2g, 2h) alone
  bool models = true;
  // Section 2g: NVFP4 MoE launch shapes timed besides the engine's (warp target, depth, blocks an
  // SM: kernels/cuda/gemv_nvfp4.h's Nvfp4GemvShape).
  std::vector<std::array<int64_t, 3>> nvfp4_shapes;
  // Whole-model sections: the experts' formats each model runs in (bench/random_checkpoint.h).
  std::vector<ExpertFormat> model_experts{ExpertFormat::kBf16};
  uint64_t seed = 1;
  // Tokens a KV page of the whole-model sections (serving's default is 512; 64 keeps forks of short
  // contexts sharing pages).
  int64_t page_size = 64;
};

// A model config by name for the tables ("glm-5.2") and its parsed form.
struct NamedConfig {
  std::string name;
  model::ModelConfig config;
};

// Section 1: the ceilings, and a table of what was measured for them.
absl::StatusOr<Ceilings> MeasureCeilings(const Options& o, Table* table);

// Section 2: sparse MLA decode attention and the indexer (IndexerScores + TopK) at each model's
// per-rank (TP1) shapes over a paged cache, for every batch x context. MlaDecodeTable times one
// call (2a), or with layers > 1 that many calls back to back over disjoint rows, per layer (2f).
Table MlaDecodeTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c, int layers = 1);
Table IndexerTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c);
// Section 2e: 2b then 2a as one decode step runs them (scores, TopK, the selection, the attention).
Table SparseAttentionTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c);
// Section 2d: one MoE layer's expert GEMMs alone, dispatched three ways (bench/roofline_experts.cc).
Table ExpertGemmTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c);
// Section 2g: one MoE layer's expert decode products at batch 1 and 8, bf16 vs FP8 vs NVFP4 weights
// (bench/roofline_nvfp4.cc).
Table ExpertDecodeTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c);
// Section 2h: a dense MLP's NVFP4 gate_up at prefill row counts, decoded in registers (GemvNvfp4)
// vs dequantized tiles and cuBLAS vs bf16 weights (bench/roofline_nvfp4_prefill.cc).
Table Nvfp4PrefillTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c);

// Sections 2 (prefill MoE) and 3 (whole steps) of one model: its config file reduced to
// o.*_layers, random weights in memory; rows appended to the three tables.
void ModelSections(const std::string& name, const std::string& config_path, const std::vector<int>& layers,
                   const Options& o, const Ceilings& c, Table* moe, Table* prefill, Table* decode);

}  // namespace ferry::bench
