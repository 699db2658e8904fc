// The GB10 block-scaled FP4 mma's layout (kernels/nvfp4_mma_layout.h) and its host emulator
// (kernels/cpu/nvfp4_mma_emulator.h) without a device: the fragment maps cover each matrix once,
// the emulator over fragments built from known operands equals the CPU twin (bit for bit: the
// same order), and the harness' host form of the sm_121a kernel (gemv_w4a4_sm121.cu): packed
// weights and quantized activations read into each lane's registers by the kernel's own loader
// (w4a4::LoadLaneOperands), run through the emulator step by step as the kernel runs its mmas,
// scaled as its epilogue does, equal cpu::LinearW4A4 bit for bit.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/nvfp4_mma_emulator.h"
#include "kernels/cpu/nvfp4_w4a4.h"
#include "kernels/nvfp4_mma_layout.h"
#include "tests/catch.h"
#include "tests/kernels/nvfp4_random.h"

namespace ferry::kernels {
namespace {

namespace l = w4a4;

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST_CASE("w4a4 mma layout: every A B and D element sits in exactly one lane register", "[nvfp4][w4a4]") {
  std::vector<int> a(16 * 64, 0), b(64 * 8, 0), d(16 * 8, 0), sfa(16, 0), sfb(8, 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 8; ++i) ++a[l::AElement(lane, j, i).row * 64 + l::AElement(lane, j, i).col];
      ++d[l::DElement(lane, j).row * 8 + l::DElement(lane, j).col];
    }
    for (int j = 0; j < 2; ++j) {
      for (int i = 0; i < 8; ++i) ++b[l::BElement(lane, j, i).row * 8 + l::BElement(lane, j, i).col];
    }
    if (l::ScaleALaneRead(lane)) ++sfa[l::ScaleARow(lane)];
    if (l::ScaleBLaneRead(lane)) ++sfb[l::ScaleBCol(lane)];
  }
  for (int n : a) CHECK(n == 1);
  for (int n : b) CHECK(n == 1);
  for (int n : d) CHECK(n == 1);
  for (int n : sfa) CHECK(n == 1);
  for (int n : sfb) CHECK(n == 1);
  // A register's 8 codes are 8 consecutive K of one row (so 4 consecutive ModelOpt code bytes).
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < 4; ++j) {
      CHECK(l::AElement(lane, j, 0).col % 8 == 0);
      CHECK(l::AElement(lane, j, 7).col == l::AElement(lane, j, 0).col + 7);
    }
  }
}

TEST_CASE("w4a4 mma layout: the packed tile is each lane's 16-byte A load and scale word", "[nvfp4][w4a4]") {
  std::vector<int> bytes(l::kTileBytes, 0);
  for (int step = 0; step < l::kTileSteps; ++step) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        const int64_t at = l::CodeWordOffset(step, lane, j);
        CHECK(at == l::CodeWordOffset(step, lane, 0) + 4 * j);  // one 16-byte load
        CHECK(l::CodeWordOffset(step, lane, 0) % 16 == 0);
        for (int k = 0; k < 4; ++k) ++bytes[at + k];
      }
      const int64_t s = l::ScaleWordOffset(lane, step);
      CHECK(s % 4 == 0);
      if (l::ScaleALaneRead(lane)) {
        for (int k = 0; k < 4; ++k) ++bytes[s + k];
        for (int q = 0; q < 4; ++q) {  // the slot holds the row SF_A wants, group q of the step
          const l::Pos p = l::TileScaleSource(l::ScaleSlot(lane), step, q);
          CHECK(p.row == l::ScaleARow(lane));
          CHECK(p.col == 64 * step + 16 * q);
        }
      }
    }
  }
  for (int n : bytes) CHECK(n == 1);
}

// Random operands for `steps` chained mmas: a ModelOpt weight [16, 64 steps] and activations
// [8, 64 steps] quantized by the twin.
struct Operands {
  testing::RandomNvfp4 w;
  std::vector<uint8_t> act_codes, act_scales;
  float input_scale = 0;
};
Operands MakeOperands(int steps, std::mt19937& rng) {
  const int64_t in = 64 * steps;
  Operands op{testing::MakeRandomNvfp4(16, in, rng), {}, {}, 0};
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(8 * in));
  float amax = 0;
  for (float& v : x) v = normal(rng), amax = std::max(amax, std::fabs(v));
  op.input_scale = amax / (6.0f * 448.0f);
  op.act_codes.resize(static_cast<size_t>(8 * in / 2));
  op.act_scales.resize(static_cast<size_t>(8 * in / 16));
  cpu::QuantizeActivationsNvfp4(x.data(), 8, in, op.input_scale, op.act_codes.data(), op.act_scales.data(), in);
  return op;
}
uint8_t Nibble(const std::vector<uint8_t>& codes, int64_t stride, int64_t r, int64_t c) {
  return static_cast<uint8_t>(codes[r * stride / 2 + c / 2] >> (4 * (c % 2)) & 0x0f);
}

TEST_CASE("w4a4 emulator: chained mmas over fragments of random operands equal the CPU twin", "[nvfp4][w4a4]") {
  std::mt19937 rng(121);
  for (int steps : {1, 4, 7}) {
    const int64_t in = 64 * steps;
    const Operands op = MakeOperands(steps, rng);
    float d[32][4] = {};
    for (int s = 0; s < steps; ++s) {
      cpu::MmaNvf4Registers r{};
      for (int lane = 0; lane < 32; ++lane) {  // fragments straight from the fragment maps
        for (int j = 0; j < 4; ++j) {
          for (int i = 0; i < 8; ++i) {
            const l::Pos p = l::AElement(lane, j, i);
            r.a[lane][j] |= static_cast<uint32_t>(Nibble(op.w.codes, in, p.row, 64 * s + p.col)) << (4 * i);
          }
          r.c[lane][j] = d[lane][j];
        }
        for (int j = 0; j < 2; ++j) {
          for (int i = 0; i < 8; ++i) {
            const l::Pos p = l::BElement(lane, j, i);
            r.b[lane][j] |= static_cast<uint32_t>(Nibble(op.act_codes, in, p.col, 64 * s + p.row)) << (4 * i);
          }
        }
        for (int q = 0; q < 4; ++q) {
          r.sfa[lane] |= static_cast<uint32_t>(op.w.scales[l::ScaleARow(lane) * (in / 16) + 4 * s + q]) << (8 * q);
          r.sfb[lane] |= static_cast<uint32_t>(op.act_scales[l::ScaleBCol(lane) * (in / 16) + 4 * s + q]) << (8 * q);
        }
      }
      cpu::EmulateMmaNvf4(r, d);
    }
    std::vector<float> y(8 * 16);
    cpu::LinearW4A4Quantized(op.act_codes.data(), op.act_scales.data(), in, 8, in, op.input_scale, op.w.codes.data(),
                             op.w.scales.data(), op.w.global_scale, 16, y.data());
    const float alpha = op.input_scale * op.w.global_scale;
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        const l::Pos p = l::DElement(lane, j);  // row: weight row, col: input row
        INFO("steps " << steps << " lane " << lane << " register " << j);
        CHECK(SameBits(d[lane][j] * alpha, y[p.col * 16 + p.row]));
      }
    }
  }
}

// The host form of the sm_121a kernel: lane registers read through w4a4::LoadLaneOperands (the
// kernel's loader) from the packed weights and the padded quantized activations, one emulated
// mma a step, K tile by K tile as the kernel's warp runs them, then the epilogue's scaling.
std::vector<float> HostFormGemv(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& act_codes,
                                const std::vector<uint8_t>& act_scales, int64_t rows, int64_t in, int64_t out,
                                float input_scale) {
  const int64_t stride = l::PaddedCols(in);
  const auto load32 = [](const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  };
  std::vector<float> y(static_cast<size_t>(rows * out), NAN);
  for (int64_t rt = 0; rt < l::RowTiles(out); ++rt) {
    float d[32][4] = {};
    for (int64_t kt = 0; kt < l::ColTiles(in); ++kt) {
      const uint8_t* tile = packed.data() + (rt * l::ColTiles(in) + kt) * l::kTileBytes;
      for (int s = 0; s < l::kTileSteps; ++s) {
        const int64_t col0 = kt * l::kTileCols + l::kMmaK * s;
        cpu::MmaNvf4Registers r{};
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t t = l::ScaleBCol(lane);
          const bool has = t < rows;
          const l::LaneOperands o =
              l::LoadLaneOperands(tile, has ? act_codes.data() + t * stride / 2 : nullptr,
                                  has ? act_scales.data() + t * stride / 16 : nullptr, lane, s, col0, load32);
          std::memcpy(r.a[lane], o.a, sizeof(o.a));
          std::memcpy(r.b[lane], o.b, sizeof(o.b));
          r.sfa[lane] = o.sfa;
          r.sfb[lane] = o.sfb;
          std::memcpy(r.c[lane], d[lane], sizeof(d[lane]));
        }
        cpu::EmulateMmaNvf4(r, d);
      }
    }
    float global = 0;
    std::memcpy(&global, packed.data() + l::RowScaleOffset(out, in) + 4 * rt, 4);
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        const l::Pos p = l::DElement(lane, j);
        const int64_t o = rt * l::kTileRows + p.row;
        if (o < out && p.col < rows) y[p.col * out + o] = d[lane][j] * (input_scale * global);
      }
    }
  }
  return y;
}

TEST_CASE("w4a4 host form: the kernel's lane loads over packed weights equal the CPU twin", "[nvfp4][w4a4]") {
  std::mt19937 rng(1210);
  struct Shape {
    int64_t rows, in, out;
  };
  for (const Shape sh : {Shape{1, 256, 16}, Shape{5, 272, 40}, Shape{8, 1040, 33}}) {
    const testing::RandomNvfp4 w = testing::MakeRandomNvfp4(sh.out, sh.in, rng, /*negative_scales=*/true);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(sh.rows * sh.in));
    float amax = 0;
    for (float& v : x) v = normal(rng), amax = std::max(amax, std::fabs(v));
    const float input_scale = amax / (6.0f * 448.0f) * 0.8f;
    std::vector<uint8_t> packed(static_cast<size_t>(l::PackedBytes(sh.out, sh.in)), 0xcd);
    cpu::PackW4A4(w.codes.data(), w.scales.data(), w.global_scale, sh.out, sh.in, packed.data(), sh.out, 0);
    const int64_t stride = l::PaddedCols(sh.in);
    std::vector<uint8_t> act_codes(static_cast<size_t>(sh.rows * stride / 2)), act_scales(static_cast<size_t>(sh.rows * stride / 16));
    cpu::QuantizeActivationsNvfp4(x.data(), sh.rows, sh.in, input_scale, act_codes.data(), act_scales.data(), stride);
    const std::vector<float> got = HostFormGemv(packed, act_codes, act_scales, sh.rows, sh.in, sh.out, input_scale);
    std::vector<float> want(static_cast<size_t>(sh.rows * sh.out));
    cpu::LinearW4A4(x.data(), sh.rows, sh.in, input_scale, w.codes.data(), w.scales.data(), w.global_scale, sh.out,
                    want.data());
    int differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += SameBits(got[i], want[i]) ? 0 : 1;
    INFO("rows " << sh.rows << " in " << sh.in << " out " << sh.out);
    CHECK(differ == 0);
    // Not vacuous: the outputs are not all zero.
    int nonzero = 0;
    for (float v : want) nonzero += v != 0.0f ? 1 : 0;
    CHECK(nonzero > static_cast<int>(want.size()) / 2);
  }
}

}  // namespace
}  // namespace ferry::kernels
