//! Finding the master: the first of the configured servers that says it is one (`ROLE`), or
//! the address the sentinels give for the master's name, checked the same way (a sentinel
//! that has not yet seen a failover names the old master, which now says it is a replica).

use crate::conn::{Conn, Dial};
use crate::error::Error;
use crate::resp::Value;

/// Where the master is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis = [...]`: tried in order.
    Servers(Vec<String>),
    /// `sentinel = [...]` and `master`: each sentinel asked in turn.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

/// What `ROLE` says of a server.
#[derive(Debug, PartialEq, Eq)]
pub enum Role {
    Master,
    /// A replica or a sentinel: not where writes go.
    Other(String),
    /// `ROLE` was refused (an ACL without it): taken as a master; a write will tell.
    Unknown,
}

/// Asks `conn` what it is.
pub fn role(conn: &mut Conn) -> Result<Role, Error> {
    Ok(match conn.call(&[b"ROLE"])? {
        Value::Array(items) => match items.first().and_then(Value::text) {
            Some("master") => Role::Master,
            Some(r) => Role::Other(r.to_string()),
            None => Role::Unknown,
        },
        _ => Role::Unknown,
    })
}

/// A connection to the master, or why there is none (each address's failure, in order).
pub fn connect(target: &Target, dial: &Dial) -> Result<Conn, Error> {
    let mut why = Vec::new();
    match target {
        Target::Servers(addrs) => {
            for a in addrs {
                match master_at(a, dial) {
                    Ok(c) => return Ok(c),
                    Err(e) => why.push(e.to_string()),
                }
            }
        }
        Target::Sentinel { sentinels, master } => {
            for s in sentinels {
                let at = match ask_sentinel(s, master, dial) {
                    Ok(a) => a,
                    Err(e) => {
                        why.push(format!("sentinel {e}"));
                        continue;
                    }
                };
                match master_at(&at, dial) {
                    Ok(c) => return Ok(c),
                    Err(e) => why.push(format!("sentinel {s} named {at}: {e}")),
                }
            }
        }
    }
    Err(Error::Down(why.join("; ")))
}

/// A connection to `addr`, when it is a master.
fn master_at(addr: &str, dial: &Dial) -> Result<Conn, Error> {
    let mut c = Conn::open(addr, dial, true)?;
    match role(&mut c)? {
        Role::Master | Role::Unknown => Ok(c),
        Role::Other(r) => Err(Error::Down(format!(
            "{addr} is a {r}, not the master (a failover under way?)"
        ))),
    }
}

/// The master's `host:port` as sentinel `s` knows it.
fn ask_sentinel(s: &str, master: &str, dial: &Dial) -> Result<String, Error> {
    let mut c = Conn::open(s, dial, false)?;
    match c.call(&[b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()])? {
        Value::Array(v) if v.len() == 2 => match (v[0].text(), v[1].text()) {
            (Some(h), Some(p)) if h.contains(':') => Ok(format!("[{h}]:{p}")),
            (Some(h), Some(p)) => Ok(format!("{h}:{p}")),
            _ => Err(Error::Reply(format!(
                "{s}: a master address that is not text"
            ))),
        },
        Value::Nil => Err(Error::Down(format!(
            "{s} monitors no master named {master:?} (check [cluster] master against sentinel.conf)"
        ))),
        Value::Error(e) => Err(Error::Reply(format!("{s}: {e}"))),
        other => Err(Error::Reply(format!("{s}: unexpected answer {other:?}"))),
    }
}
