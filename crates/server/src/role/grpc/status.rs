//! gRPC statuses as the proxy makes them: the codes (the gRPC spec's `statuscodes.md`), the
//! status a failed upstream stream becomes (`http-grpc-status-mapping.md` for RST_STREAM
//! codes), the `grpc-timeout` header, and the Trailers-Only response that carries a status
//! when nothing else was sent.

use std::time::Duration;

use ringx_h2proto::ErrorCode;

/// The gRPC status codes the proxy produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Cancelled = 1,
    Unknown = 2,
    DeadlineExceeded = 4,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    Internal = 13,
    Unavailable = 14,
}

impl Code {
    /// The `grpc-status` value.
    pub fn value(self) -> &'static [u8] {
        match self {
            Code::Cancelled => b"1",
            Code::Unknown => b"2",
            Code::DeadlineExceeded => b"4",
            Code::PermissionDenied => b"7",
            Code::ResourceExhausted => b"8",
            Code::Internal => b"13",
            Code::Unavailable => b"14",
        }
    }

    /// The index of the code's counter ([`CODES`]).
    pub fn index(self) -> usize {
        CODES.iter().position(|&c| c == self).unwrap_or(0)
    }
}

/// Every code the proxy produces, in the order of its counters.
pub const CODES: [Code; 7] = [
    Code::Cancelled,
    Code::Unknown,
    Code::DeadlineExceeded,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::Internal,
    Code::Unavailable,
];

/// An upstream stream reset with `code` (RST_STREAM), as a status for the client (the
/// gRPC spec's table): a refused stream is UNAVAILABLE (it was not processed), a cancel
/// CANCELLED, "calm down" RESOURCE_EXHAUSTED, inadequate security PERMISSION_DENIED, and
/// the rest INTERNAL.
pub fn from_reset(code: ErrorCode) -> Code {
    match code {
        ErrorCode::RefusedStream => Code::Unavailable,
        ErrorCode::Cancel => Code::Cancelled,
        ErrorCode::EnhanceYourCalm => Code::ResourceExhausted,
        ErrorCode::InadequateSecurity => Code::PermissionDenied,
        _ => Code::Internal,
    }
}

/// The most a `grpc-timeout` may say (the spec's 8 digits of hours would overflow nothing,
/// but a deadline this far is none).
const MAX_TIMEOUT: Duration = Duration::from_secs(100 * 24 * 3600);

/// Parses `grpc-timeout` (`TimeoutValue TimeoutUnit`: 1 to 8 ASCII digits and one of
/// `H M S m u n`); None when it is not one (the header is then ignored, as gRPC servers do).
pub fn parse_timeout(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    let d = match unit {
        b'H' => Duration::from_secs(n.saturating_mul(3600)),
        b'M' => Duration::from_secs(n.saturating_mul(60)),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    };
    Some(d.min(MAX_TIMEOUT))
}

/// The trailers that carry `code` and `msg` (plain ASCII without `%`, so the message needs
/// no percent-encoding).
pub fn trailers(code: Code, msg: &'static str) -> [(&'static [u8], &'static [u8]); 2] {
    debug_assert!(msg
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'%' || b == b' '));
    [
        (b"grpc-status", code.value()),
        (b"grpc-message", msg.as_bytes()),
    ]
}

/// The fields of a Trailers-Only response (a HEADERS frame that ends the stream) with `code`.
pub fn trailers_only(code: Code, msg: &'static str) -> [(&'static [u8], &'static [u8]); 3] {
    let [s, m] = trailers(code, msg);
    [(b"content-type", b"application/grpc"), s, m]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_in_every_unit() {
        let cases: [(&[u8], Option<Duration>); 12] = [
            (b"1H", Some(Duration::from_secs(3600))),
            (b"2M", Some(Duration::from_secs(120))),
            (b"3S", Some(Duration::from_secs(3))),
            (b"250m", Some(Duration::from_millis(250))),
            (b"7u", Some(Duration::from_micros(7))),
            (b"99999999n", Some(Duration::from_nanos(99_999_999))),
            (b"99999999H", Some(MAX_TIMEOUT)),
            (b"123456789S", None),
            (b"S", None),
            (b"1s", None),
            (b"-1S", None),
            (b"", None),
        ];
        for (v, want) in cases {
            assert_eq!(parse_timeout(v), want, "{:?}", String::from_utf8_lossy(v));
        }
    }

    #[test]
    fn resets_become_the_specs_statuses() {
        assert_eq!(from_reset(ErrorCode::RefusedStream), Code::Unavailable);
        assert_eq!(from_reset(ErrorCode::Cancel), Code::Cancelled);
        assert_eq!(
            from_reset(ErrorCode::EnhanceYourCalm),
            Code::ResourceExhausted
        );
        assert_eq!(from_reset(ErrorCode::Protocol), Code::Internal);
        assert_eq!(trailers(Code::Unavailable, "x")[0].1, b"14");
        assert!(CODES.iter().enumerate().all(|(i, c)| c.index() == i));
    }
}
