//! The settings of one zone: [`ZoneConfig`], the back end it runs on ([`EngineKind`]) and
//! kernel submission polling ([`SqPoll`]).

/// Which back end a zone runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// io_uring (Linux 6.0 or later for everything the driver uses).
    Uring,
    /// epoll, the portable fallback.
    Epoll,
}

impl EngineKind {
    /// "uring" or "epoll".
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Uring => "uring",
            EngineKind::Epoll => "epoll",
        }
    }
}

/// The settings of one zone.
#[derive(Clone, Debug)]
pub struct ZoneConfig {
    /// Zone number, for logs.
    pub id: usize,
    /// CPU to pin the zone's thread to.
    pub cpu: Option<usize>,
    /// Back end.
    pub engine: EngineKind,
    /// Connections this zone can hold (direct-descriptor slots on io_uring).
    pub max_conns: u32,
    /// Receive buffers in the provided-buffer ring (a power of two). The pool is the zone's
    /// whole receive memory, shared by its connections: on Linux 6.12+ receives fill each
    /// buffer incrementally (many small messages share one buffer), and on 6.17+ a paused
    /// connection receives at most 256 KiB more before its receive stops.
    pub recv_buffers: u16,
    /// Size of each receive buffer.
    pub recv_buffer_size: u32,
    /// Submission queue entries.
    pub ring_entries: u32,
    /// Kernel submission polling (io_uring only): a kernel thread picks up submissions, so a
    /// busy zone submits and reaps without system calls.
    pub sqpoll: Option<SqPoll>,
    /// Learn each accepted connection's peer address before `on_accept` ([`Io::peer_addr`](crate::Io::peer_addr)).
    /// Free on epoll (accept4 returns it); on io_uring it costs one `SO_PEERNAME` socket
    /// command per connection (Linux 6.7), so it is off unless something needs the address.
    pub peer_addrs: bool,
    /// How long an idle zone keeps polling for completions before it parks (blocks in
    /// `io_uring_enter` / `epoll_wait`). Zero: park at once; `Duration::MAX`: never park
    /// (pure busy polling, for measurements). See [`Waker`](crate::Waker).
    pub busy_poll: std::time::Duration,
    /// Outbound connections ([`Io::connect`](crate::Io::connect)) this zone can hold at once; on io_uring they
    /// take direct-descriptor slots beside the accepted ones. 0: the zone does not connect.
    pub max_outbound: u32,
    /// Adaptive completion batching (io_uring, Linux 6.12): near saturation — the last wait
    /// brought 4 or more receives with data and the kernel already holds more completions, or
    /// the zone was busy at least 80% of its last measuring window (its thread's CPU time
    /// over 2 ms of wall time; busy-poll spinning counts as idle) and the last wait brought
    /// more than two — the next wait asks for as many completions as the last one brought (at
    /// least 8, at most 64), waiting at most this long for them before taking whatever came.
    /// Fewer `io_uring_enter` calls and wake-ups under load; a lightly loaded zone never
    /// waits. After a batch that does not fill, the gate stays shut for 1, 2, 4 ... 64 waits;
    /// a wait never asks for more than half the connections with a receive armed.
    /// Zero: off.
    pub batch_wait: std::time::Duration,
    /// With [`batch_wait`](Self::batch_wait): also wait for a batch when the kernel already
    /// holds completions (the first condition above). That is what takes a closed-loop echo
    /// to one `io_uring_enter` per twenty messages, but a zone that always has work waiting
    /// (many connections) then sleeps for batches it would not have slept for, and on a VM a
    /// sleep and its timer cost more CPU than the calls saved. It pays off for few connections
    /// that each wait for their answer (closed-loop echo); the measurements are in
    /// bench/NOTEBOOK.md. Off: a wait for a batch
    /// only replaces a sleep the zone takes anyway (nothing pending), so it wakes once for
    /// several completions instead of once for each.
    pub batch_when_pending: bool,
    /// Receive buffers for datagrams (UDP listeners and connected UDP sockets), a power of two;
    /// 0: the zone has no datagram sockets. A second provided-buffer ring, of whole buffers:
    /// a datagram must land in one piece, where the stream ring packs bytes incrementally.
    pub dgram_buffers: u16,
    /// Size of each datagram buffer: the largest datagram the zone takes whole, plus the
    /// room the kernel's `recvmsg` header, the sender's address and its control data take
    /// (`uring::dgram_recv::OVERHEAD`). A larger datagram arrives truncated
    /// ([`Datagram::truncated`](crate::Datagram::truncated)).
    pub dgram_buffer_size: u32,
    /// Datagram sends queued or in flight at most ([`Io::send_to`](crate::Io::send_to),
    /// [`Io::send_datagram`](crate::Io::send_datagram)); more are refused.
    pub max_datagrams_queued: u32,
    /// Segmented datagram sends (UDP GSO, [`SendTo::segment`](crate::SendTo::segment)) are
    /// made; false: [`Io::gso_works`](crate::Io::gso_works) says no from the start, and
    /// senders send one datagram at a time (to measure what GSO saves, or for a path that
    /// mishandles it).
    pub gso: bool,
}

/// `IORING_SETUP_SQPOLL` settings.
///
/// With the SQ thread on a core of its own and a `spin` longer than the gaps in the load, a
/// busy zone makes no system call: accepts, receives, sends and closes all go through the
/// ring. The allocator can still make some as connections come and go (heap trimming and
/// regrowth); call [`sys::keep_heap`](crate::sys::keep_heap) at start-up to stop that, as `ringx` does.
#[derive(Clone, Debug)]
pub struct SqPoll {
    /// How long the kernel's SQ thread polls before it sleeps (and the next submission needs
    /// a wake-up call).
    pub idle: std::time::Duration,
    /// Pin the SQ thread to this CPU.
    pub cpu: Option<u32>,
    /// Share one SQ thread between the zones that hold the same `SqShare`
    /// (`IORING_SETUP_ATTACH_WQ`).
    pub share: Option<std::sync::Arc<SqShare>>,
    /// How long a zone spins on its completion queue before it sleeps in io_uring_enter.
    pub spin: std::time::Duration,
}

/// The ring whose SQ thread the other zones attach to.
#[derive(Debug, Default)]
pub struct SqShare {
    pub(crate) first: std::sync::Mutex<Option<std::os::fd::RawFd>>,
}

impl Default for ZoneConfig {
    fn default() -> Self {
        ZoneConfig {
            id: 0,
            cpu: None,
            engine: EngineKind::Uring,
            max_conns: 16384,
            recv_buffers: 1024,
            recv_buffer_size: 16384,
            ring_entries: 1024,
            sqpoll: None,
            peer_addrs: false,
            busy_poll: std::time::Duration::ZERO,
            max_outbound: 0,
            batch_wait: std::time::Duration::ZERO,
            batch_when_pending: false,
            dgram_buffers: 0,
            dgram_buffer_size: 65536,
            max_datagrams_queued: 4096,
            gso: true,
        }
    }
}
