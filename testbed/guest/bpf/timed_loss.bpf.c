// SPDX-License-Identifier: GPL-2.0
/*
 * Time-based two-state (Good/Bad) loss channel at tc egress, for cc-testbed.
 *
 * The state timeline is computed in user space from the run's seed (topologies/lossmodel.py)
 * and written into the `timeline` map before traffic starts: entry i holds the end of state i
 * in ns after t0 and that state's drop threshold (loss probability x 2^32). For every IPv4
 * packet after t0 the program finds the state that covers "now" (binary search, so a packet's
 * fate depends on its own time, never on which packet came before) and drops it when
 * splitmix64(seed, n) < threshold, n being the packet's index on this interface since t0.
 * The same seed and the same packet sequence give the same drops.
 *
 * Counters per state instance (packets seen / dropped) let user space check the realized loss
 * per state; `dropped_bits` marks the index of every dropped packet (first 2^20 packets).
 * Packets before t0 (fidelity probes) and after the timeline's end pass and are counted apart, and
 * so do the testbed's own TCP handshakes and iperf3 control connections, which the papers' channel
 * does not carry (their flows have neither; topologies/shaping.py's control lane): SYN or SYN-ACK,
 * or a port in 61440-65535 (topologies/shaping.py: CONTROL_PORT_MIN, the hosts' ephemeral ports).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MAX_STATES 65536
#define LOG2_MAX_STATES 16
#define DROP_BITS_WORDS 16384 /* 2^20 packet indices */
#define CONTROL_PORTS 0xF000	 /* the top four bits of every control connection's client port */

struct state {
	__u64 end_ns;	 /* end of this state, ns after t0 */
	__u64 threshold; /* drop when draw < threshold; 2^32 = always */
};

struct counters {
	__u64 seen;
	__u64 dropped;
};

struct control {
	__u64 t0_ns;	/* bpf_ktime_get_ns() at the timeline's start; 0 = not armed */
	__u64 seed;
	__u64 n_states;
	__u64 next_index; /* packets seen since t0 */
	__u64 before;	/* packets passed before t0 */
	__u64 after;	/* packets passed after the timeline's end */
	__u64 control;	/* handshakes and control connections' packets passed after t0 */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_STATES);
	__type(key, __u32);
	__type(value, struct state);
} timeline SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_STATES);
	__type(key, __u32);
	__type(value, struct counters);
} state_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct control);
} control SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DROP_BITS_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} dropped_bits SEC(".maps");

static __always_inline __u64 splitmix64(__u64 x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* a TCP handshake segment or a segment of an iperf3 control connection (headers without IP options) */
static __always_inline int is_control(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct tcphdr *tcp = (void *)(ip + 1);

	if ((void *)(tcp + 1) > data_end || ip->protocol != IPPROTO_TCP || ip->ihl != 5)
		return 0;
	return tcp->syn || (bpf_ntohs(tcp->source) & CONTROL_PORTS) == CONTROL_PORTS ||
	       (bpf_ntohs(tcp->dest) & CONTROL_PORTS) == CONTROL_PORTS;
}

SEC("tc")
int timed_loss(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct control *ctl = bpf_map_lookup_elem(&control, &zero);

	if (!ctl || skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	__u64 now = bpf_ktime_get_ns();
	if (ctl->t0_ns == 0 || now < ctl->t0_ns) {
		__sync_fetch_and_add(&ctl->before, 1);
		return TC_ACT_OK;
	}
	if (is_control(skb)) {
		__sync_fetch_and_add(&ctl->control, 1);
		return TC_ACT_OK;
	}
	__u64 rel = now - ctl->t0_ns;
	__u64 n_states = ctl->n_states;
	if (n_states == 0 || n_states > MAX_STATES) {
		__sync_fetch_and_add(&ctl->after, 1);
		return TC_ACT_OK;
	}
	/* first state whose end is after rel: lo in [0, n_states] */
	__u32 lo = 0, hi = (__u32)n_states;
	for (int step = 0; step <= LOG2_MAX_STATES; step++) {
		if (lo >= hi)
			break;
		__u32 mid = lo + (hi - lo) / 2;
		struct state *s = bpf_map_lookup_elem(&timeline, &mid);
		if (!s)
			return TC_ACT_OK;
		if (s->end_ns > rel)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo >= n_states) {
		__sync_fetch_and_add(&ctl->after, 1);
		return TC_ACT_OK;
	}
	struct state *s = bpf_map_lookup_elem(&timeline, &lo);
	struct counters *c = bpf_map_lookup_elem(&state_counters, &lo);
	if (!s || !c)
		return TC_ACT_OK;
	__u64 index = __sync_fetch_and_add(&ctl->next_index, 1);
	__sync_fetch_and_add(&c->seen, 1);
	__u64 draw = splitmix64(ctl->seed ^ (index * 0xd1342543de82ef95ULL)) >> 32;
	if (draw >= s->threshold)
		return TC_ACT_OK;
	__sync_fetch_and_add(&c->dropped, 1);
	if (index < DROP_BITS_WORDS * 64ULL) {
		__u32 word = index / 64;
		__u64 *bits = bpf_map_lookup_elem(&dropped_bits, &word);
		if (bits)
			__sync_fetch_and_or(bits, 1ULL << (index % 64));
	}
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
