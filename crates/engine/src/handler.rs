//! The callbacks a zone's driver makes into the code that owns the connections.

use std::io;
use std::time::Duration;

use crate::dgram::Datagram;
use crate::io::{ConnId, Io, ListenerId};

/// What a protocol (HTTP, echo, a proxy) implements to run on a zone.
///
/// Every callback runs on the zone's thread, between two waits of the driver. Output and
/// actions queued on `io` are carried out when the callback batch is over, in one submission.
pub trait Handler {
    /// A connection was accepted on `listener`. Its handle stays valid until
    /// [`Handler::on_closed`] is called for it.
    fn on_accept(&mut self, io: &mut Io, conn: ConnId, listener: ListenerId);

    /// An outbound connection opened with [`Io::connect`] is established. (A connect that
    /// fails ends in [`Handler::on_closed`] with the error instead.)
    fn on_connected(&mut self, _io: &mut Io, _conn: ConnId) {}

    /// Bytes arrived. `data` borrows the driver's receive buffer (a provided-buffer ring slot
    /// on io_uring): it is recycled as soon as this returns, so copy out only what must
    /// outlive the call. On a connected datagram socket ([`crate::ConnectTo::datagram`]) each
    /// call is exactly one datagram.
    fn on_data(&mut self, io: &mut Io, conn: ConnId, data: &[u8]);

    /// A datagram arrived on UDP listener `listener` (see [`Datagram`]; answer it with
    /// [`Io::send_to`]). `dg.data` borrows the driver's receive buffer, as in `on_data`.
    /// The default drops it.
    fn on_datagram(&mut self, _io: &mut Io, _listener: ListenerId, _dg: Datagram<'_>) {}

    /// The peer closed its write side (a read returned 0). No more data will arrive.
    fn on_eof(&mut self, io: &mut Io, conn: ConnId);

    /// Everything queued was written, after [`Io::notify_when_flushed`].
    fn on_flushed(&mut self, _io: &mut Io, _conn: ConnId) {}

    /// The connection is gone: closed by the handler, by an error (`err`), or at shutdown.
    /// Called exactly once per accepted connection; the handle may be reused afterwards.
    fn on_closed(&mut self, io: &mut Io, conn: ConnId, err: Option<io::Error>);

    /// Called when the interval it last returned has passed, or at the earliest
    /// [`Io::timer_at`] request (and once at start). Returns the time until it wants to be
    /// called again; `None` means "only when something happens". A call answers every
    /// `timer_at` request made before it: one for a later time is not kept, so the returned
    /// time must cover each deadline the handler still has (or it asks again).
    fn on_timer(&mut self, io: &mut Io) -> Option<Duration>;

    /// The zone's [`crate::Waker`] was woken (a control message is waiting).
    fn on_wake(&mut self, io: &mut Io);

    /// Every completion (readiness event) of one wait was handled, before what the callbacks
    /// queued is carried out: work a handler put off while the batch lasted (a QUIC
    /// connection that got several datagrams answers once for them all). The default does
    /// nothing.
    fn on_batch_end(&mut self, _io: &mut Io) {}

    /// A batch of completions that includes arriving bytes for `conn` is about to be handled
    /// (called for each such connection before the first completion of the batch): bring the
    /// connection's state into the cache ([`crate::prefetch`]). A hint only; the default does
    /// nothing.
    #[inline]
    fn prefetch(&self, _conn: ConnId) {}
}
