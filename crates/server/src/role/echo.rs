//! The echo role: the netpoll benchmark's protocol, each message a 4-byte big-endian length
//! and that many bytes, decoded into a new message and encoded back. `ringx echo` runs zones
//! of it: the engine as a library for an RPC-style server, with no HTTP.

use std::time::Duration;

use ringx_engine::framing::{encode, Deframer};
use ringx_engine::{ConnId, Handler, Io, ListenerId};

/// Echo connections of one zone.
#[derive(Default)]
pub struct Echo {
    conns: Vec<Deframer>,
}

impl Handler for Echo {
    fn on_accept(&mut self, _: &mut Io, c: ConnId, _: ListenerId) {
        if self.conns.len() <= c.index() {
            self.conns.resize_with(c.index() + 1, Deframer::default);
        }
        self.conns[c.index()] = Deframer::default();
    }

    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        let Some(out) = io.out_buf(c) else { return };
        // Decode into a new message and encode that back (the benchmark's contract), straight
        // from the receive buffer when a message arrived whole.
        let r = self.conns[c.index()].feed(data, |msg| encode(out, msg));
        if let Err(e) = r {
            tracing::debug!("echo: {e}; closing");
            io.close(c);
        }
    }

    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close_after_flush(c);
    }

    fn on_closed(&mut self, _: &mut Io, c: ConnId, _: Option<std::io::Error>) {
        self.conns[c.index()] = Deframer::default();
    }

    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }

    fn on_wake(&mut self, io: &mut Io) {
        io.exit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringx_engine::framing::encode;
    use ringx_engine::testio::TestDriver;

    fn frame(msg: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        encode(&mut v, msg);
        v
    }

    #[test]
    fn messages_split_anywhere_come_back_whole_and_in_order() {
        let mut t = TestDriver::new();
        let mut h = Echo::default();
        let c = t.accept(&mut h, ListenerId(0), None);
        let mut stream = frame(b"hello");
        stream.extend(frame(&[7u8; 3000]));
        stream.extend(frame(b""));
        for piece in stream.chunks(7) {
            t.recv(&mut h, c, piece);
        }
        assert_eq!(t.take_output(c), stream);
    }

    #[test]
    fn an_oversized_frame_closes_the_connection() {
        let mut t = TestDriver::new();
        let mut h = Echo::default();
        let c = t.accept(&mut h, ListenerId(0), None);
        t.recv(&mut h, c, &u32::MAX.to_be_bytes());
        assert!(t.closed(c));
    }

    #[test]
    fn eof_closes_after_the_last_reply() {
        let mut t = TestDriver::new();
        let mut h = Echo::default();
        let c = t.accept(&mut h, ListenerId(0), None);
        t.set_window(c, Some(0));
        t.recv(&mut h, c, &frame(b"last"));
        t.eof(&mut h, c);
        assert!(!t.closed(c), "waits for the reply to be written");
        t.set_window(c, None);
        t.flush(&mut h);
        assert_eq!(t.take_output(c), frame(b"last"));
        assert!(t.closed(c));
    }

    #[test]
    fn a_wake_stops_the_zone() {
        let mut t = TestDriver::new();
        let mut h = Echo::default();
        t.wake(&mut h);
        assert!(t.exited());
    }
}
