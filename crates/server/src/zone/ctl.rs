//! What the control thread and a zone exchange: a command flag and an inbox the zone reads
//! when woken ([`ringx_engine::Waker::wake`]), and the events it sends back.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringx_config::ops::LogFormat;

use crate::route::Routes;
use crate::settings::Settings;
use crate::upstream::Upstreams;

/// Commands from the control thread, read when the zone is woken (0 = run).
pub const CMD_DRAIN: u8 = 1;

/// Control commands and messages for a zone. `cmd` and the inbox are read when the zone is
/// woken.
#[derive(Default)]
pub struct ZoneCtl {
    pub cmd: AtomicU8,
    pub inbox: Mutex<Vec<ZoneMsg>>,
}

impl ZoneCtl {
    pub fn new() -> ZoneCtl {
        ZoneCtl::default()
    }
}

pub enum ZoneMsg {
    Reload(Box<ReloadMsg>),
}

/// Sent to the control thread once the zone runs, and after each reload it applied.
pub enum ZoneEvent {
    Ready,
    Reloaded { zone: usize, generation: u64 },
}

/// A compiled configuration for one zone.
pub struct ReloadMsg {
    pub generation: u64,
    pub routes: Arc<Routes>,
    pub settings: Arc<Settings>,
    /// `Some`: the upstreams changed (to these); `None`: keep the zone's upstream state.
    pub upstreams: Option<Option<Arc<Upstreams>>>,
    /// This zone's sockets for addresses that were not served before (TCP listeners, and
    /// UDP sockets for UDP streams).
    pub listeners: Vec<(SocketAddr, ringx_engine::Listener)>,
    pub log: Option<LogFormat>,
    /// How long requests in flight may go on with the upstreams this reload replaces.
    pub deadline: Duration,
    /// The new TLS settings (certificates reread): new handshakes use them.
    pub tls: Option<Arc<crate::tls::TlsSetup>>,
}
