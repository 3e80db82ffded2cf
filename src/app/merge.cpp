// SPDX-License-Identifier: Apache-2.0
// eacgm merge: recordings of several nodes (or ranks) made one.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "app/commands.h"
#include "common/fs.h"
#include "common/text.h"
#include "export/pftrace.h"
#include "merge/merge.h"

namespace eacgm {

namespace fs = std::filesystem;

CLI::App *add_merge(CLI::App &app, MergeArgs &ma)
{
	auto *merge = app.add_subcommand("merge",
					 "Merge recordings of several nodes (or of ranks recorded apart) into one: "
					 "one timeline, each process labelled with its host and rank");
	merge->add_option("recordings", ma.inputs, "Recordings (.db) written by 'eacgm record', two or more")
		->required();
	merge->add_option("-o,--output", ma.output, "The merged recording to write")->required();
	merge->add_option("--perfetto", ma.perfetto,
			  "Also write the merged recording's trace (.pftrace or .json), as 'export' does");
	merge->add_flag("--force", ma.force, "Replace the output if it exists");
	merge->footer(
		"Clocks: each recording's times move onto the first recording's clock by the difference of their "
		"monotonic-to-wall offsets, then by the residual estimated from the collectives they share (gloo's, "
		"matched by sequence number: the median difference of their ends). Give the recording of the "
		"machine that has been up longest first. Processes: the pids of the k-th recording (from 0) become "
		"pid + k*10000000; each process is labelled with its host (the recording's hostname, or the file's "
		"name without .db where there is none; hostname/name where two recordings have the same hostname, as "
		"recordings of ranks on one machine do) and its rank (from its collective spans). The merged meta "
		"says, per input, the offsets applied (merged_from) and, per process, its host and pid "
		"(process_origins). 'eacgm summary' and 'export' read the merged file as any other.");
	return merge;
}

namespace {

bool same_file(const std::string &a, const std::string &b)
{
	std::error_code ec;
	return a == b || fs::equivalent(a, b, ec);
}

// What can be told before reading anything; the message names the fix.
Result<void> check_args(const MergeArgs &a)
{
	if (a.inputs.size() < 2)
		return make_error(ErrorKind::BadInput,
				  "merge needs two or more recordings, got " + std::to_string(a.inputs.size()) +
					  "; give every node's recording: eacgm merge a.db b.db -o all.db");
	if (a.inputs.size() > kMaxMergeInputs)
		return make_error(ErrorKind::BadInput,
				  "merge takes at most " + std::to_string(kMaxMergeInputs) + " recordings, got " +
					  std::to_string(a.inputs.size()) + "; merge fewer");
	for (size_t i = 0; i < a.inputs.size(); i++) {
		for (size_t j = 0; j < i; j++)
			if (same_file(a.inputs[i], a.inputs[j]))
				return make_error(ErrorKind::BadInput,
						  a.inputs[i] + " is given twice; give each recording once");
		if (same_file(a.inputs[i], a.output))
			return make_error(ErrorKind::BadInput,
					  "the output " + a.output + " is also an input; choose another -o");
	}
	if (!a.force && fs::exists(a.output))
		return make_error(ErrorKind::BadInput,
				  a.output + " exists; remove it, choose another -o, or pass --force to replace it");
	if (auto w = check_writable(a.output); !w)
		return w;
	if (!a.perfetto.empty()) {
		if (auto f = trace_format_of(a.perfetto); !f)
			return f.error();
		if (auto w = check_writable(a.perfetto); !w)
			return w;
	}
	return {};
}

std::string signed_ms(int64_t ns)
{
	char buf[32];
	std::snprintf(buf, sizeof buf, "%+.3f ms", static_cast<double>(ns) / 1e6);
	return buf;
}

void print_report(const std::vector<MergedInput> &ins, const std::string &output)
{
	uint64_t spans = 0;
	for (const MergedInput &in : ins)
		spans += in.spans;
	std::cout << "merged " << ins.size() << " recordings into " << output << " (" << spans << " spans)\n";
	for (size_t k = 0; k < ins.size(); k++) {
		const MergedInput &in = ins[k];
		std::cout << "  " << in.path << ": host " << in.host << ", "
			  << plural(in.processes, "process", "processes") << ", " << plural(in.spans, "span", "spans")
			  << ", pids +" << in.pid_offset;
		if (k == 0)
			std::cout << ", the reference clock\n";
		else if (!in.residual.rounds)
			std::cout << ", clock " << signed_ms(in.clock_shift_ns)
				  << " by wall clocks only (no collective in common with the others)\n";
		else
			std::cout << ", clock " << signed_ms(in.clock_shift_ns) << " by wall clocks, "
				  << signed_ms(in.residual.ns) << " from " << in.residual.rounds << " collectives\n";
	}
}

} // namespace

int run_merge(const MergeArgs &args)
{
	if (auto r = check_args(args); !r)
		return fail(r.error().message, 2);
	auto merged = merge_recordings(args.inputs, args.output);
	if (!merged)
		return fail(merged.error().message);
	print_report(*merged, args.output);
	if (args.perfetto.empty())
		return 0;
	uint64_t spans = 0;
	if (auto r = write_trace_and_summary(args.output, args.perfetto, &spans); !r)
		return fail(r.error().message);
	std::cout << "wrote " << args.perfetto << " (" << spans << " spans); open it in ui.perfetto.dev\n";
	return 0;
}

} // namespace eacgm
