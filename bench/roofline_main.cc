// ferry-bench-roofline: see bench/roofline.h and bench/README.md.
//
//   ferry-bench-roofline                     the whole run (about 3 minutes on an H200)
//   ferry-bench-roofline --smoke             small sizes: the program runs, nothing is measured
//   ferry-bench-roofline --sections=components,models --batches=1,8 ...
//
// Without a CUDA device it says so and exits 0 (CI builds it with nvcc but has no GPU).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/roofline.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/options.h"
#include "model/checkpoint/checkpoint.h"

ABSL_FLAG(bool, smoke, false,
          "Small sizes and two repetitions: checks that every section runs; the numbers mean nothing");
ABSL_FLAG(int32_t, warmup, 3, "Untimed calls before each timed case");
ABSL_FLAG(int32_t, reps, 10, "Timed calls per case (the tables give their median and best)");
ABSL_FLAG(std::string, batches, "1,8,64", "Decode batch sizes (query rows), comma-separated");
ABSL_FLAG(std::string, contexts, "4096,32768,131072",
          "Context lengths (tokens) for the attention and indexer components");
ABSL_FLAG(std::string, prefill_tokens, "2048,8192",
          "Prompt lengths (tokens) for the prefill MoE and whole prefills (empty: none)");
ABSL_FLAG(std::string, decode_contexts, "4096,32768",
          "Context lengths (tokens) of the whole decode steps, each filled by a chunked prefill");
ABSL_FLAG(std::string, dsa_config, "tests/data/configs/glm-5.2.config.json", "GLM-5.2 (glm_moe_dsa) config.json");
ABSL_FLAG(std::string, next_config, "tests/data/configs/glm-5.3-flash.config.json",
          "GLM-5.3-Flash (glm5_next) config.json");
ABSL_FLAG(std::string, dsa_layers, "0,6,7",
          "Layers of the GLM-5.2 config the model keeps (dense+full, MoE+full, MoE+shared)");
ABSL_FLAG(std::string, next_layers, "0,4,3",
          "Layers of the GLM-5.3-Flash config the model keeps (KDA+dense, KDA+MoE, MLA+MoE)");
ABSL_FLAG(std::string, sections, "components,models",
          "components: MLA decode, indexer, experts, prefill MoE; moe: the prefill MoE (2c) alone; attention: MLA "
          "decode, indexer and the two together (2a, 2b, 2e) alone; experts: the experts' GEMMs and decode products "
          "(2d, 2g, 2h) alone; models: whole prefills and decode steps");
ABSL_FLAG(std::string, models, "glm-5.2,glm-5.3-flash", "Which models to run");
ABSL_FLAG(uint64_t, seed, 1, "Seed of every random weight, cache row and token");
ABSL_FLAG(int64_t, page_size, 64, "Tokens a KV page in the whole-model sections (serving's default: 512)");
ABSL_FLAG(bool, mla_wgmma, true, "MLA decode: the sm_90a wgmma form where it runs (false: the mma.sync kernel)");
ABSL_FLAG(bool, mla_tc_small, false, "MLA decode: the mma.sync kernel's small form (a GB10's), no wgmma form");
ABSL_FLAG(std::string, nvfp4_shapes, "",
          "Section 2g: also time the NVFP4 MoE products in these launch shapes, warp_target:depth:blocks "
          "comma-separated (e.g. 1024:4:2; empty: the engine's shape only)");
ABSL_FLAG(std::string, expert_formats, "bf16",
          "Whole-model sections: the experts' formats each model runs in, comma-separated (bf16, fp8, nvfp4)");
ABSL_FLAG(bool, indexer_tma, true, "IndexerScores: TMA tiles where pages hold a multiple of 64 rows");
ABSL_FLAG(int64_t, nvfp4_gemm_min_rows, ferry::kernels::cuda::KernelOptions{}.nvfp4_gemm_min_rows,
          "NVFP4 MLPs: from this many rows through dequantized tiles and cuBLAS (fewer: GemvNvfp4)");

namespace {

using namespace ferry::bench;

constexpr int kStepLayers = 8;  // section 2f: MLA decode calls a timed sequence

// A comma-separated list of non-negative integers; empty only where allow_empty (that part is skipped).
template <typename T>
bool ParseList(const std::string& s, std::vector<T>* out, bool allow_empty = false) {
  out->clear();
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(p, &v) || v < 0) return false;
    out->push_back(static_cast<T>(v));
  }
  return allow_empty || !out->empty();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Roofline benchmark of the GLM-5.x CUDA model at real widths (bench/README.md)");
  absl::ParseCommandLine(argc, argv);
  ferry::kernels::cuda::KernelOptions forms;
  forms.mla_wgmma = absl::GetFlag(FLAGS_mla_wgmma);
  forms.mla_tc_small = absl::GetFlag(FLAGS_mla_tc_small);
  forms.indexer_tma = absl::GetFlag(FLAGS_indexer_tma);
  forms.nvfp4_gemm_min_rows = absl::GetFlag(FLAGS_nvfp4_gemm_min_rows);
  ferry::kernels::cuda::SetKernelOptions(forms);
  if (ferry::kernels::cuda::DeviceCount() == 0) {
    std::printf(
        "ferry-bench-roofline: no CUDA device (no driver or no GPU): nothing to measure; run it on a GPU "
        "machine (bench/README.md)\n");
    return 0;
  }
  Options o;
  o.smoke = absl::GetFlag(FLAGS_smoke);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.reps = absl::GetFlag(FLAGS_reps);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.page_size = absl::GetFlag(FLAGS_page_size);
  o.dsa_config = absl::GetFlag(FLAGS_dsa_config);
  o.next_config = absl::GetFlag(FLAGS_next_config);
  bool ok = ParseList(absl::GetFlag(FLAGS_batches), &o.batches) &&
            ParseList(absl::GetFlag(FLAGS_contexts), &o.contexts) &&
            ParseList(absl::GetFlag(FLAGS_prefill_tokens), &o.prefill_tokens, /*allow_empty=*/true) &&
            ParseList(absl::GetFlag(FLAGS_decode_contexts), &o.decode_contexts) &&
            ParseList(absl::GetFlag(FLAGS_dsa_layers), &o.dsa_layers) &&
            ParseList(absl::GetFlag(FLAGS_next_layers), &o.next_layers);
  for (const absl::string_view shape : absl::StrSplit(absl::GetFlag(FLAGS_nvfp4_shapes), ',', absl::SkipEmpty())) {
    std::vector<int64_t> v;
    ok = ok && ParseList(std::string(absl::StrReplaceAll(shape, {{":", ","}})), &v) && v.size() == 3;
    if (ok) o.nvfp4_shapes.push_back({v[0], v[1], v[2]});
  }
  o.model_experts.clear();
  for (const absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_expert_formats), ',', absl::SkipEmpty())) {
    if (f == "bf16") {
      o.model_experts.push_back(ExpertFormat::kBf16);
    } else if (f == "fp8") {
      o.model_experts.push_back(ExpertFormat::kFp8);
    } else if (f == "nvfp4") {
      o.model_experts.push_back(ExpertFormat::kNvfp4);
    } else {
      std::fprintf(stderr, "ferry-bench-roofline: --expert_formats takes bf16, fp8 and nvfp4, not '%s'\n",
                   std::string(f).c_str());
      return 2;
    }
  }
  if (!ok || o.reps < 1 || o.warmup < 0) {
    std::fprintf(stderr,
                 "ferry-bench-roofline: --batches, --contexts, --prefill_tokens, --decode_contexts and the "
                 "layer lists take comma-separated non-negative integers, --nvfp4_shapes triples a:b:c; --reps >= 1\n");
    return 2;
  }
  const std::string sections = absl::GetFlag(FLAGS_sections), models = absl::GetFlag(FLAGS_models);
  o.components = sections.find("components") != std::string::npos;
  o.moe_only = !o.components && sections.find("moe") != std::string::npos;
  o.attention_only = !o.components && sections.find("attention") != std::string::npos;
  o.experts_only = !o.components && sections.find("experts") != std::string::npos;
  o.components = o.components || o.moe_only || o.attention_only || o.experts_only;
  o.models = sections.find("models") != std::string::npos;
  if (o.smoke) {
    o.warmup = 1;
    o.reps = 2;
    o.batches = {1, 4};
    o.contexts = {4096};
    o.prefill_tokens = {256};
    o.decode_contexts = {512};
  }

  absl::StatusOr<std::string> device = ferry::kernels::cuda::DeviceName(0);
  std::printf("# ferry-bench-roofline\n\ndevice: %s; seed %llu; %d warm-up and %d timed calls a case%s\n",
              device.ok() ? device->c_str() : "?", static_cast<unsigned long long>(o.seed), o.warmup, o.reps,
              o.smoke ? " (SMOKE RUN: small sizes, numbers meaningless)" : "");
  Table ceilings_table;
  absl::StatusOr<Ceilings> ceilings = MeasureCeilings(o, &ceilings_table);
  if (!ceilings.ok()) {
    std::fprintf(stderr, "ferry-bench-roofline: measuring the ceilings failed: %s\n",
                 std::string(ceilings.status().message()).c_str());
    return 1;
  }
  const Ceilings& c = *ceilings;
  PrintTable(ceilings_table, c);

  // The models' shapes (per rank = all heads: one GPU is TP1).
  std::vector<NamedConfig> shapes;
  std::vector<std::pair<std::string, std::string>> paths;
  if (models.find("glm-5.2") != std::string::npos) paths.push_back({"glm-5.2", o.dsa_config});
  if (models.find("glm-5.3-flash") != std::string::npos) paths.push_back({"glm-5.3-flash", o.next_config});
  for (const auto& [name, path] : paths) {
    absl::StatusOr<nlohmann::json> j = ferry::model::ReadJsonFile(path);
    absl::StatusOr<ferry::model::ModelConfig> mc =
        j.ok() ? ferry::model::ParseModelConfig(*j, path) : absl::StatusOr<ferry::model::ModelConfig>(j.status());
    if (!mc.ok()) {
      std::fprintf(stderr, "ferry-bench-roofline: %s: %s\n", path.c_str(), std::string(mc.status().message()).c_str());
      return 1;
    }
    shapes.push_back({name, *mc});
  }

  std::vector<Table> done;
  if (o.components && !o.moe_only) {
    if (!o.experts_only) {
      done.push_back(MlaDecodeTable(shapes, o, c));
      PrintTable(done.back(), c);
      done.push_back(IndexerTable(shapes, o, c));
      PrintTable(done.back(), c);
      done.push_back(SparseAttentionTable(shapes, o, c));
      PrintTable(done.back(), c);
      done.push_back(MlaDecodeTable(shapes, o, c, kStepLayers));
      PrintTable(done.back(), c);
    }
    if (!o.attention_only) {
      Table experts = ExpertGemmTable(shapes, o, c);
      PrintTable(experts, c);
      done.push_back(ExpertDecodeTable(shapes, o, c));
      PrintTable(done.back(), c);
      done.push_back(Nvfp4PrefillTable(shapes, o, c));
      PrintTable(done.back(), c);
    }
  }
  for (const auto& [name, path] : paths) {
    if ((!o.components || o.attention_only || o.experts_only) && !o.models) break;
    Table moe, prefill, decode;
    moe.title = absl::StrCat("2c. Prefill MoE of ", name,
                             " (model::cuda::FfnAdd: router, routing, experts, shared expert, combine), one layer");
    moe.explanation =
        "FLOPs = 2 x tokens x hidden x (3 x moe_inter x (top_k + shared) + n_experts) (experts and router); bytes = "
        "the weights of the experts the routing chose, once, the shared expert and router, the input and the float32 "
        "residual. Two routings of the same tokens: the random checkpoint's own (its random correction bias outweighs "
        "the spread of the top scores, so the loads are skewed: the note gives the experts with rows and the most "
        "rows of one) and balanced (the bias zeroed, as a trained router's correction bias aims for). Expert ids go to the host (one sync); bf16 experts: one cuBLAS call an expert, side "
        "by side on 8 streams (GroupedLinearBf16); the FP8 rows (sm_90a only), the same layer with its experts "
        "stored in FP8 as the FP8 releases ship them, run W8A8: each projection's input quantized "
        "(QuantizeActFp8Rows), then one GroupedLinearW8A8 launch a projection (every expert and the shared one), "
        "bytes counting one byte a weight and its block scales. % matrix is against the bf16 rate measured in 1 "
        "(the E4M3 tensor-core peak is twice the bf16 one). Target: >= 40% of the matrix rate.";
    prefill.title = absl::StrCat("3a. Whole prefill of ", name, " through the model's Forward (one conversation)");
    prefill.explanation =
        "The layers named in the line above at real widths, embedding to lm_head (last row), fresh cache each time. "
        "FLOPs = 2 x tokens x the matrix elements a token multiplies (top_k routed experts + shared) + attention "
        "(each row over min(pos + 1, 2048) selected rows, all heads) + indexer scoring (every earlier key or pool, 32 "
        "heads) + KDA recurrence; bytes = every weight once + the new cache rows. Wall clock around Forward() (which "
        "synchronizes).";
    decode.title = absl::StrCat("3b. Whole decode steps of ", name,
                                " through the model's Forward (batch rows = forks of one filled context)");
    decode.explanation =
        "bytes = the weights the step must read (attention, indexer, norms, dense MLP, routers, shared experts, the "
        "routed experts chosen: exactly top_k at batch 1, the expected distinct count under uniform routing above, "
        "and lm_head) + each row's cache reads (selected latent rows, indexer keys), KDA state read and written, the "
        "float32 logits; FLOPs = 2 x matrix elements x rows + attention + indexer. Forks share the context's pages, "
        "so their cache reads may hit L2 (the weights, the bulk, cannot). Target: batch 1 at >= 60% of its roofline "
        "(bytes / bandwidth; the weights are > 99% of those bytes at batch 1).";
    const std::vector<int>& layers = name == "glm-5.2" ? o.dsa_layers : o.next_layers;
    ModelSections(name, path, layers, o, c, &moe, &prefill, &decode);
    if (o.components && !o.attention_only) {
      PrintTable(moe, c);
      done.push_back(moe);
    }
    if (o.models) {
      PrintTable(prefill, c);
      PrintTable(decode, c);
      done.push_back(prefill);
      done.push_back(decode);
    }
  }

  // The targets, collected.
  std::printf("\n### Targets\n\n");
  int met = 0, missed = 0, failed = 0;
  for (const Table& t : done) {
    for (const Row& r : t.rows) {
      if (!r.error.empty()) {
        ++failed;
        continue;
      }
      if (r.target.kind == TargetKind::kNone) continue;
      const bool m = r.Met(c);
      (m ? met : missed) += 1;
      std::printf("- %s: %.1f%% (target %.0f%%) %s\n", r.name.c_str(), 100 * r.TargetValue(c), 100 * r.target.fraction,
                  m ? "met" : "NOT MET");
    }
  }
  std::printf("\n%d targets met, %d not met, %d cases failed\n", met, missed, failed);
  return failed > 0 ? 1 : 0;
}
