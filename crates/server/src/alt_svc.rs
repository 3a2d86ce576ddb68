//! `Alt-Svc` for servers with `quic = true` (issue 38): their responses over TCP, HTTP/1 and
//! HTTP/2 alike, tell clients that HTTP/3 answers on the same ports
//! (`Alt-Svc: h3=":443"; ma=86400`), as nginx's documented
//! `add_header Alt-Svc 'h3=":443"; ma=86400';` does by hand and Caddy does by itself.
//!
//! The line is compiled in once, per location, where the location's other added lines are:
//! - a `return` with nothing else to do (no `add_header`, `error_page`, rewriting or guard,
//!   in a server that does not rewrite) gets it in its serialised head, so it stays on the
//!   fast path that writes the whole response in one copy;
//! - every other location gets it as the last `always` line of its `add_header`
//!   (`rewrite::headers::AddHeaders`), which its answers, error pages, refusals, answers from
//!   the cache and proxied responses all write already; the server's own `add_header` (for a
//!   request no location takes) gets it too.
//!
//! A configuration without `quic` compiles exactly as before: no request of it pays anything.
//! Where the operator writes `Alt-Svc` (in `add_header`, or in a `return`'s `headers`), theirs
//! goes out instead, never both; `add_header = { "Alt-Svc" = "" }` in a location sends none.
//!
//! **Over HTTP/3.** A response over QUIC does not advertise QUIC to a client already on it:
//! the HTTP/3 role leaves out the `Alt-Svc` field whose value is the server's compiled one
//! (`VServer::alt_svc`) as it encodes the head; an operator's own other value goes out.
//! (`AddHeaders::ends_with_alt_svc` and `Canned::alt_svc` say where the line was compiled
//! in.)

use std::sync::Arc;

use ringx_config::{Location, Server};

use crate::rewrite::{AddHeaders, LocRw};
use crate::route::{Action, Loc};

/// How long a client may remember the advertisement, in seconds (nginx's example, Caddy's
/// default): a day.
const MAX_AGE: u32 = 86_400;

/// A QUIC server's advertisement.
pub struct AltSvc {
    /// The field's value: `h3=":443"; ma=86400`, one entry per port.
    value: String,
    /// The whole header line, with CRLF.
    line: String,
}

impl AltSvc {
    /// The advertisement of server `s`: its listen ports, each once, in the order written;
    /// none when the server has no `quic = true`.
    pub fn of(s: &Server) -> Option<AltSvc> {
        if !*s.quic.get_ref() {
            return None;
        }
        let mut ports: Vec<u16> = Vec::new();
        for a in &s.listen {
            let p = a.get_ref().port();
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
        let value = ports
            .iter()
            .map(|p| format!("h3=\":{p}\"; ma={MAX_AGE}"))
            .collect::<Vec<_>>()
            .join(", ");
        let line = format!("Alt-Svc: {value}\r\n");
        Some(AltSvc { value, line })
    }

    /// The server's `add_header`, for requests no location takes, with the line.
    /// The field's value.
    pub fn value(&self) -> &str {
        &self.value
    }

    pub fn server_lines(&self, lines: Option<Arc<AddHeaders>>) -> Arc<AddHeaders> {
        AddHeaders::with_alt_svc(lines, &self.value)
    }

    /// Compiles the line into location `loc` (configured as `l`), whose rewriting, added
    /// lines and error pages are `rw`; `server_rewrites`: its server routes requests through
    /// rewriting (`flow::route`), which may answer for the location (a redirect, an error).
    pub fn apply(&self, loc: &mut Loc, rw: &mut LocRw, l: &Location, server_rewrites: bool) {
        let own = l.ret.as_ref().is_some_and(|r| {
            r.headers
                .keys()
                .any(|k| k.get_ref().eq_ignore_ascii_case("alt-svc"))
        });
        if own {
            return;
        }
        if let Action::Return(c) = &mut loc.action {
            // Nothing but this response can come from the location: no line of its own, no
            // error page, no refusal, no rewriting answering in its name.
            if rw.is_empty() && !server_rewrites && loc.guard.is_none() {
                c.add_alt_svc(&self.line);
                return;
            }
        }
        rw.add_header = Some(AddHeaders::with_alt_svc(rw.add_header.take(), &self.value));
    }
}
