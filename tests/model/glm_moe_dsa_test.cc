// glm_moe_dsa on the CPU reference against the transformers goldens (tests/data/glm-dsa-tiny),
// and the engine's own invariants: chunked prefill, batching and bad input.
#include "model/families/glm_moe_dsa.h"

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "model/families/causal_lm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sampling.h"
#include "model/golden/golden.h"
#include "model/checkpoint/safetensors.h"
#include "tests/catch.h"
#include "tests/testing/tiny_models.h"
#include "tests/testing/files.h"

namespace ferry::model {
namespace {

const std::string kDir = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny";

std::unique_ptr<GlmMoeDsa> LoadTiny() { return ferry::testing::LoadAs<GlmMoeDsa>(kDir); }
std::vector<GoldenPrompt> Goldens() { return ferry::testing::GoldensOf(kDir); }

// Logits of every position of `ids` fed in pieces of `chunk` tokens.
std::vector<float> Prefill(CausalLM& m, const std::vector<int32_t>& ids, size_t chunk) {
  auto seq = m.NewSequence();
  std::vector<float> all;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    const size_t n = std::min(chunk, ids.size() - i);
    ForwardSegment seg{seq.get(), std::span<const int32_t>(ids.data() + i, n), true};
    auto out = m.Forward(std::span<const ForwardSegment>(&seg, 1));
    REQUIRE(out.ok());
    all.insert(all.end(), out->logits.begin(), out->logits.end());
  }
  REQUIRE(seq->length() == static_cast<int64_t>(ids.size()));
  return all;
}

TEST_CASE("glm_moe_dsa matches the transformers goldens - prefill and decode", "[glm_moe_dsa][golden]") {
  auto m = LoadTiny();
  for (const GoldenPrompt& g : Goldens()) {
    auto r = CheckGoldenPrompt(*m, g, 1e-3f);
    REQUIRE(r.ok());
    INFO(g.name << " prefill err " << r->max_prefill_error << " decode err " << r->max_decode_error);
    CHECK(r->tokens_equal);
    CHECK(r->max_prefill_error <= 1e-3f);
    CHECK(r->max_decode_error <= 1e-3f);
    CHECK(r->passed);
  }
}

TEST_CASE("glm_moe_dsa hidden states match transformers layer by layer", "[glm_moe_dsa][golden]") {
  auto m = LoadTiny();
  auto golden = SafetensorsFile::Open(kDir + "/golden.safetensors");
  REQUIRE(golden.ok());
  const GoldenPrompt g = Goldens()[1];
  std::vector<int32_t> ids = g.ids;
  ids.insert(ids.end(), g.greedy.begin(), g.greedy.end());
  auto seq = m->NewSequence();
  ForwardSegment seg{seq.get(), ids, true};
  std::vector<std::vector<float>> hidden;
  auto out = m->ForwardWithHidden(std::span<const ForwardSegment>(&seg, 1), &hidden);
  REQUIRE(out.ok());
  REQUIRE(hidden.size() == 5);
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

TEST_CASE("glm_moe_dsa: a prompt fed in pieces gives the same logits bit for bit", "[glm_moe_dsa]") {
  auto m = LoadTiny();
  const GoldenPrompt g = Goldens()[2];  // 90 tokens: the indexer is sparse past 16
  const std::vector<float> whole = Prefill(*m, g.ids, g.ids.size());
  for (size_t chunk : {1, 7, 16, 17, 64}) {
    INFO("chunk " << chunk);
    CHECK(Prefill(*m, g.ids, chunk) == whole);
  }
}

TEST_CASE("glm_moe_dsa: a batched step equals each segment run alone", "[glm_moe_dsa]") {
  auto m = LoadTiny();
  const auto goldens = Goldens();
  // Alone: each prompt's prefill, then one decode token.
  std::vector<std::vector<float>> alone_prefill, alone_decode;
  for (const GoldenPrompt& g : goldens) {
    auto seq = m->NewSequence();
    ForwardSegment p{seq.get(), g.ids, true};
    auto a = m->Forward(std::span<const ForwardSegment>(&p, 1));
    REQUIRE(a.ok());
    alone_prefill.push_back(a->logits);
    ForwardSegment d{seq.get(), std::span<const int32_t>(&g.greedy[0], 1), false};
    auto b = m->Forward(std::span<const ForwardSegment>(&d, 1));
    REQUIRE(b.ok());
    alone_decode.push_back(b->logits);
  }
  // Together: all three prefills in one step, then a step mixing two decodes with a prefill of
  // a fresh copy of prompt 0.
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
    CHECK(part == alone_prefill[s]);
  }
  auto fresh = m->NewSequence();
  std::vector<ForwardSegment> mixed = {
      ForwardSegment{seqs[1].get(), std::span<const int32_t>(&goldens[1].greedy[0], 1), false},
      ForwardSegment{fresh.get(), goldens[0].ids, true},
      ForwardSegment{seqs[2].get(), std::span<const int32_t>(&goldens[2].greedy[0], 1), false},
  };
  auto mix = m->Forward(mixed);
  REQUIRE(mix.ok());
  CHECK(std::vector<float>(mix->logits.begin(), mix->logits.begin() + V) == alone_decode[1]);
  CHECK(std::vector<float>(mix->logits.begin() + mix->first_row[1] * V,
                           mix->logits.begin() + mix->first_row[2] * V) == alone_prefill[0]);
  CHECK(std::vector<float>(mix->logits.begin() + mix->first_row[2] * V, mix->logits.end()) == alone_decode[2]);
}

class ForeignState final : public SequenceState {
 public:
  int64_t length() const override { return 0; }
  int64_t bytes() const override { return 0; }
  absl::Status RewindTo(int64_t) override { return absl::OkStatus(); }
  absl::Status AdoptPages(std::span<const int32_t>) override { return absl::OkStatus(); }
  std::vector<int32_t> Pages() const override { return {}; }
  absl::StatusOr<std::unique_ptr<SequenceState>> ForkAt(int64_t, int32_t) const override {
    return std::unique_ptr<SequenceState>(std::make_unique<ForeignState>());
  }
};

TEST_CASE("glm_moe_dsa: bad steps are refused and change no state", "[glm_moe_dsa]") {
  auto m = LoadTiny();
  auto seq = m->NewSequence();
  const std::vector<int32_t> ok = {3, 4, 5};
  ForwardSegment first{seq.get(), ok, false};
  REQUIRE(m->Forward(std::span<const ForwardSegment>(&first, 1)).ok());
  const int64_t bytes = seq->bytes();

  auto refused = [&](std::vector<ForwardSegment> step, const std::string& what) {
    auto r = m->Forward(step);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(r.status().message()).find(what) != std::string::npos);
    CHECK(seq->length() == 3);
    CHECK(seq->bytes() == bytes);
  };
  const std::vector<int32_t> bad = {7, 384};
  const std::vector<int32_t> neg = {-1};
  const std::vector<int32_t> none;
  ForeignState foreign;
  refused({ForwardSegment{seq.get(), bad, false}}, "token 1 is 384, outside the vocabulary [0, 384)");
  refused({ForwardSegment{seq.get(), neg, false}}, "token 0 is -1");
  refused({ForwardSegment{seq.get(), none, false}}, "segment 0: no tokens");
  refused({ForwardSegment{seq.get(), ok, false}, ForwardSegment{seq.get(), ok, false}},
          "segment 1: its state is already in this step");
  refused({ForwardSegment{seq.get(), ok, false}, ForwardSegment{&foreign, ok, false}},
          "segment 1: state is not a glm_moe_dsa sequence");
  // A conversation of another instance of the same model: its pages are in that model's arenas.
  auto other = LoadTiny();
  auto elsewhere = other->NewSequence();
  refused({ForwardSegment{seq.get(), ok, false}, ForwardSegment{elsewhere.get(), ok, false}},
          "segment 1: state is not a glm_moe_dsa sequence of this model");
  CHECK(elsewhere->length() == 0);
}

TEST_CASE("glm_moe_dsa: a checkpoint that disagrees with its config is refused by name", "[glm_moe_dsa]") {
  ferry::testing::TempDir dir;
  auto cfg = ReadJsonFile(kDir + "/config.json");
  REQUIRE(cfg.ok());
  (*cfg)["q_lora_rank"] = 95;
  ferry::testing::WriteFile(dir.File("config.json"), cfg->dump());
  std::filesystem::create_symlink(std::filesystem::absolute(kDir + "/model.safetensors"),
                                  dir.File("model.safetensors"));
  auto m = LoadCausalLM(dir.path());
  REQUIRE_FALSE(m.ok());
  const std::string e(m.status().message());
  CHECK(e.find("model.safetensors: tensor 'model.layers.0.self_attn.q_a_proj.weight' has shape [96, 128] "
               "but the config implies [95, 128]") != std::string::npos);
}

TEST_CASE("sampled segments come back as their token - without logits - in both families", "[model]") {
  for (const std::string& dir : {kDir, std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny"}) {
    INFO(dir);
    auto m = LoadCausalLM(dir);
    REQUIRE(m.ok());
    const std::vector<GoldenPrompt> g = ferry::testing::GoldensOf(dir);
    // Each prompt three times in one step: asking for logits, for the greedy token with 5 top
    // log-probabilities, and for a token sampled at T = 0.8, top-k 50, top-p 0.9.
    std::vector<std::unique_ptr<SequenceState>> seqs;
    std::vector<ForwardSegment> segs;
    kernels::RowSampler greedy, warm;
    greedy.top_logprobs = 5;
    warm.temperature = 0.8f;
    warm.top_k = 50;
    warm.top_p = 0.9f;
    for (size_t i = 0; i < g.size(); ++i) {
      for (int k = 0; k < 3; ++k) {
        seqs.push_back((*m)->NewSequence());
        warm.uniform = 0.37 + 0.1 * static_cast<double>(i);
        std::optional<kernels::RowSampler> sample;
        if (k > 0) sample = k == 1 ? greedy : warm;
        segs.push_back({seqs.back().get(), g[i].ids, false, sample});
      }
    }
    auto out = (*m)->Forward(segs);
    REQUIRE(out.ok());
    REQUIRE(out->picks.size() == segs.size());
    CHECK(out->logits.size() == g.size() * static_cast<size_t>(out->vocab));
    for (size_t s = 0; s < segs.size(); s += 3) {
      CHECK(out->picks[s].token == -1);
      CHECK(out->first_row[s + 1] == -1);
      CHECK(out->first_row[s + 2] == -1);
      const float* logits = out->logits.data() + out->first_row[s] * out->vocab;
      const kernels::SampledToken want_greedy = kernels::cpu::SampleRow(logits, out->vocab, *segs[s + 1].sample);
      CHECK(out->picks[s + 1].token == g[s / 3].greedy[0]);
      CHECK(out->picks[s + 1].token == want_greedy.token);
      REQUIRE(out->picks[s + 1].n_top == 5);
      CHECK(out->picks[s + 1].top_ids[0] == want_greedy.token);
      for (int j = 0; j < 5; ++j) {
        CHECK(out->picks[s + 1].top_ids[j] == want_greedy.top_ids[j]);
        CHECK(out->picks[s + 1].top_logprobs[j] == want_greedy.top_logprobs[j]);
      }
      CHECK(out->picks[s + 1].logprob == want_greedy.logprob);
      CHECK(out->picks[s + 1].logprob <= 0.0f);
      CHECK(out->picks[s + 2].token == kernels::cpu::SampleRow(logits, out->vocab, *segs[s + 2].sample).token);
    }
  }
}

}  // namespace
}  // namespace ferry::model
