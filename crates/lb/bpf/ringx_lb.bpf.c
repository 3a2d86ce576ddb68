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
 *      else the service's Maglev ring at hash(5-tuple) -> a backend, remembered
 *   6. encapsulate (GUE over UDP, or IP-in-IP) to the backend's next hop (resolved by
 *      the control plane), XDP_TX, or XDP_REDIRECT to
 *      another device                                  -> FWD; next hop unresolved DROP
 *                                                         (NO_ROUTE), over its MTU (TOO_BIG)
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


/* ICMP's fixed header (linux/icmp.h would pull in the C library's socket headers). */
struct icmp_hdr {
	__u8 type;
	__u8 code;
	__u16 check;
	__u32 rest; /* unused, or the next-hop MTU (RFC 1191) / the MTU (RFC 8201) */
};
#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4
#define ICMPV6_PKT_TOOBIG 2

/* ---- settings (written by the loader, src/loader.rs) ---- */

const volatile __u32 lb_encap = LB_ENCAP_GUE;
/* GUE: the backends' UDP port (network order). */
const volatile __u16 lb_gue_port = 0;
/* The outer source addresses (this balancer's own), in network order. Read element by
 * element: copying them with a cast that drops `volatile` would let clang fold in the zero
 * initialiser instead of what the loader wrote. */
const volatile __u32 lb_src_v4 = 0;
const volatile __u32 lb_src_v6[4] = {};

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
LB_MAP(lb_vip_stats, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct lb_counter, LB_MAX_VIPS);
LB_MAP(lb_backend_stats, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct lb_counter, LB_MAX_BACKENDS);
/* 64 slots, more than LB_REASON_MAX: a newer program may add reasons to a pinned map. */
LB_MAP(lb_stats, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct lb_reason_counter, 64);

/* The connection table. An LRU hash whose free lists are per CPU (BPF_F_NO_COMMON_LRU): no
 * CPU contends for another's list on insert, yet every CPU sees every flow, so a flow whose
 * packets move to another CPU keeps its backend. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb_flow_key);
	__type(value, struct lb_flow);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_conns SEC(".maps");

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

/* ---- what a packet is ---- */

/* The inner packet to send on: its IP header's start and length, and the flow it belongs
 * to (the client's direction, also for an ICMP error about it). */
struct pkt {
	struct lb_flow_key flow;
	__u32 ip_off;  /* the IP header's offset in the frame */
	__u32 ip_len;  /* the IP packet's length (its header says so; any padding excluded) */
	__u8 tos;      /* for the outer header */
	__u8 df;       /* IPv4 with don't-fragment (IPv6: never fragmented on the way) */
	__u8 family;   /* of the inner packet: 4 or 6 */
	__u8 syn;      /* TCP SYN without ACK */
	__u8 icmp;     /* an ICMP error about the flow, not a packet of it */
};

/* Reads source and destination ports at `c`; `l4_len` is what the IP header says. For TCP,
 * checks the data offset too. Returns 0, or a reason to stop. */
static __always_inline int ports(struct cursor *c, __u8 proto, __u32 l4_len, struct pkt *p)
{
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = cursor_take(c, sizeof(*th));

		if (!th || l4_len < sizeof(*th) || th->doff * 4 < sizeof(*th) ||
		    th->doff * 4 > l4_len)
			return LB_DROP_MALFORMED;
		p->flow.sport = th->source;
		p->flow.dport = th->dest;
		p->syn = th->syn && !th->ack;
		return 0;
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *uh = cursor_take(c, sizeof(*uh));

		if (!uh || l4_len < sizeof(*uh))
			return LB_DROP_MALFORMED;
		p->flow.sport = uh->source;
		p->flow.dport = uh->dest;
		return 0;
	}
	return LB_PASS_NOT_VIP;
}

static __always_inline int vip_addr(const __u8 *addr, __u8 family, __u32 len)
{
	struct lb_addr a = { .family = family };

	__builtin_memcpy(a.addr, addr, 16);
	(void)len;
	return bpf_map_lookup_elem(&lb_vip_addrs, &a) != 0;
}

/* The embedded packet of an ICMP error (at `c`): the backend's reply that could not go on,
 * source = VIP. Fills `p->flow` in the client's direction. Returns 0, or a reason. */
static __always_inline int icmp_inner4(struct cursor *c, struct pkt *p)
{
	struct iphdr *in = cursor_take(c, sizeof(*in));
	__u16 *l4;

	if (!in || in->version != 4 || in->ihl < 5)
		return LB_DROP_MALFORMED;
	if (!cursor_take(c, (in->ihl * 4 - sizeof(*in)) & 0x3f))
		return LB_DROP_MALFORMED;
	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return LB_PASS_ICMP;
	l4 = cursor_take(c, 4); /* the first 8 bytes are quoted; the ports are enough */
	if (!l4)
		return LB_DROP_MALFORMED;
	__builtin_memcpy(p->flow.src, &in->daddr, 4);
	__builtin_memcpy(p->flow.dst, &in->saddr, 4);
	p->flow.sport = l4[1];
	p->flow.dport = l4[0];
	p->flow.proto = in->protocol;
	return 0;
}

static __always_inline int icmp_inner6(struct cursor *c, struct pkt *p)
{
	struct ipv6hdr *in = cursor_take(c, sizeof(*in));
	__u16 *l4;

	if (!in || in->version != 6)
		return LB_DROP_MALFORMED;
	if (in->nexthdr != IPPROTO_TCP && in->nexthdr != IPPROTO_UDP)
		return LB_PASS_ICMP;
	l4 = cursor_take(c, 4);
	if (!l4)
		return LB_DROP_MALFORMED;
	__builtin_memcpy(p->flow.src, &in->daddr, 16);
	__builtin_memcpy(p->flow.dst, &in->saddr, 16);
	p->flow.sport = l4[1];
	p->flow.dport = l4[0];
	p->flow.proto = in->nexthdr;
	return 0;
}

/* IPv4: fills `p`; returns 0 to balance it, or the reason to stop with. */
static __always_inline int parse4(struct cursor *c, void *data, struct pkt *p)
{
	struct iphdr *ip = cursor_take(c, sizeof(*ip));
	__u32 hlen, tot;

	if (!ip || ip->version != 4 || ip->ihl < 5)
		return LB_DROP_MALFORMED;
	hlen = ip->ihl * 4;
	tot = bpf_ntohs(ip->tot_len);
	if (tot < hlen || tot > cursor_left(c) + sizeof(*ip))
		return LB_DROP_MALFORMED;
	if (!cursor_take(c, (hlen - sizeof(*ip)) & 0x3f)) /* 0..40, bounded for the verifier */
		return LB_DROP_MALFORMED;
	p->ip_off = (void *)ip - data;
	p->ip_len = tot;
	p->tos = ip->tos;
	p->df = !!(ip->frag_off & bpf_htons(0x4000));
	p->family = 4;
	p->flow.family = 4;
	__builtin_memcpy(p->flow.src, &ip->saddr, 4);
	__builtin_memcpy(p->flow.dst, &ip->daddr, 4);
	/* More fragments, or an offset: the ports are in the first fragment only, so the
	 * fragments of one datagram could not be kept together (Katran drops them too). */
	if (ip->frag_off & bpf_htons(0x3fff))
		return vip_addr(p->flow.dst, 4, 4) ? LB_DROP_FRAGMENT : LB_PASS_NOT_VIP;
	if (ip->protocol == IPPROTO_ICMP) {
		struct icmp_hdr *ic = cursor_take(c, sizeof(*ic));

		if (!ic)
			return LB_DROP_MALFORMED;
		if (ic->type != ICMP_DEST_UNREACH || ic->code != ICMP_FRAG_NEEDED)
			return LB_PASS_ICMP;
		p->icmp = 1;
		return icmp_inner4(c, p);
	}
	p->flow.proto = ip->protocol;
	return ports(c, ip->protocol, tot - hlen, p);
}

static __always_inline int parse6(struct cursor *c, void *data, struct pkt *p)
{
	struct ipv6hdr *ip6 = cursor_take(c, sizeof(*ip6));
	__u32 plen;

	if (!ip6 || ip6->version != 6)
		return LB_DROP_MALFORMED;
	plen = bpf_ntohs(ip6->payload_len);
	if (plen == 0 || plen > cursor_left(c)) /* 0: a jumbogram, never balanced */
		return LB_DROP_MALFORMED;
	p->ip_off = (void *)ip6 - data;
	p->ip_len = plen + sizeof(*ip6);
	p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	p->family = 6;
	p->flow.family = 6;
	__builtin_memcpy(p->flow.src, &ip6->saddr, 16);
	__builtin_memcpy(p->flow.dst, &ip6->daddr, 16);
	if (ip6->nexthdr == IPPROTO_FRAGMENT)
		return vip_addr(p->flow.dst, 6, 16) ? LB_DROP_FRAGMENT : LB_PASS_NOT_VIP;
	if (ip6->nexthdr == IPPROTO_ICMPV6) {
		struct icmp_hdr *ic = cursor_take(c, sizeof(*ic));

		if (!ic)
			return LB_DROP_MALFORMED;
		if (ic->type != ICMPV6_PKT_TOOBIG)
			return LB_PASS_ICMP;
		p->icmp = 1;
		return icmp_inner6(c, p);
	}
	if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
		return ip6->nexthdr == IPPROTO_HOPOPTS || ip6->nexthdr == IPPROTO_ROUTING ||
			       ip6->nexthdr == IPPROTO_DSTOPTS
			   ? LB_PASS_IPV6_EXT
			   : LB_PASS_NOT_VIP;
	p->flow.proto = ip6->nexthdr;
	return ports(c, ip6->nexthdr, plen, p);
}

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
	if (!p->icmp) {
		struct lb_flow nf = { .backend = *be, .vip = vid };

		bpf_map_update_elem(&lb_conns, &p->flow, &nf, BPF_ANY);
	}
	return 0;
}

/* ---- encapsulation ---- */

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

static __always_inline void outer4(struct iphdr *o, const struct lb_backend *b, __u8 proto,
				   __u16 len, __u8 tos)
{
	__u16 *w = (__u16 *)o;
	__u32 sum = 0;

	o->version = 4;
	o->ihl = 5;
	o->tos = tos;
	o->tot_len = bpf_htons(len);
	o->id = 0;
	o->frag_off = bpf_htons(0x4000); /* DF: the inner packet is never fragmented here */
	o->ttl = 64;
	o->protocol = proto;
	o->check = 0;
	o->saddr = lb_src_v4;
	__builtin_memcpy(&o->daddr, b->addr, 4);
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	o->check = csum_fold(sum);
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

/* Where the encapsulated packet goes: the backend's next hop. Returns 0 or a reason. */
static __always_inline int route(const struct lb_backend *b, __u32 tot, __u8 *dmac, __u8 *smac)
{
	if (!(b->dmac[0] | b->dmac[1] | b->dmac[2] | b->dmac[3] | b->dmac[4] | b->dmac[5]))
		return LB_DROP_NO_ROUTE;
	if (b->mtu && tot > b->mtu)
		return LB_DROP_TOO_BIG;
	__builtin_memcpy(dmac, b->dmac, 6);
	if (b->smac[0] | b->smac[1] | b->smac[2] | b->smac[3] | b->smac[4] | b->smac[5])
		__builtin_memcpy(smac, b->smac, 6);
	return 0;
}

/* The answer to an IPv4 packet with DF that would exceed the path's MTU once encapsulated:
 * ICMP destination unreachable / fragmentation needed back to the client (RFC 1191), with
 * the MTU left for the inner packet, from the address the client sent to, so that its TCP
 * lowers the segment size instead of losing these packets silently. The quoted part is the
 * client's IP header (without options; with options the packet is dropped) and 8 bytes,
 * already in place after growing the head by the new headers. Returns LB_TX_ICMP_TOO_BIG
 * (send the frame back with XDP_TX), or the reason to drop the packet. */
static __always_inline int too_big4(struct xdp_md *ctx, __u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *in = data + sizeof(*eth);
	__u8 dst[6], src[6];
	__u32 saddr, daddr, sum = 0;
	struct iphdr *o;
	struct icmp_hdr *ic;
	__u16 *w;
	int len;

	if ((void *)(in + 1) + 8 > end || in->ihl != 5)
		return LB_DROP_TOO_BIG;
	__builtin_memcpy(dst, eth->h_source, 6);
	__builtin_memcpy(src, eth->h_dest, 6);
	saddr = in->daddr;
	daddr = in->saddr;
	/* [eth][ip 20][icmp 8] in front of the quoted 28 bytes, then nothing after them. */
	if (bpf_xdp_adjust_head(ctx, 0 - (int)(sizeof(struct iphdr) + sizeof(*ic))))
		return LB_DROP_TOO_BIG;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	len = end - data;
	if (bpf_xdp_adjust_tail(ctx, 14 + 20 + 8 + 28 - len))
		return LB_DROP_TOO_BIG;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + 14 + 20 + 8 + 28 > end)
		return LB_DROP_TOO_BIG;
	eth = data;
	__builtin_memcpy(eth->h_dest, dst, 6);
	__builtin_memcpy(eth->h_source, src, 6);
	eth->h_proto = bpf_htons(ETH_P_IP);
	o = (void *)(eth + 1);
	o->version = 4;
	o->ihl = 5;
	o->tos = 0;
	o->tot_len = bpf_htons(20 + 8 + 28);
	o->id = 0;
	o->frag_off = 0;
	o->ttl = 64;
	o->protocol = IPPROTO_ICMP;
	o->check = 0;
	o->saddr = saddr;
	o->daddr = daddr;
	w = (__u16 *)o;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	o->check = csum_fold(sum);
	ic = (void *)(o + 1);
	ic->type = ICMP_DEST_UNREACH;
	ic->code = ICMP_FRAG_NEEDED;
	ic->check = 0;
	ic->rest = bpf_htonl(mtu & 0xffff); /* unused (2 bytes), next-hop MTU (2 bytes) */
	w = (__u16 *)ic;
	sum = 0;
#pragma unroll
	for (int i = 0; i < (8 + 28) / 2; i++)
		sum += w[i];
	ic->check = csum_fold(sum);
	return LB_TX_ICMP_TOO_BIG;
}

/* Puts the outer headers in front of the inner IP packet; 0 with the action to send the
 * frame with in `*action`, LB_TX_ICMP_TOO_BIG with XDP_TX (the frame is now the ICMP error),
 * or the reason to drop it. */
static __always_inline int encap_send(struct xdp_md *ctx, const struct pkt *p,
				      const struct lb_backend *b, __u64 hash, int *action)
{
	int gue = lb_encap == LB_ENCAP_GUE;
	__u32 iplen = b->family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	__u32 olen = iplen + (gue ? sizeof(struct udphdr) : 0);
	__u8 proto = gue ? IPPROTO_UDP : (p->family == 4 ? IPPROTO_IPIP : IPPROTO_IPV6);
	__u32 tot = olen + p->ip_len;
	__u8 dmac[6], smac[6];
	struct ethhdr *eth;
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
	__builtin_memcpy(smac, eth->h_dest, 6);
	r = route(b, tot, dmac, smac);
	if (r == LB_DROP_TOO_BIG && p->family == 4 && p->df && !p->icmp) {
		r = too_big4(ctx, b->mtu - olen);
		*action = XDP_TX;
		return r;
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
	__builtin_memcpy(eth->h_dest, dmac, 6);
	__builtin_memcpy(eth->h_source, smac, 6);
	if (b->family == 4) {
		struct iphdr *o = (void *)(eth + 1);

		eth->h_proto = bpf_htons(ETH_P_IP);
		outer4(o, b, proto, tot, p->tos);
		if (gue) {
			struct udphdr *u = (void *)(o + 1);

			u->source = bpf_htons(0xc000 | (hash & 0x3fff));
			u->dest = lb_gue_port;
			u->len = bpf_htons(tot - sizeof(*o));
			u->check = 0; /* allowed over IPv4 */
		}
	} else {
		struct ipv6hdr *o = (void *)(eth + 1);

		eth->h_proto = bpf_htons(ETH_P_IPV6);
		outer6(o, b, proto, tot - sizeof(*o), p->tos, hash);
		if (gue) {
			struct udphdr *u = (void *)(o + 1);

			u->source = bpf_htons(0xc000 | (hash & 0x3fff));
			u->dest = lb_gue_port;
			u->len = bpf_htons(tot - sizeof(*o));
			/* Zero over IPv6: RFC 6935's tunnel exception; ringx_lb_decap takes it
			 * off before the stack could check it. */
			u->check = 0;
		}
	}
	if (!b->ifindex || b->ifindex == ctx->ingress_ifindex)
		*action = XDP_TX;
	else
		*action = bpf_redirect(b->ifindex, 0);
	return 0;
}

SEC("xdp")
int ringx_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	struct cursor c = { .pos = data, .end = (void *)(long)ctx->data_end };
	struct ethhdr *eth = cursor_take(&c, sizeof(*eth));
	struct pkt p = {};
	struct lb_vip_key vk = {};
	struct lb_vip *vip;
	struct lb_flow *f;
	__u32 be = 0, vid = 0, bytes = ctx->data_end - ctx->data;
	int r, miss = 0, verdict = XDP_DROP;
	__u64 hash;
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

	hash = flow_hash(&p.flow);
	/* An established flow first: one hash lookup on the common path. */
	f = bpf_map_lookup_elem(&lb_conns, &p.flow);
	b = f ? established(f, &p) : 0;
	if (b) {
		vid = f->vip;
		be = f->backend;
	} else {
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
		r = pick(&p, vid, hash, &be);
		if (r)
			goto stop;
		b = backend(be);
		if (!b) {
			r = LB_DROP_NO_BACKEND;
			goto stop;
		}
	}
	r = encap_send(ctx, &p, b, hash, &verdict);
	if (r == LB_TX_ICMP_TOO_BIG) {
		count_reason_n(r, bytes);
		return XDP_TX;
	}
	if (r)
		goto stop;
	{
		int fresh = miss && !p.icmp && (p.flow.proto == IPPROTO_UDP || p.syn);

		count_flow(&lb_vip_stats, vid, bytes, miss, fresh);
		count_flow(&lb_backend_stats, be, bytes, miss, fresh);
	}
	{
		/* The counter's bytes are the frame as it arrived. */
		__u32 key = p.icmp ? LB_FWD_ICMP : LB_FWD;
		struct lb_reason_counter *rc = bpf_map_lookup_elem(&lb_stats, &key);

		if (rc) {
			rc->packets++;
			rc->bytes += bytes;
		}
	}
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
