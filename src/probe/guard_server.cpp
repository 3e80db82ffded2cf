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
#include <sstream>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL // linux/pidfd.h, 6.9+; glibc 2.36 lacks it
#endif

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
		char st = sys_.state(r.tgid, r.tid);
		if (st == 'T' || st == 't')
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
	if (r.kind == EACGM_GUARD_RESTORE)
		return g->abandoned_seq < r.seq;
	return g->seq == r.seq; // a rearm: the thread has asked nothing since
}

void GuardAnswerer::answer(const eacgm_guard_request &r, uint64_t wait_ns)
{
	to_resume_.insert(r.tgid);
	asked_ns_.push_back(r.ts_ns);
	counts_.requests++;
	bool ok = wait_stopped(r, wait_ns) && stands(r);
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

void GuardAnswerer::resume_all()
{
	for (uint32_t tgid : to_resume_)
		sys_.resume(tgid);
	to_resume_.clear();
	const uint64_t now = sys_.now_ns();
	for (uint64_t asked : asked_ns_) {
		const uint64_t held = now > asked ? now - asked : 0;
		counts_.held_ns += held;
		counts_.max_held_ns = std::max(counts_.max_held_ns, held);
	}
	asked_ns_.clear();
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
		UniqueFd fd = thread_fd(tid);
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
		UniqueFd fd = thread_fd(tid);
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
	static std::optional<uint64_t> syscall_word(uint32_t tgid, uint32_t tid, size_t from_end)
	{
		auto text = read_small_file(task_path(tgid, tid, "syscall"));
		if (!text)
			return std::nullopt;
		std::istringstream in(*text);
		std::vector<std::string> words;
		for (std::string w; in >> w;)
			words.push_back(w);
		if (words.size() < 3 || words.size() < from_end)
			return std::nullopt; // "running": not stopped after all
		return std::strtoull(words[words.size() - from_end].c_str(), nullptr, 0);
	}

	// The key of a thread's task storage: a pidfd of the thread.
	static UniqueFd thread_fd(uint32_t tid)
	{
		return UniqueFd(int(syscall(SYS_pidfd_open, pid_t(tid), PIDFD_THREAD)));
	}

	int guards_, done_, stopped_;
};

// If eacgm dies while a guard program's stop is unanswered, the process
// would stay stopped: a process of its own outlives eacgm to resume it. A
// grandchild (eacgm never reaps it, nor sees it among its children), in a
// session of its own (a terminal's Ctrl-C is not for it), with nothing but
// eacgm's pidfd and the guard's record of stops. It waits for eacgm to end,
// then sends SIGCONT to every process in the record (a process eacgm had
// already resumed but not yet struck off gets a SIGCONT it does not need).
// Forked from a process with threads: only async-signal-safe calls after it.
void start_watchdog(int stopped_map)
{
	int self = int(syscall(SYS_pidfd_open, getpid(), 0));
	if (self < 0)
		return;
	pid_t child = fork();
	if (child == 0) {
		if (fork() != 0)
			_exit(0);
		setsid();
		for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE})
			signal(sig, SIG_IGN);
		if (dup2(self, 3) < 0 || dup2(stopped_map, 4) < 0)
			_exit(1);
		syscall(SYS_close_range, 5, ~0u, 0);
		int devnull = open("/dev/null", O_RDWR);
		for (int fd : {0, 1, 2})
			dup2(devnull, fd);
		pollfd p{3, POLLIN, 0};
		while (poll(&p, 1, -1) < 0 && errno == EINTR) {
		}
		uint32_t key = 0, next = 0;
		bool first = true;
		while (bpf_map_get_next_key(4, first ? nullptr : &key, &next) == 0) {
			kill(pid_t(next), SIGCONT);
			key = next, first = false;
		}
		_exit(0);
	}
	close(self);
	if (child > 0)
		while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
		}
}

} // namespace

// ---- The server ------------------------------------------------------------

Result<std::unique_ptr<GuardServer>> GuardServer::start(const Maps &maps)
{
	std::unique_ptr<GuardServer> s(new GuardServer());
	s->maps_ = maps;
	s->sys_ = std::make_unique<LinuxGuardSystem>(maps.guards, maps.done, maps.stopped);
	s->answerer_ = std::make_unique<GuardAnswerer>(*s->sys_);
	auto on_request = [](void *ctx, void *data, size_t size) {
		if (size >= sizeof(eacgm_guard_request))
			static_cast<GuardServer *>(ctx)->batch_.push_back(*static_cast<eacgm_guard_request *>(data));
		return 0;
	};
	s->rb_ = ring_buffer__new(bpf_map__fd(maps.requests), on_request, s.get(), nullptr);
	if (!s->rb_)
		return errno_error(errno, "cannot read the exception guard's requests");
	s->wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC));
	if (!s->wake_)
		return errno_error(errno, "cannot make the exception guard's eventfd");
	start_watchdog(maps.stopped);
	s->thread_ = std::thread([p = s.get()] { p->run(); });
	return s;
}

// Every request in the ring, answered; again while answering let more in
// (a second thread of a process that stopped meanwhile); then each process
// resumed once. A SIGCONT may free a thread whose own request came in after
// the last read: its program stops it again before it reads a slot.
void GuardServer::drain()
{
	for (;;) {
		batch_.clear();
		ring_buffer__consume(rb_);
		if (batch_.empty())
			break;
		for (auto &r : batch_)
			answerer_->answer(r);
	}
	answerer_->resume_all();
	std::lock_guard<std::mutex> lock(mu_);
	counts_ = answerer_->counts();
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
}

GuardCounts GuardServer::counts() const
{
	std::lock_guard<std::mutex> lock(mu_);
	return counts_;
}

} // namespace eacgm
