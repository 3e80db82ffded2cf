// SPDX-License-Identifier: Apache-2.0
// A layer table row, as tests/compile_check.py compiles it: with every
// column it compiles; one left out, or two swapped, must not
// (common/layers.h: a new layer's row cannot forget a column).
#include "common/layers.h"

using namespace eacgm;

#if defined(EVERY_COLUMN)
constexpr Layer row{"test", Source::spec, Collective::no, Joiner::none, Timing::measured, Throttle::yes};
#elif defined(NO_THROTTLE)
constexpr Layer row{"test", Source::spec, Collective::no, Joiner::none, Timing::measured};
#elif defined(SWAPPED)
constexpr Layer row{"test", Source::spec, Joiner::none, Collective::no, Timing::measured, Throttle::yes};
#else
#error "name a variant: EVERY_COLUMN, NO_THROTTLE or SWAPPED"
#endif

int main() { return row.name.size() == 4 ? 0 : 1; }
