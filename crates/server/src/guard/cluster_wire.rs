//! Cluster limits on the wire, sans-I/O: the Lua scripts a host runs on Redis once per sync
//! of a zone (one `EVAL`, whatever the number of keys), the command built from the keys it
//! saw, the reply read back, and what the reply does to the zone's table.
//!
//! **`limit_req`.** Redis keeps, per key, the cluster's theoretical arrival time (GCRA, µs on
//! Redis's clock: `TIME`). A host sends how many requests it admitted for each key since its
//! last sync; the script charges them (`interval` each, from no earlier than the start of
//! the span they were admitted in) and returns how far the arrival time is ahead of now. The
//! host raises its own state to `sent + ahead` ([`Table::raise`]): its next decisions count
//! every host's requests. Every admitted request is charged once in Redis, so what hosts
//! admit between two syncs, not knowing each other's, is repaid by the refusals after it; and
//! between two replies each host grants at most its share of the burst
//! (`ClusterZone::admit`). The cluster admits `rate × t + burst + 1` over `t`, give or take
//! what the hosts admit in the last sync period (`cluster_tests.rs` simulates it).
//!
//! **`limit_conn`.** Redis keeps, per key, a hash of host → `count:time`. A host sends its
//! count of requests in progress for each key it has active; the script stores it, drops
//! other hosts' entries older than [`CONN_TTL`] (a host that died), and returns the sum of the
//! others, which the host keeps beside its own count ([`Table::set_remote`]).
//!
//! **Hosts.** Every sync adds the host to a sorted set scored by time and returns how many
//! hosts synced within [`HOSTS_ALIVE`]: while Redis is gone, each host enforces its share
//! (the limit divided by that number).

use std::time::Duration;

use ringx_cluster::Value;

use super::limit::Table;

/// A host that has not synced for this long no longer counts among the hosts alive.
pub const HOSTS_ALIVE: Duration = Duration::from_secs(3);
/// Another host's `limit_conn` count not refreshed for this long is dropped (it died).
pub const CONN_TTL: Duration = Duration::from_secs(5);
/// Keys in one sync of one zone at most; more wait for the next.
pub const MAX_KEYS: usize = 1000;

/// The prologue of both scripts: Redis's clock, the host's heartbeat, the hosts alive.
/// KEYS[1] the hosts' set; ARGV[1] this host, ARGV[2] the window in ms.
const PROLOGUE: &str = r#"
pcall(redis.replicate_commands)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local alive = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - alive * 1000)
redis.call('PEXPIRE', KEYS[1], alive * 2)
local out = { redis.call('ZCARD', KEYS[1]) }
"#;

/// `limit_req`: ARGV[3] the interval (µs, may have decimals), ARGV[4] the span the counts
/// were admitted in (µs), ARGV[5..] each key's count. Returns the hosts, then how far each
/// key's arrival time is ahead of now (µs, 0 when not).
const REQ_BODY: &str = r#"
local iv = tonumber(ARGV[3])
local floor = now - tonumber(ARGV[4])
for i = 2, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if tat < floor then tat = floor end
  tat = tat + tonumber(ARGV[i + 3]) * iv
  local ahead = tat - now
  if ahead < 0 then ahead = 0 end
  redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', math.ceil(ahead / 1000) + 1000)
  out[i] = math.floor(ahead)
end
return out
"#;

/// `limit_conn`: ARGV[3] the TTL (ms), ARGV[4..] this host's count per key. Returns the
/// hosts, then the other hosts' count per key.
const CONN_BODY: &str = r#"
local ttl = tonumber(ARGV[3])
for i = 2, #KEYS do
  local n = tonumber(ARGV[i + 2])
  if n > 0 then
    redis.call('HSET', KEYS[i], ARGV[1], n .. ':' .. string.format('%.0f', now))
  else
    redis.call('HDEL', KEYS[i], ARGV[1])
  end
  local others = 0
  local all = redis.call('HGETALL', KEYS[i])
  for j = 1, #all, 2 do
    if all[j] ~= ARGV[1] then
      local c, at = string.match(all[j + 1], '^(%d+):(%d+)$')
      if c and tonumber(at) >= now - ttl * 1000 then
        others = others + tonumber(c)
      else
        redis.call('HDEL', KEYS[i], all[j])
      end
    end
  end
  if n > 0 or others > 0 then redis.call('PEXPIRE', KEYS[i], ttl) end
  out[i] = others
end
return out
"#;

/// Which limit a zone is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Req,
    Conn,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Req => "limit_req",
            Kind::Conn => "limit_conn",
        }
    }

    pub fn script(self) -> String {
        let body = match self {
            Kind::Req => REQ_BODY,
            Kind::Conn => CONN_BODY,
        };
        format!("{PROLOGUE}{body}")
    }
}

/// One key of a sync: its hash in this host's table, its hash across hosts (the Redis
/// key), and the count sent (requests admitted since the last sync, or in progress).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub local: u64,
    pub stable: u128,
    pub n: u32,
}

/// What a zone's sync needs besides its keys.
pub struct Header<'a> {
    /// `[cluster] prefix`.
    pub prefix: &'a str,
    pub zone: &'a str,
    /// This host's name in the hosts' set.
    pub host: &'a str,
    /// `limit_req`: ns one request takes of the rate.
    pub interval_ns: u64,
    /// `limit_req`: the time since the previous sync's keys were taken.
    pub span: Duration,
}

/// The hosts' set.
pub fn hosts_key(prefix: &str) -> String {
    format!("{prefix}limit:hosts")
}

/// The Redis key of one key of a zone: the zone's name and the key's stable hash.
pub fn redis_key(prefix: &str, kind: Kind, zone: &str, stable: u128) -> String {
    format!("{prefix}{}:{zone}:{stable:032x}", kind.name())
}

/// The `EVAL` of one sync.
pub fn command(kind: Kind, h: &Header, items: &[Item]) -> Vec<Vec<u8>> {
    let mut a: Vec<Vec<u8>> = Vec::with_capacity(8 + 2 * items.len());
    a.push(b"EVAL".to_vec());
    a.push(kind.script().into_bytes());
    a.push((items.len() + 1).to_string().into_bytes());
    a.push(hosts_key(h.prefix).into_bytes());
    for it in items {
        a.push(redis_key(h.prefix, kind, h.zone, it.stable).into_bytes());
    }
    a.push(h.host.as_bytes().to_vec());
    a.push(HOSTS_ALIVE.as_millis().to_string().into_bytes());
    match kind {
        Kind::Req => {
            let iv = h.interval_ns;
            a.push(format!("{}.{:03}", iv / 1000, iv % 1000).into_bytes());
            a.push(h.span.as_micros().to_string().into_bytes());
        }
        Kind::Conn => a.push(CONN_TTL.as_millis().to_string().into_bytes()),
    }
    for it in items {
        a.push(it.n.to_string().into_bytes());
    }
    a
}

/// A sync's reply: the hosts alive and one number per key sent.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub hosts: u32,
    pub values: Vec<u64>,
}

/// Reads the reply to a sync of `keys` keys.
pub fn parse(v: &Value, keys: usize) -> Result<Reply, String> {
    let Value::Array(a) = v else {
        return Err(format!("a sync got {v:?}, not an array"));
    };
    if a.len() != keys + 1 {
        return Err(format!("a sync of {keys} keys got {} values", a.len()));
    }
    let int = |x: &Value| match x {
        Value::Int(i) => Ok((*i).max(0) as u64),
        other => Err(format!("a sync got {other:?}, not an integer")),
    };
    Ok(Reply {
        hosts: int(&a[0])?.clamp(1, u64::from(u32::MAX)) as u32,
        values: a[1..].iter().map(int).collect::<Result<_, _>>()?,
    })
}

/// What a `limit_req` reply does to the table at `now` (ns, as `limit::nanos`), for the
/// sync sent at `sent`: each key's state is raised to the cluster's arrival time. Redis
/// measured `ahead` somewhere between `sent` and `now`; counting it from `sent` errs by the
/// round trip on the lenient side (a later sync corrects it), where counting it from `now`
/// would lose the round trip's worth of the rate at every sync on a busy key.
pub fn apply_req(t: &Table, (sent, now): (u64, u64), items: &[Item], r: &Reply) {
    for (it, ahead_us) in items.iter().zip(&r.values) {
        if *ahead_us > 0 {
            t.raise(
                it.local,
                now,
                sent.saturating_add(ahead_us.saturating_mul(1000)),
            );
        }
    }
}

/// What a `limit_conn` reply does: each key's count of the other hosts.
pub fn apply_conn(t: &Table, items: &[Item], r: &Reply) {
    for (it, others) in items.iter().zip(&r.values) {
        t.set_remote(it.local, (*others).min(u64::from(u32::MAX)) as u32);
    }
}
