// SPDX-License-Identifier: Apache-2.0
#include "probe/guard_server.h"

#include <algorithm>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sched.h>
#include <tuple>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "probe/pid_watch.h"

namespace eacgm {

// ---- Answering -------------------------------------------------------------

// A rearm is carried out only where its thread still is: stopped at the
// probe that asked (the probed instruction, or the one after it once the
// kernel has emulated or stepped it), its stack pointer at most this far
// below where it asked (the probed instruction's own push or sub).
constexpr uint64_t kRearmIpSlack = 16;  // an x86-64 instruction is at most 15 bytes; arm64's 4
constexpr uint64_t kRearmSpSlack = 512; // what a first instruction may take from the stack

// The thread is stopped already, nearly always: its SIGSTOP takes it on its
// way back to user mode, before the agent has woken. Else the agent yields
// the CPU to it for a while (it may share the agent's), then sleeps.
bool GuardAnswerer::wait_stopped(const eacgm_guard_request &r, uint64_t wait_ns)
{
	const uint64_t start = sys_.now_ns(), deadline = start + wait_ns;
	for (;;) {
		// Stopped, and off its CPU: its registers read (/proc says
		// "running" until then, a moment after the state letter is T).
		char st = sys_.state(r.tgid, r.tid);
		if ((st == 'T' || st == 't') && sys_.stack_pointer(r.tgid, r.tid))
			return true;
		const uint64_t now = sys_.now_ns();
		if (st == 0 || !stands(r) || now >= deadline)
			return false; // gone, given up by its thread, or never stopped
		sys_.pause_us(now - start < 1'000'000 ? 0 : 100);
	}
}

bool GuardAnswerer::stands(const eacgm_guard_request &r)
{
	auto g = sys_.guard_state(r.tid);
	if (!g)
		return false;
	// Every slot written already (another agent's guard, on a machine with
	// two): nothing left to do, and no stop to wait for (that agent's
	// SIGCONT may have ended this request's).
	bool left = false;
	for (uint32_t i = 0; i < r.n && i < EACGM_GUARD_SLOTS && !left; i++) {
		uint64_t now = 0;
		left = sys_.read(r.tid, r.slot[i], now) && now == r.expect[i];
	}
	if (!left)
		return false;
	if (r.kind == EACGM_GUARD_RESTORE)
		return g->abandoned_seq < r.seq;
	return g->seq == r.seq; // a rearm: the thread has asked nothing since
}

void GuardAnswerer::answer(const eacgm_guard_request &r)
{
	to_resume_.insert(r.tgid);
	asked_ns_.push_back(r.ts_ns);
	counts_.requests++;
	bool ok = wait_stopped(r, r.kind == EACGM_GUARD_RESTORE ? kRestoreWaitNs : kRearmWaitNs) && stands(r);
	if (ok && r.kind == EACGM_GUARD_REARM) {
		// Freed early (a SIGCONT for another thread) and stopped again
		// elsewhere: the frames it asked about may be gone.
		auto sp = sys_.stack_pointer(r.tgid, r.tid);
		auto ip = sys_.instruction_pointer(r.tgid, r.tid);
		ok = sp && ip && *sp <= r.sp && *sp + kRearmSpSlack >= r.sp && *ip >= r.ip &&
			*ip < r.ip + kRearmIpSlack;
	}
	if (!ok) {
		counts_.moot++;
		return;
	}
	for (uint32_t i = 0; i < r.n && i < EACGM_GUARD_SLOTS; i++) {
		uint64_t now = 0;
		if (!sys_.read(r.tid, r.slot[i], now) || now != r.expect[i])
			continue; // not what the program saw: leave it
		if (!sys_.write(r.tid, r.slot[i], r.value[i]))
			counts_.failed++;
		else if (r.kind == EACGM_GUARD_RESTORE)
			counts_.restored++;
		else
			counts_.rearmed++;
	}
	if (r.kind == EACGM_GUARD_RESTORE)
		sys_.mark_done(r.tid, r.seq);
}

std::set<uint32_t> GuardAnswerer::finish_batch()
{
	const uint64_t now = sys_.now_ns();
	for (uint64_t asked : asked_ns_) {
		const uint64_t held = now > asked ? now - asked : 0;
		counts_.held_ns += held;
		counts_.max_held_ns = std::max(counts_.max_held_ns, held);
	}
	asked_ns_.clear();
	return std::exchange(to_resume_, {});
}

void GuardAnswerer::resume_all()
{
	for (uint32_t tgid : finish_batch())
		sys_.resume(tgid);
}

// ---- The machine -----------------------------------------------------------

namespace {

// /proc and the guard's maps, for real.
class LinuxGuardSystem : public GuardSystem {
public:
	LinuxGuardSystem(int guards, int done, int stopped) : guards_(guards), done_(done), stopped_(stopped) {}

	char state(uint32_t tgid, uint32_t tid) override
	{
		auto stat = read_small_file(task_path(tgid, tid, "stat"));
		if (!stat)
			return 0;
		size_t close = stat->rfind(')'); // the name may hold spaces and parentheses
		return close != std::string::npos && close + 2 < stat->size() ? (*stat)[close + 2] : 0;
	}

	// /proc/TID/syscall of a thread stopped outside a system call: "-1 SP
	// PC"; inside one: "NR ARG1..ARG6 SP PC".
	std::optional<uint64_t> stack_pointer(uint32_t tgid, uint32_t tid) override
	{
		return syscall_word(tgid, tid, 2);
	}
	std::optional<uint64_t> instruction_pointer(uint32_t tgid, uint32_t tid) override
	{
		return syscall_word(tgid, tid, 1);
	}

	std::optional<eacgm_guard_thread> guard_state(uint32_t tid) override
	{
		UniqueFd fd = thread_pidfd(tid);
		int key = fd.get();
		eacgm_guard_thread g{};
		if (!fd || bpf_map_lookup_elem(guards_, &key, &g) != 0)
			return std::nullopt;
		return g;
	}

	bool read(uint32_t tid, uint64_t addr, uint64_t &value) override
	{
		iovec local{&value, sizeof(value)}, remote{reinterpret_cast<void *>(addr), sizeof(value)};
		return process_vm_readv(pid_t(tid), &local, 1, &remote, 1, 0) == sizeof(value);
	}

	bool write(uint32_t tid, uint64_t addr, uint64_t value) override
	{
		iovec local{&value, sizeof(value)}, remote{reinterpret_cast<void *>(addr), sizeof(value)};
		return process_vm_writev(pid_t(tid), &local, 1, &remote, 1, 0) == sizeof(value);
	}

	void mark_done(uint32_t tid, uint64_t seq) override
	{
		UniqueFd fd = thread_pidfd(tid);
		int key = fd.get();
		if (fd)
			bpf_map_update_elem(done_, &key, &seq, BPF_ANY);
	}

	// The watchdog's record goes first: a stop recorded after it is this
	// SIGCONT's to end or a later one's (its thread asks again).
	void resume(uint32_t tgid) override
	{
		bpf_map_delete_elem(stopped_, &tgid);
		kill(pid_t(tgid), SIGCONT);
	}

	uint64_t now_ns() override { return mono_ns(); }

	void pause_us(unsigned us) override
	{
		if (!us) {
			sched_yield();
			return;
		}
		timespec t{0, long(us) * 1000};
		nanosleep(&t, nullptr);
	}

private:
	static std::string task_path(uint32_t tgid, uint32_t tid, const char *file)
	{
		return "/proc/" + std::to_string(tgid) + "/task/" + std::to_string(tid) + "/" + file;
	}

	// The from_end-th word from the end of /proc/TID/syscall (1: PC, 2: SP).
	// No stream: the watchdog calls this in a child forked from threads.
	static std::optional<uint64_t> syscall_word(uint32_t tgid, uint32_t tid, size_t from_end)
	{
		auto text = read_small_file(task_path(tgid, tid, "syscall"));
		if (!text)
			return std::nullopt;
		std::vector<std::string> words;
		for (size_t at = 0; (at = text->find_first_not_of(" \n", at)) != std::string::npos;) {
			size_t end = text->find_first_of(" \n", at);
			words.push_back(text->substr(at, end - at));
			at = end;
		}
		if (words.size() < 3 || words.size() < from_end)
			return std::nullopt; // "running": not stopped after all
		return std::strtoull(words[words.size() - from_end].c_str(), nullptr, 0);
	}

	int guards_, done_, stopped_;
};

// Every request the ring holds, answered by `a`, until none is left; then
// each process resumed once (the server's loop and the watchdog's last act).
void answer_all(struct ring_buffer *rb, std::vector<eacgm_guard_request> &batch, GuardAnswerer &a)
{
	for (;;) {
		batch.clear();
		ring_buffer__consume(rb);
		if (batch.empty())
			break;
		for (auto &r : batch)
			a.answer(r);
	}
}

int on_request(void *ctx, void *data, size_t size)
{
	if (size >= sizeof(eacgm_guard_request))
		static_cast<std::vector<eacgm_guard_request> *>(ctx)->push_back(
			*static_cast<eacgm_guard_request *>(data));
	return 0;
}

// If eacgm dies while a guard program's request is unanswered, the process
// would stay stopped, and its unwinder would find the trampoline: a process
// of its own outlives eacgm to answer it. A child in a session of its own (a
// terminal's Ctrl-C is not for it), with the guard's ring and maps and the
// read end of a pipe whose write end only eacgm holds. The pipe closing
// (the server done, or eacgm dead, whichever way) is its word: it answers
// what the ring still holds, sends SIGCONT to every process still in the
// record of stops (one eacgm had resumed but not yet struck off gets a
// SIGCONT it does not need), and exits. Forked from a process with threads,
// it uses nothing but system calls and malloc (which glibc makes safe in
// the child of a fork). Returns the write end and the child's pid, which
// the server reaps once it has closed the pipe.
std::pair<UniqueFd, pid_t> start_watchdog(const GuardServer::Maps &m)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return {UniqueFd(), -1};
	pid_t child = fork();
	if (child == 0) {
		setsid();
		for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE})
			signal(sig, SIG_IGN);
		// To 3..7: copied first above them, so that no dup2 overwrites one
		// still to be copied.
		const int keep[] = {p[0], bpf_map__fd(m.requests), m.guards, m.done, m.stopped};
		int high[5];
		for (int i = 0; i < 5; i++)
			if ((high[i] = fcntl(keep[i], F_DUPFD, 100)) < 0)
				_exit(1);
		for (int i = 0; i < 5; i++)
			if (dup2(high[i], 3 + i) < 0)
				_exit(1);
		syscall(SYS_close_range, 8, ~0u, 0); // the pipe's write end among them
		int devnull = open("/dev/null", O_RDWR);
		for (int fd : {0, 1, 2})
			dup2(devnull, fd);
		pollfd w{3, POLLIN, 0};
		while (poll(&w, 1, -1) < 0 && errno == EINTR) {
		}
		LinuxGuardSystem sys(5, 6, 7);
		GuardAnswerer a(sys);
		std::vector<eacgm_guard_request> batch;
		if (struct ring_buffer *rb = ring_buffer__new(4, on_request, &batch, nullptr))
			answer_all(rb, batch, a);
		a.resume_all();
		uint32_t next = 0; // what no request reached the agent for
		for (int i = 0; i < 4096 && bpf_map_get_next_key(7, nullptr, &next) == 0; i++)
			sys.resume(next);
		_exit(0);
	}
	close(p[0]);
	return {UniqueFd(p[1]), child};
}

} // namespace

// ---- The server ------------------------------------------------------------

Result<std::unique_ptr<GuardServer>> GuardServer::start(const Maps &maps)
{
	std::unique_ptr<GuardServer> s(new GuardServer());
	s->maps_ = maps;
	s->sys_ = std::make_unique<LinuxGuardSystem>(maps.guards, maps.done, maps.stopped);
	s->answerer_ = std::make_unique<GuardAnswerer>(*s->sys_);
	s->rb_ = ring_buffer__new(bpf_map__fd(maps.requests), on_request, &s->batch_, nullptr);
	if (!s->rb_)
		return errno_error(errno, "cannot read the exception guard's requests");
	s->wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC));
	if (!s->wake_)
		return errno_error(errno, "cannot make the exception guard's eventfd");
	std::tie(s->watchdog_, s->watchdog_pid_) = start_watchdog(maps);
	s->thread_ = std::thread([p = s.get()] { p->run(); });
	return s;
}

// Every request in the ring, answered; again while answering let more in
// (a second thread of a process that stopped meanwhile); then each process
// resumed once. A SIGCONT may free a thread whose own request came in after
// the last read: its program stops it again before it reads a slot.
void GuardServer::drain()
{
	answer_all(rb_, batch_, *answerer_);
	// The counts before the processes go on: whoever reads them once a
	// traced program has ended finds every answer it had.
	const std::set<uint32_t> resume = answerer_->finish_batch();
	{
		std::lock_guard<std::mutex> lock(mu_);
		counts_ = answerer_->counts();
	}
	for (uint32_t tgid : resume)
		sys_->resume(tgid);
}

void GuardServer::run()
{
	pollfd fds[2] = {{ring_buffer__epoll_fd(rb_), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
	for (;;) {
		// libbpf's epoll fd over the ring: readable while it holds a
		// record (a program submits each with a wakeup). The timeout only
		// bounds how late a lost wakeup would be seen.
		if (poll(fds, 2, 1000) < 0 && errno != EINTR)
			break;
		drain();
		if (fds[1].revents)
			break;
	}
}

GuardServer::~GuardServer()
{
	if (thread_.joinable()) {
		uint64_t one = 1;
		(void)!::write(wake_.get(), &one, sizeof(one));
		thread_.join();
	}
	if (rb_) {
		drain(); // what came in since
		ring_buffer__free(rb_);
	}
	// Whatever a program stopped and no request reached us for (resume()
	// strikes each off: the first key again, until none is left).
	uint32_t next = 0;
	for (int i = 0; sys_ && i < 4096 && bpf_map_get_next_key(maps_.stopped, nullptr, &next) == 0; i++)
		sys_->resume(next);
	watchdog_.reset(); // its word to go
	if (watchdog_pid_ > 0)
		while (waitpid(watchdog_pid_, nullptr, 0) < 0 && errno == EINTR) {
		}
}

GuardCounts GuardServer::counts() const
{
	std::lock_guard<std::mutex> lock(mu_);
	return counts_;
}

} // namespace eacgm
