//! Fuzz the HTTP/3 connection: after the client's control stream and SETTINGS, a script of
//! stream writes (a stream, a length, whether it ends) never panics, and gives the same
//! events and output however each write is cut, and whether it is fed as a slice (`feed`) or
//! as `Bytes` (`feed_bytes`); every request that comes out is one the HTTP/1.1 head builder
//! can write.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringx_h3proto::qpack::instructions::DecoderInstruction;
use ringx_h3proto::settings::Settings;
use ringx_h3proto::{Conn, Event, Framing, Limits, Uni};

/// Request streams 0, 4, 8; the control stream 2; 6, 10, 14 for the encoder, decoder and
/// any other unidirectional stream (their first byte says which); 1 and 3 are ours.
const IDS: [u64; 9] = [0, 4, 8, 2, 6, 10, 14, 1, 3];

/// The script's writes: stream, bytes, fin.
fn script(data: &[u8]) -> Vec<(u64, &[u8], bool)> {
    let mut v = Vec::new();
    let mut rest = data;
    while let [sel, len, tail @ ..] = rest {
        let n = usize::from(*len & 0x7f).min(tail.len());
        v.push((IDS[usize::from(*sel) % IDS.len()], &tail[..n], len & 0x80 != 0));
        rest = &tail[n..];
    }
    v
}

fn run(writes: &[(u64, &[u8], bool)], cut: usize) -> (Vec<String>, Vec<u8>) {
    let limits = Limits {
        max_field_section_size: 1024,
        qpack_max_table_capacity: 256,
        qpack_blocked_streams: 2,
        max_header_frame: 1024,
        max_control_frame: 256,
        max_blocked_bytes: 512,
        max_streams: 2,
        max_ignored_uni: 2,
    };
    let mut c = Conn::new(limits);
    let mut control = vec![0x00];
    Settings::default().write(&mut control);
    c.feed(2, &control, false).unwrap();
    let mut result = Ok(());
    'all: for &(id, bytes, fin) in writes {
        let at = if cut == 0 { bytes.len() } else { cut.min(bytes.len()) };
        let pieces = [(&bytes[..at], fin && at == bytes.len()), (&bytes[at..], fin)];
        for (piece, fin) in pieces {
            if piece.is_empty() && !fin {
                continue;
            }
            result = if cut % 2 == 1 {
                c.feed_bytes(id, &bytes::Bytes::copy_from_slice(piece), fin)
            } else {
                c.feed(id, piece, fin)
            };
            if result.is_err() {
                break 'all;
            }
            if fin {
                break;
            }
        }
    }
    let mut events: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    // Body bytes may come in more events when cut: join them.
    let mut joined: Vec<Event> = Vec::new();
    for e in events.drain(..) {
        if let Event::Request { head, .. } = &e {
            let mut h = Vec::new();
            head.write_http1(&mut h, Framing::Chunked);
            assert!(!h[..h.len() - 2].windows(4).any(|w| w == b"\r\n\r\n"));
        }
        match (joined.last_mut(), e) {
            (Some(Event::Data { id: a, data, end }), Event::Data { id: b, data: more, end: e }) if *a == b => {
                *data = [&data[..], &more[..]].concat().into();
                *end |= e;
            }
            (_, e @ Event::Data { .. }) if matches!(&e, Event::Data { data, end: false, .. } if data.is_empty()) => {}
            (_, e) => joined.push(e),
        }
    }
    let mut log: Vec<String> = joined.iter().map(|e| format!("{e:?}")).collect();
    log.push(format!("{result:?}"));
    // The decoder stream (after its type byte), with the Insert Count Increments sent after
    // each piece of the encoder stream summed.
    let mut dec = &c.out(Uni::Decoder)[1..];
    let mut inserts = 0;
    while let Ok(Some((i, n))) = DecoderInstruction::parse(dec) {
        match i {
            DecoderInstruction::InsertCountIncrement(k) => inserts += k,
            i => log.push(format!("{i:?}")),
        }
        dec = &dec[n..];
    }
    assert!(dec.is_empty());
    log.push(format!("inserts {inserts}"));
    (log, c.out(Uni::Control).to_vec())
}

fuzz_target!(|data: &[u8]| {
    let writes = script(data);
    let whole = run(&writes, 0);
    for cut in [1, 2, 5] {
        assert_eq!(run(&writes, cut), whole);
    }
});
