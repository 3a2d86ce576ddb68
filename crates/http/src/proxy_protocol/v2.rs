//! Version 2: the binary header (16 fixed bytes, an address block, then TLVs), with the
//! TLVs' framing and a CRC32c TLV checked.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use super::crc32c::{crc32c_finish, crc32c_update};
use super::header::{Parse, ProxyError, ProxyHeader, NOT_PROXY, V2_MAX_LEN, V2_SIG};

/// Length of the fixed part of a version 2 header.
pub(super) const V2_FIXED: usize = 16;

/// The v2 TLV type of a CRC32c checksum over the whole header.
pub(super) const PP2_TYPE_CRC32C: u8 = 0x03;

pub(super) fn parse(buf: &[u8]) -> Result<Parse, ProxyError> {
    let sig = buf.len().min(V2_SIG.len());
    if buf[..sig] != V2_SIG[..sig] {
        return Err(NOT_PROXY);
    }
    let Some(&ver_cmd) = buf.get(12) else {
        return Ok(Parse::Partial);
    };
    if ver_cmd >> 4 != 2 {
        return Err(ProxyError("v2 version is not 2"));
    }
    let proxy = match ver_cmd & 0xf {
        0 => false,
        1 => true,
        _ => return Err(ProxyError("v2 command is not LOCAL or PROXY")),
    };
    let Some(&fam) = buf.get(13) else {
        return Ok(Parse::Partial);
    };
    // The address block's length for the family; LOCAL ignores the family.
    let addr_len = if proxy {
        match fam {
            0x00 => 0,
            0x11 | 0x12 => 12,
            0x21 | 0x22 => 36,
            0x31 | 0x32 => 216,
            _ => return Err(ProxyError("v2 unknown address family or transport")),
        }
    } else {
        0
    };
    let (Some(&hi), Some(&lo)) = (buf.get(14), buf.get(15)) else {
        return Ok(Parse::Partial);
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    let total = V2_FIXED + len;
    if total > V2_MAX_LEN {
        return Err(ProxyError("v2 header longer than 536 bytes"));
    }
    if len < addr_len {
        return Err(ProxyError("v2 length shorter than the address block"));
    }
    let Some(header) = buf.get(..total) else {
        return Ok(Parse::Partial);
    };
    let block = &header[V2_FIXED..];
    let parsed = if !proxy {
        ProxyHeader::Local
    } else {
        match fam {
            0x11 => {
                let ip = |at: usize| {
                    Ipv4Addr::new(block[at], block[at + 1], block[at + 2], block[at + 3])
                };
                ProxyHeader::Tcp {
                    src: SocketAddrV4::new(ip(0), be16(block, 8)).into(),
                    dst: SocketAddrV4::new(ip(4), be16(block, 10)).into(),
                }
            }
            0x21 => {
                let ip = |at: usize| {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&block[at..at + 16]);
                    Ipv6Addr::from(octets)
                };
                ProxyHeader::Tcp {
                    src: SocketAddrV6::new(ip(0), be16(block, 32), 0, 0).into(),
                    dst: SocketAddrV6::new(ip(16), be16(block, 34), 0, 0).into(),
                }
            }
            _ => ProxyHeader::Unknown,
        }
    };
    // TLVs follow a known address block; with AF_UNSPEC or LOCAL the whole
    // block is opaque and skipped.
    if proxy && fam != 0x00 {
        check_tlvs(header, V2_FIXED + addr_len)?;
    }
    Ok(Parse::Done {
        header: parsed,
        consumed: total,
    })
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Checks the TLV framing of `header[start..]` and the CRC32c if one is
/// present.
fn check_tlvs(header: &[u8], start: usize) -> Result<(), ProxyError> {
    let mut at = start;
    let mut crc_at = None;
    while at < header.len() {
        let Some(tl) = header.get(at..at + 3) else {
            return Err(ProxyError("v2 truncated TLV"));
        };
        let (kind, value) = (tl[0], at + 3);
        let end = value + usize::from(u16::from_be_bytes([tl[1], tl[2]]));
        if end > header.len() {
            return Err(ProxyError("v2 TLV longer than the header"));
        }
        if kind == PP2_TYPE_CRC32C {
            if end - value != 4 {
                return Err(ProxyError("v2 CRC32C TLV is not 4 bytes"));
            }
            if crc_at.replace(value).is_some() {
                return Err(ProxyError("v2 duplicate CRC32C TLV"));
            }
        }
        at = end;
    }
    if let Some(v) = crc_at {
        let want = u32::from_be_bytes([header[v], header[v + 1], header[v + 2], header[v + 3]]);
        let got = crc32c_finish(crc32c_update(
            crc32c_update(crc32c_update(!0, &header[..v]), &[0; 4]),
            &header[v + 4..],
        ));
        if got != want {
            return Err(ProxyError("v2 CRC32C mismatch"));
        }
    }
    Ok(())
}
