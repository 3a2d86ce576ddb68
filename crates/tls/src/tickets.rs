//! Session ticket keys, rotated on a schedule. One rotator is shared by every zone (a ticket
//! issued in one zone resumes in any other); its lock is taken once per ticket issued or
//! presented, on handshakes only.
//!
//! rustls's own `Ticketer::new()` rotates every 6 hours; ringx rotates on `[tls]
//! ticket_key_rotate` by wrapping a fresh one of those as each generation of
//! rustls's `TicketRotator`: a key encrypts for one period and decrypts for one more.

use std::sync::Arc;

use rustls::server::ProducesTickets;
use rustls::TicketRotator;

use crate::provider::Provider;

/// A provider's ticketer behind a box, as `TicketRotator` wants its generations.
#[derive(Debug)]
struct Generation(Arc<dyn ProducesTickets>);

impl ProducesTickets for Generation {
    fn enabled(&self) -> bool {
        self.0.enabled()
    }
    fn lifetime(&self) -> u32 {
        self.0.lifetime()
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.0.encrypt(plain)
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.0.decrypt(cipher)
    }
}

fn aws_lc() -> Result<Box<dyn ProducesTickets>, rustls::crypto::GetRandomFailed> {
    generation(Provider::AwsLc)
}

fn ring() -> Result<Box<dyn ProducesTickets>, rustls::crypto::GetRandomFailed> {
    generation(Provider::Ring)
}

fn generation(p: Provider) -> Result<Box<dyn ProducesTickets>, rustls::crypto::GetRandomFailed> {
    p.ticketer()
        .map(|t| Box::new(Generation(t)) as Box<dyn ProducesTickets>)
        .map_err(|_| rustls::crypto::GetRandomFailed)
}

/// Ticket keys that change every `every_s` seconds (at most 6 hours, the lifetime of one
/// generation's own key).
pub fn rotating(p: Provider, every_s: u32) -> Result<Arc<dyn ProducesTickets>, rustls::Error> {
    let every_s = every_s.clamp(60, 6 * 3600);
    let gen = match p {
        Provider::AwsLc => aws_lc,
        Provider::Ring => ring,
    };
    Ok(Arc::new(TicketRotator::new(every_s, gen)?))
}
