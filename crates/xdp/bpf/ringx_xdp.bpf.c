// SPDX-License-Identifier: Apache-2.0
/*
 * ringx's XDP filter: inline DDoS protection in the driver hook, before the kernel
 * allocates anything for a packet (seed 002, the XDP paper, §4.2 "inline DDoS mitigation").
 *
 * Decisions, in order, each counted per CPU under its reason (ringx_xdp.h, RX_REASONS):
 *   1. malformed or truncated L2/L3 header          -> DROP  (MALFORMED)
 *   2. source on the allow list (LPM, v4 and v6)    -> PASS  (PASS_ALLOW)
 *   3. source on the block list (LPM, v4 and v6)    -> DROP  (BLOCK)
 *   4. IPv6 extension chain longer than the bound   -> DROP  (EXT_LIMIT)
 *      non-first fragment                           -> PASS  (FRAGMENT)
 *      malformed or truncated L4 header             -> DROP  (MALFORMED)
 *   5. TCP SYN beyond the source's token bucket     -> DROP  (SYN_RATE)   if rx_syn_rate
 *   6. TCP/UDP to a port that is not served         -> DROP  (PORT)       if rx_port_filter
 *   7. everything else                              -> PASS  (PASS, PASS_NOT_IP)
 *
 * Settings are `const volatile` globals that the loader writes before loading: the kernel
 * freezes .rodata, the verifier treats them as constants and removes the code of disabled
 * rules. Lists live in maps that ringx and `ringx xdp` update while the program runs.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "ringx_xdp.h"
#include "parsing.h"

char LICENSE[] SEC("license") = "Apache-2.0";

/* ---- settings (written by the loader, see src/loader.rs) ---- */

/* SYNs per second per source (IPv4 address or IPv6 /64); 0 turns rate limiting off. */
const volatile __u64 rx_syn_rate = 0;
/* Bucket size in SYNs: how many a source may send at once after being quiet. */
const volatile __u64 rx_syn_burst = 1;
/* Time for an empty bucket to fill: burst * 1e9 / rate, computed by the loader so the
 * program needs no division and the refill below cannot overflow. */
const volatile __u64 rx_syn_fill_ns = 0;
/* 1: drop TCP and UDP to ports below rx_ephemeral_low that rx_ports does not list. */
const volatile __u32 rx_port_filter = 0;
/* Ports from here up are never filtered: replies to the host's own connections (the
 * proxy's upstreams, DNS) arrive on them. The loader reads ip_local_port_range. */
const volatile __u32 rx_ephemeral_low = 65536;

/* 1: a packet the filter passes goes on to the next XDP program in rx_chain (a tail call),
 * when one is there: filter -> load balancer (or steering) -> pass, on one device. */
const volatile __u32 rx_chain_on = 0;

/* ---- maps (pinned by name under the loader's pin directory, shared with the CLI) ---- */

#define RX_LPM_MAP(name, key_t, entries)                                                   \
	struct {                                                                           \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);                                       \
		__type(key, key_t);                                                        \
		__type(value, __u32); /* RX_ORIGIN_* */                                    \
		__uint(max_entries, entries);                                              \
		__uint(map_flags, BPF_F_NO_PREALLOC); /* LPM tries must not preallocate */ \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                                       \
	} name SEC(".maps")

RX_LPM_MAP(rx_allow_v4, struct rx_lpm_v4, 4096);
RX_LPM_MAP(rx_allow_v6, struct rx_lpm_v6, 4096);
RX_LPM_MAP(rx_block_v4, struct rx_lpm_v4, 65536);
RX_LPM_MAP(rx_block_v6, struct rx_lpm_v6, 65536);

/* SYN token buckets; LRU so that a flood from many sources evicts the quietest instead of
 * failing inserts. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct rx_rate_key);
	__type(value, struct rx_bucket);
	__uint(max_entries, 65536);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rx_syn_buckets SEC(".maps");

/* Served ports: index = port (host order), value = RX_PORT_TCP | RX_PORT_UDP. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 65536);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rx_ports SEC(".maps");

/* Counters by reason. 64 slots, more than RX_REASON_MAX, so that a newer program with more
 * reasons can keep using a map pinned by an older one. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct rx_counter);
	__uint(max_entries, 64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rx_stats SEC(".maps");

/* The next stage (slot 0). Replacing the program in the slot is one map update, so every
 * packet meets the old stage or the new one; an empty slot passes. Pinned, so the stage
 * outlives the process that put it there and survives the filter's own replacement. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rx_chain SEC(".maps");

/* ---- verdicts ---- */

#define RX_VERDICT_PASS XDP_PASS
#define RX_VERDICT_DROP XDP_DROP

/* Counts the packet under `reason` and returns the reason's verdict. Always inlined with a
 * constant reason, so the switch folds to one return. */
static __always_inline int verdict(struct xdp_md *ctx, enum rx_reason reason)
{
	__u32 key = reason;
	struct rx_counter *c = bpf_map_lookup_elem(&rx_stats, &key);
	int v;

	if (c) { /* per-CPU value: no other CPU writes it, plain adds suffice */
		c->packets++;
		c->bytes += ctx->data_end - ctx->data;
	}
	switch (reason) {
#define RX_REASON_CASE(name, vd, desc) \
	case RX_##name:                \
		v = RX_VERDICT_##vd;   \
		break;
		RX_REASONS(RX_REASON_CASE)
#undef RX_REASON_CASE
	default:
		v = XDP_DROP;
	}
	/* rx_chain_on is a frozen constant: without a chain the verifier removes this. A tail
	 * call that finds no program falls through to the filter's own verdict. */
	if (rx_chain_on && v == XDP_PASS)
		bpf_tail_call(ctx, &rx_chain, 0);
	return v;
}

/* ---- rules ---- */

/* Takes one token from the source's SYN bucket; false when it is empty.
 *
 * Buckets are shared by all CPUs and updated without atomics: two CPUs refilling the same
 * bucket at once can lose one update, which at worst gives a source a token or two more
 * than its rate. The alternative, a per-CPU LRU hash, would multiply every source's rate by
 * the number of CPUs its flows are hashed to. */
static __always_inline int syn_allowed(const struct rx_rate_key *key)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 full = rx_syn_burst * RX_TOKEN;
	struct rx_bucket *b = bpf_map_lookup_elem(&rx_syn_buckets, key);
	__u64 tokens, elapsed;

	if (!b) {
		struct rx_bucket fresh = { .tokens = full - RX_TOKEN, .last_ns = now };

		/* A concurrent insert for the same source wins; this SYN passes either way. */
		bpf_map_update_elem(&rx_syn_buckets, key, &fresh, BPF_NOEXIST);
		return 1;
	}
	elapsed = now - b->last_ns;
	if (elapsed >= rx_syn_fill_ns) {
		tokens = full;
	} else {
		/* elapsed < burst * 1e9 / rate, so elapsed * rate < burst * 1e9: no overflow. */
		tokens = b->tokens + elapsed * rx_syn_rate;
		if (tokens > full)
			tokens = full;
	}
	b->last_ns = now;
	if (tokens < RX_TOKEN) {
		b->tokens = tokens;
		return 0;
	}
	b->tokens = tokens - RX_TOKEN;
	return 1;
}

static __always_inline int port_served(__u16 port, __u8 proto_bit)
{
	__u32 key = port;
	__u8 *bits;

	if (port >= rx_ephemeral_low)
		return 1;
	bits = bpf_map_lookup_elem(&rx_ports, &key);
	return bits && (*bits & proto_bit);
}

/* L4: the cursor is at the transport header; `l4_len` is what the IP header says the
 * payload holds (already checked to fit in the packet). */
static __always_inline int l4(struct xdp_md *ctx, struct cursor *c, __u8 proto, __u32 l4_len,
			      const struct rx_rate_key *rk)
{
	__u16 dport;
	__u8 bit;

	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = cursor_take(c, sizeof(*th));
		__u32 doff;

		if (!th || l4_len < sizeof(*th))
			return verdict(ctx, RX_DROP_MALFORMED);
		doff = th->doff * 4;
		if (doff < sizeof(*th) || doff > l4_len)
			return verdict(ctx, RX_DROP_MALFORMED);
		/* rx_syn_rate is a frozen constant: with rate limiting off the verifier removes
		 * this branch and the program never touches rx_syn_buckets. */
		if (rx_syn_rate && th->syn && !th->ack && !syn_allowed(rk))
			return verdict(ctx, RX_DROP_SYN_RATE);
		dport = th->dest;
		bit = RX_PORT_TCP;
	} else if (proto == IPPROTO_UDP) {
		struct udphdr *uh = cursor_take(c, sizeof(*uh));

		if (!uh || l4_len < sizeof(*uh))
			return verdict(ctx, RX_DROP_MALFORMED);
		dport = uh->dest;
		bit = RX_PORT_UDP;
	} else {
		return verdict(ctx, RX_PASS);
	}
	if (rx_port_filter && !port_served(bpf_ntohs(dport), bit))
		return verdict(ctx, RX_DROP_PORT);
	return verdict(ctx, RX_PASS);
}

static __always_inline int ipv4(struct xdp_md *ctx, struct cursor *c)
{
	struct iphdr *ip = cursor_take(c, sizeof(*ip));
	struct rx_lpm_v4 key = { .prefixlen = 32 };
	struct rx_rate_key rk = { .family = 4 };
	__u32 hlen, tot;

	if (!ip || ip->version != 4 || ip->ihl < 5)
		return verdict(ctx, RX_DROP_MALFORMED);
	hlen = ip->ihl * 4; /* 20..60 */
	tot = bpf_ntohs(ip->tot_len);
	/* The kernel drops these in ip_rcv_core() too; the filter must not read past them. */
	if (tot < hlen || tot > cursor_left(c) + sizeof(*ip))
		return verdict(ctx, RX_DROP_MALFORMED);
	/* Options: hlen - 20 is at most 40, a bound the verifier can see. */
	if (!cursor_take(c, hlen - sizeof(*ip)))
		return verdict(ctx, RX_DROP_MALFORMED);

	__builtin_memcpy(key.addr, &ip->saddr, 4);
	if (bpf_map_lookup_elem(&rx_allow_v4, &key))
		return verdict(ctx, RX_PASS_ALLOW);
	if (bpf_map_lookup_elem(&rx_block_v4, &key))
		return verdict(ctx, RX_DROP_BLOCK);
	if (ip->frag_off & bpf_htons(0x1fff)) /* fragment offset: not the first fragment */
		return verdict(ctx, RX_PASS_FRAGMENT);

	__builtin_memcpy(rk.addr, &ip->saddr, 4);
	return l4(ctx, c, ip->protocol, tot - hlen, &rk);
}

/* Extension headers that share the generic layout: next header, length in 8-octet units
 * not counting the first. */
static __always_inline int ipv6_generic_ext(__u8 nh)
{
	return nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING || nh == IPPROTO_DSTOPTS ||
	       nh == IPPROTO_MH || nh == 139 /* HIP */ || nh == 140 /* Shim6 */;
}

/* The largest offset the extension header walk can reach: 14 + 8 (VLANs) + 40 + 8 * 2048.
 * A power of two minus one, used as a mask below. */
#define RX_EXT_OFF_MASK 0x7fff

/* `l3_off`: where the IPv6 header starts (the cursor is there too). */
static __always_inline int ipv6(struct xdp_md *ctx, struct cursor *c, __u32 l3_off)
{
	void *data = (void *)(long)ctx->data;
	__u8 *end = (__u8 *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = cursor_take(c, sizeof(*ip6));
	struct rx_lpm_v6 key = { .prefixlen = 128 };
	struct rx_rate_key rk = { .family = 6 };
	__u32 plen, off, skipped;
	__u8 nh;

	if (!ip6 || ip6->version != 6)
		return verdict(ctx, RX_DROP_MALFORMED);
	plen = bpf_ntohs(ip6->payload_len); /* 0: a jumbogram, its length is in an option */
	if (plen > cursor_left(c))
		return verdict(ctx, RX_DROP_MALFORMED);

	__builtin_memcpy(key.addr, &ip6->saddr, 16);
	if (bpf_map_lookup_elem(&rx_allow_v6, &key))
		return verdict(ctx, RX_PASS_ALLOW);
	if (bpf_map_lookup_elem(&rx_block_v6, &key))
		return verdict(ctx, RX_DROP_BLOCK);

	/* The extension header walk is a bounded loop (kernel 5.3+) over a scalar offset
	 * rather than the cursor: the verifier walks every iteration along every path, and
	 * three header kinds per iteration would make 3^8 paths, unless paths that reach the
	 * next iteration in the same state are pruned. Masking the offset at the top of each
	 * iteration gives every path the same range there (it never changes the value: every
	 * header accepted below lies inside the packet, and the walk cannot go past
	 * RX_EXT_OFF_MASK). */
	nh = ip6->nexthdr;
	off = l3_off + sizeof(*ip6);
	for (int i = 0; i < RX_IPV6_EXT_MAX; i++) {
		__u8 *h;
		__u32 len;

		off &= RX_EXT_OFF_MASK;
		h = data + off;
		if (ipv6_generic_ext(nh) || nh == IPPROTO_AH) {
			if (h + 2 > end)
				return verdict(ctx, RX_DROP_MALFORMED);
			/* AH counts 4-octet units, minus 2 (RFC 4302); the others 8-octet units,
			 * minus 1 (RFC 8200). At most 2048 bytes. */
			len = nh == IPPROTO_AH ? (h[1] + 2) * 4 : (h[1] + 1) * 8;
		} else if (nh == IPPROTO_FRAGMENT) {
			len = 8;
			if (h + 8 > end)
				return verdict(ctx, RX_DROP_MALFORMED);
			/* Fragment offset (bytes 2-3, high 13 bits): not the first fragment. */
			if (((h[2] << 8) | h[3]) & 0xfff8)
				return verdict(ctx, RX_PASS_FRAGMENT);
		} else {
			break;
		}
		if (h + len > end)
			return verdict(ctx, RX_DROP_MALFORMED);
		nh = h[0];
		off += len;
	}
	if (ipv6_generic_ext(nh) || nh == IPPROTO_AH || nh == IPPROTO_FRAGMENT)
		return verdict(ctx, RX_DROP_EXT_LIMIT);
	off &= RX_EXT_OFF_MASK;
	skipped = off - (l3_off + sizeof(*ip6));
	if (plen && skipped > plen)
		return verdict(ctx, RX_DROP_MALFORMED);
	c->pos = data + off;

	__builtin_memcpy(rk.addr, &ip6->saddr, 8); /* the /64 */
	return l4(ctx, c, nh, plen ? plen - skipped : cursor_left(c), &rk);
}

SEC("xdp")
int ringx_xdp(struct xdp_md *ctx)
{
	struct cursor c = {
		.pos = (void *)(long)ctx->data,
		.end = (void *)(long)ctx->data_end,
	};
	struct ethhdr *eth = cursor_take(&c, sizeof(*eth));
	__u32 l3_off;
	__be16 proto;

	if (!eth)
		return verdict(ctx, RX_DROP_MALFORMED);
	proto = eth->h_proto;
	l3_off = sizeof(*eth);
	for (int i = 0; i < RX_VLAN_MAX; i++) {
		struct { __be16 tci; __be16 proto; } *vlan;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		vlan = cursor_take(&c, sizeof(*vlan));
		if (!vlan)
			return verdict(ctx, RX_DROP_MALFORMED);
		proto = vlan->proto;
		l3_off += sizeof(*vlan);
	}
	if (proto == bpf_htons(ETH_P_IP))
		return ipv4(ctx, &c);
	if (proto == bpf_htons(ETH_P_IPV6))
		return ipv6(ctx, &c, l3_off);
	return verdict(ctx, RX_PASS_NOT_IP);
}
