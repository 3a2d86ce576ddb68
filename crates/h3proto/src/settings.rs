//! SETTINGS (RFC 9114 §7.2.4): the parameters each side announces once, first thing on its
//! control stream. What ours say is what [`Limits`](crate::Limits) enforces.

use crate::error::{ConnError, ErrorCode};
use crate::varint;

/// Setting identifiers.
pub mod id {
    /// RFC 9204 §5: the dynamic table capacity the encoder may use (0: none).
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    /// RFC 9114 §4.2.2: the largest field section (names + values + 32 per field).
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    /// RFC 9204 §5: how many streams may wait on dynamic table inserts.
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
    /// RFC 9220 (extended CONNECT): 0 or 1.
    pub const ENABLE_CONNECT_PROTOCOL: u64 = 0x08;
    /// RFC 9297 (datagrams): 0 or 1.
    pub const H3_DATAGRAM: u64 = 0x33;
}

/// The settings we act on; others are read, checked where the RFCs say so, and ignored.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settings {
    pub qpack_max_table_capacity: u64,
    /// None: unlimited (the default).
    pub max_field_section_size: Option<u64>,
    pub qpack_blocked_streams: u64,
}

fn bad(msg: &'static str) -> ConnError {
    ConnError::new(ErrorCode::Settings, msg)
}

impl Settings {
    /// Reads a whole SETTINGS payload. Identifiers HTTP/2 used for settings HTTP/3 has not
    /// (0x02..=0x05) and repeated identifiers are H3_SETTINGS_ERROR; a payload that ends
    /// inside a varint is H3_FRAME_ERROR.
    pub fn parse(mut p: &[u8]) -> Result<Settings, ConnError> {
        let truncated = ConnError::new(ErrorCode::Frame, "a SETTINGS payload cut short");
        let mut s = Settings::default();
        let mut seen = Vec::new();
        while !p.is_empty() {
            let (k, n) = varint::decode(p).ok_or(truncated)?;
            p = &p[n..];
            let (v, n) = varint::decode(p).ok_or(truncated)?;
            p = &p[n..];
            seen.push(k);
            match k {
                id::QPACK_MAX_TABLE_CAPACITY => s.qpack_max_table_capacity = v,
                id::MAX_FIELD_SECTION_SIZE => s.max_field_section_size = Some(v),
                id::QPACK_BLOCKED_STREAMS => s.qpack_blocked_streams = v,
                id::ENABLE_CONNECT_PROTOCOL | id::H3_DATAGRAM if v > 1 => {
                    return Err(bad("a boolean setting other than 0 or 1"))
                }
                0x02..=0x05 => return Err(bad("an HTTP/2 setting")),
                _ => {}
            }
        }
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("a setting given twice"));
        }
        Ok(s)
    }

    /// Appends the SETTINGS frame (its values other than the defaults), with one reserved
    /// setting as grease (RFC 9114 §7.2.4.1) so peers that choke on unknown ones are found.
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut p = Vec::new();
        let mut put = |k: u64, v: u64| {
            varint::encode(&mut p, k);
            varint::encode(&mut p, v);
        };
        if self.qpack_max_table_capacity != 0 {
            put(id::QPACK_MAX_TABLE_CAPACITY, self.qpack_max_table_capacity);
        }
        if let Some(n) = self.max_field_section_size {
            put(id::MAX_FIELD_SECTION_SIZE, n);
        }
        if self.qpack_blocked_streams != 0 {
            put(id::QPACK_BLOCKED_STREAMS, self.qpack_blocked_streams);
        }
        put(0x1f * 7 + 0x21, 0);
        // The frame header, written here rather than by `frame` (which reads SETTINGS).
        varint::encode(out, 0x04);
        varint::encode(out, p.len() as u64);
        out.extend_from_slice(&p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_settings_read_back() {
        let s = Settings {
            qpack_max_table_capacity: 4096,
            max_field_section_size: Some(32 * 1024),
            qpack_blocked_streams: 16,
        };
        let mut out = Vec::new();
        s.write(&mut out);
        let n = 2;
        assert_eq!((out[0], usize::from(out[1])), (0x04, out.len() - n));
        assert_eq!(Settings::parse(&out[n..]), Ok(s));
        assert_eq!(Settings::parse(&[]), Ok(Settings::default()));
    }

    #[test]
    fn bad_settings_are_refused() {
        let code = |p: &[u8]| Settings::parse(p).unwrap_err().code;
        assert_eq!(code(&[0x01, 0x40]), ErrorCode::Frame);
        assert_eq!(code(&[0x01]), ErrorCode::Frame);
        assert_eq!(code(&[0x01, 0x00, 0x01, 0x01]), ErrorCode::Settings);
        assert_eq!(code(&[0x04, 0x00]), ErrorCode::Settings);
        assert_eq!(code(&[0x08, 0x02]), ErrorCode::Settings);
        // Unknown and reserved identifiers are ignored.
        assert!(Settings::parse(&[0x21, 0x05, 0x40, 0xff, 0x00]).is_ok());
    }
}
