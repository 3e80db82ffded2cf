// NCCL: what a collective's arguments do not say by themselves. A
// communicator is an opaque pointer; its rank and size are known only from
// the call that created it. This remembers them per process and puts
// rank/nranks on every later call on that communicator.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "common/model.h"

namespace eacgm {

class NcclCommunicators {
public:
	// Call for every span in the order they ended (init calls end before
	// the calls that use their communicator start).
	void observe(Span &s);

private:
	struct Comm {
		int64_t rank, nranks;
	};
	std::map<std::pair<uint32_t, std::string>, Comm> comms_; // (pid, comm pointer)
};

} // namespace eacgm
