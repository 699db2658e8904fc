// An independent float64 reading of glm_moe_dsa, written the way transformers computes it:
// the whole sequence at once, no cache, keys and values expanded through kv_b_proj, the indexer
// as a mask. Slow and simple; it checks the engine on configurations no golden covers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::testing {

// Logits [tokens.size(), vocab] of a teacher-forced forward over `tokens`.
std::vector<double> DsaOracleLogits(const std::string& checkpoint_dir, const std::vector<int32_t>& tokens);

}  // namespace ferry::testing
