//! HTTP settings in the form the hot path reads them.

use std::time::Duration;

use ringx_http::Limits;

use ringx_config::Http;

pub struct Settings {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub send_timeout: Duration,
    pub lingering_timeout: Duration,
    pub keepalive_requests: u32,
    pub max_body: u64,
    pub limits: Limits,
    /// Input a connection may hold unparsed (a partial head, or requests waiting while the
    /// connection's output drains).
    pub max_buffered: usize,
}

impl Settings {
    pub fn from_config(h: &Http, recv_buffer_size: u64) -> Settings {
        let limits = Limits {
            max_head: h.max_header_size.0 as usize,
            max_uri: h.max_uri_size.0 as usize,
            max_headers: h.max_headers,
        };
        Settings {
            header_timeout: h.client_header_timeout.0,
            body_timeout: h.client_body_timeout.0,
            keepalive_timeout: h.keepalive_timeout.0,
            send_timeout: h.send_timeout.0,
            lingering_timeout: h.lingering_timeout.0,
            keepalive_requests: h.keepalive_requests.max(1),
            max_body: h.client_max_body_size.0,
            max_buffered: limits.max_head + 4 * recv_buffer_size as usize,
            limits,
        }
    }
}
