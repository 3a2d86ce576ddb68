#!/usr/bin/env python3
"""Checks that ringx's unit tests fail when the behaviour they guard is broken.

Each entry of MUTATIONS names one unit test and one change to the production code that breaks
what that test guards (a dropped statement, an inverted or loosened condition, an off-by-one,
the wrong timeout...). For each entry the script

  1. checks that the snippet occurs exactly once in the file, outside test code;
  2. applies the change and builds the tests (`cargo test -p ringx-server --lib --no-run`):
     a mutation that does not compile is not a valid mutation and is reported as such;
  3. runs `cargo test -p ringx-server --lib <test> -- --exact` with a timeout, and expects
     it to FAIL (a test that hangs until the timeout counts as failing);
     an entry with `pkg` (and `itest`, an integration test's name) builds and runs that
     crate's library tests (or that integration test) instead of ringx-server's;
  4. restores the file, always (try/finally, Ctrl-C and SIGTERM included), and verifies it is
     byte-identical to what it was. A copy of the original waits in target/mutation-check/
     while the file is mutated, so even a killed run is repaired by the next one.

Before any mutation, the unmutated crate is built and the selected tests must pass.

At the end it prints a table and writes scripts/mutation_check.json (for a run with --only,
the entries it ran are merged into the file's existing results). The exit status is non-zero
if a test survived its mutation, a snippet is missing or ambiguous, a mutation does not
compile, or a test does not exist or fails unmutated.

    python3 scripts/mutation_check.py                 # every entry (about 5 minutes on 2 cores)
    python3 scripts/mutation_check.py --only retried  # the entries whose test name has it
    python3 scripts/mutation_check.py --list          # the table, nothing run
    python3 scripts/mutation_check.py --check         # snippets only, nothing built

Python 3.8+, no packages beyond the standard library.
"""

import argparse
import datetime
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "scripts" / "mutation_check.json"
BACKUPS = ROOT / "target" / "mutation-check"
CARGO = os.environ.get("CARGO", "cargo")
S = "crates/server/src/"
Q = "crates/quic/src/"


def target(m):
    """The cargo arguments naming entry `m`'s tests: ringx-server's library by default."""
    return ("-p", m.get("pkg", "ringx-server"), *(("--test", m["itest"]) if "itest" in m else ("--lib",)))


def build_cmd(m):
    return [CARGO, "test", *target(m), "--no-run"]

# fmt: off
MUTATIONS = [
    # ---- zone::tls_tests: kernel TLS hand-over --------------------------------------------
    dict(test="zone::tls_tests::after_the_handshake_the_kernel_seals_and_the_role_writes_plaintext",
         file=S + "transport/tls.rs",
         find='        self.kernel = true;\n        true\n    }',
         replace='        self.kernel = false;\n        true\n    }',
         why="after giving the kernel its keys, the transport still seals in user space"),
    dict(test="zone::tls_tests::a_kernel_that_refuses_the_keys_closes_the_connection_before_any_plaintext",
         file=S + "tls.rs",
         find="let ktls = z.ktls.filter(|_| io.can_set_sockopt());",
         replace="let ktls = z.ktls.filter(|_| false && io.can_set_sockopt());",
         why="the zone never offers the kernel a connection"),
    dict(test="zone::tls_tests::a_kernel_without_the_cipher_leaves_the_records_to_ringx",
         file="crates/tls/src/conn.rs",
         find="if support.allows(&secrets.tx.1) {",
         replace="if support.allows(&secrets.tx.1) || true {",
         why="a cipher the kernel lacks is handed over anyway"),
    # ---- zone::tests: routing -----------------------------------------------------------
    dict(test="zone::tests::a_return_location_answers_with_its_status_and_body",
         file=S + "route_build.rs",
         find="Canned::new(status, head_for(None, body.len()), body.clone())",
         replace="Canned::new(status, head_for(None, body.len() + 1), body.clone())",
         why="a return location's Content-Length is off by one"),
    dict(test="zone::tests::the_longest_prefix_wins",
         file=S + "route_build.rs",
         find="1 => b.path.len().cmp(&a.path.len()),",
         replace="1 => a.path.len().cmp(&b.path.len()),",
         why="locations are sorted shortest prefix first"),
    dict(test="zone::tests::an_exact_location_matches_only_its_path",
         file=S + "route.rs",
         find="                l.path == path\n",
         replace="                path.starts_with(&l.path)\n",
         why="an exact location matches as a prefix"),
    dict(test="zone::tests::the_host_picks_the_server",
         file="crates/tls/src/sni.rs",
         find='.find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))',
         replace='.find(|(n, _)| n.as_bytes() == name)',
         why="server names are compared case-sensitively"),
    dict(test="zone::tests::no_matching_location_is_404",
         file=S + "pipeline/routing.rs",
         find='Some(Action::None) | None => a.error(out, 404, ""),',
         replace='Some(Action::None) | None => Answer { ch: ConnHdr::Close, ..a }.error(out, 404, ""),',
         why="a 404 announces the close of a keep-alive connection"),
    dict(test="zone::tests::paths_are_normalised_before_routing",
         file=S + "pipeline/routing.rs",
         find="b'/' | b'.' if prev == b'/' => return false,",
         replace="b'.' if prev == b'/' => return false,",
         why="a path with '//' is taken as clean and routed unnormalised"),
    dict(test="zone::tests::a_path_above_the_root_is_400_and_closes",
         file=S + "pipeline/routing.rs",
         find='        return Reply {\n            close: true,\n            ..Reply::bytes(w)',
         replace='        return Reply {\n            close: false,\n            ..Reply::bytes(w)',
         why="the 400 for a path that cannot be normalised keeps the connection open"),
    dict(test="zone::tests::head_gets_the_head_only",
         file=S + "response/mod.rs",
         find="if ch == ConnHdr::Keep11 && !head_only {",
         replace="if ch == ConnHdr::Keep11 {",
         why="the one-copy keep-alive form of a return response sends the body to HEAD"),
    dict(test="zone::tests::options_asterisk_lists_the_methods",
         file=S + "pipeline/routing.rs",
         find='if req.path == "*" {',
         replace='if req.path == "/*" {',
         why="OPTIONS * is not recognised (asterisk-form compared with the wrong form)"),
    dict(test="zone::tests::connect_is_405",
         file=S + "pipeline/routing.rs",
         find='    if req.method == Method::Connect {\n        return Some(405);',
         replace='    if req.method == Method::Connect && req.header("x-405").is_some() {\n        return Some(405);',
         why="CONNECT without a body is routed instead of refused with 405"),
    dict(test="zone::tests::static_files_are_served_with_validators_and_missing_ones_are_404",
         file=S + "static_files.rs",
         find="(206, a, b - a + 1)",
         replace="(206, a, b - a)",
         why="a byte range is one byte short (inclusive end taken as exclusive)"),
    dict(test="zone::tests::a_post_to_a_static_location_is_refused_at_once",
         file=S + "role/http1/prepared.rs",
         find="if p.written.status >= 400 {",
         replace="if p.written.status >= 500 {",
         why="a 4xx refusal waits for the request body instead of going out at once"),
    # ---- zone::tests: keep-alive and pipelining ---------------------------------------------
    dict(test="zone::tests::a_keep_alive_connection_serves_request_after_request",
         file=S + "role/http1/mod.rs",
         find="return self.after_response(cx, b, c, !keep, more_input);",
         replace="return self.after_response(cx, b, c, keep, more_input);",
         why="a keep-alive response closes the connection after it (inverted condition)"),
    dict(test="zone::tests::pipelined_requests_are_answered_in_order",
         file=S + "role/http1/mod.rs",
         find="Next::Continue => continue,",
         replace="Next::Continue => break,",
         why="parsing stops after the first request of a burst"),
    dict(test="zone::tests::pipelined_requests_split_anywhere_give_the_same_responses",
         file=S + "role/http1/mod.rs",
         find='if used < data.len() && self.cycle.phase != Phase::Lingering {',
         replace='if used < data.len() && self.cycle.phase == Phase::Idle {',
         why="the tail of a receive is kept only between requests: a partial head is lost"),
    dict(test="zone::tests::connection_close_is_honoured",
         file=S + "role/http1/cycle.rs",
         find='keep_alive && !cx.ctx.draining && self.requests < cx.ctx.set.keepalive_requests',
         replace='!cx.ctx.draining && self.requests < cx.ctx.set.keepalive_requests',
         why="the request's Connection: close is ignored"),
    dict(test="zone::tests::http10_closes_unless_it_asks_for_keep_alive",
         file=S + "response/head.rs",
         find="(true, false) => ConnHdr::Keep10,",
         replace="(true, false) => ConnHdr::Keep11,",
         why="HTTP/1.0 keep-alive is not confirmed with Connection: keep-alive"),
    dict(test="zone::tests::keepalive_requests_limits_a_connection",
         file=S + "role/http1/cycle.rs",
         find='self.requests < cx.ctx.set.keepalive_requests',
         replace='self.requests <= cx.ctx.set.keepalive_requests',
         why="keepalive_requests is off by one (one request too many)"),
    dict(test="zone::tests::a_request_body_is_read_before_the_next_request",
         file=S + "role/http1/mod.rs",
         find='let has_body = !matches!(req.body, BodyKind::None | BodyKind::Length(0));',
         replace='let has_body = matches!(req.body, BodyKind::Chunked);',
         why="a Content-Length body is not read: the response goes out before it"),
    dict(test="zone::tests::a_chunked_body_is_read_before_the_next_request",
         file=S + "role/http1/mod.rs",
         find='let has_body = !matches!(req.body, BodyKind::None | BodyKind::Length(0));',
         replace='let has_body = matches!(req.body, BodyKind::Length(_));',
         why="a chunked body is not read: its chunks are parsed as the next request"),
    dict(test="zone::tests::expect_continue_gets_100_before_the_body_is_sent",
         file=S + "role/http1/prepared.rs",
         find='if req.expect_continue {',
         replace='if !req.expect_continue {',
         why="100 Continue is sent when not asked for, and not when asked for"),
    dict(test="zone::tests::a_body_over_the_limit_is_413",
         file=S + "role/http1/prepared.rs",
         find="if self.body.received() > max_body {",
         replace="if d.done && self.body.received() > max_body {",
         why="a streamed body is measured against the limit only once complete"),
    dict(test="zone::tests::a_head_over_the_limit_is_431",
         file=S + "role/http1/mod.rs",
         find="&cx.ctx.set.limits,",
         replace="&ringx_http::Limits::default(),",
         why="the parser gets the default limits, not the configured max_header_size"),
    dict(test="zone::tests::a_malformed_request_is_400_and_nothing_after_it_is_answered",
         file=S + "role/http1/cycle.rs",
         find='        self.phase = Phase::Lingering;\n        b.inbuf = Vec::new();',
         replace='        b.inbuf = Vec::new();',
         why="lingering does not enter the Lingering phase: input after a 400 is answered"),
    dict(test="zone::tests::a_slow_reader_stops_the_reading_of_its_requests",
         file=S + "role/http1/cycle.rs",
         find="            cx.io.pause_recv(c);\n            b.tr.notify_when_flushed(cx.io, c);\n",
         replace="            cx.io.pause_recv(c);\n",
         why="a connection paused for its output queue is never told it drained: it never reads again"),
    dict(test="zone::tests::a_client_fin_after_a_response_closes_the_connection",
         file=S + "role/http1/mod.rs",
         find="Phase::Idle if b.paused => {}",
         replace="Phase::Idle => {}",
         why="a FIN on an idle keep-alive connection is ignored (dropped guard)"),
    # ---- zone::tests: timeouts ----------------------------------------------------------------
    dict(test="zone::tests::an_idle_keep_alive_connection_closes_after_keepalive_timeout",
         file=S + "role/http1/cycle.rs",
         find="let at = now + cx.ctx.set.keepalive_timeout;",
         replace="let at = now + cx.ctx.set.header_timeout;",
         why="an idle keep-alive connection gets client_header_timeout instead of keepalive_timeout"),
    dict(test="zone::tests::a_new_connection_must_send_its_head_within_client_header_timeout",
         file=S + "zone/mod.rs",
         find="let at = now + cx.ctx.set.header_timeout;",
         replace="let at = now + cx.ctx.set.keepalive_timeout;",
         why="a new connection gets keepalive_timeout instead of client_header_timeout"),
    dict(test="zone::tests::a_partial_head_times_out_with_408",
         file=S + "role/http1/mod.rs",
         find='            Phase::Head | Phase::Body => self.fail(cx, b, c, 408, false),',
         replace='            Phase::Head => cx.io.close(c),\n            Phase::Body => self.fail(cx, b, c, 408, false),'
                 "            Phase::Body => self.fail(cx, b, c, 408, false),",
         why="a partial head that times out is closed silently instead of answered 408"),
    dict(test="zone::tests::a_stalled_body_times_out_with_408",
         file=S + "role/http1/mod.rs",
         find="                            pos += n;\n"
              "                            let at = cx.io.now() + cx.ctx.set.body_timeout;\n"
              "                            cx.ctx.set_deadline(cx.io, b, c, at);\n"
              "                            break;",
         replace="                            pos += n;\n"
                 "                            break;",
         why="body progress does not move the client_body_timeout deadline"),
    dict(test="zone::tests::a_reader_that_stops_is_closed_after_send_timeout_without_progress",
         file=S + "zone/mod.rs",
         find="                base.last_out = pending;\n",
         replace="",
         why="the send-progress mark is never updated: a stalled reader is never closed"),
    dict(test="zone::tests::a_lingering_connection_closes_after_lingering_timeout",
         file=S + "role/http1/cycle.rs",
         find="let at = cx.io.now() + cx.ctx.set.lingering_timeout;",
         replace="let at = cx.io.now() + cx.ctx.set.send_timeout;",
         why="a lingering connection gets send_timeout instead of lingering_timeout"),
    # ---- zone::tests: drain, reload, counters -------------------------------------------------
    dict(test="zone::tests::a_drain_stops_listening_gives_idle_connections_a_grace_and_exits_when_empty",
         file=S + "ctx/mod.rs",
         find="self.draining && self.active == 0 && quic_conns == 0 && !io.accepting()",
         replace="self.draining && self.active <= 1 && quic_conns == 0 && !io.accepting()",
         why="a draining zone exits while one connection is still open"),
    dict(test="zone::tests::a_drain_serves_a_connection_accepted_while_the_accepts_were_being_cancelled",
         file=S + "ctx/mod.rs",
         find="self.draining && self.active == 0 && quic_conns == 0 && !io.accepting()",
         replace="self.draining && self.active == 0 && quic_conns == 0",
         why="a draining zone exits while an accept may still hand it a connection"),
    dict(test="zone::tests::a_drain_with_nothing_left_ends_when_the_accepts_are_given_back",
         file="crates/engine/src/io.rs",
         find="        if was && !self.accepting() {\n            self.timer_at(self.now);\n",
         replace="        if was && !self.accepting() {\n",
         why="the handler hears that the last accept was given back only at its next timer"),
    dict(test="a_connection_left_by_the_cancelled_accept_is_served_uring",
         pkg="ringx-engine", itest="drain", file="crates/engine/src/uring/accept.rs",
         find="            // The cancelled accept's last completion, after the cancellation's own.\n"
              "            sweep(d, id);\n",
         replace="            release(d, id);\n",
         why="connections a cancelled accept left queued wait for a wake-up that went to it"),
    dict(test="an_exiting_zone_leaves_queued_connections_queued",
         pkg="ringx-engine", itest="drain", file="crates/engine/src/uring/accept.rs",
         find="    if free == 0 || d.exiting {",
         replace="    if free == 0 {",
         why="a zone exiting without a drain takes queued connections and closes them unanswered"),
    dict(test="listen::tests::start_up_waits_for_an_address_to_be_released",
         pkg="ringx-engine", file="crates/engine/src/listen.rs",
         find="Err(e) if e.kind() != io::ErrorKind::AddrInUse || patience.is_zero() => return Err(e),",
         replace="Err(e) if true => return Err(e),",
         why="a restart at once finds its port held by the process it replaces, and exits"),
    dict(test="listen::tests::an_address_held_past_the_wait_is_refused",
         pkg="ringx-engine", file="crates/engine/src/listen.rs",
         find="Err(e) if waiting && start.elapsed() >= patience => {",
         replace="Err(e) if waiting => {",
         why="an address in use is refused after one short wait, not after the whole wait"),
    dict(test="zone::tests::a_request_in_the_drain_grace_is_answered_with_close",
         file=S + "role/http1/cycle.rs",
         find='keep_alive && !cx.ctx.draining && self.requests',
         replace='keep_alive && self.requests',
         why="a response during a drain does not announce the close"),
    dict(test="zone::tests::a_reload_serves_new_requests_from_the_new_routes",
         file=S + "zone/control.rs",
         find="        self.ctx.routes = routes;\n",
         replace="",
         why="a reload keeps serving the old routes"),
    dict(test="zone::tests::a_reload_that_removes_an_address_closes_its_idle_connections",
         file=S + "zone/control.rs",
         find="                            if h.is_idle(base, io, c) {\n"
              "                                io.close(c);\n"
              "                            } else if h.phase() == Phase::Idle && base.inbuf.is_empty() {\n"
              "                                base.tr.close_after_flush(io, c); // its last response is still being sent\n"
              "                            } else {\n"
              "                                h.last_request();\n"
              "                            }\n",
         replace="                        h.last_request();\n",
         why="an idle connection on an address the reload removes stays open for one more request"),
    dict(test="zone::tests::requests_are_counted_by_status_class",
         file=S + "role/http1/mod.rs",
         find='                cx.ctx.log.status(cx.io, c, written, b);\n                return self.after_response(cx, b, c, !keep, more_input);',
         replace='                return self.after_response(cx, b, c, !keep, more_input);',
         why="a locally answered request's status is not recorded (counted as 499)"),
    # ---- zone::tests: the connection limit ---------------------------------------------------
    dict(test="zone::tests::near_the_connection_limit_the_longest_idle_connections_make_room",
         file=S + "zone/mod.rs",
         find="            idle.truncate(want);\n",
         replace="",
         why="near max_conns every idle connection is closed, not only the longest idle ones"),
    dict(test="zone::tests::busy_connections_are_not_reclaimed",
         file=S + "zone/mod.rs",
         find="ClientRole::Http1(h) if h.is_idle(&cl.base, io, ConnId(i as u32)) => {",
         replace="ClientRole::Http1(_) => {",
         why="near max_conns a connection with a request in progress is reclaimed too"),
    # ---- role::exchange::tests: forwarding and pooling ------------------------------------------
    dict(test="role::exchange::tests::a_request_is_forwarded_with_the_client_address_and_its_response_relayed",
         file=S + "role/proxy_start.rs",
         find="client: b.addr.map(|a| a.ip()),",
         replace="client: None,",
         why="the client's address is not forwarded (X-Forwarded-For, X-Real-IP)"),
    dict(test="role::exchange::tests::an_upstream_connection_goes_back_to_the_pool_and_carries_the_next_request",
         file=S + "role/exchange/mod.rs",
         find="self.dial.reach(cx.io, pools, connector, true, from, now)?;",
         replace="self.dial.reach(cx.io, pools, connector, false, from, now)?;",
         why="an exchange never takes a pooled connection"),
    dict(test="role::exchange::tests::a_pipelined_request_waits_for_the_proxied_one",
         file=S + "role/http1/steps.rs",
         find="        if !b.paused {\n            self.read_on(cx, b, c);\n        }\n    }\n\n    /// A fill's exchange ended",
         replace="    }\n\n    /// A fill's exchange ended",
         why="the request waiting behind a proxied one is not picked up once its response is done"),
    dict(test="role::exchange::tests::unsolicited_bytes_on_a_pooled_connection_keep_the_next_request_off_it",
         file=S + "role/exchange/response.rs",
         find="        up.client = None;\n        let reusable",
         replace="        let reusable",
         why="a pooled connection stays owned by its last client, so its events bypass the pool"),
    dict(test="role::exchange::tests::proxy_host_upstream_sends_the_server_address_as_host",
         file=S + "role/exchange/mod.rs",
         find="        if self.host_upstream {\n            rehost(&mut self.head, &def.servers[self.dial.server].name);\n        }\n",
         replace="",
         why="proxy_host = \"upstream\" is not re-applied for the server a retry goes to"),
    dict(test="role::exchange::rehost_tests::rehost_replaces_only_the_host_line",
         file=S + "role/exchange/mod.rs",
         find='    if !head[start..].starts_with(b"Host: ") {\n        return;\n    }\n',
         replace="",
         why="rehost replaces the first header line whatever it is"),
    dict(test="role::exchange::tests::a_head_request_gets_no_body_and_keeps_both_connections",
         file=S + "role/proxy_start.rs",
         find="ex.head_request = req.method == Method::Head;",
         replace="ex.head_request = false;",
         why="the response to a proxied HEAD is read as if it had a body"),
    dict(test="role::exchange::tests::interim_responses_are_not_passed_on",
         file=S + "role/exchange/response.rs",
         find="if (100..200).contains(&h.status) && h.status != 101 {",
         replace="if h.status == 100 {",
         why="only 100 Continue is skipped: other 1xx reach the client"),
    dict(test="role::exchange::tests::a_101_turns_the_connections_into_a_tunnel",
         file=S + "role/exchange/response.rs",
         find="                if end < input.len() {\n                    base.tr.write(cx.io, c, &input[end..]);\n                }\n",
         replace="",
         why="bytes that follow a 101 in the same read are dropped"),
    # ---- role::exchange::tests: retries and failures --------------------------------------------
    dict(test="role::exchange::tests::a_refused_connect_is_retried_on_the_next_server",
         file=S + "role/exchange/mod.rs",
         find="&& self.dial.tries_left > 0",
         replace="&& self.dial.tries_left > 1",
         why="retries are counted off by one: retries = 1 gives up at once"),
    dict(test="role::exchange::tests::every_server_refusing_is_502",
         file=S + "role/exchange/mod.rs",
         find="UpState::Connecting => Kind::Connect,",
         replace="UpState::Connecting => Kind::Timeout,",
         why="a refused connect is classed as a timeout (504 instead of 502)"),
    dict(test="role::exchange::tests::a_reset_before_any_response_byte_is_retried_for_an_idempotent_request",
         file=S + "role/proxy_start.rs",
         find="Method::Get | Method::Head | Method::Options",
         replace="Method::Head | Method::Options",
         why="GET is missing from the idempotent methods: it is not retried"),
    dict(test="role::exchange::tests::a_post_is_not_retried_after_a_reset",
         file=S + "role/exchange/mod.rs",
         find="            && self.idempotent\n",
         replace="",
         why="requests are retried whatever their method"),
    dict(test="role::exchange::tests::a_pooled_connection_closed_before_any_byte_is_retried_silently",
         file=S + "role/exchange/mod.rs",
         find="matches!(why.kind, Kind::Reset | Kind::Connect)",
         replace="matches!(why.kind, Kind::Connect)",
         why="the keep-alive race (a reused connection closed before any byte) is not retried silently"),
    dict(test="role::exchange::tests::a_502_answer_is_retried_on_another_server",
         file=S + "role/exchange/response.rs",
         find="if matches!(h.status, 502 | 503) && self.can_retry(cx.ctx.pools(self.dial.gen)) {",
         replace="if matches!(h.status, 503) && self.can_retry(cx.ctx.pools(self.dial.gen)) {",
         why="a 502 answer is passed on instead of retried"),
    dict(test="role::exchange::tests::a_502_answer_with_no_retry_left_is_passed_on",
         file=S + "role/exchange/response.rs",
         find="if matches!(h.status, 502 | 503) && self.can_retry(cx.ctx.pools(self.dial.gen)) {",
         replace="if matches!(h.status, 502 | 503) {",
         why="a 502 answer with no retry left is replaced by ringx's own 502 page"),
    dict(test="role::exchange::tests::a_response_cut_midway_closes_the_client_connection",
         file=S + "role/http1/proxying.rs",
         find='        } else {\n            b.tr.close_after_flush(cx.io, c);\n        }\n',
         replace='        } else {\n        }\n',
         why="a response cut midway leaves the client connection open"),
    dict(test="role::exchange::tests::an_unparsable_response_is_blamed_on_its_server",
         file=S + "role/exchange/mod.rs",
         find="!matches!(why.kind, Kind::Status(_)) && why.side == Side::Upstream",
         replace="!matches!(why.kind, Kind::Status(_) | Kind::Malformed) && why.side == Side::Upstream",
         why="a malformed answer is not counted against its server (passive health)"),
    dict(test="role::exchange::tests::a_body_too_large_to_replay_is_not_retried",
         file=S + "role/exchange/mod.rs",
         find="            && (!self.has_body || self.replay.is_some())\n",
         replace="",
         why="a request whose body cannot be replayed is retried"),
    dict(test="role::exchange::tests::a_small_body_is_replayed_to_the_next_server",
         file=S + "role/exchange/mod.rs",
         find="        if let Some(r) = &self.replay {\n            rec.tr.write(cx.io, u, r);\n        }\n",
         replace="",
         why="a retry sends the head without the body kept for replay"),
    dict(test="role::exchange::tests::a_request_body_streams_to_the_upstream",
         file=S + "role/exchange/mod.rs",
         find="                    up.tr.write(cx.io, u, raw);\n",
         replace="",
         why="request body bytes arriving after the head are not forwarded"),
    dict(test="role::exchange::tests::a_client_leaving_mid_body_closes_the_upstream_connection",
         file=S + "role/exchange/mod.rs",
         find="            up.abandon(cx.io, u);\n",
         replace="",
         why="a cut exchange leaves its upstream connection open"),
    dict(test="role::exchange::tests::a_chunked_response_reaches_an_http10_client_unchunked_and_closed",
         file=S + "role/exchange/response.rs",
         find="(None, ClientFraming::Close) => w(d.data),",
         replace="(None, ClientFraming::Close) => w(&input[pos..pos + d.consumed]),",
         why="a chunked body goes to an HTTP/1.0 client with its chunk framing"),
    dict(test="role::exchange::tests::a_chunked_response_reaches_an_http11_client_as_it_came",
         file=S + "role/exchange/response.rs",
         find='(None, ClientFraming::Same) => w(&input[pos..pos + d.consumed - d.trailer]),',
         replace='(None, ClientFraming::Same) => w(d.data),',
         why="a chunked body relayed as chunked loses its chunk framing"),
    dict(test="role::exchange::tests::a_response_until_close_ends_at_the_server_fin",
         file=S + "role/exchange/response.rs",
         find="                    return Outcome::Cut;\n                }\n                self.response_done(cx, u, false)",
         replace="                    return Outcome::Cut;\n                }\n                Outcome::Pending",
         why="the server's FIN does not end a response framed by the close"),
    # ---- role::exchange::tests: timeouts and back-pressure --------------------------------------
    dict(test="role::exchange::tests::an_upstream_that_does_not_answer_gets_504_after_read_timeout",
         file=S + "role/exchange/response.rs",
         find="            up.state = UpState::Busy;\n            cx.ctx.set_up_deadline(cx.io, up, u, now + rt);\n",
         replace="            up.state = UpState::Busy;\n",
         why="the read timeout is not armed when the connect completes (connect_timeout stays)"),
    dict(test="role::exchange::tests::a_connect_that_hangs_is_retried_then_504",
         file=S + "role/exchange/mod.rs",
         find="matches!(x.state, UpState::Connecting | UpState::Busy)",
         replace="matches!(x.state, UpState::Busy)",
         why="a connect that times out is ignored"),
    dict(test="role::exchange::tests::a_client_waiting_for_a_slow_upstream_is_not_timed_out_by_its_own_deadline",
         file=S + "role/http1/proxying.rs",
         find='.is_some_and(|x| x.req_body.is_some() && !x.body_paused)',
         replace='.is_some_and(|x| !x.body_paused)',
         why="a client waiting for the upstream is timed out as if it were sending its body"),
    dict(test="role::exchange::tests::a_slow_client_pauses_the_upstream_until_it_reads",
         file=S + "role/exchange/response.rs",
         find="                    pause_upstream(cx.io, up, u);\n",
         replace="",
         why="a full client queue does not stop reading from the upstream"),
    dict(test="role::exchange::tests::a_slow_upstream_pauses_the_client_body",
         file=S + "role/http1/proxying.rs",
         find="                ex.body_paused = true;\n",
         replace="",
         why="the body pause is not recorded, so the client is never resumed"),
    # ---- role::exchange::tests: reloads -------------------------------------------------------
    dict(test="role::exchange::tests::a_reload_does_not_wait_for_a_proxied_request_and_that_request_finishes",
         file=S + "role/exchange/response.rs",
         find="let draining = cx.ctx.draining || !cx.ctx.is_current(self.dial.gen);",
         replace="let draining = cx.ctx.draining;",
         why="a connection of replaced upstreams goes back to their pool, which then never retires"),
    dict(test="role::exchange::tests::a_request_still_on_replaced_upstreams_after_drain_timeout_is_cut",
         file=S + "zone/control.rs",
         find="                        self.upstream_event(io, u, UpEvent::Timeout);\n",
         replace="",
         why="past drain_timeout a request on replaced upstreams loses its connection, its client is never answered"),
    dict(test="role::exchange::tests::a_reload_that_keeps_the_upstreams_keeps_the_pool",
         file=S + "zone/control.rs",
         find="if let Some(u) = upstreams {",
         replace="if let Some(u) = upstreams.or(Some(self.ctx.current_pools().map(|p| p.0.defs.clone()))) {",
         why="every reload rebuilds the upstream state, closing the pooled connections"),
    # ---- role::stream::tests --------------------------------------------------------------------
    dict(test="role::stream::tests::a_stream_relays_bytes_both_ways",
         file=S + "role/tunnel.rs",
         find="        up.tr.write(cx.io, self.up, data);\n",
         replace="",
         why="a tunnel does not relay the client's bytes"),
    dict(test="role::stream::tests::bytes_sent_before_the_upstream_is_up_are_delivered_once_it_is",
         file=S + "role/tunnel.rs",
         find="        self.flush_client_buffer(cx, b);\n        let at",
         replace="        let at",
         why="bytes held while connecting are not sent once the tunnel opens"),
    dict(test="role::stream::tests::a_refused_stream_connect_goes_to_the_next_server_then_gives_up",
         file=S + "role/stream.rs",
         find="if self.dial.tries_left > 0 && self.dial.untried(pools) {",
         replace="if self.dial.tries_left > 1 && self.dial.untried(pools) {",
         why="stream retries are counted off by one: retries = 1 gives up at once"),
    dict(test="role::stream::tests::a_stream_connect_that_hangs_times_out_and_moves_on",
         file=S + "role/stream.rs",
         find="                cx.ctx.set_up_deadline(cx.io, rec, r.conn, now + timeout);\n",
         replace="",
         why="a stream's connect has no timeout"),
    dict(test="role::stream::tests::a_stream_behind_a_load_balancer_reads_its_proxy_header_first",
         file=S + "role/stream.rs",
         find="header: def.proxy_protocol,",
         replace="header: false,",
         why="a stream listener's proxy_protocol is ignored"),
    dict(test="role::stream::tests::a_stream_without_its_proxy_header_is_closed",
         file=S + "role/stream.rs",
         find="Step::Refused => cx.io.close(c),",
         replace="Step::Refused => {}",
         why="a stream whose PROXY header is refused stays open"),
    dict(test="role::stream::tests::a_fin_is_passed_on_and_the_tunnel_closes_when_both_sides_finished",
         file=S + "role/tunnel.rs",
         find="        up.tr.shutdown_after_flush(cx.io, self.up);\n        if up.eof {",
         replace="        if up.eof {",
         why="the client's FIN is not passed on to the server"),
    dict(test="role::stream::tests::a_silent_tunnel_is_closed_after_its_idle_timeout",
         file=S + "role/tunnel.rs",
         find="        up.tr.write(cx.io, self.up, data);\n        up.deadline = at;\n",
         replace="        up.tr.write(cx.io, self.up, data);\n",
         why="client activity does not move the tunnel's idle deadline"),
    dict(test="role::stream::tests::a_server_closing_the_tunnel_closes_the_client_after_what_it_sent",
         file=S + "role/tunnel.rs",
         find="UpEvent::Closed(_) => b.tr.close_after_flush(cx.io, c),",
         replace="UpEvent::Closed(_) => {}",
         why="the upstream closing a tunnel is not passed on to the client"),
    dict(test="role::stream::tests::a_client_leaving_closes_the_upstream",
         file=S + "role/tunnel.rs",
         find="                up.client = None;\n                up.tr.close_after_flush(cx.io, self.up);\n            }\n        }\n    }\n\n    pub fn upstream_event",
         replace="                up.client = None;\n            }\n        }\n    }\n\n    pub fn upstream_event",
         why="a tunnel whose client is gone leaves its upstream connection open"),
    # ---- role::upstream::tests ------------------------------------------------------------------
    dict(test="role::upstream::tests::bytes_on_an_idle_connection_take_it_out_of_the_pool",
         file=S + "role/upstream.rs",
         find="            (UpState::Idle, _) => {\n"
              "                if let Some(p) = pools {\n"
              "                    p.remove_idle(self.upstream, self.server, u);\n"
              "                }\n"
              "                self.abandon(io, u);",
         replace="            (UpState::Idle, _) => {\n"
                 "                self.abandon(io, u);",
         why="an idle connection that gets bytes is closed but left in the pool"),
    dict(test="role::upstream::tests::a_server_closing_an_idle_connection_takes_it_out_of_the_pool",
         file=S + "role/upstream.rs",
         find="            (UpState::Idle, _) => {",
         replace="            (UpState::Idle, UpEvent::Data(_)) => {",
         why="a FIN on an idle connection closes it but leaves it in the pool"),
    dict(test="role::upstream::tests::a_reset_idle_connection_leaves_the_pool",
         file=S + "role/upstream.rs",
         find="            (UpState::Idle, UpEvent::Closed(..)) => {\n"
              "                if let Some(p) = pools {\n"
              "                    p.remove_idle(self.upstream, self.server, u);\n"
              "                }\n"
              "            }",
         replace="            (UpState::Idle, UpEvent::Closed(..)) => {}",
         why="a reset idle connection stays in the pool"),
    dict(test="role::upstream::tests::reopening_a_pooled_record_resets_it",
         file=S + "role/upstream.rs",
         find="        self.keep = false;\n",
         replace="",
         why="a pooled record reused for a new request keeps the last response's keep flag"),
    # ---- role::echo::tests ----------------------------------------------------------------------
    dict(test="role::echo::tests::messages_split_anywhere_come_back_whole_and_in_order",
         file=S + "role/echo.rs",
         find="let r = self.conns[c.index()].feed(data, |msg| encode(out, msg));",
         replace="let r = Deframer::default().feed(data, |msg| encode(out, msg));",
         why="a message split across receives is forgotten between them"),
    dict(test="role::echo::tests::an_oversized_frame_closes_the_connection",
         file=S + "role/echo.rs",
         find='            tracing::debug!("echo: {e}; closing");\n            io.close(c);\n',
         replace='            tracing::debug!("echo: {e}; closing");\n',
         why="an oversized frame is logged but the connection stays open"),
    dict(test="role::echo::tests::eof_closes_after_the_last_reply",
         file=S + "role/echo.rs",
         find="io.close_after_flush(c);",
         replace="io.close(c);",
         why="a FIN closes at once, dropping replies not yet written"),
    dict(test="role::echo::tests::a_wake_stops_the_zone",
         file=S + "role/echo.rs",
         find="    fn on_wake(&mut self, io: &mut Io) {\n        io.exit();\n    }",
         replace="    fn on_wake(&mut self, _io: &mut Io) {}",
         why="a wake does not stop the echo zone"),
    # ---- role::proxy_header::tests --------------------------------------------------------------
    dict(test="role::proxy_header::tests::a_header_in_pieces_sets_the_client_address_and_keeps_what_follows",
         file=S + "role/proxy_header.rs",
         find="                base.addr = Some(src);\n",
         replace="",
         why="the PROXY header's source address does not replace the peer's"),
    dict(test="role::proxy_header::tests::garbage_and_endless_headers_are_refused",
         file=S + "role/proxy_header.rs",
         find='            tracing::debug!("PROXY protocol header refused: {e}");\n            Step::Refused\n',
         replace='            tracing::debug!("PROXY protocol header refused: {e}");\n            Step::Partial\n',
         why="bytes the parser refuses are waited on as an incomplete header"),
    # ---- pipeline::routing::tests ----------------------------------------------------------------
    dict(test="pipeline::routing::tests::clean_paths_are_borrowed",
         file=S + "pipeline/routing.rs",
         find="return Some(Cow::Borrowed(raw));",
         replace="return Some(Cow::Owned(raw.to_owned()));",
         why="a clean path is copied instead of borrowed (an allocation per request)"),
    dict(test="pipeline::routing::tests::paths_needing_work_are_not_clean",
         file=S + "pipeline/routing.rs",
         find="b'%' | 0 => return false,",
         replace="b'%' => return false,",
         why="a path with a NUL byte is taken as clean"),
    # ---- response.rs, compiled.rs, error.rs, route.rs -------------------------------------------
    dict(test="response::tests::canned_forms_agree",
         file=S + "response/head.rs",
         find="Some(c.head.len() + date.len() + 2)",
         replace="Some(c.head.len() + date.len())",
         why="the one-copy form reports a head two bytes short (the empty line forgotten)"),
    dict(test="response::tests::writers_report_what_they_wrote",
         file=S + "response/mod.rs",
         find="if status != 304 && status != 204 {",
         replace="if status != 204 {",
         why="a 304 head carries a Content-Length"),
    dict(test="response::tests::marking_a_prepared_response_closed",
         file=S + "response/mod.rs",
         find="} else if !head.windows(CLOSE.len()).any(|w| w == CLOSE) {",
         replace="} else {",
         why="marking a response closed adds a second Connection: close"),
    dict(test="compiled::tests::the_fingerprint_follows_upstreams_not_routes",
         file=S + "compiled.rs",
         find="            u.read_timeout,\n            u.send_timeout,",
         replace="            u.send_timeout,\n            u.send_timeout,",
         why="read_timeout is left out of the upstream fingerprint (a reload keeps stale pools)"),
    dict(test="compiled::tests::a_missing_root_is_an_error_naming_it",
         file=S + "route_build.rs",
         find='Err(Error::io(format!("open {}", p.display()), e))',
         replace='Err(Error::io("open root directory", e))',
         why="the error for a root that cannot be opened does not name it"),
    dict(test="error::tests::statuses_follow_the_side_at_fault",
         file=S + "error.rs",
         find="(Kind::Timeout, Side::Upstream) => 504,",
         replace="(Kind::Timeout, _) => 504,",
         why="a client timeout is answered 504 instead of 408"),
    dict(test="error::tests::display_names_the_context_and_the_cause",
         file=S + "error.rs",
         find='        if let Some(e) = &self.cause {\n            write!(f, ": {e}")?;\n        }\n',
         replace="",
         why="an error's display leaves out its cause"),
    dict(test="route::tests::server_by_host",
         file="crates/tls/src/sni.rs",
         find='while let Some(rest) = name.strip_suffix(b".") {',
         replace='if let Some(rest) = name.strip_suffix(b".") {',
         why="only one trailing dot is stripped from the Host"),
    dict(test="role::exchange::tests::a_response_with_an_empty_length_completes_at_its_head",
         file=S + "role/exchange/response.rs",
         find='                // An empty body ends with the head: no byte will come to end it.\n                ResponseBody::None | ResponseBody::Length(0) => {',
         replace='                // An empty body ends with the head: no byte will come to end it.\n                ResponseBody::None => {',
         why="a Content-Length: 0 response leaves its exchange waiting for a body that never comes"),
    # ---- role::h2::tests: HTTP/2 -------------------------------------------------------------
    dict(test="role::h2::tests::a_preface_cut_in_its_first_bytes_still_starts_http2",
         file=S + "zone/client.rs",
         find="Preface::Undecided => return base.inbuf.extend_from_slice(data),",
         replace="Preface::Undecided => {}",
         why="a first read that ends within the preface's first 4 bytes makes the connection HTTP/1"),
    dict(test="pipeline::tests::the_stages_in_order_say_where_each_request_goes",
         file=S + "pipeline/serve.rs",
         find="    if !cached {\n        return Step::Proxy(None);",
         replace="    if true {\n        return Step::Proxy(None);",
         why="a location's proxy cache is never looked at"),
    dict(test="role::h2::tests::a_stream_passes_its_locations_guard",
         file=S + "pipeline/serve.rs",
         find="                return Step::Refuse { status, headers };\n            }\n            step => return step,",
         replace="                let _ = (status, headers);\n            }\n            _ => {}",
         why="a guard's refusal, delay or subrequest is ignored: the request goes on"),
    dict(test="role::h2::tests::an_h2c_request_is_answered_on_its_stream",
         file=S + "zone/client.rs",
         find="Preface::Yes => *role = ClientRole::H2(Box::new(start_h2(cx, base, c))),",
         replace="Preface::Yes => {}",
         why="the h2c preface is not recognised: the connection stays HTTP/1"),
    dict(test="role::h2::tests::h2c_follows_a_proxy_header_and_the_client_address_is_the_announced_one",
         file=S + "zone/client.rs",
         find="dispatch_data(cx, base, role, c, &rest);",
         replace="h.on_data(cx, base, c, &rest);",
         why="what follows a PROXY header is always HTTP/1: h2c behind a load balancer is refused"),
    dict(test="role::h2::tests::an_upstream_chunked_trailer_section_reaches_the_client_as_trailers",
         file=S + "role/h2/serve.rs",
         find="s.trailers = trailers;",
         replace="let _ = trailers;",
         why="an upstream's trailers are dropped: the stream ends on its DATA"),
    dict(test="role::h2::tests::static_files_with_range_and_304",
         file=S + "role/h2/serve.rs",
         find="s.out.push(Piece::File(f, off, off + len));",
         replace="s.out.push(Piece::File(f, off + 1, off + len));",
         why="a file body loses its first byte"),
    dict(test="role::h2::tests::the_peer_window_paces_the_body",
         file=S + "role/h2/stream.rs",
         find="let cap = conn.capacity(id).min(conn.max_frame()) as u64;",
         replace="let cap = conn.max_frame() as u64;",
         why="DATA ignores the peer's window"),
    dict(test="role::h2::tests::a_proxied_stream_reaches_an_http1_upstream_and_the_pool_is_reused",
         file=S + "role/multiplex/proxied.rs",
         find="ex.version = ringx_http::Version::Http10;",
         replace="ex.version = ringx_http::Version::Http11;",
         why="a chunked upstream response reaches the stream still chunk-framed"),
    dict(test="role::h2::tests::a_request_body_streams_to_the_upstream_chunked_or_with_its_length",
         file=S + "role/multiplex/proxied.rs",
         find='framed.extend_from_slice(b"0\\r\\n\\r\\n");',
         replace="",
         why="a chunked request body is never terminated"),
    dict(test="role::h2::tests::smuggling_attempts_never_reach_the_upstream",
         file="crates/http/src/decoded.rs",
         find="if v.iter().any(|&b| b == 0 || b == b'\\r' || b == b'\\n') {",
         replace="if v.iter().any(|&b| b == 0) {",
         why="CR/LF in an HTTP/2 field value is let through to the HTTP/1.1 head"),
    dict(test="role::h2::tests::an_unreachable_upstream_is_a_502_on_that_stream_only",
         file=S + "role/multiplex/failed.rs",
         find="let page = ErrorPage::new(status, ConnHdr::Keep11, head_only).extra(always);",
         replace="let page = ErrorPage::new(200, ConnHdr::Keep11, head_only).extra(always);",
         why="an exchange that gives up answers 200"),
    dict(test="role::h2::tests::a_slow_reader_pauses_the_upstream_until_its_window_opens",
         file=S + "role/multiplex/proxied.rs",
         find="self.ex.resume_upstream(cx);",
         replace="",
         why="an upstream paused for a slow stream is never resumed"),
    dict(test="role::h2::tests::a_drain_sends_goaway_and_lets_the_stream_in_flight_finish",
         file=S + "role/h2/mod.rs",
         find="self.link.conn.goaway(ErrorCode::NoError);\n        self.peer_away |= self.streams.is_empty();",
         replace="self.peer_away |= self.streams.is_empty();",
         why="a drain sends no GOAWAY"),
    dict(test="role::h2::tests::rapid_reset_ends_the_connection_with_enhance_your_calm",
         file="crates/h2proto/src/conn.rs",
         find="if self.resets.allow(now, l.rate_window, l.max_resets) {",
         replace="if true || self.resets.allow(now, l.rate_window, l.max_resets) {",
         why="streams reset without limit"),
    dict(test="role::h2::tests::a_zero_window_stall_is_ended_at_the_send_timeout",
         file=S + "role/h2/link.rs",
         find="s.has_output() && self.conn.capacity(s.id) == 0",
         replace="s.has_output() && self.conn.capacity(s.id) == 1",
         why="a stream held by a closed window is not seen as stalled"),
    dict(test="role::h2::tests::a_proxied_stream_gets_the_location_rewrite_headers_and_compression",
         file=S + "role/multiplex/routed.rs",
         find='        if routing::misdirected(&cx.ctx.routes, b, &route) {',
         replace='        let route = routing::Route { path: Some(req.path.into()), server: 0, at: cx.ctx.routes.servers[0].location_index(req.path).map(|loc| crate::route::LocId { server: 0, loc }), ext: None };\n        if routing::misdirected(&cx.ctx.routes, b, &route) {',
         why="an HTTP/2 stream is routed by its path alone, without the server's rewrite rules"),
    dict(test="role::h2::tests::a_stream_gets_the_error_page_of_its_location",
         file=S + "role/multiplex/failed.rs",
         find="page.and_then(|p| p.write(cx.ctx.responder(), &mut resp, status, ConnHdr::Keep11))",
         replace="page.and_then(|_| None::<crate::response::Reply>)",
         why="a proxied stream that fails gets ringx's page, not its location's error_page"),
    dict(test="role::h2::tests::a_local_stream_gets_redirects_added_headers_and_compression",
         file=S + "role/multiplex/local.rs",
         find="routing::respond(routes, r, &mut resp, req, route, ConnHdr::Keep11, rq);",
         replace="routing::respond(routes, r, &mut resp, req, &routing::Route { ext: None, path: route.path.clone(), ..*route }, ConnHdr::Keep11, rq);",
         why="a locally answered stream loses the redirect rewriting decided"),
    dict(test="role::h2::tests::an_oversized_header_list_gets_431",
         file=S + "role/h2/mod.rs",
         find="self.answer_error(cx, b, c, s, 431);",
         replace="self.answer_error(cx, b, c, s, 400);",
         why="an oversized header list gets 400, not 431"),
    # ---- role::udp::tests: UDP streams --------------------------------------------------
    dict(test="role::udp::tests::queries_and_answers_through_two_servers",
         file=S + "role/udp/mod.rs",
         find="IpAddr::V4(a) => ringx_balance::hash_key(&a.octets()),",
         replace="IpAddr::V4(a) => ringx_balance::hash_key(&peer.port().to_be_bytes()) ^ u64::from(a.octets()[3]),",
         why="the server is picked by the client's port too: one client moves between servers"),
    dict(test="role::udp::tests::idle_sessions_end",
         file=S + "role/udp/mod.rs",
         find="            None => {\n                let now = cx.io.now();\n                Self::touch(cx, s, i, now + idle);\n            }",
         replace="            None => {}",
         why="an answer from the server does not push the session's end back"),
    dict(test="role::udp::tests::responses_end_sessions",
         file=S + "role/udp/mod.rs",
         find="            Some(e) if *e <= 1 => {",
         replace="            Some(e) if *e < 1 => {",
         why="the session outlives its last expected answer"),
    dict(test="role::udp::tests::sessions_are_bounded",
         file=S + "role/udp/mod.rs",
         find="if self.sessions.on_stream(si) >= udp.max_sessions {",
         replace="if self.sessions.on_stream(si) > udp.max_sessions {",
         why="one session more than max_sessions is opened"),
    dict(test="role::udp::tests::bad_datagrams_are_dropped_and_counted",
         file=S + "role/udp/mod.rs",
         find="IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),",
         replace="IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast()),",
         why="a datagram from the broadcast address opens a session"),
    dict(test="role::udp::tests::refused_server_is_counted_and_avoided",
         file=S + "role/udp/mod.rs",
         find="                p.failed(s.upstream, s.server, now);\n            }\n        }\n    }",
         replace="            }\n        }\n    }",
         why="a refusing server is not marked failed (max_fails)"),
    dict(test="role::udp::tests::datagrams_wait_for_the_connect_bounded",
         file=S + "role/udp/session.rs",
         find="pub const HELD_MAX: usize = 16;",
         replace="pub const HELD_MAX: usize = 17;",
         why="a connecting session holds one datagram more than its bound"),
    dict(test="role::udp::tests::drain_and_reload_end_sessions",
         file=S + "zone/control.rs",
         find="        self.udp.close_all(io, None);\n",
         replace="",
         why="draining leaves UDP sessions open"),
    # ---- guard and cache (issue 23) -----------------------------------------------------
    dict(test='guard::limit::tests::gcra_passes_exactly_the_rate',
         file=S + 'guard/limit.rs',
         find='if base - now > tolerance {',
         replace='if base - now > tolerance + interval {',
         why='limit_req lets one request more than the rate through'),
    dict(test='role::http1::guard_tests::limit_req_nodelay_refuses_over_the_burst',
         file=S + 'guard/limit.rs',
         find='if base - now > tolerance {',
         replace='if base - now > tolerance + interval {',
         why="limit_req's burst is one too large"),
    dict(test='role::http1::guard_tests::access_rules_apply_in_order',
         file=S + 'guard/access.rs',
         find='            return r.allow;',
         replace='            return true;',
         why='a deny rule allows'),
    dict(test='role::http1::guard_tests::access_rules_see_the_real_address_behind_a_trusted_proxy',
         file=S + 'guard/access.rs',
         find='        if !self.trusted(peer) {\n            return peer;',
         replace='        if false {\n            return peer;',
         why='any peer may claim a client address'),
    dict(test='role::http1::guard_tests::limit_conn_counts_requests_in_progress',
         file=S + 'role/http1/mod.rs',
         find='        // The request is complete for limit_conn.\n        self.pending.progress.conn = None;',
         replace='',
         why='limit_conn never counts a completed request out'),
    dict(test='role::http1::guard_tests::auth_request_decides',
         file=S + 'pipeline/access.rs',
         find='        Some(x) if (200..300).contains(&x.status) => AuthAnswer::Allow,',
         replace='        Some(x) if (200..400).contains(&x.status) => AuthAnswer::Allow,',
         why="an auth service's redirect allows"),
    dict(test='role::http1::cache_tests::a_burst_of_misses_makes_one_upstream_request',
         file=S + 'cache/mod.rs',
         find='            Some(t) if now.saturating_duration_since(*t) < LOCK_AGE => false,',
         replace='            Some(t) if now.saturating_duration_since(*t) < LOCK_AGE => true,',
         why='a held cache lock is taken again: no collapsing'),
    dict(test='role::http1::cache_tests::a_miss_is_stored_and_the_next_request_hits',
         file=S + 'pipeline/cache.rs',
         find='            fill.store(built);',
         replace='            drop(built);',
         why='a filled response is not stored'),
    dict(test='role::http1::cache_tests::a_stale_copy_answers_while_the_upstream_is_down',
         file=S + 'cache/fill.rs',
         find='        (configured || (error && now_ms < s.sie_until)).then_some(s)',
         replace='        None',
         why='no stale copy ever stands in'),
    dict(test='role::http1::cache_tests::responses_that_must_not_be_stored_are_fetched_again',
         file=S + 'cache/policy.rs',
         find='                        "no-store" | "private" | "no-cache" => return None,',
         replace='                        "no-store" | "no-cache" => return None,',
         why='a private response is stored in the shared cache'),
    dict(test='role::http1::cache_tests::a_waiter_goes_upstream_after_the_lock_timeout',
         file=S + 'cache/loc.rs',
         find='        if cx.now.saturating_duration_since(since) >= self.lock_timeout {',
         replace='        if false {',
         why="a waiter waits forever for another's fill"),
    dict(test='role::exchange::tests::an_empty_body_ends_with_the_head',
         file=S + 'role/exchange/response.rs',
         find='                // An empty body ends with the head: no byte will come to end it.\n                ResponseBody::None | ResponseBody::Length(0) => {',
         replace='                // An empty body ends with the head: no byte will come to end it.\n                ResponseBody::None => {',
         why='a Content-Length: 0 response never completes'),
    dict(test='role::http1::cache_tests::a_retried_update_stores_only_the_retry',
         file=S + 'role/exchange/mod.rs',
         find='        if let Some(cap) = self.capture.as_mut() {\n            cap.restart();\n        }\n',
         replace='',
         why="a retried fill keeps the broken attempt's bytes: a corrupted entry is stored"),
    # ---- the auth pool (issue 35: slow hashes verified off the zone) ---------------------
    dict(test='role::http1::verify_tests::a_slow_hash_waits_on_the_pool_while_the_zone_serves_others',
         file=S + 'guard/hash.rs',
         find='    cost_us(kind, hash) > INLINE_MAX_US',
         replace='    cost_us(kind, hash) > u64::MAX',
         why='bcrypt is verified on the zone thread again'),
    dict(test='role::http1::verify_tests::pipelined_requests_wait_behind_a_verification',
         file=S + "role/http1/steps.rs",
         find='            _ => Next::Defer,\n',
         replace='            _ => Next::Hold,\n',
         why="a request waiting for the pool loses its head: it is never answered"),
    dict(test='role::http1::verify_tests::a_full_pool_answers_503',
         file=S + 'guard/basic.rs',
         find='                    bump(&n.auth_busy, 1);\n                    Checked::Busy',
         replace='                    bump(&n.auth_busy, 1);\n                    Checked::Wait',
         why='a request the full pool did not take waits for an answer that never comes'),
    dict(test='role::http1::verify_tests::a_verification_that_never_answers_times_out',
         file=S + "role/http1/cycle.rs",
         find='let at = until.unwrap_or(cx.io.now()) + cx.ctx.set.send_timeout;',
         replace='let at = until.unwrap_or(cx.io.now()) + cx.ctx.set.send_timeout * 2;',
         why='a request waiting for the pool is held past send_timeout'),
    dict(test='role::h2::tests::a_stream_waits_for_the_auth_pool_alone',
         file=S + 'role/h2/mod.rs',
         find='        self.unpark(cx, b, c, id);\n        self.after(cx, b, c);\n    }\n\n    /// Looks at waiting stream',
         replace='        self.after(cx, b, c);\n    }\n\n    /// Looks at waiting stream',
         why="the pool's answer never reaches the stream waiting for it"),
    dict(test='guard::basic::tests::a_wrong_password_is_refused_by_the_pool_and_not_remembered',
         file=S + 'guard/basic.rs',
         find='            Some((ak, Some(ok))) if ak == k => return za.answer(k, ok, now),',
         replace='            Some((_, Some(ok))) => return za.answer(k, ok, now),',
         why="an answer for other credentials is taken: a wrong password passes on a right one's answer"),
    dict(test='accesslog::tests::the_request_id_is_logged_in_json',
         file=S + 'accesslog.rs',
         find='            if let Some(id) = &e.request_id {',
         replace='            if let Some(id) = &e.request_id.filter(|_| false) {',
         why='the JSON access log leaves out the request id'),
    dict(test='pipeline::tests::a_refusal_at_a_fallback_takes_error_pages_only_where_its_sender_is_recursive',
         file=S + 'pipeline/failure.rs',
         find='            Some(f) => f.open.then_some(f.hops)?,',
         replace='            Some(f) => f.hops,',
         why="a fallback's refusal takes its location's error pages though its sender is not recursive"),
    dict(test='pipeline::tests::a_re_served_request_carries_its_body_again_only_where_it_was_kept',
         file=S + 'pipeline/failure.rs',
         find='    kept.map(Some)\n}',
         replace='    Some(kept)\n}',
         why='a request whose body was streamed and not kept is re-served without it'),
    dict(test='stream_id_rules_are_connection_errors',
         pkg='ringx-h2proto', itest='conn', file='crates/h2proto/src/recv.rs',
         find='Some(b) if h.kind != kind::CONTINUATION || h.stream != b.id =>',
         replace='Some(b) if h.kind != kind::CONTINUATION =>',
         why="a header block begun on one stream is finished by another stream's CONTINUATION"),
    dict(test='a_settings_acknowledgement_is_not_answered',
         pkg='ringx-h2proto', itest='conn', file='crates/h2proto/src/recv.rs',
         find='        return Ok(true);',
         replace='        return Ok(false);',
         why="a SETTINGS acknowledgement is taken for the peer's settings and acknowledged in turn"),
    dict(test='malformed_settings_end_the_connection',
         pkg='ringx-h2proto', itest='conn', file='crates/h2proto/src/recv.rs',
         find='    if !p.len().is_multiple_of(6) {',
         replace='    if false && !p.len().is_multiple_of(6) {',
         why='a SETTINGS frame cut mid-setting is taken'),
    dict(test='pings_are_answered_but_not_their_acknowledgements',
         pkg='ringx-h2proto', itest='conn', file='crates/h2proto/src/recv.rs',
         find='Ok((!h.has(flag::ACK)).then_some(payload))',
         replace='Ok(Some(payload))',
         why="a PING's acknowledgement is answered, two peers then ping-pong without end"),
    dict(test='a_stream_whose_priority_names_itself_is_reset',
         pkg='ringx-h2proto', itest='conn', file='crates/h2proto/src/recv.rs',
         find='Ok((&frag[5..], dep == h.stream))',
         replace='Ok((&frag[5..], false))',
         why='a HEADERS frame whose stream depends on itself becomes a request (RFC 9113 §5.3.1)'),
    dict(test='response::head::tests::lines_become_lowercase_fields_without_the_connection_specific_ones',
         file='crates/h2proto/src/response.rs',
         find='        if connection_specific(name) {\n            return false;\n        }',
         replace='',
         why='an HTTP/2 response head carries Connection and Transfer-Encoding'),
    dict(test='response::head::tests::a_canned_response_as_fields_has_its_load_time_fields_and_the_added_lines',
         file=S + 'response/head.rs',
         find='        self.len += lines.len();\n        self.fields.push_lines(lines);',
         replace='        self.len += lines.len();',
         why="an HTTP/2 response loses the header lines ringx adds (add_header, the cache status)"),
    # ---- alt_svc_tests: Alt-Svc on a QUIC server's TCP responses (issue 38) ------------------
    dict(test='alt_svc_tests::every_kind_of_answer_carries_one_alt_svc_line',
         file=S + 'rewrite/headers.rs',
         find='            Some(a) if a.sets("alt-svc") => return a,',
         replace='            Some(a) if false && a.sets("alt-svc") => return a,',
         why="the operator's own Alt-Svc goes out with ours: two lines"),
    dict(test='alt_svc_tests::proxied_responses_and_their_failures_carry_it',
         file=S + 'alt_svc.rs',
         find='        rw.add_header = Some(AddHeaders::with_alt_svc(rw.add_header.take(), &self.value));',
         replace='',
         why='a location that proxies (or does anything but a bare return) advertises nothing'),
    dict(test='alt_svc_tests::the_line_is_compiled_in_and_marked_for_http3_and_nothing_without_quic',
         file=S + 'alt_svc.rs',
         find='            if rw.is_empty() && !server_rewrites && loc.guard.is_none() {',
         replace='            if false && rw.is_empty() && !server_rewrites && loc.guard.is_none() {',
         why="a bare return takes the line as an added one and loses the one-copy fast path"),
    dict(test='alt_svc_tests::every_port_of_the_server_is_advertised_once',
         file=S + 'alt_svc.rs',
         find='            if !ports.contains(&p) {',
         replace='            if true {',
         why='a port the server listens on at two addresses is advertised twice'),
    dict(test='role::h2::tests::a_quic_servers_answers_over_h2_carry_alt_svc',
         file=S + 'alt_svc.rs',
         find='                c.add_alt_svc(&self.line);',
         replace='                c.alt_svc = true;',
         why="a bare return is marked as advertising but its head and fields lack the line"),
    # ---- zone::quic_tests: the zone's timer turns and QUIC deadlines --------------------------
    dict(test='zone::quic_tests::the_zone_wakes_by_each_quic_deadline_and_a_silent_connection_closes_at_its_idle_timeout',
         file=S + 'zone/mod.rs',
         find='let next = next.into_iter().chain(soon).chain(trim).chain(quic).min();',
         replace='let next = next.into_iter().chain(soon).chain(trim).min();',
         why="on_timer leaves the next QUIC deadline out of the interval it returns"),
    dict(test='zone::quic_tests::a_new_connection_asks_the_zone_to_wake_by_its_first_deadline',
         file=S + 'role/h3/mod.rs',
         find='            if cx.io.timer_planned().is_none_or(|p| at < p) {',
         replace='            if cx.io.timer_planned().is_some_and(|p| at < p) {',
         why="a deadline asks for no wake-up while no timer turn is planned"),
    dict(test='zone::quic_tests::a_connection_the_client_closes_drains_without_an_answer',
         file=S + 'role/h3/conn.rs',
         find='ConnectionError::ApplicationClosed(_) | ConnectionError::ConnectionClosed(_)',
         replace='ConnectionError::ConnectionClosed(_)',
         why="a client's application close (HTTP/3's, the usual one) is answered with a close"),
    dict(test='zone::quic_tests::a_client_hello_in_two_initials_of_one_batch_gets_no_ack_of_its_own',
         file=S + 'role/h3/mod.rs',
         find='        c.due = true;\n        self.conns[slot as usize] = Some(c);\n        self.due.push(slot);\n',
         replace='        self.conns[slot as usize] = Some(c);\n        self.drive(cx, slot);\n',
         why="a new connection runs at once: its first Initial gets an ACK of its own"),
    dict(test='zone::quic_tests::a_known_path_that_carries_less_is_forgotten',
         file=S + 'role/h3/path_size.rs',
         find='        if self.known_start && !self.confirmed && p.lost_packets > 0 {',
         replace='        if self.known_start && !self.confirmed && p.lost_packets > 0 && false {',
         why="a known size whose flight was lost stays known: every connection pays it"),
    dict(test='zone::quic_tests::a_known_path_whose_handshake_times_out_is_forgotten',
         file=S + 'role/h3/path_size.rs',
         find='        if self.known_start && !self.confirmed && self.timed_out {',
         replace='        if self.known_start && !self.confirmed && self.timed_out && false {',
         why="a known size whose every datagram was lost stays known"),
    dict(test='zone::quic_tests::a_client_back_from_a_known_path_starts_at_its_size',
         file=S + 'role/h3/mod.rs',
         find='let config = step.map(|i| l.known_path[i].clone());',
         replace='let config = step.map(|i| l.known_path[i].clone()).filter(|_| false);',
         why="a known client's connection starts at 1,200 bytes and probes again"),
    # ---- role::h3::deadlines: QUIC connections' timers -------------------------------------
    dict(test='role::h3::deadlines::tests::a_deadline_moved_later_is_woken_for_where_it_stands',
         file=S + 'role/h3/deadlines.rs',
         find='                Some(d) if d > at => {',
         replace='                Some(d) if d > at && false => {',
         why="the zone is told to wake where a deadline stood, not where it moved to"),
    dict(test='role::h3::deadlines::tests::stale_entries_do_not_pile_up',
         file=S + 'role/h3/deadlines.rs',
         find='                if self.heap.len() > 2 * self.slots.len() + SLACK {',
         replace='                if false && self.heap.len() > 2 * self.slots.len() + SLACK {',
         why="entries a connection left behind stay until they come to the front, tens of seconds"),
    dict(test='role::h3::deadlines::tests::a_deadline_moved_earlier_gets_its_own_entry',
         file=S + 'role/h3/deadlines.rs',
         find='            Some(at) if s.queued.is_none_or(|q| at < q) => {',
         replace='            Some(at) if s.queued.is_none() => {',
         why="a deadline moved earlier waits for the later entry and fires late"),
    dict(test='role::h3::deadlines::tests::gone_and_replaced_connections_are_not_due',
         file=S + 'role/h3/deadlines.rs',
         find='        if let Some(s) = self.slots.get_mut(slot as usize) {\n            s.deadline = None;',
         replace='        if let Some(s) = self.slots.get_mut(slot as usize).filter(|_| false) {\n            s.deadline = None;',
         why="a connection that is gone is still woken at its deadline"),
    # ---- ringx-tls: the server's suite order --------------------------------------------------
    dict(test="tests::the_server_order_picks_aes_128_gcm_whatever_the_client_lists_first",
         pkg="ringx-tls", file="crates/tls/src/provider.rs",
         find="        (tls12, aead_rank(s.suite()))",
         replace="        (tls12, 0)",
         why="rustls's order stands: AES-256-GCM and its SHA-384 key schedule first"),
    # ---- ringx-quic padding: PADDING cut before quinn-proto reads it -------------------------
    dict(test='padding::tests::an_initial_of_crypto_and_padding_keeps_one_byte_of_padding',
         pkg='ringx-quic', file=Q + 'padding.rs',
         find='        let end = if r.p[start] == PADDING {',
         replace='        let end = if false {',
         why="a run of PADDING is kept whole: quinn-proto reads it byte by byte again"),
    dict(test='padding::tests::a_payload_of_padding_alone_keeps_a_frame',
         pkg='ringx-quic', file=Q + 'padding.rs',
         find='            start + 1\n',
         replace='            start\n',
         why="a run is cut to nothing: a packet of PADDING alone becomes one without frames"),
    dict(test='padding::tests::a_frame_the_walk_does_not_read_ends_it_there',
         pkg='ringx-quic', file=Q + 'padding.rs',
         find='                if len == 0 || len > MAX_CID {',
         replace='                if len == 0 {',
         why="a connection ID longer than 20 bytes is walked past and zeros after it are cut"),
    dict(test='padding::tests::padding_after_new_connection_ids_is_cut_as_quinn_proto_sends_it',
         pkg='ringx-quic', file=Q + 'padding.rs',
         find='                self.skip(len + RESET_TOKEN)?;',
         replace='                self.skip(len)?;',
         why="NEW_CONNECTION_ID's reset token is read as frames"),
    dict(test='a_client_initial_reaches_quinn_proto_without_its_padding',
         pkg='ringx-quic', itest='padding', file=Q + 'handshake.rs',
         find='        Ok(trim_keys(self.last.keep(version, dst_cid, keys)))',
         replace='        Ok(self.last.keep(version, dst_cid, keys))',
         why="the Initial keys quinn-proto gets leave PADDING in"),
    # ---- ringx-quic initial: a new connection's Initial keys derived once --------------------
    dict(test='initial::tests::a_kept_set_is_taken_once_and_only_for_its_connection',
         pkg='ringx-quic', file=Q + 'initial.rs',
         find='            Some(l) if l.version == version && l.cid == *cid => {',
         replace='            Some(l) if l.version == version => {',
         why="a connection takes the Initial keys derived for another connection ID"),
    dict(test='handshake::tests::a_new_connection_takes_the_initial_keys_its_first_packet_was_opened_with',
         pkg='ringx-quic', file=Q + 'handshake.rs',
         find='            Side::Server => self.last.take(self.version, dst_cid),',
         replace='            Side::Server => None,',
         why="the connection derives its Initial keys a second time"),
]
# fmt: on

# Files that are test code as a whole.
TEST_FILES = re.compile(r"(^|/)(tests?\.rs|[^/]*_tests\.rs|testkit\.rs)$|/tests/")


class Interrupted(Exception):
    pass


def on_signal(signum, _frame):
    raise Interrupted(f"signal {signum}")


def sha(data):
    return hashlib.sha256(data).hexdigest()


def backup_path(rel):
    return BACKUPS / (urllib.parse.quote(rel, safe="") + ".orig")


def recover():
    """Restores files a killed run left mutated (their originals wait in BACKUPS)."""
    if not BACKUPS.is_dir():
        return
    for b in sorted(BACKUPS.glob("*.orig")):
        rel = urllib.parse.unquote(b.name[: -len(".orig")])
        print(f"recovering {rel} from an interrupted run", file=sys.stderr)
        (ROOT / rel).write_bytes(b.read_bytes())
        b.unlink()


def check_snippet(m):
    """None if the mutation can be applied, else why not."""
    path = ROOT / m["file"]
    if not path.is_file():
        return f"no file {m['file']}"
    if TEST_FILES.search(m["file"]):
        return "the file is test code"
    if m["find"] == m["replace"]:
        return "the replacement is the snippet itself"
    text = path.read_text()
    n = text.count(m["find"])
    if n != 1:
        return f"snippet found {n} times (needs exactly 1)"
    at = text.index(m["find"])
    cfg_test = re.search(r"^#\[cfg\(test\)\]", text, re.M)
    if cfg_test and at > cfg_test.start():
        return "the snippet is in test code (after #[cfg(test)])"
    return None


def run(cmd, timeout):
    """(exit status or None on timeout, output, seconds); the whole process group is killed
    on timeout or interruption."""
    t0 = time.monotonic()
    p = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace"), time.monotonic() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out.decode(errors="replace"), time.monotonic() - t0
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise


def test_cmd(m):
    return [CARGO, "test", *target(m), m["test"], "--", "--exact"]


def verdict(code, out):
    """What one test run says: killed, survived, or not-run (no such test)."""
    if code is None:
        return "killed", "timed out"
    m = re.search(r"test result: \w+\. (\d+) passed; (\d+) failed", out)
    if not m:
        return "error", "no test result in cargo's output"
    passed, failed = int(m.group(1)), int(m.group(2))
    if failed:
        # Where and why the test failed: the first panic's location and message.
        p = re.search(r"panicked at ([^\n]*?):\n([^\n]*)", out)
        return "killed", f"failed at {p.group(1)}: {p.group(2)[:200]}" if p else "failed"
    if passed:
        return "survived", "passed"
    return "not-run", "no test of that name ran"


def mutate_and_test(m, build_timeout, test_timeout):
    rel = m["file"]
    path = ROOT / rel
    orig = path.read_bytes()
    digest = sha(orig)
    bak = backup_path(rel)
    BACKUPS.mkdir(parents=True, exist_ok=True)
    bak.write_bytes(orig)
    t0 = time.monotonic()
    try:
        text = orig.decode()
        path.write_bytes(text.replace(m["find"], m["replace"], 1).encode())
        code, out, _ = run(build_cmd(m), build_timeout)
        if code is None:
            return "error", "the build timed out", time.monotonic() - t0
        if code != 0:
            errs = [line for line in out.splitlines() if line.startswith("error")]
            return "invalid", "does not compile: " + "; ".join(errs[:2]), time.monotonic() - t0
        code, out, _ = run(test_cmd(m), test_timeout)
        result, detail = verdict(code, out)
        return result, detail, time.monotonic() - t0
    finally:
        path.write_bytes(orig)
        if sha(path.read_bytes()) != digest:
            raise SystemExit(f"FATAL: {rel} differs from its original after restoring")
        bak.unlink()


def baseline(sel, build_timeout):
    """Builds the unmutated tests of each target the entries `sel` name and runs them: the
    (target, name) pairs that exist, and which of `sel`'s tests fail unmutated."""
    names, failing = set(), []
    for t in dict.fromkeys(target(m) for m in sel):
        code, out, _ = run([CARGO, "test", *t, "--no-run"], build_timeout)
        if code != 0:
            sys.exit(f"the unmutated tests of {' '.join(t)} do not build:\n" + out[-4000:])
        code, out, _ = run([CARGO, "test", *t, "--", "--list"], 600)
        here = set(re.findall(r"^(\S+): test$", out, re.M))
        names |= {(t, n) for n in here}
        code, out, _ = run([CARGO, "test", *t], build_timeout)
        ok = set(re.findall(r"^test (\S+) \.\.\. ok$", out, re.M))
        failing += [m["test"] for m in sel if target(m) == t and m["test"] in here
                    and m["test"] not in ok]
    return names, failing


def git_head():
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return ""


def table(rows):
    w = max([len(r["test"]) for r in rows] + [4])
    lines = [f"{'test':<{w}}  {'result':<8}  {'secs':>5}  mutation"]
    for r in rows:
        lines.append(f"{r['test']:<{w}}  {r['result']:<8}  {r['seconds']:>5.0f}  {r['why']}")
    return "\n".join(lines)


def write_results(rows, selected_all, total, command):
    results = {}
    if not selected_all and RESULTS.is_file():
        try:
            for r in json.loads(RESULTS.read_text()).get("results", []):
                results[r["test"]] = r
        except (ValueError, KeyError):
            results = {}
    for r in rows:
        results[r["test"]] = r
    order = [m["test"] for m in MUTATIONS]
    merged = [results[t] for t in order if t in results]
    count = {}
    for r in merged:
        count[r["result"]] = count.get(r["result"], 0) + 1
    doc = {
        "what": "each unit test run against a mutation of the production code that breaks "
        "the behaviour it guards; every test must fail (killed)",
        "command": command,
        "commit": git_head(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "last_run_seconds": round(total),
        "mutations": len(merged),
        "counts": count,
        "results": merged,
    }
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", metavar="SUBSTRING", help="entries whose test name contains it")
    ap.add_argument("--list", action="store_true", help="print the table of mutations and exit")
    ap.add_argument("--check", action="store_true", help="check the snippets only, build nothing")
    ap.add_argument("--test-timeout", type=int, default=120, help="seconds per test run (120)")
    ap.add_argument("--build-timeout", type=int, default=1800, help="seconds per build (1800)")
    ap.add_argument("--no-json", action="store_true", help="do not write the results file")
    args = ap.parse_args()

    sel = [m for m in MUTATIONS if not args.only or args.only in m["test"]]
    if not sel:
        sys.exit(f"no entry's test name contains {args.only!r}")
    dup = {m["test"] for m in MUTATIONS if sum(x["test"] == m["test"] for x in MUTATIONS) > 1}
    if dup:
        sys.exit(f"tests with more than one entry: {sorted(dup)}")
    if args.list:
        for m in sel:
            print(f"{m['test']}\n    {m['file']}: {m['why']}")
        print(f"{len(sel)} entries")
        return 0

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    recover()
    bad = [(m, why) for m in sel for why in [check_snippet(m)] if why]
    for m, why in bad:
        print(f"BAD ENTRY {m['test']} ({m['file']}): {why}", file=sys.stderr)
    if args.check:
        print(f"{len(sel) - len(bad)} of {len(sel)} entries can be applied")
        return 1 if bad else 0

    t_start = time.monotonic()
    print("baseline: building and running the unmutated tests", flush=True)
    names, failing = baseline(sel, args.build_timeout)
    rows = []
    for m in sel:
        why_bad = dict((id(b), w) for b, w in bad).get(id(m))
        if (target(m), m["test"]) not in names:
            why_bad = "no such test"
        elif m["test"] in failing:
            why_bad = "the test fails without the mutation"
        if why_bad:
            rows.append(dict(test=m["test"], file=m["file"], why=m["why"], result="error",
                             detail=why_bad, seconds=0.0))
    todo = [m for m in sel if m["test"] not in {r["test"] for r in rows}]
    try:
        for i, m in enumerate(todo, 1):
            print(f"[{i}/{len(todo)}] {m['test']}: {m['why']} ... ", end="", flush=True)
            result, detail, secs = mutate_and_test(m, args.build_timeout, args.test_timeout)
            print(f"{result} ({detail}, {secs:.0f} s)", flush=True)
            rows.append(dict(test=m["test"], file=m["file"], why=m["why"], result=result,
                             detail=detail, seconds=round(secs, 1)))
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"\ninterrupted ({str(e) or 'Ctrl-C'}): every file was restored", file=sys.stderr)
        return 130
    total = time.monotonic() - t_start
    order = {m["test"]: i for i, m in enumerate(MUTATIONS)}
    rows.sort(key=lambda r: order[r["test"]])
    print()
    print(table(rows))
    killed = sum(r["result"] == "killed" for r in rows)
    print(f"\n{killed} of {len(rows)} tests killed by their mutation in {total / 60:.1f} min")
    if not args.no_json:
        command = "python3 scripts/mutation_check.py" + (f" --only {args.only}" if args.only else "")
        write_results(rows, args.only is None, total, command)
        print(f"results: {RESULTS.relative_to(ROOT)}")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
