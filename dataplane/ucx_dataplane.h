// The UCX data plane on host memory: UCP tag send/receive between the ranks of one group, one
// UCP context + worker per rank, one endpoint per peer.
//
// Bootstrap is two-phase because worker addresses travel over the control plane (gRPC) in the
// real system, and over pipes in the tests:
//
//   FERRY_ASSIGN_OR_RETURN(auto dp, UcxDataPlane::Create(rank, world));
//   publish(dp->address());                       // opaque blob, a few hundred bytes
//   FERRY_RETURN_IF_ERROR(dp->Connect(all_addresses));   // one per rank, own included
//
// Connect returns once every peer has connected too (a small handshake with each peer), so a
// bad address or an absent peer shows up there rather than in the first collective.
//
// Tag layout (the 64-bit UCP tag):
//   bit  63     : 1 for the data plane's own messages (the Connect handshake), 0 for users
//   bits 62..48 : the sender's rank (15 bits: world <= 32768)
//   bits 47..16 : users' messages: 32 bits of the deployment's nonce (Connect); 0 in the handshake
//   bits 15..0  : the user tag (PostSend/PostRecv refuse tags >= 2^16 with INVALID_ARGUMENT)
// Receives match the full 64 bits, so a receive matches exactly (peer, tag), and UCX keeps
// messages of one sender in order, which gives dataplane.h's ordering rule.
//
// The deployment's nonce: a secret the ranks get over the authenticated control plane. Every
// rank's handshake carries it (a peer whose handshake carries another is refused, naming the
// rank it claimed), and every user message's tag carries 32 bits of it, so a process that was not
// given it cannot have a message matched by a receive, whatever rank it writes into its tag.
//
// Transports come from UCX's own environment (UCX_TLS, UCX_NET_DEVICES, UCX_RNDV_THRESH, ...):
// docs/ must say that UCX_* variables are honoured. Only when the user set neither UCX_TLS nor
// UCX_NET_DEVICES and UCX cannot start with its own defaults does Create() retry with
// UCX_TLS=tcp,self (through ucp_config_modify, not the environment; the .cc records what was
// measured). Shared-memory transports alone (UCX_TLS=posix,self) cannot connect: in UCX 1.13 they
// lack the peer failure handling these endpoints require, so list tcp with them.
//
// Failure: endpoints use UCP_ERR_HANDLING_MODE_PEER, so a peer that dies fails our sends to it
// and our pending receives from it with UNAVAILABLE instead of hanging (Wait also has its own
// timeout). A receive whose message is longer than the buffer completes with INVALID_ARGUMENT
// naming both sizes. Errors from UCX calls carry ucs_status_string().
//
// Requests: progress is driven by Test()/Wait() (ucp_worker_progress); one thread drives the
// DataPlane and all its Requests, and every Request must be destroyed before its DataPlane.
// Destroying an incomplete receive cancels it (ucp_request_cancel). UCX cannot cancel a send,
// so destroying an incomplete send keeps progressing it for up to one second and then
// force-closes the endpoint to that peer (the only way to guarantee UCX stops reading the
// buffer): later transfers with that peer fail with UNAVAILABLE. (The peer is not told: it
// finds out through its own timeouts.)
//
// Shutdown (the destructor): endpoints are closed with a flush (bounded to a few seconds, then
// abandoned), then the worker and context are destroyed.
//
// fork(): create UCX objects only after forking (UCX does not support use across fork()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/dataplane.h"

namespace ferry::dataplane {

class UcxDataPlane final : public DataPlane {
 public:
  static constexpr int kUserTagBits = 16;
  static constexpr int kNonceBits = 32;
  static constexpr uint64_t kMaxUserTag = (uint64_t{1} << kUserTagBits) - 1;
  static constexpr int kMaxWorld = 1 << 15;

  // Creates the UCP context and worker of `rank` in a group of `world` (1 <= world <= kMaxWorld).
  static absl::StatusOr<std::unique_ptr<UcxDataPlane>> Create(int rank, int world);
  ~UcxDataPlane() override;
  UcxDataPlane(const UcxDataPlane&) = delete;
  UcxDataPlane& operator=(const UcxDataPlane&) = delete;

  // The worker's address: an opaque blob to hand to every rank's Connect().
  std::string address() const;

  // Creates one endpoint per peer from `addresses` (indexed by rank, world of them, our own
  // included and ignored) and exchanges a handshake with every peer, waiting at most `timeout`
  // for all of them. `nonce`: the deployment's (the same on every rank). Call once.
  // INVALID_ARGUMENT when a peer's handshake names another rank, PERMISSION_DENIED when it
  // carries another nonce.
  absl::Status Connect(const std::vector<std::string>& addresses,
                       std::chrono::milliseconds timeout = std::chrono::seconds(60), uint64_t nonce = 0);

  int rank() const override;
  int world() const override;
  // transport: "ucx(<UCX_TLS>)", e.g. "ucx(tcp,self)".
  Capabilities capabilities() const override;

  absl::StatusOr<std::unique_ptr<Request>> PostSend(int peer, uint64_t tag, const void* data,
                                                    size_t bytes) override;
  absl::StatusOr<std::unique_ptr<Request>> PostRecv(int peer, uint64_t tag, void* data,
                                                    size_t capacity) override;

  // The 64-bit UCP tag of a message from `sender` with user tag `tag` (the layout above).
  // A user message's tag (internal: the handshake's, which carries no nonce).
  uint64_t WireTag(int sender, uint64_t tag, bool internal = false) const;

  struct State;  // UCX handles and per-peer health; defined in the .cc

 private:
  explicit UcxDataPlane(std::unique_ptr<State> state);
  absl::StatusOr<std::unique_ptr<Request>> Post(bool recv, int peer, uint64_t wire_tag, void* data,
                                                size_t bytes);

  std::unique_ptr<State> s_;
};

}  // namespace ferry::dataplane
