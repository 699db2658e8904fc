// A worker's options that do not depend on its rank (common/options.h: defined by ferry-worker
// and by `ferry`, whose serve hands them all to every worker it starts; check-golden and
// generate read the device ones).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/options.h"

#define FERRY_WORKER_OPTIONS(X)                                                                             \
  X(std::string, device, "cpu", "Where the model runs: cpu, or cuda (one GPU a rank)")                      \
  X(std::string, precision, "bf16", "--device cuda: bf16 (serving) or f32 (float32 activations, for goldens)") \
  X(bool, fp8_experts, true,                                                                                \
    "--device cuda, bf16: keep experts a checkpoint stores in block-scaled FP8 in FP8 and run them as W8A8 " \
    "(false: upcast them to bf16, the CPU reference's numerics)")                                          \
  X(std::string, dataplane, "auto",                                                                         \
    "--device cuda: how ranks move device values: nccl (a GPU a rank, on the device), ucx (staged through "  \
    "host memory; ranks may share a GPU), auto (nccl when every rank has a GPU of its own)")                 \
  X(bool, nvfp4_experts, true,                                                                              \
    "--device cuda, bf16: keep the experts and MLPs a checkpoint stores in NVFP4 packed (0.5625 bytes a "    \
    "weight, decoded exactly on the fly; false: upcast them to bf16)")                                                     \
  X(std::string, nvfp4_numerics, "w4a16",                                                                   \
    "How NVFP4 MLP and expert weights compute: w4a16 (weights exact, activations as computed) or w4a4 "     \
    "(activations quantized to NVFP4 under the checkpoint's input scales, as FP4 tensor cores run them; "    \
    "cpu, or cuda in bf16)")                                                                                 \
  X(double, memory_gib, 0,                                                                                  \
    "Memory a rank may use, weights included, GiB (0: the host's available memory over the ranks); plan: "  \
    "the device's memory a rank, of which --reserve-gib is kept back")                                      \
  X(int32_t, connect_timeout_s, 60, "Seconds a worker waits for the coordinator and its peers")

FERRY_WORKER_OPTIONS(FERRY_DECLARE_OPTION)

namespace ferry {

// --dataplane against --device, as every process that takes them checks it: auto or ucx, or nccl
// with cuda (NCCL moves device values only). INVALID_ARGUMENT naming both otherwise.
inline absl::Status CheckDataPlane(const std::string& plane, const std::string& device) {
  if (plane == "auto" || plane == "ucx" || (plane == "nccl" && device == "cuda")) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--dataplane ", plane, " with --device ", device,
                                                 ": use auto, ucx, or nccl with --device cuda"));
}

}  // namespace ferry
