/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The contract between ringx_lb.bpf.c (the load balancer and the backends' decapsulation)
 * and the Rust control plane: map keys and values, counter indices and limits.
 *
 * build.rs reads this file: every X(...) line of LB_REASONS / LBD_REASONS becomes a Rust
 * enum variant, every `#define LB_NAME number` a constant and every LB_ASSERT_SIZE a size
 * the Rust struct of the same name is checked against at compile time. One per line.
 */
#ifndef RINGX_LB_H
#define RINGX_LB_H

#include <linux/types.h>

/* Why the balancer gave a packet its verdict: the index of the per-CPU counters (lb_stats).
 * X(name, verdict, description); FWD is XDP_TX or XDP_REDIRECT. Append only. */
#define LB_REASONS(X) \
	X(PASS_NOT_IP, PASS, "not IPv4 or IPv6") \
	X(PASS_NOT_VIP, PASS, "not addressed to a virtual service (address, port, protocol)") \
	X(PASS_ICMP, PASS, "ICMP that is not a size error about a virtual service's flow") \
	X(PASS_IPV6_EXT, PASS, "IPv6 with extension headers other than a fragment header") \
	X(FWD, FWD, "encapsulated and sent to a backend") \
	X(FWD_ICMP, FWD, "fragmentation-needed / packet-too-big sent to the flow's backend") \
	X(DROP_MALFORMED, DROP, "truncated or inconsistent header") \
	X(DROP_FRAGMENT, DROP, "IP fragment addressed to a virtual service's address") \
	X(DROP_NO_BACKEND, DROP, "virtual service without a usable backend") \
	X(DROP_NO_ROUTE, DROP, "no route or no resolved neighbour towards the backend") \
	X(DROP_TOO_BIG, DROP, "encapsulated packet larger than the route's MTU") \
	X(DROP_ENCAP, DROP, "no room in the frame for the outer headers") \
	X(TX_ICMP_TOO_BIG, FWD, "too big once encapsulated (IPv4 with DF, or IPv6): ICMP fragmentation-needed or ICMPv6 packet-too-big sent back to the client") \
	X(DROP_TOO_BIG_LIMITED, DROP, "too big once encapsulated, its ICMP answer over the rate limit (too_big_rate, too_big_burst)") \
	X(FWD_QUIC, FWD, "QUIC packet sent to the backend its connection ID names, where the connection table had no entry or another backend for its addresses and ports (a client that moved)") \
	/* end of LB_REASONS */

/* The backends' decapsulation program (ringx_lb_decap), counters in lbd_stats. */
#define LBD_REASONS(X) \
	X(DECAP_IPIP, PASS, "IP-in-IP packet decapsulated") \
	X(DECAP_GUE, PASS, "GUE (IP in UDP) packet decapsulated") \
	X(PASS_OTHER, PASS, "not encapsulated: passed untouched") \
	X(DROP_MALFORMED, DROP, "truncated or inconsistent outer or inner header") \
	/* end of LBD_REASONS */

enum lb_reason {
#define LB_REASON_ENUM(name, verdict, desc) LB_##name,
	LB_REASONS(LB_REASON_ENUM)
#undef LB_REASON_ENUM
	LB_REASON_MAX
};

enum lbd_reason {
#define LBD_REASON_ENUM(name, verdict, desc) LBD_##name,
	LBD_REASONS(LBD_REASON_ENUM)
#undef LBD_REASON_ENUM
	LBD_REASON_MAX
};

/* Maglev lookup table entries per virtual service: the smallest table of crates/balance
 * (a prime; enough for 655 backends at 100 entries each). */
#define LB_RING_SIZE 65537
/* Table capacities (the loader may size the maps below them, never above). */
#define LB_MAX_VIPS 64
#define LB_MAX_BACKENDS 4096
/* A ring entry that names no backend (a service whose backends are all out). */
#define LB_NO_BACKEND 4294967295

/* QUIC connection IDs as ringx issues them (crates/quic/src/cid.rs, QUIC-LB's plaintext
 * layout): LB_QUIC_CID_LEN bytes, the first byte's top three bits the config rotation
 * (LB_QUIC_ROTATION), the second the host (a backend's quic_host, 1..255). */
#define LB_QUIC_CID_LEN 12
#define LB_QUIC_ROTATION 0
#define LB_QUIC_HOST_BYTE 1
/* lb_quic_hosts: LB_QUIC_HOSTS slots per service (one per host byte). */
#define LB_QUIC_HOSTS 256

/* Encapsulations (lb_encap). */
#define LB_ENCAP_GUE 1  /* outer IP + UDP to lb_gue_port + the inner IP packet (GUE variant 1) */
#define LB_ENCAP_IPIP 2 /* outer IP + the inner packet: IPPROTO_IPIP (4) or IPPROTO_IPV6 (41) */

/* lb_backend.flags. */
#define LB_BACKEND_PRESENT 1 /* configured; an absent slot is free */
#define LB_BACKEND_DRAIN 2   /* no new flows; established flows stay */
#define LB_BACKEND_DOWN 4    /* failed its health check: no new flows */

/* lb_vip.flags. */
#define LB_VIP_PRESENT 1

/* A virtual service: destination address (IPv4 in the first 4 bytes), port (network order)
 * and protocol (IPPROTO_TCP or IPPROTO_UDP). */
struct lb_vip_key {
	__u8 addr[16];
	__u16 port;
	__u8 proto;
	__u8 family; /* 4 or 6 */
};

struct lb_vip {
	__u32 id;    /* index of its ring (lb_ring) and counters (lb_vip_stats) */
	__u32 flags; /* LB_VIP_* */
};

/* An address alone (lb_vip_addrs: which destinations are virtual, for fragments). */
struct lb_addr {
	__u8 addr[16];
	__u8 family;
	__u8 pad[3];
};

/* A backend, with the next hop towards it as the control plane resolved it from the
 * kernel's routes and neighbours (the program needs no GPL-only helper, and no route lookup
 * per packet). */
struct lb_backend {
	__u8 addr[16];
	__u8 family;
	__u8 pad;
	__u16 mtu;     /* of the device towards it; 0: not checked */
	__u32 flags;   /* LB_BACKEND_* */
	__u32 ifindex; /* the device towards it; 0: the one the packet came in on */
	__u8 dmac[6];  /* the next hop's MAC; all zero: unresolved */
	__u8 smac[6];  /* the device's own MAC; all zero: the arriving frame's destination */
};

/* A flow: the client's packet as it arrives (source = client, destination = VIP). */
struct lb_flow_key {
	__u8 src[16];
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};

/* An IPv4 flow as its table (lb_conns4) keys it: the same values in 16 bytes. The ring's
 * hash is over the lb_flow_key form either way. */
struct lb_flow_key4 {
	__u32 src;
	__u32 dst;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct lb_flow {
	__u32 backend; /* index into lb_backends */
	__u32 vip;     /* the service's id, for its counters */
	__u32 hash;    /* the flow's hash (its low 32 bits): an established flow is not hashed again */
};

/* Which (service, backend) pairs exist and with what weight: the control plane rebuilds a
 * service's ring from these alone, so every process (ringx serve, ringx lb) computes the
 * same ring from the pinned maps. */
struct lb_member_key {
	__u32 vip;
	__u32 backend;
};

/* Per service and per backend (per CPU). */
struct lb_counter {
	__u64 packets;
	__u64 bytes;
	__u64 new_flows;  /* TCP SYNs and UDP flows that got a backend from the ring */
	__u64 lru_misses; /* connection-table misses (new flows and mid-flow misses) */
};

struct lb_reason_counter {
	__u64 packets;
	__u64 bytes;
};

#define LB_ASSERT_SIZE(type, size) _Static_assert(sizeof(type) == size, #type " size")
LB_ASSERT_SIZE(struct lb_vip_key, 20);
LB_ASSERT_SIZE(struct lb_vip, 8);
LB_ASSERT_SIZE(struct lb_addr, 20);
LB_ASSERT_SIZE(struct lb_backend, 40);
LB_ASSERT_SIZE(struct lb_flow_key, 40);
LB_ASSERT_SIZE(struct lb_flow_key4, 16);
LB_ASSERT_SIZE(struct lb_flow, 12);
LB_ASSERT_SIZE(struct lb_member_key, 8);
LB_ASSERT_SIZE(struct lb_counter, 32);
LB_ASSERT_SIZE(struct lb_reason_counter, 16);

#endif /* RINGX_LB_H */
