// SPDX-License-Identifier: Apache-2.0
// eacgm: traces ML workloads from the outside with eBPF.
#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>

#include "app/commands.h"
#include "common/layers.h"
#include "common/text.h"

using namespace eacgm;

static CLI::App *add_serve(CLI::App &app, ServeArgs &sa)
{
	auto *serve = app.add_subcommand("serve",
					 "Run as the node agent: trace every process on the node that calls a traced "
					 "library or runs Python, serve Prometheus metrics, until SIGTERM");
	serve->add_option("--config", sa.config,
			  std::string("Configuration file (TOML; every key and its default: docs/agent.md, "
				      "Configuration). Default: ") +
				  kDefaultServeConfig + " when it exists, else the defaults");
	serve->add_option("--listen", sa.listen,
			  "Address of /metrics and /healthz, HOST:PORT (overrides the config's listen; default "
			  "127.0.0.1:9464; port 0 picks a free one)");
	serve->add_option("--ready-file", sa.ready_file,
			  "Write this file once serving: one line of JSON with eacgm's pid, the port, the probes and "
			  "processes traced. Wait on it (or on the stderr line 'eacgm: serving ...') rather than "
			  "guessing when the agent is up");
	// Tests only: a node whose wall clock is off, for the cluster's clock alignment.
	serve->add_option("--test-clock-shift-ms", sa.test_clock_shift_ms)->group("");
	serve->footer("SIGHUP reloads the configuration's filters; SIGTERM or SIGINT stops the agent, which "
		      "flushes what it holds and exits 0.");
	return serve;
}

namespace {

// What the command line says, filled by CLI11 as it parses: each
// subcommand's arguments and whether it was the one given.
struct Commands {
	RecordArgs rec;
	ServeArgs serve;
	DetectArgs detect;
	ProbesArgs probes;
	MergeArgs merge;
	SqlArgs sql;
	ClusterArgs cluster;
	std::string db, perfetto, flat; // export, summary
	CLI::App *record_cmd = nullptr, *serve_cmd = nullptr, *export_cmd = nullptr, *summary_cmd = nullptr,
		 *detect_cmd = nullptr, *doctor_cmd = nullptr, *probes_cmd = nullptr, *list_cmd = nullptr,
		 *merge_cmd = nullptr, *sql_cmd = nullptr, *cluster_cmd = nullptr;
};

// record: what it traces and where it writes.
void add_record_outputs(CLI::App *record, RecordArgs &rec)
{
	record->add_option("--layers", rec.layers,
			   "Layers to trace, comma separated, from " + join(layer_names()) +
				   ". Default: all of them; one that cannot work here (gpu without an "
				   "NVIDIA driver) says why and the others go on")
		->delimiter(',');
	record->add_option("--spec", rec.specs, "Extra probe spec file (JSON); repeatable")->check(CLI::ExistingFile);
	record->add_option("-o,--output", rec.output, "SQLite recording to write (default: eacgm-<time>.db)");
	record->add_option(
		"--perfetto", rec.perfetto,
		"Trace to write, in the format its name ends with: .pftrace (Perfetto's own, compact) or .json "
		"(Chrome's trace-event JSON) (default: the recording's name with .pftrace)");
	record->add_option("--flamegraph", rec.flamegraph,
			   "Python layer: write the sampled stacks in the collapsed format of flame graph tools "
			   "(flamegraph.pl, speedscope)");
	record->add_option("--clickhouse", rec.clickhouse,
			   "Also ship every span to ClickHouse at this HTTP address, "
			   "http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE] (port 8123, database eacgm unless given); "
			   "the tables are made on first use. The recording is written as without it; rows that "
			   "cannot be sent within 10 s of the end are counted as dropped (docs/clickhouse.md)");
	record->add_option("--clickhouse-cluster", rec.clickhouse_cluster,
			   "With --clickhouse: ship through Distributed tables over this cluster of the server's "
			   "remote_servers (each table's rows in TABLE_local on every shard)");
	record->add_option("-p,--pid", rec.pid, "Attach to this running process and its descendants");
	record->add_option("--ready-file", rec.ready_file,
			   "Write this file once every probe is attached (before the command starts; with -p, once "
			   "the process tree is followed): one line of JSON with eacgm's pid, the probes and processes "
			   "traced and the CLOCK_MONOTONIC time in ns. Written whole (by rename); a stale one is "
			   "removed at start and the file is left in place at the end. Wait on it (or on the stderr "
			   "line 'eacgm: recording (...)') instead of guessing when tracing has begun");
}

// record: what the layers read, and how often.
void add_record_layers(CLI::App *record, RecordArgs &rec)
{
	record->add_option("--torch-ops", rec.torch_ops,
			   "Extra PyTorch operators to trace, comma separated, named as in at::_ops (an overload is "
			   "joined with '_': add__Tensor) or as regular expressions ('add_.*'); each call costs a "
			   "uprobe hit")
		->delimiter(',');
	record->add_option("--sample-hz", rec.sample_hz,
			   "Python layer: stack samples per second of CPU time (0: only the stacks behind "
			   "CUDA/NCCL/torch calls)")
		->capture_default_str()
		->check(CLI::Range(0u, 10000u));
	record->add_option("--python-entries", rec.python_entries,
			   "Python layer: trace entries into the eval loop exactly (a uprobe on "
			   "_PyEval_EvalFrameDefault). auto: on 3.11+, where only calls from C enter it (callbacks, "
			   "hooks, module calls, threads); all: on 3.8-3.10 too, where every Python call enters it "
			   "(exact calls, a uprobe each); off (the default: importing a large package makes tens of "
			   "thousands of entries, and the import phase's nesting comes out too deep)")
		->capture_default_str()
		->check(CLI::IsMember({"auto", "all", "off"}));
	record->add_option("--gpu-hz", rec.gpu_hz, "GPU layer: NVML samples per second per device")
		->capture_default_str()
		->check(CLI::Range(0.1, 1000.0));
	record->add_option("--host-interval-ms", rec.host_interval_ms,
			   "Host layer: length of the intervals the kernel aggregates scheduling, fault and network "
			   "counts over")
		->capture_default_str()
		->check(CLI::Range(10u, 60000u));
}

// record: detection, stopping, and what tracing may cost.
void add_record_cost(CLI::App *record, RecordArgs &rec)
{
	// Hidden: a benchmark's input, not a user's (bench/pipeline_cost.sh).
	record->add_option("--raw-dump", rec.raw_dump,
			   "Also write every span record decode sees, for bench_pipeline_cost --replay")
		->group("");
	record->add_flag("!--no-detect", rec.detect,
			 "Do not score calls online for anomalies (eacgm detect can still do it on the recording)");
	record->add_option("--detect-fpr", rec.detect_fpr,
			   "Online detection's target false-alarm rate per call (a training step makes tens of calls: "
			   "1e-4 is a false alarm every few hundred steps)")
		->capture_default_str()
		->check(CLI::Range(1e-9, 0.5));
	record->add_option("--stop-timeout", rec.stop_timeout_s,
			   "After Ctrl-C (or SIGINT/SIGTERM sent to eacgm, which passes it on): seconds the command "
			   "gets to finish (a job that saves a checkpoint on SIGINT needs longer) before the recording "
			   "stops without it; the command goes on running, untraced")
		->capture_default_str()
		->check(CLI::Range(0.0, 86400.0));
	record->add_option(
		      "--overhead-budget", rec.overhead_budget_pct,
		      "Percent of the CPU of the threads making traced calls that the calls may cost (each costs "
		      "a uprobe trap, about a microsecond, and what the probe reads: a Python stack a few more), "
		      "and percent of one core eacgm may spend handling them (what eacgm's own CPU takes from those "
		      "threads, on a machine with no idle core, counts against the first; what is counted of the "
		      "first is held to half of it, as a training step measured about twice the count). Past "
		      "either the hottest functions are probed in bursts, a share "
		      "of each second, and each call seen stands for those missed: their counts and totals "
		      "become estimates, marked ~ in the summary. 0: every call, whatever it costs")
		->capture_default_str()
		->check(CLI::Range(0.0, 100.0));
	record->add_option("--nice", rec.nice,
			   "Niceness of eacgm's own threads (0-19): at 10 eacgm runs in the time a busy job gives up "
			   "rather than preempting it, and still gets a tenth of a contended core; the command it "
			   "launches keeps its own")
		->capture_default_str()
		->check(CLI::Range(0, 19));
	record->add_option("--budget-after", rec.budget_after_s,
			   "Seconds before the overhead budget first acts (the cost is measured meanwhile; a shorter "
			   "recording keeps every call)")
		->capture_default_str()
		->check(CLI::Range(0.0, 86400.0));
	record->add_option(
		      "--hang-after", rec.hang_after_s,
		      "Report a call that waits on other processes (a collective, the wait for one, an NCCL "
		      "communicator's set-up) still in flight after this many seconds: a line on stderr naming "
		      "the call, pid, rank, sequence number, age, Python stack and the ranks that have not entered "
		      "that collective (missing_ranks), and a 'hang' row in the recording's events. 0: off")
		->capture_default_str()
		->check(CLI::Range(0.0, 86400.0));
	record->add_flag("--bpf-stats", rec.bpf_stats,
			 "Have the kernel count eacgm's BPF programs' runs and run time (the recording's meta "
			 "bpf_runs:*, bpf_ns:*, and the host layer's share in host_layer_cpu_pct). Off by default: "
			 "it adds two clock reads to every BPF program run on the machine, about 60 ns to each "
			 "traced call");
	// At most 1 GiB (as serve's ring_buffer_kb): the buffer is the kernel's
	// memory, locked, and a few MiB already hold seconds of calls.
	record->add_option("--ring-buffer-kb", rec.ring_buffer_kb,
			   "Span ring buffer size in KiB, a power of two (records beyond it are counted as lost)")
		->check(CLI::Range(4u, 1048576u))
		->capture_default_str();
	record->footer(
		"Ends when every traced process has exited: the command and the processes it started "
		"(eacgm then exits with the command's exit code), or the process attached to and its "
		"descendants, whether they exit before, during or after the attach; or on Ctrl-C (the command gets "
		"--stop-timeout to finish; a second Ctrl-C discards the recording). A process given with -p that is "
		"gone or a zombie, or "
		"that exits before eacgm has tracked it, is an error (exit 1).\nNeeds root (CAP_BPF, CAP_PERFMON).");
}

CLI::App *add_record(CLI::App &app, RecordArgs &rec)
{
	auto *record = app.add_subcommand("record", "Record a command (after --) or a running process (-p)");
	add_record_outputs(record, rec);
	add_record_layers(record, rec);
	add_record_cost(record, rec);
	return record;
}

// export and summary: a recording in, a trace or a table out.
void add_readers(CLI::App &app, Commands &c)
{
	c.export_cmd = app.add_subcommand(
		"export", "Write a recording as a Perfetto trace, or as a SQLite file with a row per span");
	c.export_cmd->add_option("recording", c.db, "Recording (.db) written by 'eacgm record'")->required();
	auto *trace = c.export_cmd->add_option(
		"--perfetto", c.perfetto,
		"Trace to write, in the format its name ends with: .pftrace (Perfetto's own, compact) or .json "
		"(Chrome's trace-event JSON)");
	auto *flat = c.export_cmd->add_option(
		"--sqlite", c.flat,
		"SQLite file to write with a row per span (the layout of recordings before version 4, with its "
		"`spans` view): for tools that cannot load eacgm_sql.so; a new file");
	trace->excludes(flat); // one of them: dispatch() says so when neither is given

	c.sql_cmd =
		app.add_subcommand("sql", "Run SQL on a recording (read-only), `spans` included, and print the rows");
	c.sql_cmd->add_option("recording", c.sql.db, "Recording (.db) written by 'eacgm record'")->required();
	c.sql_cmd->add_option("query", c.sql.query, "SQL: one statement or several, separated by ';'")->required();
	c.sql_cmd->add_option("--format", c.sql.format, "list (columns separated by |), csv, or json (an object a row)")
		->capture_default_str()
		->check(CLI::IsMember({"list", "csv", "json"}));
	c.sql_cmd->add_flag("!--no-header", c.sql.header, "Leave out the line of column names (list and csv)");
	c.sql_cmd->footer("Tables: spans (a row per call), processes, threads, metrics, events, anomalies, drops, "
			  "meta; see docs/store.md. The same `spans` in the sqlite3 shell or Python: load "
			  "eacgm_sql.so (installed beside eacgm).");

	c.summary_cmd = app.add_subcommand("summary", "Print per-layer, per-function statistics of a recording");
	c.summary_cmd->add_option("recording", c.db, "Recording (.db) written by 'eacgm record'")->required();
}

CLI::App *add_detect(CLI::App &app, DetectArgs &da)
{
	auto *det = app.add_subcommand("detect",
				       "Find anomalous calls in a recording (Gaussian mixtures per function) "
				       "and their causes; writes them into the recording");
	det->add_option("recording", da.db, "Recording (.db) written by 'eacgm record'")->required();
	det->add_flag("--json", da.json, "Print anomalies and per-function models as JSON");
	det->add_option("--fpr", da.fpr,
			"Target false-alarm rate: each function's threshold is this quantile of "
			"its training scores")
		->capture_default_str()
		->check(CLI::Range(1e-9, 0.5));
	det->add_option("--covariance", da.covariance, "Covariance of each mixture component")
		->capture_default_str()
		->check(CLI::IsMember({"full", "diag"}));
	det->add_option("--components", da.components, "Components per function, MIN-MAX, chosen by BIC")
		->capture_default_str();
	det->add_option("--rule", da.rule,
			"Score: density under the most likely component (component, the paper's "
			"rule) or of the whole mixture (mixture)")
		->capture_default_str()
		->check(CLI::IsMember({"component", "mixture"}));
	det->add_flag("--replay", da.replay,
		      "Judge the calls as the live agent does (record, serve): replayed in time order, each "
		      "function's first --cold-start calls train its first model and are not scored, refits on a "
		      "sliding --window every --refit-every calls. Without it each function is fitted on all its "
		      "calls and every call is scored");
	det->add_option("--window", da.window_s,
			"With --replay: training window in seconds (the most recent events of a function)")
		->capture_default_str()
		->check(CLI::PositiveNumber);
	det->add_option("--cold-start", da.cold_start,
			"With --replay: calls of a function that train its first model (not scored)")
		->capture_default_str()
		->check(CLI::Range(20, 1000000));
	det->add_option("--refit-every", da.refit_every,
			"With --replay: calls of a function between refits of its model")
		->capture_default_str()
		->check(CLI::Range(1, 100000000));
	det->add_option("--restarts", da.restarts, "k-means++ initialisations per component count (best kept)")
		->capture_default_str()
		->check(CLI::Range(1, 100));
	det->add_option("--seed", da.seed, "Seed of the k-means++ initialisation")->capture_default_str();
	det->add_option("--var-floor", da.var_floor, "Smallest component variance, in standard deviations squared")
		->capture_default_str()
		->check(CLI::Range(1e-9, 1.0));
	det->add_option("--min-weight", da.min_weight,
			"Smallest share of calls a component may hold (rarer modes "
			"are not learnt as normal)")
		->capture_default_str()
		->check(CLI::Range(0.0, 0.5));
	det->add_option("--min-slowdown", da.min_slowdown,
			"A call flagged for its duration or its gap is reported only when that is at least this "
			"many times the typical one (1: any) ...")
		->capture_default_str()
		->check(CLI::Range(1.0, 1000.0));
	det->add_option("--min-excess", da.min_excess_us, "... and at least this many microseconds longer (0: any) ...")
		->capture_default_str()
		->check(CLI::Range(0.0, 1e9));
	det->add_option("--noise-alpha", da.noise_alpha,
			"... and more than the machine's own stalls explain: the chance that stalls of that size, as "
			"often as the recording's other short functions show them, slowed as many of the function's "
			"calls is below this (0: no such test)")
		->capture_default_str()
		->check(CLI::Range(0.0, 1.0));
	det->add_option("--sure-excess", da.sure_excess_us,
			"... unless it is at least this many microseconds longer, which is told without that test "
			"(0: every slowdown takes it)")
		->capture_default_str()
		->check(CLI::Range(0.0, 1e9));
	det->add_option("--max-fit-rows", da.max_fit_rows,
			"EM fits a function's mixture on at most this many of its calls, evenly spaced (0: all); "
			"every call is still scored and sets the threshold")
		->capture_default_str();
	det->add_option("--features", da.features,
			"Write every call's features, score and verdict to this CSV file (the table any other "
			"detector can be given; not with --replay)");
	det->add_option("--layers", da.layers, "Only spans of these layers, comma separated")->delimiter(',');
	det->add_flag("--no-store", da.no_store, "Do not write the anomalies into the recording");
	det->add_option("--max-rows", da.max_rows, "Anomalies printed (0: all)")->capture_default_str();
	det->footer("Features, model and causes: see docs/detection.md and src/detect/features.h.");

	return det;
}

void add_probes(CLI::App &app, Commands &c)
{
	ProbesArgs &pa = c.probes;
	c.probes_cmd =
		app.add_subcommand("probes", "Find a library's functions by pattern and write a probe spec for them");
	c.probes_cmd->require_subcommand(1);
	c.list_cmd = c.probes_cmd->add_subcommand("list",
						  "List the functions whose demangled name matches, with file offsets, "
						  "sizes and aliases");
	auto *pgen = c.probes_cmd->add_subcommand("generate",
						  "Write a probe spec (for 'eacgm record --spec') tracing the "
						  "functions that match");
	for (auto *s : {c.list_cmd, pgen}) {
		s->add_option("--lib", pa.lib,
			      "Library or executable: a path, or a soname in the loader cache "
			      "(e.g. libnccl.so.2)")
			->required();
		s->add_option("--match", pa.match, "Regular expression searched in demangled (or raw) function names")
			->required();
		s->add_option("--max", pa.max, "Refuse more matches than this (each traced call costs a uprobe hit)")
			->capture_default_str();
	}
	c.list_cmd->add_flag("--all", pa.all, "List every match, however many");
	pgen->add_option("-o,--output", pa.output, "Spec file (JSON) to write")->required();
	pgen->add_option("--layer", pa.layer, "Layer name of the spec's spans")->capture_default_str();
}

// cluster summary|stragglers|hangs: one subcommand each, the same options.
void add_cluster(CLI::App &app, Commands &c)
{
	ClusterArgs &ca = c.cluster;
	c.cluster_cmd = app.add_subcommand(
		"cluster",
		"Answer across every node that ships to one ClickHouse (record --clickhouse, serve's [clickhouse])");
	c.cluster_cmd->require_subcommand(1);
	struct What {
		const char *name, *help;
	};
	for (What w :
	     {What{"summary", "Per function across the nodes: calls, total, mean and longest time, hosts and ranks"},
	      What{"stragglers",
		   "Per collective round across ranks: the rank that arrived last, and by how much "
		   "(the latest start less the earliest)"},
	      What{"hangs",
		   "Collectives in flight past an agent's hang limit (--hang-after, hang_after_s): the "
		   "ranks inside, and the ranks of the job that never arrived (missing_ranks)"}}) {
		auto *s = c.cluster_cmd->add_subcommand(w.name, w.help);
		s->callback([&ca, name = std::string(w.name)] { ca.what = name; });
		s->add_option("--clickhouse", ca.clickhouse,
			      "ClickHouse's HTTP address, http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]")
			->required();
		s->add_option("--job", ca.job, "Only this job's rows");
		s->add_option("--host", ca.host, "Only this node's rows");
		s->add_option("--rank", ca.rank, "Only this rank's rows")->check(CLI::NonNegativeNumber);
		s->add_option("--since", ca.since, "Only rows that started this long ago or later: 30s, 15m, 2h, 7d");
		s->add_option("--limit", ca.limit, "Rows printed")->capture_default_str()->check(CLI::PositiveNumber);
		s->add_flag("--show-sql", ca.show_sql, "Print the SQL run (on stderr), to start your own queries from");
	}
	auto *schema = c.cluster_cmd->add_subcommand(
		"schema",
		"Print the statements that make eacgm's tables in ClickHouse: an agent runs them on the "
		"server it ships to; a shard of a cluster that no agent ships to needs them run by hand");
	schema->callback([&ca] { ca.what = "schema"; });
	schema->add_option("--clickhouse", ca.clickhouse,
			   "ClickHouse's HTTP address, http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE] (its "
			   "database is the one named; nothing is sent to it)")
		->required();
	schema->add_option("--cluster", ca.cluster,
			   "The tables as [clickhouse] cluster makes them: TABLE_local, and TABLE Distributed over "
			   "this cluster of remote_servers");
	schema->add_option("--ttl-days", ca.ttl_days,
			   "With a TTL of this many days (servers from 19.6; on older ones the agent drops day "
			   "partitions past keep_days itself)")
		->check(CLI::NonNegativeNumber);
	c.cluster_cmd->footer("The tables and the columns the SQL reads: docs/clickhouse.md.");
}

int dispatch(Commands &c)
{
	if (c.record_cmd->parsed())
		return run_record(c.rec);
	if (c.serve_cmd->parsed())
		return run_serve(c.serve);
	if (c.export_cmd->parsed()) {
		if (c.flat.empty() && c.perfetto.empty())
			return fail("export: give --perfetto TRACE.json (a trace) or --sqlite FILE.db (a row per span)",
				    2);
		return c.flat.empty() ? run_export(c.db, c.perfetto) : run_export_sqlite(c.db, c.flat);
	}
	if (c.sql_cmd->parsed())
		return run_sql(c.sql);
	if (c.cluster_cmd->parsed())
		return run_cluster(c.cluster);
	if (c.summary_cmd->parsed())
		return run_summary(c.db);
	if (c.detect_cmd->parsed())
		return run_detect(c.detect);
	if (c.merge_cmd->parsed())
		return run_merge(c.merge);
	if (c.doctor_cmd->parsed())
		return run_doctor();
	if (c.probes_cmd->parsed()) {
		c.probes.action = c.list_cmd->parsed() ? "list" : "generate";
		return run_probes(c.probes);
	}
	return 2;
}

} // namespace

int main(int argc, char **argv)
{
	// Everything after "--" is the traced command, untouched by our parser.
	Commands c;
	int split = argc;
	for (int i = 1; i < argc; i++)
		if (!std::strcmp(argv[i], "--")) {
			split = i;
			break;
		}
	for (int i = split + 1; i < argc; i++)
		c.rec.command.push_back(argv[i]);

	CLI::App app{"eacgm: traces CUDA, NCCL, PyTorch, Python, GPU and host activity of ML jobs with eBPF, "
		     "without changing them"};
	app.set_version_flag("--version", EACGM_VERSION);
	app.require_subcommand(1);
	c.record_cmd = add_record(app, c.rec);
	add_readers(app, c);
	c.detect_cmd = add_detect(app, c.detect);
	c.merge_cmd = add_merge(app, c.merge);
	c.serve_cmd = add_serve(app, c.serve);
	c.doctor_cmd = app.add_subcommand("doctor", "Check kernel features, privileges, libraries and Pythons");
	add_probes(app, c);
	add_cluster(app, c);
	try {
		app.parse(split, argv);
	} catch (const CLI::ParseError &e) {
		// CLI11 prints the message; its own codes (105, 106, ...) mean
		// nothing to a shell, so usage errors exit 2 as is customary.
		return app.exit(e) == 0 ? 0 : 2;
	}
	if (!c.rec.command.empty() && !c.record_cmd->parsed()) {
		std::cerr << "eacgm: only 'record' takes a command after --\n";
		return 2;
	}
	return dispatch(c);
}
