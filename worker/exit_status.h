// What a worker's exit status tells its supervisor (`ferry serve`, a launcher): besides 0 (told to
// stop), 1 (a failure of its own) and 2 (bad flags or setup), two statuses that blame another
// process, so that the supervisor names the one that failed rather than the one that noticed.
#pragma once

namespace ferry::worker {

// Its data-plane watchdog fired: a peer rank did not take part in a step within --step-timeout
// (the coordinator names that rank: its step result carried waited_for).
inline constexpr int kExitPeerTimeout = 3;

// The coordinator went away: the control stream ended without a shutdown (the coordinator
// exited, was cut off, or stopped answering keepalive pings).
inline constexpr int kExitLostCoordinator = 4;

}  // namespace ferry::worker
