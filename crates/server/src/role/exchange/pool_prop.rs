//! A property of the upstream keep-alive pool (issue 26, defect 3): whatever the servers do —
//! answer, stay silent, send bytes nobody asked for, close, reset — and whenever the clients
//! ask, every connection in a pool is open and idle, and no client waits forever: each
//! request ends with a response (the server's, 502 or 504) or a closed connection.

use std::time::Duration;

use proptest::prelude::*;
use ringx_engine::ConnId;

use crate::testkit::{get, parse_responses, Harness};

#[derive(Debug, Clone)]
enum Step {
    /// Client `n` asks (if its last request was answered).
    Ask(usize),
    /// The `n`-th upstream connection (modulo how many were opened) answers 200.
    Answer(usize),
    /// ... receives bytes nobody asked for.
    Junk(usize),
    /// ... closes its write side.
    Fin(usize),
    /// ... is reset.
    Reset(usize),
    /// Time passes.
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..3usize).prop_map(Step::Ask),
        4 => (0..8usize).prop_map(Step::Answer),
        1 => (0..8usize).prop_map(Step::Junk),
        1 => (0..8usize).prop_map(Step::Fin),
        1 => (0..8usize).prop_map(Step::Reset),
        1 => (1..3000u64).prop_map(Step::Wait),
    ]
}

const CFG: &str = r#"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001", "127.0.0.1:9002"]
keepalive = 2
read_timeout = "5s"
connect_timeout = "2s"
retries = 1
"#;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn pooled_connections_are_live_and_no_client_hangs(steps in prop::collection::vec(step(), 1..60)) {
        let mut h = Harness::new(CFG);
        let clients: Vec<ConnId> = (0..3).map(|_| h.client()).collect();
        let mut waiting = [false; 3];
        let mut ups: Vec<ConnId> = Vec::new();
        for s in steps {
            match s {
                Step::Ask(n) if !waiting[n] && h.t.is_open(clients[n]) => {
                    h.send(clients[n], &get("/"));
                    waiting[n] = true;
                }
                Step::Ask(_) => {}
                Step::Answer(i) | Step::Junk(i) | Step::Fin(i) | Step::Reset(i) if !ups.is_empty() => {
                    let u = ups[i % ups.len()];
                    if h.t.is_open(u) {
                        match s {
                            Step::Answer(_) => h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
                            Step::Junk(_) => h.send(u, b"HTTP/1.1 200 OK\r\n\r\n"),
                            Step::Fin(_) => h.eof(u),
                            _ => h.reset(u),
                        }
                    }
                }
                Step::Wait(ms) => h.advance(Duration::from_millis(ms)),
                _ => {}
            }
            // Connects complete at once; what the clients received ends their wait.
            for (u, _) in h.connects() {
                h.t.connected(&mut h.z, u);
                ups.push(u);
            }
            for (n, &c) in clients.iter().enumerate() {
                if !parse_responses(&h.output(c)).is_empty() || !h.t.is_open(c) {
                    waiting[n] = false;
                }
            }
            for (u, idle) in h.z.pooled() {
                prop_assert!(h.t.is_open(u), "pooled connection {u:?} is closed");
                prop_assert!(idle, "pooled connection {u:?} is not idle");
            }
        }
        // However it went, every request ends within the upstream's timeouts.
        h.advance(Duration::from_secs(20));
        for (n, &c) in clients.iter().enumerate() {
            let answered = !parse_responses(&h.output(c)).is_empty() || !h.t.is_open(c);
            prop_assert!(!waiting[n] || answered, "client {n} still waits");
        }
    }
}
