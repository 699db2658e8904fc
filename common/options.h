// Option tables: each concern's command-line options written once, as an X-macro list of
// X(type, name, default, help), and expanded by every binary that takes them:
//   FERRY_DEFINE_OPTION    defines the flag (one .cc of each binary)
//   FERRY_DECLARE_OPTION   declares it (a header)
//   FERRY_OPTION_NAME      its name, for ForwardedOptions
// so a flag has one name, type, default and help wherever it is taken (`ferry help` and every
// binary's --help print the same), and `ferry serve` hands its children every option of their
// tables without a list of its own. The tables: coordinator/options.h, worker/options.h, and
// FERRY_PROCESS_OPTIONS below (what every serving process takes).
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"

#define FERRY_DEFINE_OPTION(type, name, default_value, help) ABSL_FLAG(type, name, default_value, help);
#define FERRY_DECLARE_OPTION(type, name, default_value, help) ABSL_DECLARE_FLAG(type, name);
#define FERRY_OPTION_NAME(type, name, default_value, help) #name,

// What the coordinator, every worker and `ferry serve` take alike.
#define FERRY_PROCESS_OPTIONS(X)                                                                          \
  X(double, step_timeout, 60,                                                                             \
    "Seconds a step's data-plane transfers may wait for a peer before the step is aborted and the worker " \
    "exits naming the peer; the coordinator holds a rank that has not answered a step 5 s past it dead")  \
  X(double, keepalive_s, 10,                                                                              \
    "Seconds between keepalive pings on the control streams, and to wait for their answer: a stopped "    \
    "coordinator or worker is found within about twice this")                                             \
  X(bool, verbose, false, "Log debug lines to stderr")

FERRY_PROCESS_OPTIONS(FERRY_DECLARE_OPTION)

namespace ferry {

// "--name=value" for each named flag, with its current value (as it would be parsed back).
std::vector<std::string> ForwardedOptions(std::initializer_list<const char*> names);

}  // namespace ferry
