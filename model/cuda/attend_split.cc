#include "model/cuda/attend_split.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"
#include "model/blocks/mla.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

namespace {

// Host staging of device values for Collective::Exchange, which moves 4-byte words: `n` values
// of T take Words(n) of them (bf16 bits travel as they are, two a word).
template <typename T>
int64_t Words(int64_t n) {
  return (n * static_cast<int64_t>(sizeof(T)) + 3) / 4;
}

// Times one exchange into stats.
absl::Status TimedExchange(const TensorParallel& tp, const std::vector<std::span<const float>>& send,
                           const std::vector<std::span<float>>& recv, OwnerSplitStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  FERRY_RETURN_IF_ERROR(tp.comm->Exchange(send, recv));
  stats->exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return absl::OkStatus();
}

// A CSR selection of the rows `rows` (ids into the step's selection, each row's tokens mapped
// by `token`), or of all R rows with only `rows` non-empty when `all` (the rest attend nothing).
template <typename Map>
void CsrOf(const std::vector<int64_t>& rows, int64_t R, bool all, const std::vector<int32_t>& offsets,
           const std::vector<int32_t>& sel, Map token, std::vector<int32_t>* out_off, std::vector<int32_t>* out_sel) {
  out_off->assign(1, 0);
  out_sel->clear();
  auto add = [&](int64_t r) {
    for (int32_t j = offsets[r]; j < offsets[r + 1]; ++j) out_sel->push_back(token(r, sel[j]));
  };
  if (all) {
    size_t k = 0;
    for (int64_t r = 0; r < R; ++r) {
      if (k < rows.size() && rows[k] == r) {
        add(r);
        ++k;
      }
      out_off->push_back(static_cast<int32_t>(out_sel->size()));
    }
  } else {
    for (int64_t r : rows) {
      add(r);
      out_off->push_back(static_cast<int32_t>(out_sel->size()));
    }
  }
}

}  // namespace

absl::Status ReduceOverGroup(const TensorParallel& tp, float* x, int64_t n, std::vector<float>* staging) {
  if (tp.world == 1) return absl::OkStatus();
  if (tp.comm->device_buffers()) return tp.Reduce(x, n);
  staging->resize(static_cast<size_t>(n));
  FERRY_RETURN_IF_ERROR(cu::CopyToHost(staging->data(), x, staging->size() * sizeof(float)));
  FERRY_RETURN_IF_ERROR(tp.Reduce(staging->data(), n));
  return cu::CopyToDevice(x, staging->data(), staging->size() * sizeof(float));
}

template <typename T>
absl::Status AttendSplitCuda(SplitScratch& scratch, const ModelConfig& c, int64_t heads, const T* q_abs,
                             const T* q_pe, int64_t R, const RowOwners& owners, const TensorParallel& tp,
                             const act::Cache<T>& latent, const int32_t* sel_dev, const int32_t* offsets_dev,
                             T* o_lat, OwnerSplitStats* stats) {
  const int64_t H = heads, L = c.kv_lora_rank, P = c.qk_rope_head_dim, W = L + P;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.qk_nope_head_dim + P));
  const int world = tp.world, me = tp.rank;
  Workspace& ws = scratch.device;
  FERRY_RETURN_IF_ERROR(ws.Reset());
  auto upload_ids = [&](const std::vector<int32_t>& v) -> absl::StatusOr<int32_t*> {
    FERRY_ASSIGN_OR_RETURN(int32_t * d, ws.Take<int32_t>(static_cast<int64_t>(v.size())));
    if (!v.empty()) FERRY_RETURN_IF_ERROR(cu::CopyToDevice(d, v.data(), v.size() * sizeof(int32_t)));
    return d;
  };

  // The step's selections and latent tables on the host: the plan needs them.
  std::vector<int32_t>& offsets = scratch.offsets;
  std::vector<int32_t>& sel = scratch.sel;
  std::vector<int32_t>& table = scratch.table;
  offsets.resize(static_cast<size_t>(R + 1));
  FERRY_RETURN_IF_ERROR(cu::CopyToHost(offsets.data(), offsets_dev, offsets.size() * sizeof(int32_t)));
  sel.resize(static_cast<size_t>(offsets[R]));
  if (!sel.empty()) FERRY_RETURN_IF_ERROR(cu::CopyToHost(sel.data(), sel_dev, sel.size() * sizeof(int32_t)));
  const int64_t T_ = latent.table_stride;
  table.resize(static_cast<size_t>(R * T_));
  if (!table.empty()) {
    FERRY_RETURN_IF_ERROR(cu::CopyToHost(table.data(), latent.page_table, table.size() * sizeof(int32_t)));
  }
  std::vector<std::vector<int32_t>> rows_sel(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) rows_sel[r].assign(sel.begin() + offsets[r], sel.begin() + offsets[r + 1]);
  const SplitPlan plan = PlanSplit(owners.owner, owners.held, owners.fetch, owners.group, rows_sel, world, me);
  const auto identity = [](int64_t, int32_t t) { return t; };
  const int64_t orow = H * L;

  // This rank's own rows, over its own pages (the other rows attend nothing here).
  {
    std::vector<int32_t> off, s;
    CsrOf(plan.mine, R, /*all=*/true, offsets, sel, identity, &off, &s);
    FERRY_ASSIGN_OR_RETURN(int32_t * d_off, upload_ids(off));
    FERRY_ASSIGN_OR_RETURN(int32_t * d_sel, upload_ids(s));
    if (!plan.mine.empty()) {
      FERRY_RETURN_IF_ERROR(act::MlaDecode(q_abs, q_pe, R, H, L, P, latent, d_sel, d_off, scale, o_lat, nullptr, 0));
    }
  }

  // History fetch: each owner's rows that its conversations' prompt chunks select, to every rank.
  if (!plan.unions.empty()) {
    const int64_t mine_rows = plan.owner_rows[static_cast<size_t>(me)];
    std::vector<std::vector<float>> history(static_cast<size_t>(world));
    history[static_cast<size_t>(me)].resize(static_cast<size_t>(Words<T>(mine_rows * W)));
    if (mine_rows > 0) {
      // Gather the union rows out of this rank's pages: the arena's rows as one array of W-wide
      // rows (a page is whole regions of W-wide rows), index page * (stride / W) + slot.
      if (latent.page_stride % W != 0 || latent.n_pages * (latent.page_stride / W) > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat("the latent arena (", latent.n_pages, " pages of ",
                                                       latent.page_stride, " values) cannot be read as rows of ", W));
      }
      std::vector<int32_t> idx(static_cast<size_t>(mine_rows));
      for (const auto& [g, u] : plan.unions) {
        if (plan.group_owner.at(g) != me) continue;
        const int64_t r0 = plan.group_row.at(g);
        for (size_t i = 0; i < u.size(); ++i) {
          const int64_t t = u[i];
          const int64_t page = table[static_cast<size_t>(r0 * T_ + t / latent.page_rows)];
          idx[static_cast<size_t>(plan.offset.at(g)) + i] =
              static_cast<int32_t>(page * (latent.page_stride / W) + t % latent.page_rows);
        }
      }
      FERRY_ASSIGN_OR_RETURN(int32_t * d_idx, upload_ids(idx));
      FERRY_ASSIGN_OR_RETURN(T * rows, ws.Take<T>(mine_rows * W));
      FERRY_RETURN_IF_ERROR(act::CopyRows(reinterpret_cast<const T*>(latent.arena), W, d_idx, rows, W, nullptr,
                                          mine_rows, W));
      FERRY_RETURN_IF_ERROR(cu::CopyToHost(history[static_cast<size_t>(me)].data(), rows,
                                           static_cast<size_t>(mine_rows * W) * sizeof(T)));
    }
    int64_t most = 0, total = 0;
    std::vector<int64_t> first(static_cast<size_t>(world), 0);  // each owner's first row in `hist`
    for (int q = 0; q < world; ++q) {
      const int64_t n = plan.owner_rows[static_cast<size_t>(q)];
      if (q != me) history[static_cast<size_t>(q)].resize(static_cast<size_t>(Words<T>(n * W)));
      most = std::max(most, Words<T>(n * W));
      first[static_cast<size_t>(q)] = total;
      total += n;
    }
    std::vector<std::span<const float>> send(static_cast<size_t>(world), history[static_cast<size_t>(me)]);
    std::vector<std::span<float>> recv(history.begin(), history.end());
    FERRY_RETURN_IF_ERROR(ExchangeInPieces(tp, send, recv, most, FetchPieceFloats(), stats, &stats->fetch_pieces));
    for (int q = 0; q < world; ++q) {
      if (q != me) stats->rows_fetched += plan.owner_rows[static_cast<size_t>(q)];
    }
    if (!plan.fetched.empty()) {
      // Every owner's rows in one page of one array (its rows a power of two, as a page's are),
      // the fetch rows' selections renumbered into it: the same rows in the same order.
      int64_t padded = 8;
      while (padded < total) padded *= 2;
      FERRY_ASSIGN_OR_RETURN(T * hist, ws.Take<T>(padded * W));
      for (int q = 0; q < world; ++q) {
        const int64_t n = plan.owner_rows[static_cast<size_t>(q)];
        if (n == 0) continue;
        FERRY_RETURN_IF_ERROR(cu::CopyToDevice(hist + first[static_cast<size_t>(q)] * W,
                                               history[static_cast<size_t>(q)].data(),
                                               static_cast<size_t>(n * W) * sizeof(T)));
      }
      FERRY_ASSIGN_OR_RETURN(int32_t * page0, upload_ids(std::vector<int32_t>(static_cast<size_t>(R), 0)));
      act::Cache<T> view{};
      view.arena = reinterpret_cast<decltype(view.arena)>(hist);
      view.n_pages = 1;
      view.page_rows = padded;
      view.page_stride = padded * W;
      view.width = W;
      view.page_table = page0;  // every row's one page
      view.table_stride = 1;
      std::vector<int32_t> off, s;
      CsrOf(plan.fetched, R, /*all=*/true, offsets, sel,
            [&](int64_t r, int32_t t) {
              return static_cast<int32_t>(first[static_cast<size_t>(owners.owner[r])] +
                                          plan.FetchedIndex(owners.group[r], t));
            },
            &off, &s);
      FERRY_ASSIGN_OR_RETURN(int32_t * d_off, upload_ids(off));
      FERRY_ASSIGN_OR_RETURN(int32_t * d_sel, upload_ids(s));
      FERRY_ASSIGN_OR_RETURN(T * out, ws.Take<T>(R * orow));
      FERRY_RETURN_IF_ERROR(act::MlaDecode(q_abs, q_pe, R, H, L, P, view, d_sel, d_off, scale, out, nullptr, 0));
      std::vector<int32_t> rows(plan.fetched.begin(), plan.fetched.end());
      FERRY_ASSIGN_OR_RETURN(int32_t * d_rows, upload_ids(rows));
      FERRY_RETURN_IF_ERROR(
          act::CopyRows(out, orow, d_rows, o_lat, orow, d_rows, static_cast<int64_t>(rows.size()), orow));
    }
  }

  // Queries to their owners: [n, H, L] of q_abs then [n, H, P] of q_pe per owner, in row order.
  // The exchanged buffers are device scratch when the collective takes device buffers (NCCL),
  // else host vectors.
  const bool on_device = tp.comm->device_buffers();
  auto buffer = [&](std::vector<float>& host, int64_t values) -> absl::StatusOr<std::span<float>> {
    const int64_t words = Words<T>(values);
    if (words == 0) return std::span<float>();
    if (!on_device) {
      host.resize(static_cast<size_t>(words));
      return std::span<float>(host);
    }
    FERRY_ASSIGN_OR_RETURN(float* d, ws.Take<float>(words));
    return std::span<float>(d, static_cast<size_t>(words));
  };
  // Device values into an exchanged buffer, and back.
  auto out_of_device = [&](void* dst, const void* src, int64_t values) {
    const size_t bytes = static_cast<size_t>(values) * sizeof(T);
    return on_device ? cu::CopyDeviceToDevice(dst, src, bytes) : cu::CopyToHost(dst, src, bytes);
  };
  auto into_device = [&](void* dst, const void* src, int64_t values) {
    const size_t bytes = static_cast<size_t>(values) * sizeof(T);
    return on_device ? cu::CopyDeviceToDevice(dst, src, bytes) : cu::CopyToDevice(dst, src, bytes);
  };
  const int64_t ns = static_cast<int64_t>(plan.serve.size());
  std::vector<std::vector<float>> q_out(static_cast<size_t>(world)), q_in(static_cast<size_t>(world));
  std::vector<std::span<float>> q_in_s(static_cast<size_t>(world));
  std::vector<std::span<const float>> send(static_cast<size_t>(world));
  std::vector<std::span<float>> recv(static_cast<size_t>(world));
  // Rows `rs` of src [*, width], dense, to `dst` (an exchanged buffer).
  auto gather = [&](const T* src, int64_t width, const std::vector<int64_t>& rs, char* dst) -> absl::Status {
    const int64_t n = static_cast<int64_t>(rs.size());
    if (n == 0 || width == 0) return absl::OkStatus();
    FERRY_ASSIGN_OR_RETURN(int32_t * d_idx, upload_ids(std::vector<int32_t>(rs.begin(), rs.end())));
    if (on_device) return act::CopyRows(src, width, d_idx, reinterpret_cast<T*>(dst), width, nullptr, n, width);
    FERRY_ASSIGN_OR_RETURN(T * dense, ws.Take<T>(n * width));
    FERRY_RETURN_IF_ERROR(act::CopyRows(src, width, d_idx, dense, width, nullptr, n, width));
    return cu::CopyToHost(dst, dense, static_cast<size_t>(n * width) * sizeof(T));
  };
  for (int q = 0; q < world; ++q) {
    if (q == me) continue;
    const std::vector<int64_t>& rs = plan.ask[static_cast<size_t>(q)];
    const int64_t n = static_cast<int64_t>(rs.size());
    FERRY_ASSIGN_OR_RETURN(std::span<float> out, buffer(q_out[static_cast<size_t>(q)], n * H * W));
    char* bytes = reinterpret_cast<char*>(out.data());
    FERRY_RETURN_IF_ERROR(gather(q_abs, H * L, rs, bytes));
    FERRY_RETURN_IF_ERROR(gather(q_pe, H * P, rs, bytes + n * H * L * static_cast<int64_t>(sizeof(T))));
    FERRY_ASSIGN_OR_RETURN(q_in_s[static_cast<size_t>(q)], buffer(q_in[static_cast<size_t>(q)], ns * H * W));
    send[static_cast<size_t>(q)] = out;
    recv[static_cast<size_t>(q)] = q_in_s[static_cast<size_t>(q)];
    stats->rows_shipped += n;
    stats->floats_sent += static_cast<int64_t>(out.size());
  }
  FERRY_RETURN_IF_ERROR(TimedExchange(tp, send, recv, stats));

  // Every peer's queries over the rows this rank owns, in one launch: peer k's ns rows are rows
  // [k ns, (k + 1) ns), each with its step row's selection and page table.
  std::vector<int> peers;
  for (int q = 0; q < world; ++q) {
    if (q != me) peers.push_back(q);
  }
  std::vector<std::vector<float>> o_out(static_cast<size_t>(world)), o_in(static_cast<size_t>(world));
  std::vector<std::span<float>> o_out_s(static_cast<size_t>(world)), o_in_s(static_cast<size_t>(world));
  if (ns > 0) {
    const int64_t n = ns * static_cast<int64_t>(peers.size());
    FERRY_ASSIGN_OR_RETURN(T * qa, ws.Take<T>(n * H * L));
    FERRY_ASSIGN_OR_RETURN(T * qp, ws.Take<T>(n * H * P));
    std::vector<int64_t> rows;
    std::vector<int32_t> tbl;
    for (size_t k = 0; k < peers.size(); ++k) {
      const char* in = reinterpret_cast<const char*>(q_in_s[static_cast<size_t>(peers[k])].data());
      FERRY_RETURN_IF_ERROR(into_device(qa + k * ns * H * L, in, ns * H * L));
      if (P > 0) FERRY_RETURN_IF_ERROR(into_device(qp + k * ns * H * P, in + ns * H * L * sizeof(T), ns * H * P));
      for (int64_t r : plan.serve) {
        rows.push_back(r);
        tbl.insert(tbl.end(), table.begin() + r * T_, table.begin() + (r + 1) * T_);
      }
    }
    std::vector<int32_t> off, s;
    CsrOf(rows, R, /*all=*/false, offsets, sel, identity, &off, &s);
    FERRY_ASSIGN_OR_RETURN(int32_t * d_off, upload_ids(off));
    FERRY_ASSIGN_OR_RETURN(int32_t * d_sel, upload_ids(s));
    FERRY_ASSIGN_OR_RETURN(int32_t * d_tbl, upload_ids(tbl));
    act::Cache<T> view = latent;
    view.page_table = d_tbl;
    FERRY_ASSIGN_OR_RETURN(T * out, ws.Take<T>(n * orow));
    FERRY_RETURN_IF_ERROR(act::MlaDecode(qa, P > 0 ? qp : nullptr, n, H, L, P, view, d_sel, d_off, scale, out,
                                         nullptr, 0));
    for (size_t k = 0; k < peers.size(); ++k) {
      const size_t q = static_cast<size_t>(peers[k]);
      FERRY_ASSIGN_OR_RETURN(o_out_s[q], buffer(o_out[q], ns * orow));
      FERRY_RETURN_IF_ERROR(out_of_device(o_out_s[q].data(), out + k * ns * orow, ns * orow));
    }
  }
  for (int q : peers) {
    const size_t k = static_cast<size_t>(q);
    FERRY_ASSIGN_OR_RETURN(o_in_s[k], buffer(o_in[k], static_cast<int64_t>(plan.ask[k].size()) * orow));
    send[k] = o_out_s[k];
    recv[k] = o_in_s[k];
    stats->rows_served += ns;
    stats->floats_sent += static_cast<int64_t>(o_out_s[k].size());
  }
  FERRY_RETURN_IF_ERROR(TimedExchange(tp, send, recv, stats));

  // The attended latents of the asked rows, back into their rows of o_lat.
  for (int q : peers) {
    const std::vector<int64_t>& rs = plan.ask[static_cast<size_t>(q)];
    const int64_t n = static_cast<int64_t>(rs.size());
    if (n == 0) continue;
    FERRY_ASSIGN_OR_RETURN(T * in, ws.Take<T>(n * orow));
    FERRY_RETURN_IF_ERROR(into_device(in, o_in_s[static_cast<size_t>(q)].data(), n * orow));
    FERRY_ASSIGN_OR_RETURN(int32_t * d_rows, upload_ids(std::vector<int32_t>(rs.begin(), rs.end())));
    FERRY_RETURN_IF_ERROR(act::CopyRows(in, orow, nullptr, o_lat, orow, d_rows, n, orow));
  }
  return absl::OkStatus();
}

template absl::Status AttendSplitCuda<uint16_t>(SplitScratch&, const ModelConfig&, int64_t, const uint16_t*,
                                                const uint16_t*, int64_t, const RowOwners&, const TensorParallel&,
                                                const act::Cache<uint16_t>&, const int32_t*, const int32_t*,
                                                uint16_t*, OwnerSplitStats*);
template absl::Status AttendSplitCuda<float>(SplitScratch&, const ModelConfig&, int64_t, const float*, const float*,
                                             int64_t, const RowOwners&, const TensorParallel&,
                                             const act::Cache<float>&, const int32_t*, const int32_t*, float*,
                                             OwnerSplitStats*);

}  // namespace ferry::model::cuda
