#include "tests/model/cuda_carry_check.h"

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "model/cache/conversation.h"
#include "model/cuda/device_pages.h"
#include "model/blocks/mla.h"
#include "model/cache/split_rows.h"
#include "tests/testing/thread_collective.h"

namespace ferry::model {

// Carries of device pages (model/cache/split_rows.h's CarryLatentRows through PageMemory::Read/Write):
// a conversation's latent rows on rank 0 (a pattern written straight into its pages, regions of
// different widths, one empty) carried to a fresh table on rank 1 over a two-thread collective,
// in pieces smaller than a row; rank 1 must read back every row's bytes. 0 when it does.
int CarryMain(cuda::Precision precision) {
  const char* name = precision == cuda::Precision::kF32 ? "f32" : "bf16";
  const std::vector<PageRegion> regions = {PageRegion(72), PageRegion(0), PageRegion(40)};
  const int64_t tokens = 45;  // two full pages of 16 and a partial one
  std::shared_ptr<PageArena> keys[2], latent[2];
  std::unique_ptr<Conversation> conv[2];
  for (int r = 0; r < 2; ++r) {
    auto k = cuda::DeviceArena({PageRegion(8)}, CacheOptions{16, -1}, precision);
    auto l = cuda::DeviceArena(regions, CacheOptions{16, -1}, precision);
    if (!k.ok() || !l.ok()) {
      printf("carry %s: %s\n", name, std::string((k.ok() ? l.status() : k.status()).message()).c_str());
      return 1;
    }
    keys[r] = *k;
    latent[r] = *l;
    conv[r] = std::make_unique<Conversation>(SplitRows(keys[r], latent[r], r), 0, cuda::DeviceStateMemory());
    if (absl::Status st = conv[r]->split_rows()->latent().Reserve(tokens); !st.ok()) {
      printf("carry %s: %s\n", name, std::string(st.message()).c_str());
      return 1;
    }
  }
  // A pattern in every byte of rank 0's pages, rank 1's pages zeroed.
  const int64_t page_bytes = latent[0]->page_bytes();
  for (int32_t p : conv[0]->split_rows()->latent().pages()) {
    std::vector<uint8_t> bytes(static_cast<size_t>(page_bytes));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 7 + static_cast<size_t>(p) * 13 + 1) & 0xff);
    (void)latent[0]->memory().Write(p, 0, bytes.data(), page_bytes);
  }
  for (int32_t p : conv[1]->split_rows()->latent().pages()) {
    std::vector<uint8_t> zero(static_cast<size_t>(page_bytes), 0);
    (void)latent[1]->memory().Write(p, 0, zero.data(), page_bytes);
  }
  const int64_t piece = FetchPieceFloats();
  SetFetchPieceFloats(7);  // pieces that cut rows
  ferry::testing::ThreadGroup group(2);
  absl::Status status[2];
  OwnerSplitStats stats[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const LatentCarry carry{r == 0 ? conv[0].get() : nullptr, r == 1 ? conv[1].get() : nullptr, 0, 1, tokens};
      status[r] = CarryLatentRows(std::span<const LatentCarry>(&carry, 1), TensorParallel{r, 2, group.rank(r)},
                                  &stats[r]);
    });
  }
  for (std::thread& t : threads) t.join();
  SetFetchPieceFloats(piece);
  for (int r = 0; r < 2; ++r) {
    if (!status[r].ok()) {
      printf("carry %s: rank %d: %s\n", name, r, std::string(status[r].message()).c_str());
      return 1;
    }
  }
  // Every carried row, byte for byte.
  const int64_t elem = latent[0]->memory().elem_bytes();
  int64_t rows = 0, wrong = 0;
  for (int64_t l = 0; l < static_cast<int64_t>(regions.size()); ++l) {
    const int64_t row_bytes = latent[0]->width(l) * elem;
    if (row_bytes == 0) continue;
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<uint8_t> a(static_cast<size_t>(row_bytes)), b(a.size());
      const int64_t off = latent[0]->region_offset(l) * elem + (t % 16) * row_bytes;
      (void)latent[0]->memory().Read(conv[0]->split_rows()->latent().pages()[static_cast<size_t>(t / 16)], off, a.data(), row_bytes);
      (void)latent[1]->memory().Read(conv[1]->split_rows()->latent().pages()[static_cast<size_t>(t / 16)], off, b.data(), row_bytes);
      ++rows;
      wrong += a != b ? 1 : 0;
    }
  }
  printf("carry %s: %lld of %lld device rows arrived as sent (%lld tokens carried): %s\n", name,
         static_cast<long long>(rows - wrong), static_cast<long long>(rows), static_cast<long long>(stats[1].rows_carried),
         wrong == 0 && stats[1].rows_carried == tokens ? "pass" : "FAIL");
  return wrong == 0 && stats[1].rows_carried == tokens ? 0 : 1;
}

}  // namespace ferry::model
