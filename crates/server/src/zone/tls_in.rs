//! What arrives on a TLS client connection, before its role sees it: the handshake (under
//! the zone's budget), then records decrypted into plaintext for the role. Plain HTTP on the
//! TLS port gets nginx's 400; a failed handshake its alert and a close.

use ringx_engine::{ConnId, Io};
use ringx_tls::Recv;

use std::sync::atomic::Ordering;

use crate::ctx::base::Base;
use crate::metrics::{bump, ZoneCounters};
use crate::tls::{ZoneTls, PLAIN_HTTP_BODY, RETRY};
use crate::transport::Transport;

/// What the role gets.
pub enum Next {
    Nothing,
    /// Plaintext (taken from the connection; hand the buffer back with [`give_back`]).
    Data(Vec<u8>),
    /// Plaintext, then the end of the client's data (close_notify).
    Eof(Vec<u8>),
}

/// Feeds `data` (or, with `None`, goes on with bytes that waited for the budget).
pub fn receive(
    io: &mut Io,
    z: &mut ZoneTls,
    counters: &ZoneCounters,
    base: &mut Base,
    c: ConnId,
    data: Option<&[u8]>,
) -> Next {
    let Transport::Tls(t) = &mut base.tr else {
        return Next::Nothing;
    };
    if t.plain {
        return Next::Nothing; // answered already; what follows is discarded
    }
    let li = base.listener as usize;
    let sites = &z.sites;
    let config = |sni: Option<&str>| sites.config(li, sni);
    let now = io.now();
    let was_handshaking = t.conn.handshaking();
    let Some(out) = io.out_buf(c) else {
        return Next::Nothing;
    };
    let r = match data {
        Some(d) => t.conn.receive(d, &config, &mut z.budget, now, out),
        None => {
            t.queued = false; // the zone took it from the queue (`Zone::tls_retry`)
            t.conn.resume(&config, &mut z.budget, now, out)
        }
    };
    if was_handshaking {
        if let Some(s) = t.conn.session() {
            let mut info = crate::tls::info_of(s);
            info.client_auth = z.sites.asks_client_cert(li, info.sni.as_deref());
            info.server = z.sites.server(li, info.sni.as_deref()).unwrap_or(0);
            bump(
                if info.resumed {
                    &counters.tls_resumed
                } else {
                    &counters.tls_full
                },
                1,
            );
            t.info = Some(Box::new(info));
            if t.hand_over(io, c) {
                bump(&counters.tls_kernel, 1);
            }
        }
    }
    if t.kernel {
        // An alert, or a KeyUpdate and its keys, for the kernel to send.
        t.seal(io, c);
    }
    // The zone is the only writer of its counters.
    counters
        .tls_budget_waits
        .store(z.budget.waits, Ordering::Relaxed);
    counters
        .tls_handshake_ns
        .store(z.budget.spent_ns, Ordering::Relaxed);
    match r {
        Recv::Handshaking => Next::Nothing,
        Recv::Waiting => {
            // Once per connection: the queue holds at most one entry for each.
            if !std::mem::replace(&mut t.queued, true) {
                let src = base.addr.map(|a| a.ip());
                z.waiting.push(c, base.gen, t.conn.started(), src);
            }
            io.timer_at(now + RETRY);
            Next::Nothing
        }
        Recv::Data => Next::Data(std::mem::take(&mut t.conn.plain)),
        Recv::Closed => Next::Eof(std::mem::take(&mut t.conn.plain)),
        Recv::PlainHttp => {
            bump(&counters.tls_failed, 1);
            t.plain = true;
            let head = format!(
                "HTTP/1.1 400 Bad Request\r\nServer: ringx\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                PLAIN_HTTP_BODY.len()
            );
            io.write(c, head.as_bytes());
            io.write(c, PLAIN_HTTP_BODY.as_bytes());
            io.close_after_flush(c);
            Next::Nothing
        }
        Recv::Failed(why) => {
            bump(&counters.tls_failed, 1);
            tracing::debug!(conn = c.0, addr = ?base.addr, "TLS: {why}");
            t.plain = true; // nothing more is sealed: the alert is the last word
            io.close_after_flush(c);
            Next::Nothing
        }
    }
}

/// Hands a plaintext buffer back to its connection for the next records.
pub fn give_back(base: &mut Base, mut buf: Vec<u8>) {
    if let Transport::Tls(t) = &mut base.tr {
        if t.conn.plain.is_empty() && buf.capacity() <= 64 * 1024 {
            buf.clear();
            t.conn.plain = buf;
        }
    }
}

/// What arrived on a TLS upstream connection, for its exchange.
pub enum UpNext {
    Nothing,
    /// Plaintext (perhaps none), and whether the server's close_notify came with it: the end
    /// of what it sends, told to the exchange as a FIN is (`UpEvent::Eof`).
    Data(Vec<u8>, bool),
    /// The handshake or a record failed (why): the connection closes, and its exchange
    /// answers 502 or tries another server as for any connection lost before a response.
    Failed(String),
}

/// Decrypts what an upstream connection sent (plain connections: `None`, use `data`).
pub fn upstream_receive(io: &mut Io, tr: &mut Transport, u: ConnId, data: &[u8]) -> Option<UpNext> {
    let Transport::TlsUp(t) = tr else {
        return None;
    };
    let out = io.out_buf(u)?;
    Some(match t.conn.receive(data, out) {
        Ok(false) if t.conn.plain.is_empty() => UpNext::Nothing,
        Ok(closed) => UpNext::Data(std::mem::take(&mut t.conn.plain), closed),
        Err(e) => UpNext::Failed(e),
    })
}

/// The warning for an upstream connection whose TLS failed, naming its upstream.
pub fn upstream_failed(
    io: &Io,
    ctx: &crate::ctx::ZoneCtx,
    up: Option<usize>,
    u: ConnId,
    why: &str,
) {
    let name = up
        .and_then(|i| ctx.current_pools().map(|(p, _)| (p, i)))
        .and_then(|(p, i)| p.defs.list.get(i).map(|d| d.name.clone()));
    tracing::warn!(
        "upstream {} ({:?}): TLS failed: {why}",
        name.as_deref().unwrap_or("?"),
        io.peer_addr(u)
    );
}
