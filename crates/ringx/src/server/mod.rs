//! The HTTP/1.1 origin server: routing, `return` and static-file locations, run as a zone
//! handler.

pub mod mime;
pub mod respond;
pub mod route;
pub mod settings;
pub mod static_files;
pub mod zone;
