// SPDX-License-Identifier: Apache-2.0
// Which job a traced process belongs to, and its rank there, as its
// launcher told it: torchrun/torchelastic, Slurm, or a user's EACGM_JOB, read
// from the environment the process started with (/proc/PID/environ). Rows
// from every node of one job then carry the same job and their global rank.
#pragma once
#include <string>
#include <string_view>

namespace eacgm {

struct JobIdentity {
	// EACGM_JOB; else torchelastic's run id (TORCHELASTIC_RUN_ID, unless
	// "none"); else "slurm-" SLURM_JOB_ID; else the rendezvous address
	// "MASTER_ADDR:MASTER_PORT" (what every rank of one job shares); else "".
	std::string job;
	int rank = -1;       // RANK (global); -1: none given
	int local_rank = -1; // LOCAL_RANK
	int world_size = -1; // WORLD_SIZE
};

// From an environment block: NUL-separated NAME=VALUE entries, as
// /proc/PID/environ holds them. A number that does not parse counts as not
// given.
JobIdentity job_identity_of(std::string_view environ);

} // namespace eacgm
