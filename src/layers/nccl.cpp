// SPDX-License-Identifier: Apache-2.0
#include "layers/nccl.h"

#include <set>

#include "common/layers.h"

namespace eacgm {

void NcclCommunicators::observe(Span &s)
{
	if (s.layer != layer::nccl || !s.args.contains("comm") || !s.args["comm"].is_string())
		return;
	auto key = std::make_pair(s.pid, s.args["comm"].get<std::string>());
	bool ok = s.ret_name == "ncclSuccess";
	if (s.name == "ncclCommInitRank" || s.name == "ncclCommInitRankConfig") {
		// comm is the out-pointer's value, read at return.
		if (ok)
			comms_[key] = {s.args.value("rank", int64_t(-1)), s.args.value("nranks", int64_t(-1))};
		return;
	}
	if (s.name == "ncclCommInitAll") {
		// One process, ndev communicators: the first one written is rank 0.
		if (ok)
			comms_[key] = {0, s.args.value("ndev", int64_t(-1))};
		return;
	}
	auto it = comms_.find(key);
	if (it == comms_.end())
		return;
	s.args["rank"] = it->second.rank;
	s.args["nranks"] = it->second.nranks;
	static const std::set<std::string> kCollectives = {"ncclAllReduce", "ncclReduce",    "ncclBroadcast",
							   "ncclBcast",     "ncclAllGather", "ncclReduceScatter",
							   "ncclAlltoAll"};
	// A nonblocking communicator's call may answer ncclInProgress: enqueued.
	if (kCollectives.count(s.name) && (ok || s.ret_name == "ncclInProgress"))
		s.args["seq"] = it->second.next_seq++;
	if (s.name == "ncclCommDestroy" || s.name == "ncclCommAbort")
		if (ok)
			comms_.erase(it); // the pointer may be reused by the next init
}

} // namespace eacgm
