// SPDX-License-Identifier: Apache-2.0
/*
 * ringx's XDP L4 load balancer (seed 002, the XDP paper's §4.3 "load balancing"; the design
 * of Katran): a packet for a virtual service (VIP address, port, protocol) is sent to one of
 * the service's backends, encapsulated, straight back out of the driver (XDP_TX, or
 * XDP_REDIRECT when the route leaves by another device). The backend removes the outer
 * headers (ringx_lb_decap below, or an ipip/fou device) and answers the client directly:
 * the balancer only ever sees the client's half of a connection (direct server return).
 *
 *   1. not IPv4/IPv6                                   -> PASS (PASS_NOT_IP)
 *      truncated or inconsistent IP header             -> DROP (MALFORMED)
 *   2. fragment to a VIP's address                     -> DROP (FRAGMENT)   others PASS
 *   3. ICMP frag-needed / ICMPv6 packet-too-big about a
 *      VIP's flow                                      -> the flow's backend (FWD_ICMP)
 *      other ICMP                                      -> PASS (PASS_ICMP)
 *   4. the flow in the connection table (LRU), its
 *      service still the same                          -> its backend
 *   5. TCP/UDP not to a VIP                            -> PASS (PASS_NOT_VIP), untouched
 *      UDP whose QUIC connection ID names a host of the
 *      service (lb_quic_hosts), its backend not down,
 *      and 4 had no entry or another backend           -> that backend, remembered (FWD_QUIC)
 *      else the service's Maglev ring at hash(5-tuple) -> a backend, remembered
 *   6. encapsulate (GUE over UDP, or IP-in-IP) to the backend's next hop (resolved by
 *      the control plane), XDP_TX, or XDP_REDIRECT to
 *      another device                                  -> FWD; next hop unresolved DROP
 *                                                         (NO_ROUTE), over its MTU (TOO_BIG)
 *      over its MTU, IPv4 with DF or IPv6              -> ICMP frag-needed / ICMPv6 packet
 *                                                         too big back (TX_ICMP_TOO_BIG),
 *                                                         within a rate per CPU, else DROP
 *                                                         (TOO_BIG_LIMITED)
 *   PASS verdicts go on to the program in lb_chain when loaded with lb_chain_on (filter ->
 *   balancer -> steering on one device).
 *
 * An established IPv4 flow to an IPv4 backend takes a short path (fast4) with the same
 * result; everything else, and everything it is unsure of, the general path above.
 *
 * The rings are computed in user space (crates/balance's Maglev, written by crates/lb): the
 * program only indexes them, so every balancer with the same maps sends a flow to the same
 * backend (several balancers behind ECMP agree without talking to each other).
 *
 * Settings are `const volatile` globals written by the loader; changing one loads a new
 * program and swaps it into the device's link.
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

#include "ringx_lb.h"
#include "parsing.h"

char LICENSE[] SEC("license") = "Apache-2.0";

/* ---- settings (written by the loader, src/loader.rs) ---- */

const volatile __u32 lb_encap = LB_ENCAP_GUE;
/* GUE: the backends' UDP port (network order). */
const volatile __u16 lb_gue_port = 0;
/* The outer source addresses (this balancer's own), in network order. Read element by
 * element: copying them with a cast that drops `volatile` would let clang fold in the zero
 * initialiser instead of what the loader wrote. */
const volatile __u32 lb_src_v4 = 0;
const volatile __u32 lb_src_v6[4] = {};
/* 1: what the balancer passes goes on to the next XDP program in lb_chain (a tail call), the
 * third stage of filter -> balancer -> steering on one device; 0: passed to the stack. */
const volatile __u32 lb_chain_on = 0;
/* The ICMP too-big answers' rate limit per CPU, as the kernel's icmp_msgs_per_sec and
 * icmp_msgs_burst limit its own: on average one per lb_too_big_interval_ns, bursts of up to
 * lb_too_big_burst_ns / interval + 1 (0: no limit). An answer costs the balancer a frame
 * rewrite and a transmit, so a source of oversized packets must not turn it into an ICMP
 * generator at line rate. */
const volatile __u64 lb_too_big_interval_ns = 0;
const volatile __u64 lb_too_big_burst_ns = 0;

/* ---- maps (pinned by name under the loader's pin directory) ---- */

#define LB_MAP(name, t, key_t, value_t, entries)      \
	struct {                                      \
		__uint(type, t);                      \
		__type(key, key_t);                   \
		__type(value, value_t);               \
		__uint(max_entries, entries);         \
		__uint(pinning, LIBBPF_PIN_BY_NAME);  \
	} name SEC(".maps")

LB_MAP(lb_vips, BPF_MAP_TYPE_HASH, struct lb_vip_key, struct lb_vip, LB_MAX_VIPS);
LB_MAP(lb_vip_addrs, BPF_MAP_TYPE_HASH, struct lb_addr, __u32, LB_MAX_VIPS);
/* Service id -> its key (family 0: no service): a flow found in the connection table is
 * checked against it, an array lookup the verifier inlines, instead of looking the service
 * up by key (a hash lookup, a call) first. */
LB_MAP(lb_vip_keys, BPF_MAP_TYPE_ARRAY, __u32, struct lb_vip_key, LB_MAX_VIPS);
LB_MAP(lb_backends, BPF_MAP_TYPE_ARRAY, __u32, struct lb_backend, LB_MAX_BACKENDS);
/* vip id * LB_RING_SIZE + slot -> backend index. */
LB_MAP(lb_ring, BPF_MAP_TYPE_ARRAY, __u32, __u32, LB_MAX_VIPS * LB_RING_SIZE);
LB_MAP(lb_members, BPF_MAP_TYPE_HASH, struct lb_member_key, __u32, LB_MAX_BACKENDS * 4);
/* vip id * LB_QUIC_HOSTS + host byte -> backend index + 1; 0: no backend of the service has
 * that host (so a fresh map names none). An array: the verifier inlines its lookup. */
LB_MAP(lb_quic_hosts, BPF_MAP_TYPE_ARRAY, __u32, __u32, LB_MAX_VIPS * LB_QUIC_HOSTS);
LB_MAP(lb_vip_stats, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct lb_counter, LB_MAX_VIPS);
LB_MAP(lb_backend_stats, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct lb_counter, LB_MAX_BACKENDS);
/* 64 slots, more than LB_REASON_MAX: a newer program may add reasons to a pinned map. */
LB_MAP(lb_stats, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct lb_reason_counter, 64);

/* The connection table, one LRU hash per family: IPv4 flows under a 16-byte key (a shorter
 * key to hash and compare on every packet), IPv6 flows under the whole lb_flow_key. The free
 * lists are per CPU (BPF_F_NO_COMMON_LRU): no CPU contends for another's list on insert, yet
 * every CPU sees every flow, so a flow whose packets move to another CPU keeps its backend. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb_flow_key4);
	__type(value, struct lb_flow);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_conns4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb_flow_key);
	__type(value, struct lb_flow);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_conns SEC(".maps");

/* The next stage (lb_chain_on): one slot, pinned, so that a reloaded balancer keeps the
 * stage behind it and the stage is replaced by one map update. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_chain SEC(".maps");

/* The too-big limiter's theoretical arrival time (GCRA), one per CPU: not pinned, a reloaded
 * program starts with a full burst. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} lb_too_big_tat SEC(".maps");

/* ---- counting ---- */

static __always_inline void count_reason_n(__u32 reason, __u64 bytes)
{
	struct lb_reason_counter *c = bpf_map_lookup_elem(&lb_stats, &reason);

	if (c) { /* per-CPU value: plain adds */
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline void count_reason(struct xdp_md *ctx, __u32 reason)
{
	count_reason_n(reason, ctx->data_end - ctx->data);
}

static __always_inline int pass(struct xdp_md *ctx, __u32 reason)
{
	count_reason(ctx, reason);
	/* lb_chain_on is a frozen constant: without a chain the verifier removes this. An
	 * empty slot makes the tail call fall through: the packet passes. */
	if (lb_chain_on)
		bpf_tail_call(ctx, &lb_chain, 0);
	return XDP_PASS;
}

static __always_inline int drop(struct xdp_md *ctx, __u32 reason)
{
	count_reason(ctx, reason);
	return XDP_DROP;
}

static __always_inline void count_flow(void *map, __u32 idx, __u64 bytes, int miss, int fresh)
{
	struct lb_counter *c = bpf_map_lookup_elem(map, &idx);

	if (c) {
		c->packets++;
		c->bytes += bytes;
		c->lru_misses += miss;
		c->new_flows += fresh;
	}
}

/* ---- the flow hash (mirrored by src/hash.rs; the rings are indexed by it) ---- */

static __always_inline __u64 mix64(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* Over the key's ten 32-bit words (native order; IPv4 addresses zero-padded). */
static __always_inline __u64 flow_hash(const struct lb_flow_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u64 h = 0x72696e67786c6230ULL; /* "ringxlb0" */

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*k) / 4); i++) {
		h ^= w[i];
		h *= 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	return mix64(h);
}

#include "lb_parse.h"

/* ---- choosing the backend ---- */

static __always_inline struct lb_backend *backend(__u32 idx)
{
	struct lb_backend *b = bpf_map_lookup_elem(&lb_backends, &idx);

	return b && (b->flags & LB_BACKEND_PRESENT) ? b : 0;
}

/* An established flow's backend: the table entry's service still has this flow's address,
 * port and protocol, and its backend is still configured; NULL otherwise (a service id
 * reused by another service, a removed backend: then the flow is a miss). */
static __always_inline struct lb_backend *established(const struct lb_flow *f,
						       const struct pkt *p)
{
	__u32 id = f->vip;
	struct lb_vip_key *k = bpf_map_lookup_elem(&lb_vip_keys, &id);
	const __u32 *a, *b;

	if (!k || k->family != p->flow.family || k->port != p->flow.dport ||
	    k->proto != p->flow.proto)
		return 0;
	a = (const __u32 *)k->addr;
	b = (const __u32 *)p->flow.dst;
	if ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]))
		return 0;
	return backend(f->backend);
}

/* The IPv4 table's key of an IPv4 flow. */
static __always_inline void key4(struct lb_flow_key4 *k, const struct lb_flow_key *f)
{
	k->src = *(const __u32 *)f->src;
	k->dst = *(const __u32 *)f->dst;
	*(__u32 *)&k->sport = *(const __u32 *)&f->sport; /* both ports */
	*(__u32 *)&k->proto = f->proto;                   /* and the padding, zero */
}

/* The flow's entry in its family's table, or NULL. */
static __always_inline struct lb_flow *flow_lookup(const struct pkt *p)
{
	if (p->family == 4) {
		struct lb_flow_key4 k;

		key4(&k, &p->flow);
		return bpf_map_lookup_elem(&lb_conns4, &k);
	}
	return bpf_map_lookup_elem(&lb_conns, &p->flow);
}

/* Puts the flow's backend in its family's connection table. */
static __always_inline void remember(const struct pkt *p, __u32 vid, __u32 hash, __u32 be)
{
	struct lb_flow nf = { .backend = be, .vip = vid, .hash = hash };

	if (p->family == 4) {
		struct lb_flow_key4 k;

		key4(&k, &p->flow);
		bpf_map_update_elem(&lb_conns4, &k, &nf, BPF_ANY);
	} else {
		bpf_map_update_elem(&lb_conns, &p->flow, &nf, BPF_ANY);
	}
}

/* A new flow's backend (or one the table does not know): the service's ring at the flow's
 * hash, remembered, except for ICMP errors, which are not packets of the flow. */
static __always_inline int pick(const struct pkt *p, __u32 vid, __u64 hash, __u32 *out)
{
	__u32 slot, *be;

	slot = vid * LB_RING_SIZE + (__u32)(hash % LB_RING_SIZE);
	be = bpf_map_lookup_elem(&lb_ring, &slot);
	if (!be || *be == LB_NO_BACKEND || !backend(*be))
		return LB_DROP_NO_BACKEND;
	*out = *be;
	if (!p->icmp)
		remember(p, vid, hash, *be);
	return 0;
}

/* ---- QUIC: the host a connection ID names ---- */

/* The bytes of a UDP payload read for it: a long header's host byte is the 8th. */
#define LB_QUIC_PEEK 8

/* The slot of lb_quic_hosts that the QUIC packet at `q` (its UDP payload, LB_QUIC_PEEK
 * bytes readable, checked by the caller) names for service `vid`, or -1 when it names none:
 *  - a short header (bit 0x80 clear: every packet once the handshake is done) carries the
 *    destination connection ID right after its first byte, without a length;
 *  - a long header carries the ID's length at 5 and the ID at 6; only a Handshake packet's
 *    (type 2) is sure to be one the server chose, so only it is read. A client's Initial and
 *    0-RTT carry an ID the client made up (random bytes that could name any host), and go by
 *    the connection table and the ring, as the client's address stays put until the
 *    handshake is confirmed (RFC 9000 §9).
 * An ID of ours has the config rotation in its first byte's top bits (cid.rs); the host is
 * its second byte. Plain UDP of a service without QUIC hosts reads an empty slot. */
static __always_inline int quic_slot(const __u8 *q, __u32 vid)
{
	__u8 cid0, host;

	if (!(q[0] & 0x80)) {
		cid0 = q[1];
		host = q[1 + LB_QUIC_HOST_BYTE];
	} else if ((q[0] & 0x30) == 0x20 && q[5] == LB_QUIC_CID_LEN) {
		cid0 = q[6];
		host = q[6 + LB_QUIC_HOST_BYTE];
	} else {
		return -1;
	}
	if (cid0 >> 5 != LB_QUIC_ROTATION)
		return -1;
	return vid * LB_QUIC_HOSTS + host;
}

/* The backend index in slot `slot` of lb_quic_hosts, or LB_NO_BACKEND. */
static __always_inline __u32 quic_host(int slot)
{
	__u32 k = slot, *v;

	if (slot < 0)
		return LB_NO_BACKEND;
	v = bpf_map_lookup_elem(&lb_quic_hosts, &k);
	return v && *v ? *v - 1 : LB_NO_BACKEND;
}

#include "lb_too_big.h"

/* ---- encapsulation ---- */

/* The outer IPv4 header, written as five 32-bit words (the IP header sits 4-aligned when the
 * frame's data is NET_IP_ALIGN'd, and x86 takes any alignment), its checksum summed from the
 * values written rather than read back: the one's-complement sum is the same in either byte
 * order, so the 16-bit halves are added as the words hold them. */
static __always_inline void outer4(struct iphdr *o, const struct lb_backend *b, __u8 proto,
				   __u16 len, __u8 tos)
{
	__u32 *w = (__u32 *)o;
	__u32 dst = *(const __u32 *)b->addr;
	__u32 src = lb_src_v4;
	/* version 4, ihl 5, tos | total length; id 0 | DF; ttl 64, protocol | checksum */
	__u32 w0 = 0x45 | (__u32)tos << 8 | (__u32)bpf_htons(len) << 16;
	__u32 w1 = 0x00400000;
	__u32 w2 = 64 | (__u32)proto << 8;
	__u32 sum = (w0 & 0xffff) + (w0 >> 16) + 0x0040 + w2 + (src & 0xffff) + (src >> 16) +
		    (dst & 0xffff) + (dst >> 16);

	w[0] = w0;
	w[1] = w1;
	w[2] = w2 | (__u32)csum_fold(sum) << 16;
	w[3] = src;
	w[4] = dst;
}

static __always_inline void outer6(struct ipv6hdr *o, const struct lb_backend *b, __u8 nh,
				   __u16 plen, __u8 tos, __u64 hash)
{
	o->version = 6;
	o->priority = tos >> 4;
	/* The flow label carries the flow's hash: ECMP and RSS on the way spread by it. */
	o->flow_lbl[0] = ((tos & 0xf) << 4) | ((hash >> 16) & 0xf);
	o->flow_lbl[1] = hash >> 8;
	o->flow_lbl[2] = hash;
	o->payload_len = bpf_htons(plen);
	o->nexthdr = nh;
	o->hop_limit = 64;
	o->saddr.in6_u.u6_addr32[0] = lb_src_v6[0];
	o->saddr.in6_u.u6_addr32[1] = lb_src_v6[1];
	o->saddr.in6_u.u6_addr32[2] = lb_src_v6[2];
	o->saddr.in6_u.u6_addr32[3] = lb_src_v6[3];
	__builtin_memcpy(&o->daddr, b->addr, 16);
}

/* Where the encapsulated packet goes: the backend's next hop. Fills the MAC addresses (the
 * source stays the arriving frame's destination when the backend names none); returns 0 or
 * a reason. */
static __always_inline int route(const struct lb_backend *b, __u32 tot, __u16 *dmac, __u16 *smac)
{
	const __u16 *d = (const __u16 *)b->dmac, *s = (const __u16 *)b->smac;

	if (!(d[0] | d[1] | d[2]))
		return LB_DROP_NO_ROUTE;
	if (b->mtu && tot > b->mtu)
		return LB_DROP_TOO_BIG;
	dmac[0] = d[0];
	dmac[1] = d[1];
	dmac[2] = d[2];
	if (s[0] | s[1] | s[2]) {
		smac[0] = s[0];
		smac[1] = s[1];
		smac[2] = s[2];
	}
	return 0;
}

/* Whether this CPU may answer one more packet with an ICMP too-big now (GCRA: the
 * answer's theoretical time moves one interval on per answer and may run ahead of the clock
 * by the burst). Per-CPU value: no other CPU writes it. */
static __always_inline int too_big_allowed(void)
{
	__u32 k = 0;
	__u64 now, tat, *v;

	if (!lb_too_big_interval_ns)
		return 1;
	v = bpf_map_lookup_elem(&lb_too_big_tat, &k);
	if (!v)
		return 0;
	now = bpf_ktime_get_ns();
	tat = *v > now ? *v : now;
	if (tat - now > lb_too_big_burst_ns)
		return 0;
	*v = tat + lb_too_big_interval_ns;
	return 1;
}

/* Puts the outer headers in front of the inner IP packet; 0 with the action to send the
 * frame with in `*action`, LB_TX_ICMP_TOO_BIG with XDP_TX (the frame is now the ICMP error),
 * or the reason to drop it. */
static __always_inline int encap_send(struct xdp_md *ctx, const struct pkt *p,
				      const struct lb_backend *b, __u32 hash, __u32 frame_len,
				      int *action)
{
	int gue = lb_encap == LB_ENCAP_GUE;
	__u32 iplen = b->family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	__u32 olen = iplen + (gue ? sizeof(struct udphdr) : 0);
	__u8 proto = gue ? IPPROTO_UDP : (p->family == 4 ? IPPROTO_IPIP : IPPROTO_IPV6);
	__u32 tot = olen + p->ip_len;
	__u16 dmac[3], smac[3];
	struct eth16 *eth;
	void *data, *end;
	int r;

	if (tot > 0xffff)
		return LB_DROP_TOO_BIG;
	/* This device's own MAC, for the fixed-gateway case: the frame came to it. */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return LB_DROP_MALFORMED;
	smac[0] = eth->dst[0];
	smac[1] = eth->dst[1];
	smac[2] = eth->dst[2];
	r = route(b, tot, dmac, smac);
	if (r == LB_DROP_TOO_BIG && !p->icmp && (p->family == 6 || p->df)) {
		if (!too_big_allowed())
			return LB_DROP_TOO_BIG_LIMITED;
		*action = XDP_TX;
		return p->family == 4 ? too_big4(ctx, b->mtu - olen) : too_big6(ctx, b->mtu - olen, frame_len);
	}
	if (r)
		return r;
	/* Anything before the IP header other than a plain Ethernet header was refused by
	 * the parser; grow the head by the outer headers. */
	if (bpf_xdp_adjust_head(ctx, 0 - (int)olen))
		return LB_DROP_ENCAP;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	/* Constant offsets from data: the verifier needs one comparison for all of it. */
	if (data + sizeof(*eth) + sizeof(struct ipv6hdr) + sizeof(struct udphdr) > end)
		return LB_DROP_ENCAP;
	eth->dst[0] = dmac[0];
	eth->dst[1] = dmac[1];
	eth->dst[2] = dmac[2];
	eth->src[0] = smac[0];
	eth->src[1] = smac[1];
	eth->src[2] = smac[2];
	if (b->family == 4) {
		struct iphdr *o = (void *)(eth + 1);

		eth->proto = bpf_htons(ETH_P_IP);
		outer4(o, b, proto, tot, p->tos);
		if (gue) {
			__u32 *u = (void *)(o + 1);

			/* source port (from the flow's hash), destination port; length, checksum 0
			 * (allowed over IPv4) */
			u[0] = bpf_htons(0xc000 | (hash & 0x3fff)) | (__u32)lb_gue_port << 16;
			u[1] = bpf_htons(tot - sizeof(*o));
		}
	} else {
		struct ipv6hdr *o = (void *)(eth + 1);

		eth->proto = bpf_htons(ETH_P_IPV6);
		outer6(o, b, proto, tot - sizeof(*o), p->tos, hash);
		if (gue) {
			__u32 *u = (void *)(o + 1);

			/* Checksum zero over IPv6: RFC 6935's tunnel exception; ringx_lb_decap
			 * takes the header off before the stack could check it. */
			u[0] = bpf_htons(0xc000 | (hash & 0x3fff)) | (__u32)lb_gue_port << 16;
			u[1] = bpf_htons(tot - sizeof(*o));
		}
	}
	if (!b->ifindex || b->ifindex == ctx->ingress_ifindex)
		*action = XDP_TX;
	else
		*action = bpf_redirect(b->ifindex, 0);
	return 0;
}

/* ---- the common case ---- */

/* Returned by fast4 when it did not handle the packet. */
#define LB_FAST_NO -1   /* not its case: the general path decides */
#define LB_FAST_MISS -2 /* its case, but not in the table: the general path need not look */

/* An established IPv4 flow to an IPv4 backend, without IP options or fragmentation, within
 * the MTU: nine packets in ten at a balancer carrying TCP. The same verdict, frame and
 * counters as the general path gives such a packet, in far fewer instructions (no cursor,
 * no struct pkt, the key built straight from the headers): the general path spends more on
 * parsing and carrying state across its calls than on the lookup itself. Anything it does
 * not decide goes to the general path, which decides everything. Returns the XDP action,
 * or LB_FAST_NO / LB_FAST_MISS. */
static __always_inline int fast4(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct eth16 *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u8 *l4 = (void *)(ip + 1);
	struct lb_flow_key4 k;
	struct lb_vip_key *vk;
	struct lb_backend *b;
	struct lb_counter *c;
	struct lb_flow *f;
	const __u16 *mac;
	__u16 s0, s1, s2;
	__u32 tot, olen, id, be, hash, bytes;
	int gue = lb_encap == LB_ENCAP_GUE;
	__u8 tos;

	/* Ethernet, IPv4 with a 20-byte header, the UDP header or the TCP header's first 20. */
	if ((void *)(l4 + sizeof(struct udphdr)) > end || eth->proto != bpf_htons(ETH_P_IP) ||
	    *(__u8 *)ip != 0x45 || (ip->frag_off & bpf_htons(0x3fff)))
		return LB_FAST_NO;
	tot = bpf_ntohs(ip->tot_len);
	if (tot > (__u32)(end - (void *)ip))
		return LB_FAST_NO;
	if (ip->protocol == IPPROTO_TCP) {
		__u32 doff;

		if ((void *)(l4 + sizeof(struct tcphdr)) > end)
			return LB_FAST_NO;
		doff = l4[12] >> 4;
		if (doff < 5 || tot < sizeof(*ip) + doff * 4)
			return LB_FAST_NO;
	} else if (ip->protocol != IPPROTO_UDP || tot < sizeof(*ip) + sizeof(struct udphdr)) {
		return LB_FAST_NO;
	}
	k.src = ip->saddr;
	k.dst = ip->daddr;
	*(__u32 *)&k.sport = *(__u32 *)l4; /* both ports */
	*(__u32 *)&k.proto = ip->protocol; /* and the padding, zero */
	f = bpf_map_lookup_elem(&lb_conns4, &k);
	if (!f)
		return LB_FAST_MISS;
	/* established(), on words: the service's address; its port, protocol and family. */
	id = f->vip;
	vk = bpf_map_lookup_elem(&lb_vip_keys, &id);
	if (!vk || *(__u32 *)vk->addr != k.dst ||
	    *(__u32 *)&vk->port != ((__u32)k.dport | (__u32)k.proto << 16 | 4u << 24))
		return LB_FAST_NO;
	be = f->backend;
	hash = f->hash;
	/* QUIC: a connection ID that names another backend than the table's (a client now at
	 * addresses and ports that another connection had) is the general path's to decide. */
	if (ip->protocol == IPPROTO_UDP) {
		__u8 *q = l4 + sizeof(struct udphdr);
		__u32 qb;

		if ((void *)(q + LB_QUIC_PEEK) <= end &&
		    tot >= sizeof(*ip) + sizeof(struct udphdr) + LB_QUIC_PEEK) {
			qb = quic_host(quic_slot(q, id));
			if (qb != LB_NO_BACKEND && qb != be)
				return LB_FAST_NO;
		}
	}
	b = backend(be);
	olen = sizeof(struct iphdr) + (gue ? sizeof(struct udphdr) : 0);
	/* An IPv6 backend, an unresolved next hop, the MTU: the general path's. */
	if (!b || b->family != 4 || (b->mtu && tot + olen > b->mtu))
		return LB_FAST_NO;
	mac = (const __u16 *)b->dmac;
	if (!(mac[0] | mac[1] | mac[2]))
		return LB_FAST_NO;
	mac = (const __u16 *)b->smac;
	if (mac[0] | mac[1] | mac[2]) {
		s0 = mac[0];
		s1 = mac[1];
		s2 = mac[2];
	} else {
		s0 = eth->dst[0];
		s1 = eth->dst[1];
		s2 = eth->dst[2];
	}
	tos = ip->tos;
	bytes = end - data;
	if (bpf_xdp_adjust_head(ctx, 0 - (int)olen))
		return LB_FAST_NO;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if (data + sizeof(*eth) + sizeof(struct iphdr) + sizeof(struct udphdr) > end)
		return drop(ctx, LB_DROP_ENCAP); /* cannot be: it just grew by olen */
	mac = (const __u16 *)b->dmac;
	eth->dst[0] = mac[0];
	eth->dst[1] = mac[1];
	eth->dst[2] = mac[2];
	eth->src[0] = s0;
	eth->src[1] = s1;
	eth->src[2] = s2;
	eth->proto = bpf_htons(ETH_P_IP);
	outer4((void *)(eth + 1), b, gue ? IPPROTO_UDP : IPPROTO_IPIP, tot + olen, tos);
	if (gue) {
		__u32 *u = (void *)(eth + 1) + sizeof(struct iphdr);

		u[0] = bpf_htons(0xc000 | (hash & 0x3fff)) | (__u32)lb_gue_port << 16;
		u[1] = bpf_htons(tot + sizeof(struct udphdr));
	}
	c = bpf_map_lookup_elem(&lb_vip_stats, &id);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
	c = bpf_map_lookup_elem(&lb_backend_stats, &be);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
	count_reason_n(LB_FWD, bytes);
	if (!b->ifindex || b->ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(b->ifindex, 0);
}

/* ---- everything ---- */

/* Every packet fast4 did not decide; `known_miss`: fast4 found its flow in no table. */
static __always_inline int general(struct xdp_md *ctx, int known_miss)
{
	void *data = (void *)(long)ctx->data;
	struct cursor c = { .pos = data, .end = (void *)(long)ctx->data_end };
	struct ethhdr *eth = cursor_take(&c, sizeof(*eth));
	struct pkt p = {};
	struct lb_vip_key vk = {};
	struct lb_vip *vip;
	struct lb_flow *f;
	__u32 be = 0, vid = 0, bytes = ctx->data_end - ctx->data;
	int r, miss = 0, quic = 0, verdict = XDP_DROP;
	__u32 hash;
	__u64 h = 0;
	struct lb_backend *b;

	if (!eth)
		return drop(ctx, LB_DROP_MALFORMED);
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		r = parse4(&c, data, &p);
	else if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		r = parse6(&c, data, &p);
	else
		return pass(ctx, LB_PASS_NOT_IP);
	if (r)
		goto stop;

	/* An established flow first: one hash lookup on the common path, and its hash kept in
	 * its entry. (An ICMP error about an IPv4 flow is never fast4's, so known_miss speaks
	 * of this packet's own flow.) */
	f = known_miss ? 0 : flow_lookup(&p);
	b = f ? established(f, &p) : 0;
	if (b) {
		vid = f->vip;
		be = f->backend;
		hash = f->hash;
	} else {
		h = flow_hash(&p.flow);
		hash = h;
		/* The service: the flow's destination (for an ICMP error, the quoted packet's
		 * source). */
		__builtin_memcpy(vk.addr, p.flow.dst, 16);
		vk.port = p.flow.dport;
		vk.proto = p.flow.proto;
		vk.family = p.flow.family;
		vip = bpf_map_lookup_elem(&lb_vips, &vk);
		if (!vip) {
			r = p.icmp ? LB_PASS_ICMP : LB_PASS_NOT_VIP;
			goto stop;
		}
		vid = vip->id;
		miss = 1;
	}
	/* QUIC: the backend the connection ID names, unless it is down (a drained one keeps
	 * its connections, as the table keeps its flows). The cursor is at the UDP payload;
	 * the bytes read must be the datagram's, not the frame's padding. */
	if (p.flow.proto == IPPROTO_UDP && !p.icmp) {
		__u8 *q = c.pos;
		struct lb_backend *qb;
		__u32 qi;

		if ((void *)(q + LB_QUIC_PEEK) <= c.end &&
		    (void *)q - data + LB_QUIC_PEEK <= p.ip_off + p.ip_len) {
			qi = quic_host(quic_slot(q, vid));
			qb = qi == LB_NO_BACKEND ? 0 : backend(qi);
			if (qb && !(qb->flags & LB_BACKEND_DOWN) && (miss || qi != be)) {
				be = qi;
				b = qb;
				remember(&p, vid, hash, be);
				quic = 1;
			}
		}
	}
	if (miss && !quic) {
		r = pick(&p, vid, h, &be);
		if (r)
			goto stop;
		b = backend(be);
		if (!b) {
			r = LB_DROP_NO_BACKEND;
			goto stop;
		}
	}
	r = encap_send(ctx, &p, b, hash, bytes, &verdict);
	if (r == LB_TX_ICMP_TOO_BIG) {
		count_reason_n(r, bytes);
		return XDP_TX;
	}
	if (r)
		goto stop;
	{
		/* A flow the connection ID routed is a connection the backend already has. */
		int fresh = miss && !quic && !p.icmp && (p.flow.proto == IPPROTO_UDP || p.syn);

		count_flow(&lb_vip_stats, vid, bytes, miss, fresh);
		count_flow(&lb_backend_stats, be, bytes, miss, fresh);
	}
	/* The counter's bytes are the frame as it arrived. */
	count_reason_n(p.icmp ? LB_FWD_ICMP : quic ? LB_FWD_QUIC : LB_FWD, bytes);
	return verdict;

stop:
	switch (r) {
#define LB_REASON_CASE(name, v, desc) \
	case LB_##name:               \
		return LB_VERDICT_##v(ctx, LB_##name);
#define LB_VERDICT_PASS(ctx, r) pass(ctx, r)
#define LB_VERDICT_DROP(ctx, r) drop(ctx, r)
#define LB_VERDICT_FWD(ctx, r) drop(ctx, LB_DROP_MALFORMED) /* never a stop reason */
		LB_REASONS(LB_REASON_CASE)
#undef LB_REASON_CASE
	default:
		return drop(ctx, LB_DROP_MALFORMED);
	}
}

SEC("xdp")
int ringx_lb(struct xdp_md *ctx)
{
	int r = fast4(ctx);

	return r >= 0 ? r : general(ctx, r == LB_FAST_MISS);
}
