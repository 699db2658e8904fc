// The discrete decisions of a forward pass, recorded from one run and replayed into another.
//
// A forward makes two kinds of choices that are not continuous in its inputs: which keys (or, in
// glm5_next, which pools) the lightning indexer keeps for a row, and which experts the MoE router
// sends a row to. On the random tiny checkpoints many of them are near ties, and bf16 rounding
// flips some; one flipped key or expert moves a row by tens of percent, and every later row
// through the cache (bench/results/h200-check-golden-cuda.md). A logit comparison cannot then
// tell bf16 rounding from a bug. `ferry check-golden --device cuda --precision bf16` therefore
// records the decisions of the float32 run (which matches the goldens to ~1e-4), replays them
// into the bf16 run, and holds the bf16 logits to a tolerance; an unpinned run (kCompare) reports
// how many decisions bf16 alone would change. Routing replay is the same idea as the RL stacks'
// "rollout routing replay" (the trainer is pinned to the experts the sampler chose).
//
// The log is a tape: one entry per decision site per layer per Forward(), in call order. A run
// that replays must make exactly the same Forward() calls (same segments, same chunking) as the
// one that recorded; every mismatch (site, layer, rows, width) is an error, never a silent skip.
//
// Decisions are id rows [rows, width] int32, -1 padding the unused tail of a row (TopK's and
// MoeRoute's output formats: ids ascending, then -1). Rows compare as sets (order ignored).
//
// Plain C++, no device code: a model reports to the log attached with CausalLM::set_decision_log.
// The CPU backend decides on host ids directly (CpuOps::TapTopK, MoeForward's RouteDecision);
// the CUDA models (model/cuda/decision_tap.h) copy their ids to the host, call Decide(), and
// upload what it leaves. A model without a log attached pays nothing.
// Thread safety: none; one Forward() at a time (as CausalLM).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/ops.h"

namespace ferry::model {

class FfnObserver;  // model/blocks/ffn.h

enum class DecisionSite : int {
  kIndexerTopK = 0,  // indexer top-k: token ids (glm_moe_dsa) or pool ids (glm5_next) a row keeps
  kMoeExperts = 1,   // MoE router: the top_k expert ids of a row
};
inline constexpr int kDecisionSites = 2;
const char* DecisionSiteName(DecisionSite site);

// A row whose own decision differs from the tape's.
struct DecisionDifference {
  DecisionSite site = DecisionSite::kIndexerTopK;
  int64_t layer = 0;
  int64_t row = 0;       // the row on the tape as recorded (for a prompt's tape: the token position)
  float margin = NAN;    // the recorded decision's margin (Append), NaN when the tape has none
};

// What Decide() saw since Start(). "Own" is the decision the running model computed itself.
struct DecisionStats {
  int64_t decisions = 0;  // row decisions compared (kReplay, kCompare) or recorded (kRecord)
  int64_t differing = 0;  // of those, own set != recorded set
  std::array<int64_t, kDecisionSites> by_site{};            // decisions per site
  std::array<int64_t, kDecisionSites> differing_by_site{};  // differing per site
  int64_t fp4_rows = 0;             // W4A4 rounded MLP input rows recorded or compared (Fp4Row)
  int64_t fp4_groups_differing = 0;  // of their groups of 16, own values != recorded
  int64_t positions = 0;            // rows over all steps (a step's row is one token position)
  int64_t positions_differing = 0;  // rows with at least one differing decision in any layer
  std::vector<DecisionDifference> differences;  // every differing row decision, in the order met
};

class DecisionLog {
 public:
  enum class Mode {
    kRecord,   // append the model's own decisions to the tape
    kReplay,   // compare the model's own decision with the tape's, then pin: ids := tape
    kCompare,  // compare only: the model keeps its own decision (the unpinned run)
  };

  // Starts a run in `mode`: the cursor goes to the tape's start and the stats to zero.
  // kRecord also clears the tape.
  void Start(Mode mode);
  Mode mode() const { return mode_; }

  // A Forward() step of `rows` rows begins (call once per step, before its decisions).
  // Errors (kReplay, kCompare): FAILED_PRECONDITION when the tape's next step has another row
  // count or the previous step did not consume all of its entries.
  absl::Status BeginStep(int64_t rows);

  // A decision site: `ids` [rows, width] are the model's own decision (-1 pads a row's tail).
  // kRecord: appended. kReplay: compared, then overwritten with the recorded ids (-1 padding
  // included). kCompare: compared, left as they are. Returns true when `ids` were overwritten.
  // Errors: INVALID_ARGUMENT when ids.size() != rows * width or outside a step;
  // FAILED_PRECONDITION (kReplay, kCompare) when the tape's next entry is another site, layer or
  // shape, or the tape is exhausted (the two runs made different calls). Nothing is counted or
  // written on error.
  absl::StatusOr<bool> Decide(DecisionSite site, int64_t layer, int64_t rows, int64_t width,
                              std::span<int32_t> ids);

  // kRecord: appends a decision made elsewhere (another engine's, read from a file) to the
  // current step, with each row's margin: how near the decision was to another (its recorder
  // defines the measure; DecisionDifference reports it for the rows a replay disagrees with).
  // INVALID_ARGUMENT outside a kRecord step or when ids are not [rows, width] / margins not
  // [rows] (margins may be empty: unknown).
  absl::Status Append(DecisionSite site, int64_t layer, int64_t width, std::span<const int32_t> ids,
                      std::span<const float> margins);

  // W4A4 numerics' rounded MLP inputs (each value e2m1 x its group's E4M3 scale, before the
  // activation scale: what the FP4 products multiply), a row at a time. FP4 codes flip at rounding
  // ties as routing choices do, so a comparison of two runs pins them too. Kept by key, not in
  // order (the backends round in different orders): `mlp` an expert id, kFp4DenseMlp,
  // kFp4SharedExpert or kFp4RoutedInput (the routed experts' one rounding of a token's input),
  // `input` 0 (gate and up) or 1 (down), `row` the step's row. kRecord: kept. kReplay: each group
  // of 16 compared with the record (stats().fp4_groups_differing), then the row := the record
  // (returns true). kCompare: compared only. A tape without FP4 rows (recorded from a run without
  // W4A4) leaves every row as it is. Errors: INVALID_ARGUMENT outside a step or for a width not a
  // multiple of 16; FAILED_PRECONDITION (kReplay, kCompare) for a row the tape lacks while it holds
  // others, or holds with another width. Recut carries no FP4 rows.
  static constexpr int64_t kFp4DenseMlp = -1, kFp4SharedExpert = -2, kFp4RoutedInput = -3;
  absl::StatusOr<bool> Fp4Row(int64_t layer, int64_t mlp, int64_t input, int64_t row, std::span<float> values);

  // Ends the run (counts the last step's positions). Errors as BeginStep for unconsumed
  // entries; kReplay/kCompare: FAILED_PRECONDITION when steps of the tape were not replayed.
  absl::Status Finish();

  // The recorded tape re-cut into other steps over its rows, for replay into a run that feeds the
  // same tokens in other steps (a prompt token by token against its one forward, two
  // conversations alone against one step of both, a fork that runs a prompt's tail again). Rows
  // are numbered over the whole tape (step 0's first, then step 1's, ...); new step i takes the
  // rows [steps[i].first, +steps[i].count), which must lie in one recorded step, and every entry
  // of that step gives them its rows (same sites and layers, in order); a range of no rows is a
  // step with no decisions. Rows may be taken more than once or not at all. INVALID_ARGUMENT when
  // a range straddles recorded steps or leaves the tape.
  struct RowRange {
    int64_t first = 0, count = 0;
  };
  absl::StatusOr<DecisionLog> Recut(std::span<const RowRange> steps) const;

  const DecisionStats& stats() const { return stats_; }
  int64_t steps() const { return static_cast<int64_t>(steps_.size()); }
  int64_t entries() const { return static_cast<int64_t>(entries_.size()); }

 private:
  struct Entry {
    DecisionSite site;
    int64_t layer, rows, width;
    std::vector<int32_t> ids;
    std::vector<float> margins;  // [rows] or empty
    int64_t first_row = 0;       // the tape row (as recorded) of its row 0
  };
  struct StepMark {
    int64_t rows;
    size_t first_entry;  // index of its first entry in entries_
    int64_t first_row;   // rows recorded before it
  };
  absl::Status CloseStep();

  Mode mode_ = Mode::kRecord;
  std::vector<Entry> entries_;
  std::vector<StepMark> steps_;
  size_t cursor_ = 0;        // next entry (kReplay, kCompare)
  size_t step_cursor_ = 0;   // next step (kReplay, kCompare)
  bool in_step_ = false;
  int64_t step_rows_ = 0;
  size_t step_end_ = 0;                  // kReplay/kCompare: entries_ index where this step ends
  std::vector<char> row_differs_;        // this step's rows: any differing decision yet
  std::map<std::array<int64_t, 5>, std::vector<float>> fp4_rows_;  // (step, layer, mlp, input, row)
  DecisionStats stats_;
};

// The routing weights cpu::RouteRow gives a row whose chosen experts are `experts` [top_k]
// (the pinned ones, -1 never: REQUIRES valid ids): s = sigmoid(logits); w = s[e] / (sum s[chosen]
// + 1e-20) when norm_topk_prob, then * routed_scaling_factor, the sum in the order given. With
// RouteRow's own picks this is RouteRow's weights exactly.
void PinnedRouteWeights(const float* logits, std::span<const int32_t> experts, const kernels::cpu::RoutingParams& p,
                        float* weights);

// Which log and which layer a decision site reports to; log == nullptr: off (every serving path).
// The CPU backend also shows ffn_inputs the layer's MLP inputs (calibration).
struct DecisionTap {
  DecisionLog* log = nullptr;
  int64_t layer = -1;
  FfnObserver* ffn_inputs = nullptr;  // sees the layer's MLP inputs (model/blocks/ffn.h); null: none
};

}  // namespace ferry::model
