//! A client connection as the zone keeps it ([`Client`]: what every role needs of it, and
//! the role it plays), and how its bytes reach that role: through the PROXY header first
//! where the listener expects one, and to HTTP/2 when a plain connection opens with the h2c
//! preface.

use ringx_engine::ConnId;

use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::role::{ClientRole, H2};

/// An accepted connection: what every role needs of it, and the role it plays.
pub struct Client {
    pub base: Base,
    pub role: ClientRole,
}

/// Bytes (plaintext over TLS) for a client connection's role; a new connection whose
/// first bytes (after the PROXY header, on a listener that expects one) are the h2c
/// preface becomes HTTP/2 first.
pub(super) fn dispatch_data(
    cx: &mut Cx,
    base: &mut Base,
    role: &mut ClientRole,
    c: ConnId,
    data: &[u8],
) {
    if let ClientRole::Http1(h) = role {
        if h.awaits_proxy_header() {
            if !h.proxy_header(cx, base, c, data) {
                return;
            }
            // The header is done (the phase moved on): what followed it starts afresh.
            let rest = std::mem::take(&mut base.inbuf);
            if !rest.is_empty() {
                dispatch_data(cx, base, role, c, &rest);
            }
            return;
        }
        if cx.ctx.set.h2c && h.is_fresh() && !base.tr.is_tls() {
            use ringx_h2proto::frame::{preface, Preface};
            match preface(&base.inbuf, data) {
                // Held in the input buffer, where either protocol takes it from.
                Preface::Undecided => return base.inbuf.extend_from_slice(data),
                Preface::Yes => *role = ClientRole::H2(Box::new(start_h2(cx, base, c))),
                Preface::No => {}
            }
        }
    }
    match role {
        ClientRole::Http1(h) => h.on_data(cx, base, c, data),
        ClientRole::H2(h) => h.on_data(cx, base, c, data),
        ClientRole::Tunnel(t) => t.client_data(cx, base, c, data),
        ClientRole::Stream(s) => s.client_data(cx, base, c, data),
        ClientRole::Free => {}
    }
}

/// A connection becomes HTTP/2 (the h2c preface, or ALPN `h2`).
pub(super) fn start_h2(cx: &mut Cx, base: &mut Base, c: ConnId) -> H2 {
    let limits = cx.ctx.set.h2.clone();
    H2::start(cx, base, c, limits)
}
