//! `[cluster]` as the client takes it (the binary makes it from `ringx_config::cluster`).

use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;

use crate::conn::{Dial, TlsSpec};
use crate::discover::Target;

/// `[cluster]`, as the client takes it.
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    pub target: Target,
    pub username: Option<String>,
    pub password: Option<String>,
    pub tls: Option<TlsSpec>,
    /// Every key starts with it.
    pub prefix: String,
    pub connect_timeout: Duration,
    /// A command's budget, and each read and write's timeout on the thread.
    pub timeout: Duration,
    /// `[cluster] events_secret`: the key of the MACs of the messages between hosts.
    pub events_secret: Option<String>,
}

/// Without the password and the secret: settings may be logged.
impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("target", &self.target)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "(set)"))
            .field("tls", &self.tls)
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field(
                "events_secret",
                &self.events_secret.as_ref().map(|_| "(set)"),
            )
            .finish()
    }
}

impl Settings {
    /// How to reach a server with these settings and `tls`, their TLS made into a client
    /// configuration.
    pub fn dial(&self, tls: Option<Arc<ClientConfig>>) -> Dial {
        Dial {
            tls: tls.map(|c| (c, self.tls.as_ref().and_then(|t| t.sni.clone()))),
            connect_timeout: self.connect_timeout,
            timeout: self.timeout,
            username: self.username.clone(),
            password: self.password.clone(),
        }
    }
}
