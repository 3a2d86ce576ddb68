//! Fuzz the QPACK decoder: the first byte picks the table capacity and the second where
//! the encoder stream ends and the field section begins. Nothing panics; the encoder
//! stream gives the same table and acknowledgments however it is split; a section
//! decodes to no more than the size limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringx_h3proto::qpack::instructions::DecoderInstruction;
use ringx_h3proto::qpack::{Decoded, Decoder};

const LIMIT: u64 = 2048;

fn run(capacity: usize, enc: &[u8], cut: usize, section: &[u8]) -> (String, Vec<String>) {
    let mut d = Decoder::new(capacity);
    let mut log = String::new();
    let r = d
        .feed_encoder_stream(&enc[..cut])
        .and_then(|()| d.feed_encoder_stream(&enc[cut..]));
    log.push_str(&format!("{r:?} {} {}\n", d.table().insert_count(), d.table().size()));
    if r.is_ok() {
        let mut size = 0u64;
        let r = d.decode(4, section, LIMIT, |n, v| {
            size += n.len() as u64 + v.len() as u64 + 32;
            log.push_str(&format!("{n:?}: {v:?}\n"));
        });
        assert!(size <= LIMIT);
        if let Ok(Decoded::Blocked(ric)) = r {
            assert!(ric > d.table().insert_count());
        }
        log.push_str(&format!("{r:?}\n"));
    }
    (log, acknowledged(d.out()))
}

/// What the decoder stream says, with the Insert Count Increments (sent after each piece of
/// the encoder stream) summed.
fn acknowledged(mut out: &[u8]) -> Vec<String> {
    let mut inserts = 0;
    let mut said = Vec::new();
    while let Ok(Some((i, n))) = DecoderInstruction::parse(out) {
        match i {
            DecoderInstruction::InsertCountIncrement(k) => inserts += k,
            i => said.push(format!("{i:?}")),
        }
        out = &out[n..];
    }
    assert!(out.is_empty());
    said.push(format!("inserts {inserts}"));
    said
}

fuzz_target!(|data: &[u8]| {
    let [cap, split, rest @ ..] = data else { return };
    let capacity = usize::from(*cap) * 4;
    let at = usize::from(*split).min(rest.len());
    let (enc, section) = rest.split_at(at);
    let whole = run(capacity, enc, enc.len(), section);
    // An error stops the stream where it is: the same whether or not it was cut, as long as
    // the cut comes after it; so only error-free streams are compared cut anywhere.
    if whole.0.starts_with("Ok") {
        for cut in [0, enc.len() / 3, enc.len() / 2] {
            assert_eq!(run(capacity, enc, cut, section), whole);
        }
    }
});
