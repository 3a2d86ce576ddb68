//! CRC32c (Castagnoli), the checksum of a version 2 `PP2_TYPE_CRC32C` TLV.

/// CRC32c (Castagnoli, reflected polynomial 0x82F63B78) lookup table.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// Feeds `data` into a running CRC32c (start from `!0`).
pub(super) fn crc32c_update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = CRC32C_TABLE[usize::from((crc as u8) ^ b)] ^ (crc >> 8);
    }
    crc
}

pub(super) fn crc32c_finish(crc: u32) -> u32 {
    !crc
}
