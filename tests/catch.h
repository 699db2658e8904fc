// Catch2 v2 (Debian 12) and v3 (Ubuntu 24.04, the GB10 boxes) behind one include.
// Tests use only the macros both versions share.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_test_macros.hpp>
#else
#include <catch2/catch.hpp>
#endif
