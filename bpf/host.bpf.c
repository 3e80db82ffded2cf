// SPDX-License-Identifier: GPL-2.0
/* The host layer: what the machine does to the traced processes, aggregated
 * in the kernel per process and interval so that the cost stays one map
 * update per event however busy the machine is. Scheduling (delay, off-CPU
 * time, switches, migrations, who held the CPU while a traced thread
 * waited), page faults, socket bytes and packets, TCP retransmits and RTT.
 *
 * Only tracepoints and perf events: this kernel has no kprobes. Two map
 * generations per kind: programs write the one `gen` names, the agent flips
 * `gen` at an interval's end and reads and clears the other one later
 * (src/layers/host.cpp says why). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "eacgm/abi/host.h"
#include "traced.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_UDP 17
#define MSG_PEEK 2
#define TCP_CLOSE 7
#define TCP_SYN_SENT 2

/* Which generation the programs write; flipped by the agent (mmapped .bss). */
volatile __u32 gen;

#define GEN_MAPS(name, type_, key_, value_, entries)                                                                   \
	struct {                                                                                                       \
		__uint(type, type_);                                                                                   \
		__uint(max_entries, entries);                                                                          \
		__type(key, key_);                                                                                     \
		__type(value, value_);                                                                                 \
	} name##0 SEC(".maps"), name##1 SEC(".maps")

/* Plain hashes with atomic adds rather than per-CPU hashes: per-CPU values
 * are preallocated for every possible CPU, 100+ MB on a large machine. */
GEN_MAPS(stats, BPF_MAP_TYPE_HASH, __u32, struct eacgm_host_stats, 4096);
GEN_MAPS(interf, BPF_MAP_TYPE_HASH, struct eacgm_host_interf_key, struct eacgm_host_interf, 16384);
GEN_MAPS(conns, BPF_MAP_TYPE_HASH, struct eacgm_host_conn_key, struct eacgm_host_conn, 16384);

/* Which traced process a socket belongs to, learnt in process context (send,
 * receive, connect), for events that run in softirq context on whatever task
 * was current (transmit, receive, retransmit). LRU: sockets other than TCP
 * have no close tracepoint to forget them by. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* struct sock * */
	__type(value, __u32);
} sock_owner SEC(".maps");

/* Per traced thread: since when it is off the CPU (blocked) and since when
 * it waits for one (runnable), and its page-fault counters when last seen.
 * Task storage goes away with the task. */
struct thread_state {
	__u64 off_ts;
	__u64 wait_ts;
	__u64 min_flt, maj_flt;
	__u32 flt_known; /* min_flt and maj_flt hold a reading */
	__u32 pad;
};
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} threads SEC(".maps");

/* Per CPU: the last tasks that ran on it (idle left out), so that a wait
 * ending on this CPU is split among the tasks that ran during it. */
struct run_slot {
	__u64 start, end;
	__u32 tgid, pid;
	/* The comm is read only when an interferer is first charged: reading
	 * it at every switch of every task cost more than the rest of this
	 * program. The task may be gone by then: its pid is checked. */
	struct task_struct *task;
};
struct run_history {
	__u64 last_switch;
	__u32 head, pad;
	struct run_slot slots[EACGM_HOST_RUN_HISTORY];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct run_history);
} history SEC(".maps");

static struct eacgm_host_stats *stats_of(__u32 tgid)
{
	void *m = gen ? (void *)&stats1 : (void *)&stats0;
	struct eacgm_host_stats *s = bpf_map_lookup_elem(m, &tgid);
	if (s)
		return s;
	struct eacgm_host_stats zero = {};
	bpf_map_update_elem(m, &tgid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(m, &tgid);
}

#define ADD(field, v) __sync_fetch_and_add(&(field), (v))

static void add_interference(__u32 tgid, const struct run_slot *slot, __u64 ns)
{
	void *m = gen ? (void *)&interf1 : (void *)&interf0;
	struct eacgm_host_interf_key k = {.tgid = tgid, .interferer = slot->tgid};
	struct eacgm_host_interf *v = bpf_map_lookup_elem(m, &k);
	if (v) {
		ADD(v->ns, ns);
		return;
	}
	struct eacgm_host_interf nv = {.ns = ns};
	struct task_struct *t = slot->task;
	if (BPF_CORE_READ(t, pid) == slot->pid)
		BPF_CORE_READ_STR_INTO(&nv.comm, t, group_leader, comm);
	else
		__builtin_memcpy(nv.comm, "(exited)", 9);
	if (bpf_map_update_elem(m, &k, &nv, BPF_NOEXIST) && (v = bpf_map_lookup_elem(m, &k)))
		ADD(v->ns, ns); /* another CPU created it first */
}

static void record_run(struct run_history *h, struct task_struct *prev, __u64 now)
{
	__u64 start = h->last_switch;
	h->last_switch = now;
	if (prev->pid == 0 || start == 0) /* idle, or the first switch seen */
		return;
	struct run_slot *s = &h->slots[h->head % EACGM_HOST_RUN_HISTORY];
	s->start = start;
	s->end = now;
	s->tgid = prev->tgid;
	s->pid = prev->pid;
	s->task = prev;
	h->head++;
}

/* A traced thread waited on this CPU since `since`: charges every task that
 * ran here meanwhile with its overlap. A wait longer than the history (16
 * switches) is charged only for the part the history covers. */
static void attribute_wait(struct run_history *h, __u32 tgid, __u64 since, __u64 now)
{
	for (int i = 0; i < EACGM_HOST_RUN_HISTORY; i++) {
		struct run_slot *s = &h->slots[i];
		__u64 from = s->start > since ? s->start : since;
		__u64 to = s->end < now ? s->end : now;
		if (s->tgid && to > from)
			add_interference(tgid, s, to - from);
	}
}

/* Page faults, from the kernel's own per-thread counters (what getrusage
 * sums): read when a traced thread leaves the CPU, its faults since the
 * last reading are added. Nothing runs per fault: a program on the fault
 * events, each fault, cost a busy ResNet-18 step about 1% (10 ms of BPF a
 * second). A thread first seen entering the CPU is read then, before it
 * runs, so nothing it does traced is missed; one already running when
 * tracing began is counted from its first switch. */
static void count_faults(struct thread_state *t, struct eacgm_host_stats *s, struct task_struct *task)
{
	__u64 min = task->min_flt, maj = task->maj_flt;
	if (t->flt_known && s) {
		if (min > t->min_flt)
			ADD(s->faults_minor, min - t->min_flt);
		if (maj > t->maj_flt)
			ADD(s->faults_major, maj - t->maj_flt);
	}
	t->min_flt = min;
	t->maj_flt = maj;
	t->flt_known = 1;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(host_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0;
	struct run_history *h = bpf_map_lookup_elem(&history, &zero);
	if (!h)
		return 0;
	record_run(h, prev, now);

	__u32 tgid = prev->tgid;
	if (tgid && eacgm_is_traced(tgid)) {
		struct thread_state *t = bpf_task_storage_get(&threads, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		struct eacgm_host_stats *s = stats_of(tgid);
		/* Still runnable (preempted, or yielded): it waits for the CPU
		 * from now. Otherwise it blocked. The kernel counts its nvcsw
		 * and nivcsw the same way, except a sleep cut short by a
		 * pending signal, which it counts as voluntary. */
		bool runnable = preempt || prev_state == 0;
		if (t) {
			t->off_ts = runnable ? 0 : now;
			t->wait_ts = runnable ? now : 0;
		}
		if (t)
			count_faults(t, s, prev);
		if (s) {
			if (runnable)
				ADD(s->switches_involuntary, 1);
			else
				ADD(s->switches_voluntary, 1);
		}
	}

	tgid = next->tgid;
	if (tgid && eacgm_is_traced(tgid)) {
		struct thread_state *t = bpf_task_storage_get(&threads, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!t)
			return 0;
		if (!t->flt_known) /* first seen: its counters before it runs */
			count_faults(t, 0, next);
		struct eacgm_host_stats *s = stats_of(tgid);
		if (s && t->wait_ts && now > t->wait_ts) {
			__u64 d = now - t->wait_ts;
			ADD(s->sched_delay_ns, d);
			ADD(s->sched_waits, 1);
			if (d > s->sched_delay_max_ns)
				s->sched_delay_max_ns = d;
			attribute_wait(h, tgid, t->wait_ts, now);
		}
		if (s && t->off_ts && now > t->off_ts)
			ADD(s->offcpu_ns, now - t->off_ts);
		t->off_ts = 0;
		t->wait_ts = 0;
	}
	return 0;
}

/* A blocked thread becomes runnable: its wait for a CPU starts. */
static void woken(struct task_struct *p, bool is_new)
{
	__u32 tgid = p->tgid;
	if (!eacgm_is_traced(tgid))
		return;
	struct thread_state *t = bpf_task_storage_get(&threads, p, 0, is_new ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	/* A wakeup of a thread that has not left its CPU (woken before it
	 * slept) starts no wait. */
	if (t && (is_new || t->off_ts) && !t->wait_ts)
		t->wait_ts = bpf_ktime_get_ns();
	if (t && is_new && !t->flt_known) /* a new task's counters start at 0 */
		t->flt_known = 1;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(host_wakeup, struct task_struct *p)
{
	woken(p, false);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(host_wakeup_new, struct task_struct *p)
{
	woken(p, true);
	return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(host_migrate, struct task_struct *p, int dest_cpu)
{
	__u32 tgid = p->tgid;
	if (!eacgm_is_traced(tgid))
		return 0;
	struct eacgm_host_stats *s = stats_of(tgid);
	if (s)
		ADD(s->migrations, 1);
	return 0;
}

/* Socket bytes at the end of sock_sendmsg/sock_recvmsg (6.3+): process
 * context, every socket family, `ret` is the byte count or an error. */
static void sock_io(struct sock *sk, int ret, int flags, bool tx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (ret <= 0 || (flags & MSG_PEEK) || !eacgm_is_traced(tgid))
		return;
	__u64 key = (__u64)sk;
	bpf_map_update_elem(&sock_owner, &key, &tgid, BPF_ANY);
	struct eacgm_host_stats *s = stats_of(tgid);
	if (!s)
		return;
	if (tx) {
		ADD(s->tx_bytes, ret);
	} else {
		ADD(s->rx_bytes, ret);
		/* One receive call takes one UDP datagram; TCP segments are
		 * counted as they arrive (host_tcp_probe). */
		if (sk->sk_protocol == IPPROTO_UDP)
			ADD(s->rx_packets, 1);
	}
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(host_send, struct sock *sk, int ret, int flags)
{
	sock_io(sk, ret, flags, true);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(host_recv, struct sock *sk, int ret, int flags)
{
	sock_io(sk, ret, flags, false);
	return 0;
}

static __u32 owner_of(const struct sock *sk)
{
	__u64 key = (__u64)sk;
	__u32 *o = bpf_map_lookup_elem(&sock_owner, &key);
	return o ? *o : 0;
}

/* Segments in one skb: a GSO/GRO skb carries several packets. */
static __u32 skb_segs(const struct sk_buff *skb)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u32 end = BPF_CORE_READ(skb, end); /* an offset on 64-bit kernels */
	struct skb_shared_info *sh = (struct skb_shared_info *)(head + end);
	__u16 segs = 0;
	bpf_probe_read_kernel(&segs, sizeof(segs), &sh->gso_segs);
	return segs ? segs : 1;
}

/* Packets leaving through any device (loopback and veth included) from a
 * socket of a traced process. */
SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(host_xmit, const struct sk_buff *skb, const struct net_device *dev)
{
	struct sock *sk = BPF_CORE_READ(skb, sk);
	__u32 tgid = sk ? owner_of(sk) : 0;
	if (!tgid)
		return 0;
	struct eacgm_host_stats *s = stats_of(tgid);
	if (s)
		ADD(s->tx_packets, skb_segs(skb));
	return 0;
}

static struct eacgm_host_conn *conn_of(const struct sock *sk, __u32 tgid)
{
	struct eacgm_host_conn_key k = {.tgid = tgid};
	k.family = BPF_CORE_READ(sk, __sk_common.skc_family);
	k.sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	k.dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (k.family == AF_INET) {
		__u32 s = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__u32 d = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(k.saddr, &s, 4);
		__builtin_memcpy(k.daddr, &d, 4);
	} else if (k.family == AF_INET6) {
		BPF_CORE_READ_INTO(&k.saddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&k.daddr, sk, __sk_common.skc_v6_daddr);
	} else {
		return 0;
	}
	void *m = gen ? (void *)&conns1 : (void *)&conns0;
	struct eacgm_host_conn *c = bpf_map_lookup_elem(m, &k);
	if (c)
		return c;
	struct eacgm_host_conn zero = {};
	bpf_map_update_elem(m, &k, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(m, &k);
}

/* Every segment a TCP connection receives in the established state (top of
 * tcp_rcv_established): counts it and samples the smoothed RTT, which the
 * kernel keeps in 1/8 us. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(host_tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	__u32 tgid = owner_of(sk);
	if (!tgid)
		return 0;
	struct eacgm_host_stats *s = stats_of(tgid);
	if (s)
		ADD(s->rx_packets, skb_segs(skb));
	struct eacgm_host_conn *c = conn_of(sk, tgid);
	__u32 srtt = BPF_CORE_READ((struct tcp_sock *)sk, srtt_us) >> 3;
	if (c && srtt) {
		ADD(c->srtt_us_sum, srtt);
		ADD(c->srtt_samples, 1);
	}
	return 0;
}

/* Segments a TCP skb of the write queue holds (the kernel's tcp_skb_pcount,
 * kept in the skb's control block): a retransmitted skb may carry several,
 * and the kernel's RetransSegs counts each. */
static __u32 tcp_skb_segs(const struct sk_buff *skb)
{
	const struct tcp_skb_cb *cb = (const struct tcp_skb_cb *)skb->cb;
	__u16 segs = BPF_CORE_READ(cb, tcp_gso_segs);
	return segs ? segs : 1;
}

/* Each retransmission, as the kernel counts it (RetransSegs, failed sends
 * included: the tracepoint fires for them too): a segment each. Counting
 * skbs came one short of the kernel under netem's 2% loss (e2e test_host
 * TcpThroughNetem, 2 of 4 runs): one retransmitted skb can hold two
 * segments. */
SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(host_retransmit, const struct sock *sk, const struct sk_buff *skb)
{
	__u32 tgid = owner_of(sk);
	struct eacgm_host_conn *c = tgid ? conn_of(sk, tgid) : 0;
	if (c)
		ADD(c->retransmits, tcp_skb_segs(skb));
	return 0;
}

/* connect() moves a socket to SYN_SENT in the caller's context: its owner
 * is known before its first segment (and a SYN retransmit) goes out. A
 * closed TCP socket is forgotten, so its address, when reused, is not
 * charged to the old owner. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(host_sock_state, const struct sock *sk, const int oldstate, const int newstate)
{
	__u64 key = (__u64)sk;
	if (newstate == TCP_CLOSE) {
		bpf_map_delete_elem(&sock_owner, &key);
		return 0;
	}
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (newstate == TCP_SYN_SENT && eacgm_is_traced(tgid))
		bpf_map_update_elem(&sock_owner, &key, &tgid, BPF_ANY);
	return 0;
}
