//! nginx's configuration language, read as nginx reads it, into a tree of directives that
//! each keep their `FILE:LINE`.
//!
//! ```
//! let conf = ringx_nginxconf::parse_str(
//!     "nginx.conf",
//!     "http { server { listen 80; location = /x { return 200 \"a;b\"; } } }",
//! )
//! .unwrap();
//! let server = &conf.directives[0].block.as_ref().unwrap()[0];
//! let location = &server.block.as_ref().unwrap()[1];
//! assert_eq!(location.args(), ["=", "/x"]);
//! assert_eq!(location.block.as_ref().unwrap()[0].args(), ["200", "a;b"]);
//! ```
//!
//! * [`lexer`]: words, quotes, escapes, comments and `${var}` as `ngx_conf_read_token` has them.
//! * [`parser`]: directives and blocks, and `include` expanded where it stands: a glob
//!   (`*`, `?`, `[...]`) or a file, relative to the prefix (the directory of the main file),
//!   matches in name order, with include loops, depth and file sizes bounded.
//!
//! What a directive means (`map`, `geo`, `if`, a `location` modifier) is left to the reader of
//! the tree: the grammar of nginx is the same for every directive, and the tree keeps each
//! word as written (after unescaping) with whether it was quoted.
#![forbid(unsafe_code)]

mod error;
mod glob;
pub mod lexer;
pub mod parser;
mod tree;

pub use error::Error;
pub use lexer::Word;
pub use parser::{load, parse_str, Limits};
pub use tree::{Conf, Directive};

#[cfg(test)]
mod tests;
