// glm5_next (GLM-5.3-Flash) on the CPU reference against the transformers goldens
// (tests/data/glm5next-tiny), and its own invariants: the chunked and recurrent KDA forms,
// prompts in pieces, batching, and snapshots of the recurrent state.
#include "model/families/glm5_next.h"

#include <cmath>
#include <memory>
#include <string>

#include "model/families/causal_lm.h"
#include "model/families/generate.h"
#include "model/golden/golden.h"
#include "model/checkpoint/safetensors.h"
#include "tests/catch.h"
#include "tests/testing/tiny_models.h"

namespace ferry::model {
namespace {

const std::string kDir = std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny";

std::unique_ptr<Glm5Next> LoadTiny() { return ferry::testing::LoadAs<Glm5Next>(kDir); }
std::vector<GoldenPrompt> Goldens() { return ferry::testing::GoldensOf(kDir); }

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

// Logits of every position of `ids` fed in pieces of `chunk` tokens.
std::vector<float> Prefill(Glm5Next& m, const std::vector<int32_t>& ids, size_t chunk, int64_t kda_chunk) {
  auto seq = m.NewSequence();
  std::vector<float> all;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    const size_t n = std::min(chunk, ids.size() - i);
    ForwardSegment seg{seq.get(), std::span<const int32_t>(ids.data() + i, n), true};
    auto out = m.ForwardWithOptions(std::span<const ForwardSegment>(&seg, 1), nullptr, kda_chunk);
    REQUIRE(out.ok());
    all.insert(all.end(), out->logits.begin(), out->logits.end());
  }
  return all;
}

TEST_CASE("glm5_next matches the transformers goldens - prefill and decode", "[glm5_next][golden]") {
  auto m = LoadTiny();
  for (const GoldenPrompt& g : Goldens()) {
    for (int64_t chunk : {0, 7}) {
      auto r = CheckGoldenPrompt(*m, g, 1e-3f, chunk);
      REQUIRE(r.ok());
      INFO(g.name << " prefill chunk " << chunk << ": prefill err " << r->max_prefill_error << ", decode err "
                  << r->max_decode_error);
      CHECK(r->tokens_equal);
      CHECK(r->max_prefill_error <= 1e-3f);
      CHECK(r->max_decode_error <= 1e-3f);
    }
  }
}

TEST_CASE("glm5_next hidden states match transformers layer by layer", "[glm5_next][golden]") {
  auto m = LoadTiny();
  auto golden = SafetensorsFile::Open(kDir + "/golden.safetensors");
  REQUIRE(golden.ok());
  const GoldenPrompt g = Goldens()[1];
  std::vector<int32_t> ids = g.ids;
  ids.insert(ids.end(), g.greedy.begin(), g.greedy.end());
  auto seq = m->NewSequence();
  ForwardSegment seg{seq.get(), ids, true};
  std::vector<std::vector<float>> hidden;
  REQUIRE(m->ForwardWithOptions(std::span<const ForwardSegment>(&seg, 1), &hidden).ok());
  REQUIRE(hidden.size() == 9);
  for (size_t L = 0; L < hidden.size(); ++L) {
    const TensorInfo* t = golden->Find("p1.hidden." + std::to_string(L));
    REQUIRE(t != nullptr);
    REQUIRE(t->numel() == static_cast<int64_t>(hidden[L].size()));
    const float* want = reinterpret_cast<const float*>(golden->Data(*t));
    double num = 0, den = 0;
    for (size_t i = 0; i < hidden[L].size(); ++i) {
      num += (hidden[L][i] - want[i]) * (hidden[L][i] - want[i]);
      den += double(want[i]) * want[i];
    }
    INFO("hidden." << L << " relative error " << std::sqrt(num / den));
    CHECK(std::sqrt(num / den) < 1e-5);
  }
}

TEST_CASE("glm5_next: the chunked and recurrent KDA forms agree - prompts in pieces agree",
          "[glm5_next]") {
  auto m = LoadTiny();
  const GoldenPrompt g = Goldens()[2];  // 90 tokens: two KDA chunks, a sparse indexer
  const std::vector<float> whole = Prefill(*m, g.ids, g.ids.size(), Glm5Next::kKdaChunk);
  const std::vector<float> recurrent = Prefill(*m, g.ids, g.ids.size(), 0);
  CHECK(MaxAbsDiff(whole, recurrent) < 3e-4);
  CHECK(MaxAbsDiff(whole, Prefill(*m, g.ids, 1, Glm5Next::kKdaChunk)) < 3e-4);
  CHECK(MaxAbsDiff(whole, Prefill(*m, g.ids, 7, Glm5Next::kKdaChunk)) < 3e-4);
  CHECK(MaxAbsDiff(whole, Prefill(*m, g.ids, 19, Glm5Next::kKdaChunk)) < 3e-4);
  // Pieces cut at KDA chunk boundaries compute exactly what one piece does.
  CHECK(Prefill(*m, g.ids, Glm5Next::kKdaChunk, Glm5Next::kKdaChunk) == whole);
  // One token at a time is the recurrent form, bit for bit.
  CHECK(Prefill(*m, g.ids, 1, Glm5Next::kKdaChunk) == recurrent);
}

TEST_CASE("glm5_next: a batched step equals each segment run alone", "[glm5_next]") {
  auto m = LoadTiny();
  const auto goldens = Goldens();
  std::vector<std::vector<float>> alone;
  for (const GoldenPrompt& g : goldens) alone.push_back(Prefill(*m, g.ids, g.ids.size(), Glm5Next::kKdaChunk));
  std::vector<std::unique_ptr<SequenceState>> seqs;
  std::vector<ForwardSegment> step;
  for (const GoldenPrompt& g : goldens) {
    seqs.push_back(m->NewSequence());
    step.push_back(ForwardSegment{seqs.back().get(), g.ids, true});
  }
  auto together = m->Forward(step);
  REQUIRE(together.ok());
  const int64_t V = together->vocab;
  for (size_t s = 0; s < goldens.size(); ++s) {
    std::vector<float> part(together->logits.begin() + together->first_row[s] * V,
                            together->logits.begin() + (together->first_row[s] + goldens[s].ids.size()) * V);
    CHECK(part == alone[s]);
  }
}

TEST_CASE("glm5_next: a snapshot after the prompt restores the same continuation", "[glm5_next]") {
  auto m = LoadTiny();
  const ModelConfig& c = m->config();
  const GoldenPrompt g = Goldens()[1];
  auto seq = m->NewSequence();
  auto* next = dynamic_cast<Conversation*>(seq.get());
  REQUIRE(next != nullptr);

  // The fixed part: conv tails (K-1 inputs of q, k, v) and S for each of the 6 KDA layers.
  const int64_t C = c.linear_num_heads * c.linear_head_dim;
  const int64_t per_layer = (3 * (c.linear_conv_kernel_dim - 1) * C +
                             c.linear_num_heads * c.linear_head_dim * c.linear_head_dim) * 4;
  CHECK(seq->fixed_bytes() == 6 * per_layer);
  CHECK(seq->fixed_bytes() == 125952);

  ForwardSegment p{seq.get(), g.ids, false};
  auto first = m->Forward(std::span<const ForwardSegment>(&p, 1));
  REQUIRE(first.ok());
  seq->KeepSnapshot();
  const int64_t n = static_cast<int64_t>(g.ids.size());
  CHECK(next->SnapshotPositions() == std::vector<int64_t>{n});

  auto decode = [&](std::vector<float> last) {
    std::vector<int32_t> toks;
    std::vector<float> all;
    for (int i = 0; i < 12; ++i) {
      const int32_t t = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      toks.push_back(t);
      ForwardSegment d{seq.get(), std::span<const int32_t>(&toks.back(), 1), false};
      auto out = m->Forward(std::span<const ForwardSegment>(&d, 1));
      REQUIRE(out.ok());
      last = out->logits;
      all.insert(all.end(), last.begin(), last.end());
    }
    return std::make_pair(toks, all);
  };
  const auto run1 = decode(first->logits);
  CHECK(run1.first == g.greedy);
  CHECK(seq->length() == n + 12);

  // No snapshot at n + 5 or n - 3: refused, nothing changes.
  for (int64_t bad : {n + 5, n - 3}) {
    absl::Status st = seq->RewindTo(bad);
    REQUIRE_FALSE(st.ok());
    CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(st.message()).find("snapshots only at [" + std::to_string(n) + "]") != std::string::npos);
    CHECK(seq->length() == n + 12);
  }
  CHECK(seq->RewindTo(n + 13).code() == absl::StatusCode::kOutOfRange);

  REQUIRE(seq->RewindTo(n).ok());
  CHECK(seq->length() == n);
  const auto run2 = decode(first->logits);
  CHECK(run2.first == run1.first);
  CHECK(run2.second == run1.second);

  // A clone carries the snapshot too and continues independently.
  auto forked = seq->Clone();
  REQUIRE(forked.ok());
  auto& fork = *forked;
  REQUIRE(fork->RewindTo(n).ok());
  CHECK(fork->length() == n);
  CHECK(seq->length() == n + 12);
}

TEST_CASE("glm_moe_dsa: rewinding per-token caches needs no snapshot", "[glm_moe_dsa]") {
  auto m = LoadCausalLM(std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny");
  REQUIRE(m.ok());
  auto g = ReadGolden(std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny/golden.safetensors");
  REQUIRE(g.ok());
  const GoldenPrompt& p = (*g)[2];
  auto seq = (*m)->NewSequence();
  CHECK(seq->fixed_bytes() == 0);
  ForwardSegment whole{seq.get(), p.ids, true};
  auto a = (*m)->Forward(std::span<const ForwardSegment>(&whole, 1));
  REQUIRE(a.ok());
  // Rewind to 40 and refeed the rest: the logits of positions 40.. are the same bits.
  REQUIRE(seq->RewindTo(40).ok());
  ForwardSegment rest{seq.get(), std::span<const int32_t>(p.ids.data() + 40, p.ids.size() - 40), true};
  auto b = (*m)->Forward(std::span<const ForwardSegment>(&rest, 1));
  REQUIRE(b.ok());
  CHECK(std::vector<float>(a->logits.begin() + 40 * a->vocab, a->logits.end()) == b->logits);
}

}  // namespace
}  // namespace ferry::model
