// SPDX-License-Identifier: Apache-2.0
// NCCL: what a collective's arguments do not say by themselves. A
// communicator is an opaque pointer; its rank and size are known only from
// the call that created it. This remembers them per process and puts
// rank/nranks on every later call on that communicator, and on each
// collective enqueued on it a sequence number `seq`, from 0 per communicator
// in the order this rank enqueued them: every rank of a communicator
// enqueues its collectives in the same order (NCCL requires it), so one seq
// is one collective on every rank, as gloo's tag is (pipeline/collectives.h
// matches them across ranks). Sends and receives differ per rank and are not
// numbered; neither is a call that failed (nothing was enqueued).
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
		int64_t next_seq = 0;
	};
	std::map<std::pair<uint32_t, std::string>, Comm> comms_; // (pid, comm pointer)
};

} // namespace eacgm
