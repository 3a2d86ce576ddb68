/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The contract between ringx_xdp.bpf.c and the Rust loader: map keys and values, the
 * counter index (reason) of every verdict, and the limits of the parser.
 *
 * build.rs reads this file and generates the Rust side of it (src/abi.rs includes the
 * result): every X(...) line of RX_REASONS becomes a `Reason`, every `#define RX_NAME number`
 * a constant, and every RX_ASSERT_SIZE a size the Rust struct of the same name is checked
 * against at compile time. Keep those three forms on one line each.
 */
#ifndef RINGX_XDP_H
#define RINGX_XDP_H

#include <linux/types.h>

/* Why a packet got its verdict; the index of the per-CPU counters (rx_stats).
 * X(name, verdict, description). Append only: the index is the counter's identity in
 * pinned maps that outlive a program version. */
#define RX_REASONS(X) \
	X(PASS_ALLOW, PASS, "source on the allow list") \
	X(PASS, PASS, "passed every rule") \
	X(PASS_NOT_IP, PASS, "not IPv4 or IPv6 (ARP, LLDP, ...), or VLAN tags nested deeper than RX_VLAN_MAX") \
	X(PASS_FRAGMENT, PASS, "non-first IP fragment: no L4 header to check") \
	X(DROP_BLOCK, DROP, "source on the block list") \
	X(DROP_SYN_RATE, DROP, "TCP SYN beyond the source's rate") \
	X(DROP_PORT, DROP, "TCP or UDP to a port that is not served") \
	X(DROP_MALFORMED, DROP, "truncated or inconsistent header") \
	X(DROP_EXT_LIMIT, DROP, "IPv6 extension header chain longer than RX_IPV6_EXT_MAX") \
	/* end of RX_REASONS */

enum rx_reason {
#define RX_REASON_ENUM(name, verdict, desc) RX_##name,
	RX_REASONS(RX_REASON_ENUM)
#undef RX_REASON_ENUM
	RX_REASON_MAX
};

/* Parser limits. */
#define RX_VLAN_MAX 2      /* 802.1Q / 802.1ad tags parsed (QinQ) */
#define RX_IPV6_EXT_MAX 8  /* IPv6 extension headers walked before giving up */

/* Bits of an rx_ports entry: the port is served over this protocol. */
#define RX_PORT_TCP 1
#define RX_PORT_UDP 2

/* Who added a block or allow entry (the value of the LPM tries). */
#define RX_ORIGIN_CLI 1
#define RX_ORIGIN_API 2
#define RX_ORIGIN_CONFIG 3

/* One token of a SYN bucket, in the bucket's unit (nano-tokens: one token per second of
 * rate accrues one unit per nanosecond, so refilling needs no division). */
#define RX_TOKEN 1000000000

/* LPM trie keys (struct bpf_lpm_trie_key layout: prefix length, then the address in
 * network order). */
struct rx_lpm_v4 {
	__u32 prefixlen;
	__u8 addr[4];
};

struct rx_lpm_v6 {
	__u32 prefixlen;
	__u8 addr[16];
};

/* A SYN bucket's key: the IPv4 source, or the /64 of an IPv6 source (one host usually
 * owns a whole /64, so rotating the low bits must not earn fresh tokens). */
struct rx_rate_key {
	__u8 family; /* 4 or 6 */
	__u8 pad[3];
	__u8 addr[16];
};

struct rx_bucket {
	__u64 tokens;  /* in RX_TOKEN units */
	__u64 last_ns; /* bpf_ktime_get_ns() of the last refill */
};

struct rx_counter {
	__u64 packets;
	__u64 bytes;
};

#define RX_ASSERT_SIZE(type, size) _Static_assert(sizeof(type) == size, #type " size")
RX_ASSERT_SIZE(struct rx_lpm_v4, 8);
RX_ASSERT_SIZE(struct rx_lpm_v6, 20);
RX_ASSERT_SIZE(struct rx_rate_key, 20);
RX_ASSERT_SIZE(struct rx_bucket, 16);
RX_ASSERT_SIZE(struct rx_counter, 16);

#endif /* RINGX_XDP_H */
