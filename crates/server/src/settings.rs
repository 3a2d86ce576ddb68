//! HTTP settings in the form the hot path reads them.

use std::time::Duration;

use ringx_http::Limits;

use ringx_config::http2::Http2;
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
    /// HTTP/2 (`[http2]`): whether it is served (ALPN `h2`, h2c prior knowledge), and its
    /// limits.
    pub http2: bool,
    pub h2c: bool,
    pub h2: ringx_h2proto::Limits,
    /// HTTP/3 (`quic = true` servers): what a zone's QUIC endpoints hold peers to.
    pub quic: QuicSettings,
}

/// When new QUIC clients must prove their address with a Retry first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryWhen {
    /// Once a zone holds half of `max_connections`.
    Auto,
    Always,
    Never,
}

/// What a zone's QUIC endpoints hold peers to (`[http] quic_*`).
#[derive(Clone, Debug)]
pub struct QuicSettings {
    /// Connections one zone holds at most.
    pub max_connections: u32,
    /// A connection with no packet for this long is closed.
    pub idle_timeout: Duration,
    /// Request streams one connection may have open at once.
    pub max_streams: u32,
    pub retry: RetryWhen,
    /// 0-RTT accepted (off: a replayed request could run twice).
    pub early_data: bool,
    /// The host byte of every connection ID issued (`[http] quic_host`; 0: no balancer).
    pub host: u8,
}

impl Default for QuicSettings {
    fn default() -> QuicSettings {
        QuicSettings {
            max_connections: 10_000,
            idle_timeout: Duration::from_secs(30),
            max_streams: 100,
            retry: RetryWhen::Auto,
            early_data: false,
            host: 0,
        }
    }
}

/// The protocol crate's limits from `[http2]`.
fn h2_limits(h: &Http2) -> ringx_h2proto::Limits {
    let u = |s: &ringx_config::Size| s.0.min(u64::from(u32::MAX)) as u32;
    ringx_h2proto::Limits {
        max_concurrent_streams: *h.max_concurrent_streams.get_ref(),
        initial_window: u(h.initial_window.get_ref()),
        conn_window: u(h.connection_window.get_ref()),
        max_frame_size: u(h.max_frame_size.get_ref()),
        max_header_list_size: u(h.max_header_list_size.get_ref()),
        max_header_block: u(h.max_header_block.get_ref()),
        max_continuations: h.max_continuations,
        rate_window: h.rate_window.0,
        max_resets: *h.max_resets.get_ref(),
        max_control_frames: *h.max_control_frames.get_ref(),
        max_empty_frames: *h.max_empty_frames.get_ref(),
    }
}

impl Settings {
    pub fn from_config(h: &Http, h2: &Http2, recv_buffer_size: u64) -> Settings {
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
            http2: h2.enable,
            h2c: h2.enable && h2.h2c,
            h2: h2_limits(h2),
            quic: QuicSettings {
                max_connections: *h.quic_max_connections.get_ref(),
                idle_timeout: h.quic_idle_timeout.get_ref().0,
                max_streams: *h.quic_max_streams.get_ref(),
                retry: match h.quic_retry {
                    ringx_config::quic::Retry::Auto => RetryWhen::Auto,
                    ringx_config::quic::Retry::Always => RetryWhen::Always,
                    ringx_config::quic::Retry::Never => RetryWhen::Never,
                },
                early_data: *h.quic_early_data.get_ref(),
                // Checked to be 0..=255 by the configuration.
                host: u8::try_from(*h.quic_host.get_ref()).unwrap_or(0),
            },
        }
    }
}
