#include "model/cuda/load_cuda.h"

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/status.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/cuda/glm5_next_cuda.h"
#include "model/cuda/glm_moe_dsa_cuda.h"

namespace ferry::model::cuda {

absl::StatusOr<std::unique_ptr<CausalLM>> LoadCausalLMCuda(const std::string& dir, const TensorParallel& tp,
                                                           const CacheOptions& cache, const CudaLoadOptions& opts) {
  const Precision precision = opts.precision;
  const int devices = kernels::cuda::DeviceCount();
  if (devices == 0) {
    return absl::FailedPreconditionError("no CUDA device: the CUDA backend needs a GPU (use --device cpu)");
  }
  FERRY_RETURN_IF_ERROR(ValidateCacheOptions(cache));
  FERRY_RETURN_IF_ERROR(opts.Check());  // before the checkpoint is opened (the families' Load check again)
  FERRY_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(dir));
  CudaLoadOptions load = opts;
  if (absl::StatusOr<kernels::cuda::DeviceMemory> mem = kernels::cuda::MemoryInfo(); mem.ok() && mem->integrated) {
    load.drop_checkpoint_pages = true;
  }
  if (opts.nvfp4_numerics == Nvfp4Numerics::kW4A4 && !ck.nvfp4()) {
    FERRY_LOG(WARNING) << dir << " stores no NVFP4 weights: --nvfp4-numerics w4a4 changes nothing";
  }
  FERRY_ASSIGN_OR_RETURN(ModelConfig cfg, ParseModelConfig(ck.config_json(), ck.config_path()));
  if (precision == Precision::kBf16 && opts.fp8_experts && !kernels::cuda::GroupedLinearFp8Available()) {
    // The first MoE layer's first expert tells how the experts are stored.
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      if (cfg.mlp_types[static_cast<size_t>(l)] == MlpType::kDense) continue;
      const TensorInfo* gate = ck.Find(cfg.LayerPrefix(l) + "mlp.experts.0.gate_proj.weight");
      if (gate != nullptr && gate->dtype == DType::kF8E4M3) {
        FERRY_LOG(WARNING) << dir << " stores its experts in FP8, but this GPU has no W8A8 expert kernels (sm_90 "
                           << "only): they are upcast to bf16, twice the bytes `ferry plan` counts for them";
      }
      break;
    }
  }
  std::unique_ptr<CausalLM> model;
  switch (cfg.family) {
    case Family::kGlmMoeDsa: {
      FERRY_ASSIGN_OR_RETURN(model, GlmMoeDsaCuda::Load(ck, cfg, cache, load, tp));
      break;
    }
    case Family::kGlm5Next: {
      FERRY_ASSIGN_OR_RETURN(model, Glm5NextCuda::Load(ck, cfg, cache, load, tp));
      break;
    }
  }
  if (load.drop_checkpoint_pages) ck.DropPages("");  // the embeddings, norms and head too
  absl::StatusOr<int> device = kernels::cuda::CurrentDevice();
  absl::StatusOr<std::string> name = kernels::cuda::DeviceName(device.ok() ? *device : 0);
  absl::StatusOr<kernels::cuda::DeviceMemory> mem = kernels::cuda::MemoryInfo();
  FERRY_LOG(INFO) << "loaded " << FamilyName(cfg.family)
                  << (tp.world > 1 ? absl::StrCat(" (rank ", tp.rank, " of ", tp.world, ")") : std::string()) << " from "
                  << dir << " onto " << (device.ok() ? absl::StrCat("GPU ", *device, ", ") : std::string())
                  << (name.ok() ? *name : std::string("a CUDA device")) << ": " << cfg.num_layers << " layers, hidden "
                  << cfg.hidden_size << ", vocab " << cfg.vocab_size << ", " << model->weight_bytes() << " bytes of "
                  << PrecisionName(precision) << " weights"
                  << (mem.ok() ? absl::StrCat(", ", mem->free_bytes >> 20, " of ", mem->total_bytes >> 20, " MiB free",
                                              mem->integrated ? " (memory shared with the host)" : "")
                               : std::string());
  // Which attention kernel decode gets here: the CUDA-core fallback reads each row once a head.
  if (precision == Precision::kBf16) {
    FERRY_LOG(INFO) << "MLA decode attention: "
                    << kernels::cuda::MlaDecodePathName(tp.Local(cfg.num_heads), cfg.kv_lora_rank, cfg.qk_rope_head_dim);
  }
  return model;
}

}  // namespace ferry::model::cuda
