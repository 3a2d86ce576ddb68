// SPDX-License-Identifier: Apache-2.0
/*
 * ringx's software connection steering (issue #5), for devices without RSS (veth, loopback-
 * like virtual devices, single-queue virtio): every TCP packet is handed to the CPU of the
 * zone that owns its connection, through a cpumap, before the kernel's TCP code runs. It is
 * Fastsocket's Receive Flow Deliver done in XDP:
 *
 *   active connections (ringx connected; the packet is an upstream's reply): the zone is
 *     encoded in our local port, the packet's DESTINATION port, by the function the zones'
 *     port tables use to choose it (ringx_steer::steering::PortMask):
 *         zone = dport & rs_mask          (rs_mask = 2^k - 1, 2^k >= zones)
 *     A port whose zone does not exist (zones not a power of two) passes unsteered.
 *
 *   passive connections (a client connected to a listening port): the local port is the
 *     listening port, the same for every connection, so it cannot spread them. The zone is
 *     a hash of the packet's SOURCE address and port (the client's), the same for every
 *     packet of the connection:
 *         zone = ((saddr_folded ^ sport) * 0x9E3779B1) * zones >> 32
 *     Not the client port's low bits: Linux clients choose even ports for connect() first,
 *     which would put most connections on one zone. The zone that accepts the connection is
 *     the one on the CPU that processed the SYN ([steering] listen = "cpu": the reuseport
 *     program picks by CPU), so every later packet of it lands there too.
 *
 *   everything else (not TCP, other ports, fragments, malformed) passes untouched.
 *
 * Which is which: dport in [rs_port_lo, rs_port_hi] (the port tables' range) is active;
 * dport marked in rs_listen is passive (a listening port in that range counts as passive).
 *
 * zone -> CPU comes from rs_zone_cpu, filled by ringx with its zones' CPUs; the CPU's
 * cpumap entry (its queue) is created by ringx too. A packet already on its zone's CPU
 * passes directly (no cpumap hop). Counters per CPU: rs_stats, slots RS_STAT_*.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "parsing.h"

char LICENSE[] SEC("license") = "Apache-2.0";

/* ---- settings (written by the loader, see src/xdp.rs) ---- */

/* Number of zones. */
const volatile __u32 rs_zones = 1;
/* Active side: zone = dport & rs_mask. */
const volatile __u32 rs_mask = 0;
/* The local port range of the zones' port tables (active connections). */
const volatile __u32 rs_port_lo = 1;
const volatile __u32 rs_port_hi = 0;

/* Counter slots; per-zone redirect counts follow at RS_STAT_ZONE + zone. Keep in step with
 * src/xdp.rs. */
#define RS_STAT_NOT_TCP 0     /* not TCP over IPv4/IPv6, or a non-first fragment */
#define RS_STAT_MALFORMED 1   /* truncated or inconsistent headers */
#define RS_STAT_OTHER_PORT 2  /* TCP to a port that is neither listening nor in the range */
#define RS_STAT_NO_ZONE 3     /* active: dport & mask names no zone */
#define RS_STAT_ACTIVE 4      /* active packets steered */
#define RS_STAT_PASSIVE 5     /* passive packets steered */
#define RS_STAT_LOCAL 6       /* steered packets already on their zone's CPU (passed) */
#define RS_STAT_REDIRECT 7    /* steered packets sent to another CPU through the cpumap */
#define RS_STAT_ZONE 16
#define RS_MAX_ZONES 240
#define RS_STATS (RS_STAT_ZONE + RS_MAX_ZONES)

/* ---- maps (private to the loading process: steering lives as long as ringx) ---- */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, RS_MAX_ZONES);
} rs_zone_cpu SEC(".maps");

/* max_entries is set by the loader to the number of possible CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
	__uint(max_entries, 1);
} rs_cpumap SEC(".maps");

/* Listening ports (host order): 1 = passive. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 65536);
} rs_listen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, RS_STATS);
} rs_stats SEC(".maps");

#define RS_VLAN_MAX 2

static __always_inline void count(__u32 slot)
{
	__u64 *c = bpf_map_lookup_elem(&rs_stats, &slot);

	if (c) /* per-CPU: no other CPU writes it */
		*c += 1;
}

static __always_inline int pass(__u32 slot)
{
	count(slot);
	return XDP_PASS;
}

/* The packet belongs to `zone`: to its CPU. */
static __always_inline int steer(__u32 zone, __u32 kind)
{
	__u32 *cpu;

	if (zone >= rs_zones || zone >= RS_MAX_ZONES)
		return pass(RS_STAT_NO_ZONE);
	cpu = bpf_map_lookup_elem(&rs_zone_cpu, &zone);
	if (!cpu)
		return pass(RS_STAT_NO_ZONE);
	count(kind);
	count(RS_STAT_ZONE + zone);
	if (*cpu == bpf_get_smp_processor_id())
		return pass(RS_STAT_LOCAL);
	count(RS_STAT_REDIRECT);
	/* XDP_PASS when the CPU has no cpumap entry. */
	return bpf_redirect_map(&rs_cpumap, *cpu, XDP_PASS);
}

/* The zone of a passive connection from `src_fold` (the client address folded to 32
 * bits) and `sport` (host order). */
static __always_inline __u32 passive_zone(__u32 src_fold, __u32 sport)
{
	__u32 h = (src_fold ^ sport) * 0x9E3779B1u;

	return (__u32)(((__u64)h * rs_zones) >> 32);
}

static __always_inline int tcp(struct cursor *c, __u32 src_fold)
{
	struct tcphdr *th = cursor_take(c, sizeof(*th));
	__u32 dport, sport;
	__u8 *listening;

	if (!th)
		return pass(RS_STAT_MALFORMED);
	dport = bpf_ntohs(th->dest);
	sport = bpf_ntohs(th->source);
	listening = bpf_map_lookup_elem(&rs_listen, &dport);
	if (listening && *listening)
		return steer(passive_zone(src_fold, sport), RS_STAT_PASSIVE);
	if (dport >= rs_port_lo && dport <= rs_port_hi)
		return steer(dport & rs_mask, RS_STAT_ACTIVE);
	return pass(RS_STAT_OTHER_PORT);
}

static __always_inline int ipv4(struct cursor *c)
{
	struct iphdr *ip = cursor_take(c, sizeof(*ip));
	__u32 hlen;

	if (!ip || ip->version != 4 || ip->ihl < 5)
		return pass(RS_STAT_MALFORMED);
	if (ip->protocol != IPPROTO_TCP || (ip->frag_off & bpf_htons(0x1fff)))
		return pass(RS_STAT_NOT_TCP);
	hlen = ip->ihl * 4; /* 20..60: options are at most 40 bytes, a bound the verifier sees */
	if (!cursor_take(c, hlen - sizeof(*ip)))
		return pass(RS_STAT_MALFORMED);
	return tcp(c, bpf_ntohl(ip->saddr));
}

static __always_inline int ipv6(struct cursor *c)
{
	struct ipv6hdr *ip6 = cursor_take(c, sizeof(*ip6));
	__u32 fold;

	if (!ip6 || ip6->version != 6)
		return pass(RS_STAT_MALFORMED);
	/* Extension headers are not walked: TCP behind them passes unsteered (counted). */
	if (ip6->nexthdr != IPPROTO_TCP)
		return pass(RS_STAT_NOT_TCP);
	fold = bpf_ntohl(ip6->saddr.in6_u.u6_addr32[0]) ^ bpf_ntohl(ip6->saddr.in6_u.u6_addr32[1]) ^
	       bpf_ntohl(ip6->saddr.in6_u.u6_addr32[2]) ^ bpf_ntohl(ip6->saddr.in6_u.u6_addr32[3]);
	return tcp(c, fold);
}

SEC("xdp")
int ringx_steer(struct xdp_md *ctx)
{
	struct cursor c = {
		.pos = (void *)(long)ctx->data,
		.end = (void *)(long)ctx->data_end,
	};
	struct ethhdr *eth = cursor_take(&c, sizeof(*eth));
	__be16 proto;

	if (!eth)
		return pass(RS_STAT_MALFORMED);
	proto = eth->h_proto;
	for (int i = 0; i < RS_VLAN_MAX; i++) {
		struct { __be16 tci; __be16 proto; } *vlan;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		vlan = cursor_take(&c, sizeof(*vlan));
		if (!vlan)
			return pass(RS_STAT_MALFORMED);
		proto = vlan->proto;
	}
	if (proto == bpf_htons(ETH_P_IP))
		return ipv4(&c);
	if (proto == bpf_htons(ETH_P_IPV6))
		return ipv6(&c);
	return pass(RS_STAT_NOT_TCP);
}
