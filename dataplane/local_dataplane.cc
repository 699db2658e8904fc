#include "dataplane/local_dataplane.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ferry::dataplane {
namespace {

// A receive posted before its message arrived. Written by the sending thread under the hub
// mutex; read by the receiving thread under the same mutex.
struct PendingRecv {
  void* data = nullptr;
  size_t capacity = 0;
  bool done = false;
  absl::Status status;
  size_t bytes = 0;
};

// (receiver, sender, tag): the queues of one ordered channel.
using ChannelKey = std::tuple<int, int, uint64_t>;

struct Hub {
  explicit Hub(int world) : alive(world, true) {}

  std::mutex mu;
  std::condition_variable cv;  // notified on every delivery and on a rank going away
  std::vector<bool> alive;
  std::map<ChannelKey, std::deque<std::vector<unsigned char>>> unexpected;
  std::map<ChannelKey, std::deque<std::shared_ptr<PendingRecv>>> posted;
};

// Copies `msg` into `recv` (or fails it when too long). Caller holds the hub mutex.
void Deliver(const unsigned char* msg, size_t size, int sender, uint64_t tag, PendingRecv& recv) {
  recv.done = true;
  if (size > recv.capacity) {
    recv.status = absl::InvalidArgumentError(
        absl::StrCat("message of ", size, " bytes from rank ", sender, " (tag ", tag,
                     ") does not fit the ", recv.capacity, "-byte receive buffer"));
    return;
  }
  if (size > 0) std::memcpy(recv.data, msg, size);
  recv.bytes = size;
}

class LocalSendRequest final : public Request {
 public:
  explicit LocalSendRequest(size_t bytes) : bytes_(bytes) {}
  bool Test() override { return true; }
  absl::Status Wait(std::chrono::milliseconds) override { return absl::OkStatus(); }
  size_t bytes() const override { return bytes_; }

 private:
  size_t bytes_;
};

class LocalRecvRequest final : public Request {
 public:
  LocalRecvRequest(std::shared_ptr<Hub> hub, ChannelKey key, std::shared_ptr<PendingRecv> recv)
      : hub_(std::move(hub)), key_(key), recv_(std::move(recv)) {}

  ~LocalRecvRequest() override {
    std::lock_guard<std::mutex> lock(hub_->mu);
    if (recv_->done) return;
    // Cancel: take the receive out of its channel so no sender writes into the buffer later.
    auto it = hub_->posted.find(key_);
    if (it == hub_->posted.end()) return;
    auto& queue = it->second;
    for (auto q = queue.begin(); q != queue.end(); ++q) {
      if (q->get() == recv_.get()) {
        queue.erase(q);
        break;
      }
    }
    if (queue.empty()) hub_->posted.erase(it);
  }

  bool Test() override {
    std::lock_guard<std::mutex> lock(hub_->mu);
    return CheckLocked();
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(hub_->mu);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!hub_->cv.wait_until(lock, deadline, [&] { return CheckLocked(); })) {
      return WithWaitedFor(absl::DeadlineExceededError(absl::StrCat("receive from rank ", std::get<1>(key_), " (tag ",
                                                                    std::get<2>(key_), ") not complete after ",
                                                                    timeout.count(), " ms")),
                           {static_cast<int>(std::get<1>(key_))});
    }
    return recv_->status;
  }

  size_t bytes() const override {
    std::lock_guard<std::mutex> lock(hub_->mu);
    return recv_->bytes;
  }

 private:
  // True once complete; completes the receive with UNAVAILABLE when its sender is gone.
  bool CheckLocked() {
    if (recv_->done) return true;
    const int sender = std::get<1>(key_);
    if (hub_->alive[sender]) return false;
    recv_->done = true;
    recv_->status = absl::UnavailableError(
        absl::StrCat("rank ", sender, " went away before sending tag ", std::get<2>(key_)));
    auto it = hub_->posted.find(key_);
    if (it != hub_->posted.end()) {
      auto& queue = it->second;
      for (auto q = queue.begin(); q != queue.end(); ++q) {
        if (q->get() == recv_.get()) {
          queue.erase(q);
          break;
        }
      }
      if (queue.empty()) hub_->posted.erase(it);
    }
    return true;
  }

  std::shared_ptr<Hub> hub_;
  ChannelKey key_;
  std::shared_ptr<PendingRecv> recv_;
};

class LocalDataPlane final : public DataPlane {
 public:
  LocalDataPlane(std::shared_ptr<Hub> hub, int rank, int world)
      : hub_(std::move(hub)), rank_(rank), world_(world) {}

  ~LocalDataPlane() override {
    std::lock_guard<std::mutex> lock(hub_->mu);
    hub_->alive[rank_] = false;
    // Messages addressed to this rank can no longer be received.
    for (auto it = hub_->unexpected.begin(); it != hub_->unexpected.end();) {
      it = std::get<0>(it->first) == rank_ ? hub_->unexpected.erase(it) : std::next(it);
    }
    hub_->cv.notify_all();
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  Capabilities capabilities() const override {
    Capabilities caps;
    caps.transport = "local";
    return caps;
  }

  absl::StatusOr<std::unique_ptr<Request>> PostSend(int peer, uint64_t tag, const void* data,
                                                    size_t bytes) override {
    if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
    const auto* src = static_cast<const unsigned char*>(data);
    std::lock_guard<std::mutex> lock(hub_->mu);
    if (!hub_->alive[peer]) {
      return absl::UnavailableError(absl::StrCat("rank ", peer, " is gone"));
    }
    const ChannelKey key{peer, rank_, tag};
    auto posted = hub_->posted.find(key);
    if (posted != hub_->posted.end()) {
      std::shared_ptr<PendingRecv> recv = std::move(posted->second.front());
      posted->second.pop_front();
      if (posted->second.empty()) hub_->posted.erase(posted);
      Deliver(src, bytes, rank_, tag, *recv);
    } else {
      hub_->unexpected[key].emplace_back(src, src + bytes);
    }
    hub_->cv.notify_all();
    return std::make_unique<LocalSendRequest>(bytes);
  }

  absl::StatusOr<std::unique_ptr<Request>> PostRecv(int peer, uint64_t tag, void* data,
                                                    size_t capacity) override {
    if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
    auto recv = std::make_shared<PendingRecv>();
    recv->data = data;
    recv->capacity = capacity;
    const ChannelKey key{rank_, peer, tag};
    std::lock_guard<std::mutex> lock(hub_->mu);
    auto queued = hub_->unexpected.find(key);
    if (queued != hub_->unexpected.end()) {
      std::vector<unsigned char> msg = std::move(queued->second.front());
      queued->second.pop_front();
      if (queued->second.empty()) hub_->unexpected.erase(queued);
      Deliver(msg.data(), msg.size(), peer, tag, *recv);
    } else {
      hub_->posted[key].push_back(recv);
    }
    return std::make_unique<LocalRecvRequest>(hub_, key, std::move(recv));
  }

 private:
  absl::Status CheckPeer(int peer) const {
    if (peer < 0 || peer >= world_ || peer == rank_) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, " cannot transfer with peer ",
                                                     peer, " (world ", world_, ")"));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<Hub> hub_;
  int rank_;
  int world_;
};

}  // namespace

std::vector<std::unique_ptr<DataPlane>> MakeLocalGroup(int world) {
  auto hub = std::make_shared<Hub>(world);
  std::vector<std::unique_ptr<DataPlane>> group;
  group.reserve(world);
  for (int r = 0; r < world; ++r) group.push_back(std::make_unique<LocalDataPlane>(hub, r, world));
  return group;
}

}  // namespace ferry::dataplane
