//! Start-up wiring of the operations pieces (counters, access log, admin listener, pid file,
//! control state), kept out of `lifecycle.rs` so that the start-up sequence stays readable:
//! [`open`] runs while privileges last, [`OpsSetup::zone`] once per zone, and
//! [`OpsSetup::control`] once every zone serves.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ringx_engine::{ListenOptions, Waker};

use crate::control::{Control, ZoneHandle};
use ringx_config::ops::LogFormat;
use ringx_config::Config;
use ringx_server::accesslog::LogWriter;
use ringx_server::ctx::reqlog::RequestLog;
use ringx_server::metrics::{Metrics, ZoneCounters};
use ringx_server::zone::ZoneCtl;
use ringx_server::{Compiled, Error};

/// What start-up opened for operations.
pub struct OpsSetup {
    admin: Option<TcpListener>,
    log_file: Option<File>,
    log_path: Option<PathBuf>,
    log_format: Option<LogFormat>,
    log_bytes: Arc<AtomicU64>,
    log_errors: Arc<AtomicU64>,
    counters: Vec<Arc<ZoneCounters>>,
    pid_file: Option<crate::pidfile::PidFile>,
}

/// Opens the admin listener, the access log and the pid file (before privileges are
/// dropped); the files are given to the `[runtime] user` the server will run as, so that
/// reopening the log and naming the process in the pid file work after the drop.
/// `admin_sock`: the admin listener handed over by a binary upgrade, if any.
pub fn open(cfg: &Config, admin_sock: Option<TcpListener>) -> Result<OpsSetup, Error> {
    let owner = match &cfg.runtime.user {
        Some(u) => Some(
            ringx_config::lookup_user(u.get_ref())
                .ok_or_else(|| Error::invalid(format!("no such user {:?}", u.get_ref())))?,
        ),
        None => None,
    };
    let admin = match &cfg.admin {
        Some(a) => Some(match admin_sock {
            Some(l) => {
                l.set_nonblocking(false)
                    .map_err(|e| Error::io("admin listener", e))?;
                l
            }
            None => crate::admin::bind(*a.listen.get_ref())
                .map_err(|e| Error::io("admin listener", e))?,
        }),
        None => None,
    };
    let log_path = cfg.http.access_log.as_ref().map(|p| p.get_ref().clone());
    let log_file = match &log_path {
        Some(p) => Some(
            ringx_server::accesslog::open_for(p, owner)
                .map_err(|e| Error::io(format!("access log {}", p.display()), e))?,
        ),
        None => None,
    };
    Ok(OpsSetup {
        admin,
        log_file,
        log_format: log_path.as_ref().map(|_| cfg.http.access_log_format),
        log_path,
        log_bytes: Arc::default(),
        log_errors: Arc::default(),
        counters: Vec::new(),
        pid_file: match &cfg.runtime.pid_file {
            Some(p) => Some(crate::pidfile::PidFile::open(p.get_ref(), owner)?),
            None => None,
        },
    })
}

/// One zone's operations state.
pub struct ZoneOps {
    pub counters: Arc<ZoneCounters>,
    pub log: RequestLog,
    /// Each listener's address, and whether it is a UDP socket.
    pub addrs: Vec<(SocketAddr, bool)>,
}

/// What [`OpsSetup::control`] needs from start-up.
pub struct ControlParts<'a> {
    pub cfg: &'a Config,
    pub config_path: Option<PathBuf>,
    pub zones: &'a [(Arc<ZoneCtl>, Waker)],
    pub lopts: ListenOptions,
    pub sockets: Vec<(SocketAddr, Vec<OwnedFd>)>,
    /// The same for the UDP sockets.
    pub udp_sockets: Vec<(SocketAddr, Vec<OwnedFd>)>,
    /// The configuration the zones were started with.
    pub compiled: Compiled,
    pub health_stop: Arc<AtomicBool>,
    pub engine: &'static str,
    pub log: LogWriter,
    pub notify: crate::sdnotify::Notify,
}

impl OpsSetup {
    /// Starts the access log writer (after the signal mask is set, so it never takes a
    /// signal; there is always one, so a reload can turn the log on).
    pub fn start_log(&mut self) -> std::io::Result<LogWriter> {
        LogWriter::start(
            self.log_file.take(),
            self.log_path.clone(),
            self.log_bytes.clone(),
            self.log_errors.clone(),
        )
    }

    /// One zone's operations state: its request log (with its counters and log sink) and its
    /// listeners' addresses.
    pub fn zone(&mut self, log: &LogWriter, listeners: &[ringx_engine::Listener]) -> ZoneOps {
        let counters = Arc::new(ZoneCounters::default());
        self.counters.push(counters.clone());
        let addrs = listeners
            .iter()
            .map(|l| {
                let a = l
                    .local_addr()
                    .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
                (a, l.is_udp())
            })
            .collect();
        ZoneOps {
            counters: counters.clone(),
            log: RequestLog::new(counters, Some(log.sink()), self.log_format),
            addrs,
        }
    }

    /// Every zone serves: metrics, the admin thread, the pid file, the upgrade handshake.
    pub fn control(self, p: ControlParts) -> Control {
        let ups = p.compiled.upstreams.clone();
        let metrics = Arc::new(Metrics {
            engine: p.engine,
            started: Instant::now(),
            zones: self.counters,
            wakers: p.zones.iter().map(|z| z.1.clone()).collect(),
            upstreams: Mutex::new(ups),
            certs: Mutex::new(
                p.compiled
                    .tls
                    .as_ref()
                    .map_or(Vec::new(), |t| t.certs.clone()),
            ),
            listeners: Mutex::new(crate::status::listeners(&p.compiled)),
            xdp_pin_dir: p.cfg.xdp.as_ref().map(|x| x.pin_dir.clone()),
            lb_pin_dir: p.cfg.lb.as_ref().map(|l| l.pin_dir.clone()),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            generation: AtomicU64::new(1),
            log_bytes: self.log_bytes,
            log_errors: self.log_errors,
        });
        let healthy = Arc::new(AtomicBool::new(true));
        // A duplicate of the admin socket, handed to a new binary on upgrade with the others.
        let admin_sock = self
            .admin
            .as_ref()
            .and_then(|l| Some((l.local_addr().ok()?, OwnedFd::from(l.try_clone().ok()?))));
        if let Some(l) = self.admin {
            let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
            let admin = crate::admin::Admin {
                board: crate::status::Board::new(metrics.clone()),
                healthy: healthy.clone(),
                token: p
                    .cfg
                    .admin
                    .as_ref()
                    .and_then(|a| a.token.as_ref().map(|t| t.get_ref().clone())),
            };
            crate::admin::spawn(l, admin);
            tracing::info!("admin: http://{addr}/ (status page), /metrics and /healthz");
        }
        if let Some(pf) = &self.pid_file {
            pf.write();
        }
        crate::upgrade::notify_ready();
        healthy.store(true, Ordering::Relaxed);
        Control {
            config_path: p.config_path,
            zones: p
                .zones
                .iter()
                .map(|(ctl, waker)| ZoneHandle {
                    ctl: ctl.clone(),
                    waker: waker.clone(),
                })
                .collect(),
            lopts: p.lopts,
            sockets: p.sockets,
            udp_sockets: p.udp_sockets,
            compiled: p.compiled,
            health_stop: p.health_stop,
            generation: 1,
            metrics,
            log: p.log,
            log_path: self.log_path,
            drain_timeout: p.cfg.runtime.drain_timeout.0,
            acks: None,
            pid_file: self.pid_file,
            upgrade: None,
            healthy,
            notify: p.notify,
            admin_sock,
        }
    }
}

/// `ringx reload`: sends `sig` to the pid in the pid file.
pub fn signal_cmd(config: &Option<PathBuf>, pid_file: Option<PathBuf>, sig: i32) -> ExitCode {
    let pid_file = match pid_file {
        Some(p) => p,
        None => {
            let cfg = match config {
                Some(p) => ringx_config::load(p),
                None => ringx_config::parse("(embedded default)", ringx_config::DEFAULT_CONFIG),
            };
            match cfg {
                Ok(c) => {
                    match c.runtime.pid_file {
                        Some(p) => p.into_inner(),
                        None => {
                            eprintln!("ringx: the configuration has no [runtime] pid_file; give --pid-file");
                            return ExitCode::FAILURE;
                        }
                    }
                }
                Err(e) => {
                    eprintln!("ringx: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let pid = match crate::pidfile::read_pid_file(&pid_file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ringx: {e}");
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: kill takes integers only.
    if unsafe { libc::kill(pid, sig) } != 0 {
        eprintln!(
            "ringx: cannot signal process {pid}: {}",
            std::io::Error::last_os_error()
        );
        return ExitCode::FAILURE;
    }
    println!("ringx: signalled process {pid}");
    ExitCode::SUCCESS
}
