//! `[http2]`: HTTP/2 over TLS (ALPN `h2`) and cleartext (h2c prior knowledge), its
//! SETTINGS, and the limits against the attacks on HTTP/2 servers. Every value is checked
//! here, at its position in the file.

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::units::{Dur, Size};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Http2 {
    /// Serve HTTP/2: offered by ALPN on TLS servers (unless a server says `http2 = false`)
    /// and taken by prior knowledge (`h2c`) on plain listeners.
    #[serde(default = "yes")]
    pub enable: bool,
    /// Accept the h2c prior-knowledge preface on plain listeners.
    #[serde(default = "yes")]
    pub h2c: bool,
    /// SETTINGS_MAX_CONCURRENT_STREAMS (nginx: http2_max_concurrent_streams, 128).
    #[serde(default = "default_streams")]
    pub max_concurrent_streams: Spanned<u32>,
    /// SETTINGS_INITIAL_WINDOW_SIZE: request body bytes a stream may send before ringx
    /// reads them.
    #[serde(default = "default_window")]
    pub initial_window: Spanned<Size>,
    /// The connection's receive window.
    #[serde(default = "default_conn_window")]
    pub connection_window: Spanned<Size>,
    /// SETTINGS_MAX_HEADER_LIST_SIZE, enforced while decoding (a larger request gets 431).
    #[serde(default = "default_header_list")]
    pub max_header_list_size: Spanned<Size>,
    /// SETTINGS_MAX_FRAME_SIZE accepted.
    #[serde(default = "default_frame")]
    pub max_frame_size: Spanned<Size>,
    /// Bytes of one header block (HEADERS and CONTINUATIONs) before decoding.
    #[serde(default = "default_block")]
    pub max_header_block: Spanned<Size>,
    /// CONTINUATION frames in one header block.
    #[serde(default = "default_continuations")]
    pub max_continuations: u32,
    /// The window the flood limits below count in.
    #[serde(default = "default_rate_window")]
    pub rate_window: Dur,
    /// Streams reset or refused per window before GOAWAY ENHANCE_YOUR_CALM (rapid reset).
    #[serde(default = "default_resets")]
    pub max_resets: Spanned<u32>,
    /// SETTINGS, PING and PRIORITY frames per window.
    #[serde(default = "default_control")]
    pub max_control_frames: Spanned<u32>,
    /// Empty DATA frames and empty header fragments per window.
    #[serde(default = "default_empty")]
    pub max_empty_frames: Spanned<u32>,
}

impl Default for Http2 {
    fn default() -> Self {
        toml::from_str("").expect("defaults deserialise")
    }
}

/// The checks of `[http2]`.
pub fn validate(h: &Http2, src: &Source) -> Result<(), ConfigError> {
    let n = |v: &Spanned<u32>, lo: u32, hi: u32, what: &str| {
        let x = *v.get_ref();
        if x < lo || x > hi {
            return Err(src.err(v.span(), format!("{what} must be between {lo} and {hi}")));
        }
        Ok(())
    };
    let size = |v: &Spanned<Size>, lo: u64, hi: u64, what: &str| {
        let x = v.get_ref().0;
        if x < lo || x > hi {
            return Err(src.err(
                v.span(),
                format!("{what} must be between {lo} and {hi} bytes, not {x}"),
            ));
        }
        Ok(())
    };
    n(
        &h.max_concurrent_streams,
        1,
        65_536,
        "http2.max_concurrent_streams",
    )?;
    size(
        &h.initial_window,
        1024,
        (1 << 31) - 1,
        "http2.initial_window",
    )?;
    size(
        &h.connection_window,
        65_535,
        (1 << 31) - 1,
        "http2.connection_window",
    )?;
    size(
        &h.max_frame_size,
        16_384,
        (1 << 24) - 1,
        "http2.max_frame_size",
    )?;
    size(
        &h.max_header_list_size,
        1024,
        16 << 20,
        "http2.max_header_list_size",
    )?;
    size(
        &h.max_header_block,
        1024,
        16 << 20,
        "http2.max_header_block",
    )?;
    n(&h.max_resets, 1, u32::MAX, "http2.max_resets")?;
    n(
        &h.max_control_frames,
        1,
        u32::MAX,
        "http2.max_control_frames",
    )?;
    n(&h.max_empty_frames, 1, u32::MAX, "http2.max_empty_frames")?;
    if h.rate_window.0.is_zero() {
        return Err(src.err(0..0, "http2.rate_window must be longer than 0"));
    }
    Ok(())
}

fn yes() -> bool {
    true
}
fn default_streams() -> Spanned<u32> {
    Spanned::new(0..0, 128)
}
fn default_window() -> Spanned<Size> {
    Spanned::new(0..0, Size(65_535))
}
fn default_conn_window() -> Spanned<Size> {
    Spanned::new(0..0, Size(1 << 20))
}
fn default_header_list() -> Spanned<Size> {
    Spanned::new(0..0, Size(32 << 10))
}
fn default_frame() -> Spanned<Size> {
    Spanned::new(0..0, Size(16_384))
}
fn default_block() -> Spanned<Size> {
    Spanned::new(0..0, Size(64 << 10))
}
fn default_continuations() -> u32 {
    32
}
fn default_rate_window() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}
fn default_resets() -> Spanned<u32> {
    Spanned::new(0..0, 400)
}
fn default_control() -> Spanned<u32> {
    Spanned::new(0..0, 1000)
}
fn default_empty() -> Spanned<u32> {
    Spanned::new(0..0, 100)
}
