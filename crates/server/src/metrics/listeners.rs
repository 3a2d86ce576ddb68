//! `/metrics` for what ringx listens on and the certificates it serves.

use super::out::Out;

/// One listening address and what it serves: `http`, `https`, `stream` (TCP) or `udp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    pub addr: String,
    pub proto: &'static str,
}

/// A served certificate: its file, its leaf's subject and when it expires.
#[derive(Clone, Debug)]
pub struct CertInfo {
    pub path: std::path::PathBuf,
    pub subject: String,
    /// Seconds since the epoch.
    pub not_after: i64,
}

/// The listeners, as an info family.
pub(super) fn render_listeners(listeners: &[ListenerInfo], o: &mut Out) {
    let name = "ringx_listener_info";
    o.family(
        name,
        "gauge",
        "Each address ringx listens on, with what it serves (http, https, stream, udp).",
    );
    for l in listeners {
        o.sample(name, &[("addr", &l.addr), ("proto", l.proto)], 1);
    }
}

/// The certificates' expiry.
pub(super) fn render_certs(certs: &[CertInfo], o: &mut Out) {
    let name = "ringx_tls_certificate_expiry_timestamp_seconds";
    o.family(
        name,
        "gauge",
        "When each served certificate expires (seconds since the epoch).",
    );
    for c in certs {
        let path = c.path.display().to_string();
        o.sample(
            name,
            &[("cert", &path), ("subject", &c.subject)],
            c.not_after,
        );
    }
}
