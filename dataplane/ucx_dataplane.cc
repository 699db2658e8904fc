#include "dataplane/ucx_dataplane.h"

#include <sched.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace ferry::dataplane {
namespace {

using Clock = std::chrono::steady_clock;

// The transports to fall back on when UCX, configured only by its own defaults, cannot start.
// Measured on Debian 12 (libucx0 1.13.1) in a container with lo + one ethernet device and no
// RDMA, 2 processes, 8-byte ping-pong and one 64 MiB message:
//   unset (UCX picks), tcp,self, tcp,posix,self, sm,tcp,self, tcp,cma,self: all work, ~11 us
//     one way, 64 MiB in 0.13-0.17 s; tcp uses lo too (also in a namespace with only lo), so
//     UCX_NET_DEVICES=lo is not needed;
//   posix,self / sm,self / sysv,self: ucp_ep_create fails "Destination is unreachable": in 1.13
//     the shared-memory transports have no peer failure handler, which the endpoints' error
//     mode (UCP_ERR_HANDLING_MODE_PEER) requires; shm must come with tcp.
// So the fallback is tcp,self. It is applied through ucp_config_modify (the process
// environment is left alone), only when the user set neither UCX_TLS nor UCX_NET_DEVICES, and
// only after UCX's own choice failed: on RDMA hosts UCX's choice (rc/ud verbs) is the one wanted.
constexpr const char* kFallbackUcxTls = "tcp,self";

// How long destroying an incomplete send keeps progressing it before force-closing the endpoint.
constexpr auto kAbandonedSendGrace = std::chrono::seconds(1);
// How long the destructor waits for endpoint close (flush) before giving up on it.
constexpr auto kCloseTimeout = std::chrono::seconds(3);

absl::Status UcxError(absl::string_view what, ucs_status_t status) {
  return absl::InternalError(absl::StrCat(what, ": ", ucs_status_string(status)));
}

// A failed transfer with `peer`: lost peers are UNAVAILABLE, the rest keep their meaning.
absl::Status TransferError(absl::string_view what, int peer, ucs_status_t status) {
  std::string msg = absl::StrCat(what, " rank ", peer, " failed: ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_CANCELED:
      return absl::CancelledError(msg);
    case UCS_ERR_INVALID_PARAM:
      return absl::InvalidArgumentError(msg);
    case UCS_ERR_NO_MEMORY:
      return absl::ResourceExhaustedError(msg);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SOME_CONNECTS_FAILED:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

bool UserConfiguredTransports() {
  return std::getenv("UCX_TLS") != nullptr || std::getenv("UCX_NET_DEVICES") != nullptr;
}

}  // namespace

struct UcxDataPlane::State {
  struct ErrArg {
    State* state = nullptr;
    int peer = -1;
  };

  int rank = 0;
  int world = 0;
  std::string tls;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  bool connected = false;
  uint64_t nonce_bits = 0;  // the deployment nonce's 32 bits in user tags (Connect)
  std::vector<ucp_ep_h> eps;             // nullptr for ourselves and for closed endpoints
  std::vector<ucs_status_t> peer_error;  // UCS_OK while the peer is healthy
  std::unique_ptr<ErrArg[]> err_args;    // stable addresses for the error handler
  int live_requests = 0;

  ~State() {
    if (worker != nullptr) ucp_worker_destroy(worker);
    if (context != nullptr) ucp_cleanup(context);
  }

  // Creates the context and worker; `tls_override` replaces UCX_TLS when not null.
  absl::Status Init(const char* tls_override) {
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) return UcxError("ucp_config_read", st);
    if (tls_override != nullptr) {
      st = ucp_config_modify(config, "TLS", tls_override);
      if (st != UCS_OK) {
        ucp_config_release(config);
        return UcxError(absl::StrCat("ucp_config_modify(TLS=", tls_override, ")"), st);
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.features = UCP_FEATURE_TAG;
    params.estimated_num_eps = static_cast<size_t>(world);
    st = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (st != UCS_OK) {
      context = nullptr;
      return UcxError(absl::StrCat("ucp_init (UCX_TLS=", tls, ")"), st);
    }
    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(context, &wparams, &worker);
    if (st != UCS_OK) {
      worker = nullptr;
      ucp_cleanup(context);
      context = nullptr;
      return UcxError(absl::StrCat("ucp_worker_create (UCX_TLS=", tls, ")"), st);
    }
    return absl::OkStatus();
  }

  unsigned Progress() { return ucp_worker_progress(worker); }

  bool PeerFailed(int peer) const { return peer_error[peer] != UCS_OK; }

  static void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* a = static_cast<ErrArg*>(arg);
    if (a->state->peer_error[a->peer] == UCS_OK) {
      a->state->peer_error[a->peer] = status == UCS_OK ? UCS_ERR_CONNECTION_RESET : status;
    }
  }

  // Progresses until ucp request `req` completes or `deadline`; true when it completed.
  bool ProgressUntilDone(void* req, Clock::time_point deadline) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
      if (Progress() == 0) {
        if (Clock::now() >= deadline) return false;
        sched_yield();
      }
    }
    return true;
  }

  // Closes the endpoint to `peer` at once; its outstanding transfers complete with
  // UCS_ERR_CANCELED. The peer counts as failed afterwards.
  void ForceClose(int peer) {
    ucp_ep_h ep = eps[peer];
    if (ep == nullptr) return;
    eps[peer] = nullptr;
    if (peer_error[peer] == UCS_OK) peer_error[peer] = UCS_ERR_CANCELED;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(req)) {
      ProgressUntilDone(req, Clock::now() + kCloseTimeout);
      ucp_request_free(req);
    }
  }
};

namespace {

class UcxRequest final : public Request {
 public:
  UcxRequest(UcxDataPlane::State* s, bool recv, int peer, uint64_t wire_tag, size_t size)
      : s_(s), recv_(recv), peer_(peer), wire_tag_(wire_tag), size_(size) {
    ++s_->live_requests;
  }

  ~UcxRequest() override {
    if (ucx_ != nullptr) {
      if (!cb_fired_) Abandon();
      ucp_request_free(ucx_);
    }
    --s_->live_requests;
  }

  // Completed at posting time (a send that UCX finished inline).
  void CompleteNow(size_t bytes) {
    complete_ = true;
    bytes_ = bytes;
  }
  void Attach(void* ucx_req) { ucx_ = ucx_req; }

  static void SendCallback(void* /*request*/, ucs_status_t status, void* user_data) {
    auto* self = static_cast<UcxRequest*>(user_data);
    self->cb_fired_ = true;
    self->ucs_status_ = status;
    self->length_ = self->size_;
  }

  static void RecvCallback(void* /*request*/, ucs_status_t status,
                           const ucp_tag_recv_info_t* info, void* user_data) {
    auto* self = static_cast<UcxRequest*>(user_data);
    self->cb_fired_ = true;
    self->ucs_status_ = status;
    self->length_ = info != nullptr ? info->length : 0;
  }

  bool Test() override {
    if (complete_) return true;
    s_->Progress();
    return CheckDone();
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    while (!complete_) {
      const unsigned events = s_->Progress();
      if (CheckDone()) break;
      if (events == 0) {
        if (Clock::now() >= deadline) {
          return WithWaitedFor(absl::DeadlineExceededError(absl::StrCat(
                                   recv_ ? "receive from" : "send to", " rank ", peer_, " (tag ",
                                   wire_tag_ & UcxDataPlane::kMaxUserTag, ", ", size_, " bytes) not complete after ",
                                   timeout.count(), " ms")),
                               {peer_});
        }
        sched_yield();  // ranks often share cores: let the peer run
      }
    }
    return status_;
  }

  size_t bytes() const override { return bytes_; }

 private:
  // Folds a fired callback (or a failed peer) into the final status.
  bool CheckDone() {
    if (complete_) return true;
    if (!cb_fired_) {
      // UCX fails sends to a failed endpoint itself; receives are posted on the worker, not the
      // endpoint, so a receive from a failed peer is ended here.
      if (!recv_ || !s_->PeerFailed(peer_)) return false;
      ucp_request_cancel(s_->worker, ucx_);
      s_->ProgressUntilDone(ucx_, Clock::now() + kAbandonedSendGrace);
      if (!cb_fired_ || ucs_status_ == UCS_ERR_CANCELED) {
        Finish(absl::UnavailableError(
            absl::StrCat("receive from rank ", peer_, " (tag ", wire_tag_ & UcxDataPlane::kMaxUserTag,
                         ") failed: the peer is gone (",
                         ucs_status_string(s_->peer_error[peer_]), ")")));
        return true;
      }
    }
    if (ucs_status_ == UCS_OK) {
      Finish(absl::OkStatus());
      bytes_ = length_;
    } else if (ucs_status_ == UCS_ERR_MESSAGE_TRUNCATED) {
      Finish(absl::InvalidArgumentError(absl::StrCat(
          "message of ", length_, " bytes from rank ", peer_, " (tag ",
          wire_tag_ & UcxDataPlane::kMaxUserTag, ") does not fit the ", size_,
          "-byte receive buffer")));
    } else {
      Finish(TransferError(recv_ ? "receive from" : "send to", peer_, ucs_status_));
    }
    return true;
  }

  void Finish(absl::Status status) {
    status_ = std::move(status);
    complete_ = true;
    if (ucx_ != nullptr && cb_fired_) {
      ucp_request_free(ucx_);
      ucx_ = nullptr;
    }
  }

  // Destroying an incomplete transfer: make sure UCX is done with the buffer before returning.
  void Abandon() {
    if (recv_) {
      ucp_request_cancel(s_->worker, ucx_);
      s_->ProgressUntilDone(ucx_, Clock::now() + kCloseTimeout);
      return;
    }
    if (s_->ProgressUntilDone(ucx_, Clock::now() + kAbandonedSendGrace)) return;
    FERRY_LOG(WARNING) << "rank " << s_->rank << ": a " << size_ << "-byte send to rank " << peer_
                       << " was abandoned incomplete; closing the endpoint to that rank";
    s_->ForceClose(peer_);
  }

  UcxDataPlane::State* s_;
  bool recv_;
  int peer_;
  uint64_t wire_tag_;
  size_t size_;
  void* ucx_ = nullptr;  // the UCX request until it is freed

  // Written by the UCX callbacks (from inside ucp_worker_progress on the driving thread).
  bool cb_fired_ = false;
  ucs_status_t ucs_status_ = UCS_INPROGRESS;
  size_t length_ = 0;

  bool complete_ = false;
  absl::Status status_;
  size_t bytes_ = 0;
};

}  // namespace

uint64_t UcxDataPlane::WireTag(int sender, uint64_t tag, bool internal) const {
  return (internal ? uint64_t{1} << 63 : 0) | (static_cast<uint64_t>(sender) << (kUserTagBits + kNonceBits)) |
         (internal ? 0 : s_->nonce_bits << kUserTagBits) | (tag & kMaxUserTag);
}

UcxDataPlane::UcxDataPlane(std::unique_ptr<State> state) : s_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<UcxDataPlane>> UcxDataPlane::Create(int rank, int world) {
  if (world < 1 || world > kMaxWorld || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("UCX data plane: rank ", rank, " of world ",
                                                   world, " is invalid (world 1..", kMaxWorld,
                                                   ")"));
  }
  auto s = std::make_unique<State>();
  s->rank = rank;
  s->world = world;
  s->eps.assign(world, nullptr);
  s->peer_error.assign(world, UCS_OK);
  s->err_args = std::make_unique<State::ErrArg[]>(world);
  for (int p = 0; p < world; ++p) s->err_args[p] = {s.get(), p};

  const char* tls = std::getenv("UCX_TLS");
  s->tls = tls != nullptr ? tls : "all";
  absl::Status st = s->Init(nullptr);
  if (!st.ok() && !UserConfiguredTransports()) {
    FERRY_LOG(WARNING) << "rank " << rank << ": UCX could not start with its default transports ("
                       << st.message() << "); retrying with UCX_TLS=" << kFallbackUcxTls;
    s->tls = kFallbackUcxTls;
    st = s->Init(kFallbackUcxTls);
  }
  if (!st.ok()) return st;
  return std::unique_ptr<UcxDataPlane>(new UcxDataPlane(std::move(s)));
}

UcxDataPlane::~UcxDataPlane() {
  if (s_ == nullptr) return;
  if (s_->live_requests != 0) {
    FERRY_LOG(ERROR) << "rank " << s_->rank << ": UCX data plane destroyed with "
                     << s_->live_requests << " requests still alive";
  }
  // Close every endpoint together (flush for healthy peers, force for failed ones), so one slow
  // peer costs the close timeout once, not once per peer.
  std::vector<void*> closing;
  for (int p = 0; p < s_->world; ++p) {
    ucp_ep_h ep = s_->eps[p];
    if (ep == nullptr) continue;
    s_->eps[p] = nullptr;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = s_->PeerFailed(p) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
  }
  const auto deadline = Clock::now() + kCloseTimeout;
  for (void* req : closing) {
    if (!s_->ProgressUntilDone(req, deadline)) {
      FERRY_LOG(WARNING) << "rank " << s_->rank << ": closing a UCX endpoint did not finish in "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(kCloseTimeout)
                                .count()
                         << " ms; destroying the worker anyway";
    }
    ucp_request_free(req);
  }
  // ~State destroys the worker, then the context.
}

std::string UcxDataPlane::address() const {
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  if (ucp_worker_get_address(s_->worker, &addr, &len) != UCS_OK) return std::string();
  std::string blob(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(s_->worker, addr);
  return blob;
}

absl::Status UcxDataPlane::Connect(const std::vector<std::string>& addresses,
                                   std::chrono::milliseconds timeout, uint64_t nonce) {
  if (s_->connected) return absl::FailedPreconditionError("UCX data plane: Connect called twice");
  // 32 bits of the nonce for the tags: both halves folded, so either half alone does not give them.
  s_->nonce_bits = (nonce ^ (nonce >> kNonceBits)) & ((uint64_t{1} << kNonceBits) - 1);
  if (addresses.size() != static_cast<size_t>(s_->world)) {
    return absl::InvalidArgumentError(absl::StrCat("UCX data plane: ", addresses.size(),
                                                   " addresses for a world of ", s_->world));
  }
  for (int p = 0; p < s_->world; ++p) {
    if (p == s_->rank) continue;
    if (addresses[p].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("UCX data plane: empty address for rank ", p));
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses[p].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &State::OnEndpointError;
    params.err_handler.arg = &s_->err_args[p];
    ucs_status_t st = ucp_ep_create(s_->worker, &params, &s_->eps[p]);
    if (st != UCS_OK) {
      s_->eps[p] = nullptr;
      return absl::UnavailableError(absl::StrCat("UCX data plane: rank ", s_->rank,
                                                 " cannot create an endpoint to rank ", p, ": ",
                                                 ucs_status_string(st), " (UCX_TLS=", s_->tls,
                                                 "; every transport needs peer failure "
                                                 "handling: list tcp too)"));
    }
  }
  s_->connected = true;

  // Handshake: every rank sends its rank number and the deployment's nonce to every peer and
  // expects the peer's. This wires up both directions of every endpoint before the first user
  // transfer.
  const int world = s_->world;
  struct Hello {
    uint64_t rank, nonce;
  };
  std::vector<Hello> inbox(world, Hello{~uint64_t{0}, 0});
  const Hello mine{static_cast<uint64_t>(s_->rank), nonce};
  std::vector<std::unique_ptr<Request>> reqs;
  for (int p = 0; p < world; ++p) {
    if (p == s_->rank) continue;
    FERRY_ASSIGN_OR_RETURN(auto r, Post(true, p, WireTag(p, 0, true), &inbox[p], sizeof(Hello)));
    reqs.push_back(std::move(r));
  }
  for (int p = 0; p < world; ++p) {
    if (p == s_->rank) continue;
    FERRY_ASSIGN_OR_RETURN(
        auto r, Post(false, p, WireTag(s_->rank, 0, true), const_cast<Hello*>(&mine), sizeof(Hello)));
    reqs.push_back(std::move(r));
  }
  const auto deadline = Clock::now() + timeout;
  for (auto& r : reqs) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (absl::Status st = r->Wait(std::max(left, std::chrono::milliseconds(0))); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("UCX data plane: rank ", s_->rank,
                                                  " handshake: ", st.message()));
    }
  }
  for (int p = 0; p < world; ++p) {
    if (p == s_->rank) continue;
    if (inbox[p].rank != static_cast<uint64_t>(p)) {
      return absl::InvalidArgumentError(absl::StrCat("UCX data plane: the address given for rank ",
                                                     p, " belongs to rank ", inbox[p].rank));
    }
    if (inbox[p].nonce != nonce) {
      return absl::PermissionDeniedError(absl::StrCat(
          "UCX data plane: the peer connected as rank ", p,
          " does not carry this deployment's nonce (a process of another deployment, or not given it): refused"));
    }
  }
  return absl::OkStatus();
}

int UcxDataPlane::rank() const { return s_->rank; }
int UcxDataPlane::world() const { return s_->world; }

Capabilities UcxDataPlane::capabilities() const {
  Capabilities caps;
  caps.transport = absl::StrCat("ucx(", s_->tls, ")");
  caps.host_memory = true;
  caps.device_memory = false;
  return caps;
}

absl::StatusOr<std::unique_ptr<Request>> UcxDataPlane::PostSend(int peer, uint64_t tag,
                                                                const void* data, size_t bytes) {
  if (tag > kMaxUserTag) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX data plane: tag ", tag, " does not fit ", kUserTagBits, " bits"));
  }
  return Post(false, peer, WireTag(s_->rank, tag), const_cast<void*>(data), bytes);
}

absl::StatusOr<std::unique_ptr<Request>> UcxDataPlane::PostRecv(int peer, uint64_t tag,
                                                                void* data, size_t capacity) {
  if (tag > kMaxUserTag) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX data plane: tag ", tag, " does not fit ", kUserTagBits, " bits"));
  }
  return Post(true, peer, WireTag(peer, tag), data, capacity);
}

absl::StatusOr<std::unique_ptr<Request>> UcxDataPlane::Post(bool recv, int peer,
                                                            uint64_t wire_tag, void* data,
                                                            size_t bytes) {
  if (peer < 0 || peer >= s_->world || peer == s_->rank) {
    return absl::InvalidArgumentError(absl::StrCat("UCX data plane: rank ", s_->rank,
                                                   " cannot transfer with peer ", peer,
                                                   " (world ", s_->world, ")"));
  }
  if (!s_->connected) {
    return absl::FailedPreconditionError("UCX data plane: Connect has not been called");
  }
  auto req = std::make_unique<UcxRequest>(s_.get(), recv, peer, wire_tag, bytes);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = req.get();
  ucs_status_ptr_t sp;
  if (recv) {
    // Deny immediate completion so that every receive reports its length through the callback.
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = &UcxRequest::RecvCallback;
    sp = ucp_tag_recv_nbx(s_->worker, data, bytes, wire_tag, ~ucp_tag_t{0}, &param);
  } else {
    // Receives from a failed peer may still find messages it sent before failing; sends not.
    if (s_->PeerFailed(peer) || s_->eps[peer] == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "send to rank ", peer, ": the peer is gone (", ucs_status_string(s_->peer_error[peer]),
          ")"));
    }
    param.cb.send = &UcxRequest::SendCallback;
    sp = ucp_tag_send_nbx(s_->eps[peer], data, bytes, wire_tag, &param);
  }
  if (UCS_PTR_IS_ERR(sp)) {
    return TransferError(recv ? "posting a receive from" : "posting a send to", peer,
                         UCS_PTR_STATUS(sp));
  }
  if (sp == nullptr) {
    req->CompleteNow(bytes);
  } else {
    req->Attach(sp);
  }
  return std::unique_ptr<Request>(std::move(req));
}

}  // namespace ferry::dataplane
