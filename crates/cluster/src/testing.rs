//! For tests (feature `testing`): a real `redis-server` on a free port, in a temporary
//! directory, persisting nothing; stopped and restarted on the same port to test recovery.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::conn::{Conn, Dial};

/// One redis-server.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// Why redis-server cannot run here, if it cannot.
pub fn missing() -> Option<String> {
    match Command::new("redis-server").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("redis-server is not installed (scripts/install-deps.sh installs it)".into()),
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

impl RedisServer {
    /// One on a free port. Tests run in parallel, so another test's server may take the
    /// port between the look and the bind: then another port.
    pub fn start() -> RedisServer {
        for _ in 0..20 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "ringx-redis-{}-{port}-{:?}",
                std::process::id(),
                Instant::now()
            ));
            std::fs::create_dir_all(&dir).expect("temporary directory");
            let mut r = RedisServer {
                port,
                dir,
                child: None,
            };
            if r.launch() {
                return r;
            }
        }
        panic!("redis-server found no free port in 20 tries");
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it again, on the same port, and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.launch(),
            "redis-server cannot listen on {} again: another process took the port",
            self.port
        );
    }

    /// Starts it and waits until it answers: `false` when it exits first (the port is
    /// taken). The server that answers must be this one (its `process_id`), not another
    /// test's that took the port.
    fn launch(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let pid = format!("process_id:{}\r\n", child.id());
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let dial = Dial {
            tls: None,
            connect_timeout: Duration::from_millis(200),
            timeout: Duration::from_secs(1),
            username: None,
            password: None,
        };
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if !matches!(c.try_wait(), Ok(None)) {
                    self.child = None;
                    return false;
                }
            }
            if let Ok(mut c) = Conn::open(&self.addr(), &dial, false) {
                let info = c.call(&[b"INFO", b"server"]);
                if info.is_ok_and(|v| v.text().is_some_and(|t| t.contains(&pid))) {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on {} did not answer", self.port);
    }

    /// Stops it and waits until the port refuses connections.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            let deadline = Instant::now() + Duration::from_secs(10);
            while TcpStream::connect(self.addr()).is_ok() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until `f` holds (30 s at most, then fails the test naming `what`).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
