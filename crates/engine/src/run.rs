//! Running one zone on the calling thread: the engine choice and the driver loop.

use crate::driver::{self, Driver};
use crate::epoll;
use crate::handler::Handler;
use crate::listener::Listener;
use crate::sys;
use crate::uring;
use crate::waker::Waker;
use crate::zone::{EngineKind, ZoneConfig};

/// Picks the engine: `requested` if it can run here, else epoll and the reason why not.
pub fn choose_engine(requested: EngineKind) -> (EngineKind, Option<String>) {
    match requested {
        EngineKind::Epoll => (EngineKind::Epoll, None),
        EngineKind::Uring => match uring::probe::check() {
            Ok(()) => (EngineKind::Uring, None),
            Err(why) => (EngineKind::Epoll, Some(why)),
        },
    }
}

/// Runs one zone on the calling thread until the handler calls [`Io::exit`](crate::Io::exit): pins the
/// thread, builds the driver, registers `listeners` (TCP listeners, or UDP sockets:
/// anything that converts into a [`Listener`]), and loops.
pub fn run_zone<H: Handler, L: Into<Listener>>(
    cfg: &ZoneConfig,
    listeners: Vec<L>,
    waker: Waker,
    handler: &mut H,
) -> std::io::Result<()> {
    if let Some(cpu) = cfg.cpu {
        sys::pin_to_cpu(cpu)?;
    }
    match cfg.engine {
        EngineKind::Uring => {
            let mut d = uring::UringDriver::new(cfg, waker)?;
            for l in listeners {
                d.add_listener(l.into())?;
            }
            driver::run(&mut d, handler)
        }
        EngineKind::Epoll => {
            let mut d = epoll::EpollDriver::new(cfg, waker)?;
            for l in listeners {
                d.add_listener(l.into())?;
            }
            driver::run(&mut d, handler)
        }
    }
}
