//! The QPACK decoder (RFC 9204 §2.2, §4.5): the dynamic table the peer's encoder stream
//! fills, field sections decoded against it, and what our decoder stream tells the encoder.
//!
//! A field section names the inserts it needs (its Required Insert Count). One that needs
//! inserts not yet received is *blocked*: [`Decoder::decode`] says so and hands over
//! nothing, and the caller keeps the section and tries again once the encoder stream has
//! brought them (bounding how many wait by SETTINGS_QPACK_BLOCKED_STREAMS). Decoding never
//! changes the table, so a section over the size limit is left where it goes over:
//! unlike HPACK, nothing after it depends on the rest.
//!
//! Every reference is checked: to an entry at or past the Required Insert Count, to one
//! evicted, before the start of the table; and a Required Insert Count larger than the
//! section's references need is refused too (RFC 9204 §4.5.1.1), so a peer cannot make a
//! stream wait for inserts it never uses.

use super::instructions::{DecoderInstruction, EncoderInstruction};
use super::prim::{self, Prim};
use super::static_table;
use super::table::{Table, TableError};
use crate::error::{ConnError, ErrorCode};

/// Per-field overhead of a field section's size (RFC 9114 §4.2.2).
pub const FIELD_OVERHEAD: u64 = 32;

/// How decoding a field section went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Every field was handed over.
    Whole,
    /// The section went over the size limit: fields from that point on were not handed over.
    TooLarge,
    /// It needs this many inserts (its Required Insert Count), more than have arrived.
    Blocked(u64),
}

/// A connection's QPACK decoder.
#[derive(Debug)]
pub struct Decoder {
    table: Table,
    /// Encoder-stream bytes of an instruction cut short.
    pending: Vec<u8>,
    /// Inserts the encoder knows we have (the Known Received Count, §2.1.4).
    known_received: u64,
    /// Our decoder stream's bytes, for the caller to send.
    out: Vec<u8>,
    scratch: (Vec<u8>, Vec<u8>),
}

fn failed(msg: &'static str) -> ConnError {
    ConnError::new(ErrorCode::QpackDecompressionFailed, msg)
}

fn encoder_error(e: TableError) -> ConnError {
    ConnError::new(
        ErrorCode::QpackEncoderStream,
        match e {
            TableError::CapacityOverMax => "a table capacity over our maximum",
            TableError::EntryTooLarge => "an insert larger than the table",
            TableError::NoSuchEntry => "an insert naming no entry",
        },
    )
}

/// A field section's prefix: the Required Insert Count, the Base, and its length.
pub fn prefix(table: &Table, block: &[u8]) -> Result<(u64, u64, usize), ConnError> {
    let short = |e: Prim| match e {
        Prim::Short => failed("a field section cut short"),
        Prim::Invalid => failed("an invalid field section prefix"),
    };
    let (encoded, n) = prim::int(block, 8).map_err(short)?;
    let ric = required_insert_count(encoded, table.insert_count(), table.max_entries())?;
    let rest = &block[n..];
    let sign = rest.first().is_some_and(|&b| b & 0x80 != 0);
    let (delta, m) = prim::int(rest, 7).map_err(short)?;
    let base = if sign {
        ric.checked_sub(delta)
            .and_then(|b| b.checked_sub(1))
            .ok_or(failed("a Base below zero"))?
    } else {
        ric.checked_add(delta).ok_or(failed("a Base too large"))?
    };
    Ok((ric, base, n + m))
}

/// The Required Insert Count from its encoding (RFC 9204 §4.5.1.1): it is sent modulo
/// twice the most entries the table can hold, and resolved against the inserts received.
pub fn required_insert_count(
    encoded: u64,
    inserts: u64,
    max_entries: u64,
) -> Result<u64, ConnError> {
    if encoded == 0 {
        return Ok(0);
    }
    let full_range = 2 * max_entries;
    if encoded > full_range {
        return Err(failed("an encoded Required Insert Count out of range"));
    }
    let max_value = inserts + max_entries;
    let max_wrapped = max_value / full_range * full_range;
    let mut ric = max_wrapped + encoded - 1;
    if ric > max_value {
        if ric <= full_range {
            return Err(failed("an invalid Required Insert Count"));
        }
        ric -= full_range;
    }
    if ric == 0 {
        return Err(failed("an invalid Required Insert Count"));
    }
    Ok(ric)
}

impl Decoder {
    /// A decoder whose table may grow to `max_capacity` (our SETTINGS_QPACK_MAX_TABLE_CAPACITY).
    pub fn new(max_capacity: usize) -> Decoder {
        Decoder {
            table: Table::new(max_capacity),
            pending: Vec::new(),
            known_received: 0,
            out: Vec::new(),
            scratch: (Vec::new(), Vec::new()),
        }
    }

    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Our decoder stream's bytes to send.
    pub fn out(&self) -> &[u8] {
        &self.out
    }

    pub fn clear_out(&mut self) {
        self.out.clear();
    }

    /// Reads bytes of the peer's encoder stream and applies its instructions; then tells
    /// the encoder what was inserted (Insert Count Increment).
    pub fn feed_encoder_stream(&mut self, b: &[u8]) -> Result<(), ConnError> {
        self.pending.extend_from_slice(b);
        let mut pos = 0;
        let r = loop {
            // No string longer than the maximum capacity can be inserted; a longer one is
            // refused when its length is read, so `pending` stays within twice that.
            let max_string = self.table.max_capacity();
            match EncoderInstruction::parse(&self.pending[pos..], max_string) {
                Ok(Some((i, n))) => {
                    pos += n;
                    if let Err(e) = self.apply(i) {
                        break Err(e);
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.pending.drain(..pos);
        let inserts = self.table.insert_count();
        if inserts > self.known_received {
            DecoderInstruction::InsertCountIncrement(inserts - self.known_received)
                .write(&mut self.out);
            self.known_received = inserts;
        }
        r
    }

    fn apply(&mut self, i: EncoderInstruction) -> Result<(), ConnError> {
        let t = &mut self.table;
        match i {
            EncoderInstruction::SetCapacity(c) => t.set_capacity(c),
            EncoderInstruction::InsertNameRef {
                is_static: true,
                index,
                value,
            } => {
                let (name, _) = static_table::get(index)
                    .ok_or(TableError::NoSuchEntry)
                    .map_err(encoder_error)?;
                t.insert(name, &value)
            }
            EncoderInstruction::InsertNameRef {
                is_static: false,
                index,
                value,
            } => {
                let name = t
                    .get_relative(index)
                    .ok_or(TableError::NoSuchEntry)
                    .map_err(encoder_error)?
                    .0
                    .to_vec();
                t.insert(&name, &value)
            }
            EncoderInstruction::InsertLiteral { name, value } => t.insert(&name, &value),
            EncoderInstruction::Duplicate(rel) => t.duplicate(rel),
        }
        .map_err(encoder_error)
    }

    /// Tells the encoder a stream's section will not be decoded (the stream was reset or
    /// abandoned while blocked). Not sent when the table cannot be used (RFC 9204 §4.4.2).
    pub fn cancel_stream(&mut self, id: u64) {
        if self.table.max_capacity() > 0 {
            DecoderInstruction::StreamCancel(id).write(&mut self.out);
        }
    }

    /// Decodes the field section of stream `id`, handing each field to `field` while the
    /// section's size (name + value + 32 per field) stays within `max_size`.
    pub fn decode(
        &mut self,
        id: u64,
        block: &[u8],
        max_size: u64,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<Decoded, ConnError> {
        let (ric, base, mut pos) = prefix(&self.table, block)?;
        if ric > self.table.insert_count() {
            return Ok(Decoded::Blocked(ric));
        }
        let mut size = 0u64;
        let mut largest = None;
        let mut result = Decoded::Whole;
        while pos < block.len() {
            let (name, value, n) = line(
                &self.table,
                &mut self.scratch,
                &block[pos..],
                ric,
                base,
                &mut largest,
            )?;
            pos += n;
            size += name.len() as u64 + value.len() as u64 + FIELD_OVERHEAD;
            if size > max_size {
                result = Decoded::TooLarge;
                break;
            }
            field(name, value);
        }
        if ric > 0 {
            if result == Decoded::Whole && largest.map(|a| a + 1) != Some(ric) {
                return Err(failed(
                    "a Required Insert Count larger than the references need",
                ));
            }
            DecoderInstruction::SectionAck(id).write(&mut self.out);
            self.known_received = self.known_received.max(ric);
        }
        Ok(result)
    }
}

/// Reads one field line at the start of `b` (RFC 9204 §4.5.2 to §4.5.6): its name, value and
/// length. `largest` is raised to each dynamic entry referenced.
fn line<'a>(
    table: &'a Table,
    scratch: &'a mut (Vec<u8>, Vec<u8>),
    b: &'a [u8],
    ric: u64,
    base: u64,
    largest: &mut Option<u64>,
) -> Result<(&'a [u8], &'a [u8], usize), ConnError> {
    let bad = |e: Prim| match e {
        Prim::Short => failed("a field line cut short"),
        Prim::Invalid => failed("an invalid field line"),
    };
    // No string can be longer than the section that holds it.
    let max = b.len();
    let mut entry =
        |is_static: bool, abs: Option<u64>| -> Result<(&'a [u8], &'a [u8]), ConnError> {
            let abs = abs.ok_or(failed("a reference before the table"))?;
            if is_static {
                return static_table::get(abs).ok_or(failed("no such static entry"));
            }
            if abs >= ric {
                return Err(failed("a reference past the Required Insert Count"));
            }
            *largest = Some(largest.map_or(abs, |l: u64| l.max(abs)));
            table
                .get(abs)
                .ok_or(failed("a reference to an evicted entry"))
        };
    let relative = |i: u64| base.checked_sub(i).and_then(|a| a.checked_sub(1));
    let first = b[0];
    if first & 0x80 != 0 {
        // Indexed Field Line.
        let (i, n) = prim::int(b, 6).map_err(bad)?;
        let is_static = first & 0x40 != 0;
        let (name, value) = entry(is_static, if is_static { Some(i) } else { relative(i) })?;
        return Ok((name, value, n));
    }
    if first & 0x40 != 0 {
        // Literal Field Line with Name Reference.
        let (i, n) = prim::int(b, 4).map_err(bad)?;
        let is_static = first & 0x10 != 0;
        let (name, _) = entry(is_static, if is_static { Some(i) } else { relative(i) })?;
        let (value, m) = prim::string(&b[n..], 7, max, &mut scratch.1).map_err(bad)?;
        return Ok((name, value, n + m));
    }
    if first & 0x20 != 0 {
        // Literal Field Line with Literal Name.
        let (name, n) = prim::string(b, 3, max, &mut scratch.0).map_err(bad)?;
        let (value, m) = prim::string(&b[n..], 7, max, &mut scratch.1).map_err(bad)?;
        return Ok((name, value, n + m));
    }
    if first & 0x10 != 0 {
        // Indexed Field Line with Post-Base Index.
        let (i, n) = prim::int(b, 4).map_err(bad)?;
        let (name, value) = entry(false, base.checked_add(i))?;
        return Ok((name, value, n));
    }
    // Literal Field Line with Post-Base Name Reference.
    let (i, n) = prim::int(b, 3).map_err(bad)?;
    let (name, _) = entry(false, base.checked_add(i))?;
    let (value, m) = prim::string(&b[n..], 7, max, &mut scratch.1).map_err(bad)?;
    Ok((name, value, n + m))
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
