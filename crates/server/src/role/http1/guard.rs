//! The HTTP/1 role's side of the guards (`crate::guard`): the request's real client address,
//! acting on a [`Verdict`] (a refusal answered, a delayed request held and resumed, the
//! `auth_request` subrequest sent and its answer applied), and malformed requests counted for
//! escalation.

use std::net::IpAddr;
use std::time::Instant;

use ringx_engine::ConnId;
use ringx_http::upstream::{write_request_head, Forward};
use ringx_http::{BodyKind, Method, Request, Version};

use super::{Http1, Next, Phase};
use crate::guard::{AuthAnswer, Input, Verdict};
use crate::response::{ConnHdr, ErrorPage};
use crate::role::exchange::capture::Capture;
use crate::route::ListenerKind;
use crate::zone::client::Base;
use crate::zone::ctx::Cx;

impl Http1 {
    /// The client's address for this request (after `real_ip_from`), and whether it is the
    /// connection's own (not a PROXY header's or a forwarded one).
    pub(super) fn client_ip(cx: &Cx, b: &mut Base, req: &Request) -> (Option<IpAddr>, bool) {
        let peer = b.addr.map(|a| a.ip().to_canonical());
        let proxied = matches!(
            cx.ctx.routes.listener_kind.get(b.listener as usize),
            Some(ListenerKind::Http {
                proxy_protocol: true
            })
        );
        let client = match (&cx.ctx.routes.http_guard.real_ip, peer) {
            (Some(r), Some(p)) => Some(r.client(p, req)),
            _ => peer,
        };
        b.real_ip = client.filter(|c| Some(*c) != peer);
        (client, client == peer && !proxied)
    }

    /// Runs the guard of location `at`; None: the request goes on to its location.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn guard(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        req: &Request,
        uri: &str,
        at: (usize, usize),
        keep: bool,
        more_input: bool,
    ) -> Option<Next> {
        let (client, own_address) = Http1::client_ip(cx, b, req);
        let now = cx.io.now();
        let ctx = &mut *cx.ctx;
        let g = ctx.routes.servers[at.0].locations[at.1].guard.as_deref()?;
        let inp = Input {
            req,
            client,
            own_address,
            tls: b.tr.is_tls(),
            uri,
            now,
        };
        match g.check(&inp, &mut self.progress, &mut ctx.guard, &ctx.log.counters) {
            Verdict::Pass => None,
            Verdict::Refuse { status, headers } => {
                Some(self.refuse(cx, b, c, req, status, &headers, keep, more_input))
            }
            Verdict::Delay(d) => {
                self.hold(cx, b, c, now + d);
                Some(Next::Defer)
            }
            Verdict::Ask => {
                let a = g
                    .auth_request
                    .as_ref()
                    .expect("Ask comes from auth_request");
                let (upstream, head) = (a.upstream, auth_head(req, &a.uri, b));
                Some(self.subrequest(cx, b, c, upstream, head, Capture::subrequest()))
            }
        }
    }

    /// Answers `status` with `headers` (the request is not served). A request with a body
    /// is answered at once and the connection closed, as for other refusals.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn refuse(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        req: &Request,
        status: u16,
        headers: &str,
        keep: bool,
        more_input: bool,
    ) -> Next {
        let head_only = req.method == Method::Head;
        let has_body = !matches!(req.body, BodyKind::None | BodyKind::Length(0));
        let page = if has_body {
            ErrorPage::closing(status)
        } else {
            ErrorPage::new(
                status,
                ConnHdr::new(req.version == Version::Http11, keep),
                head_only,
            )
        };
        let Some(out) = b.tr.out_buf(cx.io, c) else {
            return Next::Stop;
        };
        let w = cx
            .ctx
            .responder()
            .error(out, page.head_only(head_only).extra(headers));
        cx.ctx.log.status(cx.io, c, w, b);
        if has_body {
            cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
            self.progress.conn = None;
            self.linger(cx, b, c);
            return Next::Stop;
        }
        self.after_response(cx, b, c, !keep, more_input)
    }

    /// Holds the request (its head stays buffered) until `until`, then looks at it again.
    pub(super) fn hold(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, until: Instant) {
        self.phase = Phase::Wait;
        b.paused = true;
        cx.ctx.wake_at(cx.io, until, c, b.gen);
        let at = until + cx.ctx.set.send_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
    }

    /// A held request's time came (or what it waited for is there): it is parsed and routed
    /// again, with what was already decided for it kept.
    pub fn resume(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.phase != Phase::Wait {
            return;
        }
        self.phase = Phase::Idle;
        self.resumed = true;
        b.paused = false;
        if !b.eof {
            cx.io.resume_recv(c);
        }
        self.process_buffered(cx, b, c);
    }

    /// The answer of a subrequest (`capture`, or None when none could be had): applied to the
    /// request that waits for it, which is resumed on the zone's next turn (never from inside
    /// the parse that sent the subrequest).
    pub(super) fn sub_done(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        capture: Option<&Capture>,
    ) {
        let answer = match capture.filter(|x| x.complete) {
            Some(x) if (200..300).contains(&x.status) => AuthAnswer::Allow,
            Some(x) if x.status == 401 || x.status == 403 => {
                let mut headers = String::new();
                if x.status == 401 {
                    for v in x.header_lines("www-authenticate") {
                        headers.push_str("WWW-Authenticate: ");
                        headers.push_str(&String::from_utf8_lossy(v));
                        headers.push_str("\r\n");
                    }
                }
                AuthAnswer::Deny {
                    status: x.status,
                    headers,
                }
            }
            _ => AuthAnswer::Error,
        };
        self.progress.auth = Some(answer);
        let now = cx.io.now();
        self.hold(cx, b, c, now);
    }

    /// A request that could not be parsed: counted for `escalate_malformed` (400s only; the
    /// limits' 413/414/431 are not malformed).
    pub(super) fn malformed(&mut self, cx: &mut Cx, b: &Base, status: u16) {
        let Some(e) = cx.ctx.routes.http_guard.malformed else {
            return;
        };
        let proxied = matches!(
            cx.ctx.routes.listener_kind.get(b.listener as usize),
            Some(ListenerKind::Http {
                proxy_protocol: true
            })
        );
        if status == 400 && !proxied {
            if let Some(a) = b.addr {
                crate::guard::escalate::refused(a.ip(), &e, cx.io.now());
            }
        }
    }
}

/// The head of an `auth_request` subrequest: a GET of `uri` with the client's fields (no
/// body), and where the original request went.
fn auth_head(req: &Request, uri: &str, b: &Base) -> Vec<u8> {
    let sub = Request {
        method: Method::Get,
        method_str: "GET",
        target: uri,
        path: uri,
        query: None,
        body: BodyKind::None,
        expect_continue: false,
        ..*req
    };
    let mut head = Vec::with_capacity(256 + req.head_len);
    write_request_head(
        &mut head,
        &sub,
        &Forward {
            client: b.addr.map(|a| a.ip()),
            proto: if b.tr.is_tls() { "https" } else { "http" },
            host: None,
            forwarded_headers: true,
            close: false,
            upgrade: None,
            tls_client: None,
        },
    );
    head.truncate(head.len() - 2);
    head.extend_from_slice(b"X-Original-URI: ");
    head.extend_from_slice(req.target.as_bytes());
    head.extend_from_slice(b"\r\nX-Original-Method: ");
    head.extend_from_slice(req.method_str.as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
    head
}
