//! # ringx-server: what serves
//!
//! Routing, responses, static files, the reverse proxy, the stream (L4) proxy, metrics and
//! the access log, run as zone handlers on [`ringx_engine`].

pub mod accesslog;
pub mod metrics;
pub mod mime;
pub mod respond;
pub mod route;
pub mod settings;
pub mod static_files;
pub mod upstream;
pub mod zone;
