//! Active health checks, on one control thread for the whole process (checks from every zone
//! would multiply the probes by the number of cores). Each check is a short HTTP/1.1 request
//! on a new connection; `rise` successes in a row mark a server up, `fall` failures down. The
//! verdict is one atomic flag per server that zones read with a relaxed load.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{HealthDef, ServerDef, UpTls, Upstreams};

/// A plain or a TLS stream to check a server over.
trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Starts the checker if any upstream has `[upstream.health]`. It stops when `stop` is set.
pub fn spawn(ups: Arc<Upstreams>, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
    if ups.list.iter().all(|u| u.health.is_none()) {
        return None;
    }
    std::thread::Builder::new()
        .name("ringx-health".into())
        .spawn(move || run(&ups, &stop))
        .ok()
}

struct Track {
    ok_run: u32,
    fail_run: u32,
    next: Instant,
}

fn run(ups: &Upstreams, stop: &AtomicBool) {
    let now = Instant::now();
    let mut track: Vec<Vec<Track>> = ups
        .list
        .iter()
        .map(|u| {
            u.servers
                .iter()
                .map(|_| Track {
                    ok_run: 0,
                    fail_run: 0,
                    next: now,
                })
                .collect()
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut next_due = now + Duration::from_millis(500);
        for (u, tracks) in ups.list.iter().zip(track.iter_mut()) {
            let Some(h) = &u.health else { continue };
            for (i, (s, t)) in u.servers.iter().zip(tracks.iter_mut()).enumerate() {
                if t.next <= now {
                    let ok = check(s, h, u.tls.as_ref().map(|t| (t, i)));
                    record(&u.name, s, h, t, ok);
                    t.next = Instant::now() + h.interval;
                }
                next_due = next_due.min(t.next);
            }
        }
        let wait = next_due.saturating_duration_since(Instant::now());
        std::thread::sleep(wait.min(Duration::from_millis(200)));
    }
}

fn record(up: &str, s: &ServerDef, h: &HealthDef, t: &mut Track, ok: bool) {
    if ok {
        t.ok_run += 1;
        t.fail_run = 0;
    } else {
        t.fail_run += 1;
        t.ok_run = 0;
    }
    let healthy = s.healthy.load(Ordering::Relaxed);
    if healthy && t.fail_run >= h.fall {
        s.healthy.store(false, Ordering::Relaxed);
        tracing::warn!(
            "upstream {up}: server {} is down ({} failed checks)",
            s.name,
            t.fail_run
        );
    } else if !healthy && t.ok_run >= h.rise {
        s.healthy.store(true, Ordering::Relaxed);
        tracing::info!("upstream {up}: server {} is up again", s.name);
    }
}

/// One check: connect (with TLS for a TLS upstream), `GET path`, read the status line.
/// `tls`: the upstream's TLS and the server's index in it.
pub fn check(s: &ServerDef, h: &HealthDef, tls: Option<(&UpTls, usize)>) -> bool {
    let Ok(tcp) = TcpStream::connect_timeout(&s.addr, h.timeout) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(h.timeout));
    let _ = tcp.set_write_timeout(Some(h.timeout));
    let mut c: Box<dyn ReadWrite> = match tls {
        None => Box::new(tcp),
        Some((t, i)) => {
            let Ok(conn) = rustls::ClientConnection::new(t.config.clone(), t.name(i)) else {
                return false;
            };
            Box::new(rustls::StreamOwned::new(conn, tcp))
        }
    };
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: ringx-health\r\nConnection: close\r\n\r\n",
        h.path, s.name
    );
    if c.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut n = 0;
    while n < 12 {
        match c.read(&mut buf[n..]) {
            Ok(0) | Err(_) => return false,
            Ok(k) => n += k,
        }
    }
    let line = &buf[..n];
    if !line.starts_with(b"HTTP/1.") {
        return false;
    }
    let Some(status) = std::str::from_utf8(&line[9..12])
        .ok()
        .and_then(|x| x.parse::<u16>().ok())
    else {
        return false;
    };
    match h.expect {
        Some(e) => status == e,
        None => (200..400).contains(&status),
    }
}
