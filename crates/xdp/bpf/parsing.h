/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A bounds-checked cursor over packet data, in the style of xdp-tools'
 * headers/xdp/parsing_helpers.h: every header is taken through cursor_take(), which
 * compares against data_end before the pointer is handed out. The verifier rejects any
 * load from packet memory that such a comparison does not cover, so a truncated packet
 * can only ever make cursor_take() return NULL, never read past the end.
 */
#ifndef RINGX_PARSING_H
#define RINGX_PARSING_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

struct cursor {
	void *pos;
	void *end;
};

/* Returns the next `len` bytes and advances past them, or NULL when fewer remain. `len`
 * must have a known upper bound (a constant, or a value the caller masked or compared):
 * the verifier tracks pos + len as a packet pointer with a variable offset only when that
 * offset is bounded. */
static __always_inline void *cursor_take(struct cursor *c, __u32 len)
{
	void *p = c->pos;

	if (p + len > c->end)
		return NULL;
	c->pos = p + len;
	return p;
}

/* Bytes left from the cursor to the end of the packet. */
static __always_inline __u32 cursor_left(const struct cursor *c)
{
	return c->end - c->pos;
}

#endif /* RINGX_PARSING_H */
