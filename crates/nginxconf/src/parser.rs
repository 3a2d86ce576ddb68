//! Directives and blocks from the lexer's words, with `include` expanded where it stands
//! (`ngx_conf_parse` and `ngx_conf_include`).
//!
//! Relative include paths are taken from the prefix, the directory of the main file, as
//! nginx takes them from its conf prefix. Bounded so that no input can exhaust memory or
//! the stack: the size of each file and of all of them, the number of files, how deep
//! includes and blocks nest; an include loop is an error at the include that closes it.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::glob;
use crate::lexer::{End, Lexer, Word};
use crate::tree::{Conf, Directive};

/// What one configuration may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of one file.
    pub max_file: u64,
    /// Bytes of all files together.
    pub max_total: u64,
    /// Files read (each include of a file counts).
    pub max_files: usize,
    /// Includes within includes.
    pub max_include_depth: usize,
    /// Blocks within blocks.
    pub max_block_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file: 16 << 20,
            max_total: 64 << 20,
            max_files: 4096,
            max_include_depth: 32,
            max_block_depth: 64,
        }
    }
}

/// Reads the configuration at `path` and every file it includes.
pub fn load(path: &Path, limits: Limits) -> Result<Conf, Error> {
    let prefix = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut r = Reader {
        limits,
        prefix: prefix.clone(),
        chain: Vec::new(),
        files: 0,
        bytes: 0,
    };
    let file = path.display().to_string();
    let directives = r.file(path, None)?;
    Ok(Conf {
        file,
        prefix,
        directives,
    })
}

/// Parses `text` as the main file `name` (includes are read relative to its directory).
pub fn parse_str(name: &str, text: &str) -> Result<Conf, Error> {
    let path = Path::new(name);
    let prefix = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut r = Reader {
        limits: Limits::default(),
        prefix: prefix.clone(),
        chain: vec![path.canonicalize().unwrap_or_else(|_| path.to_path_buf())],
        files: 1,
        bytes: text.len() as u64,
    };
    let directives = r.bytes(name, text.as_bytes())?;
    Ok(Conf {
        file: name.to_string(),
        prefix,
        directives,
    })
}

struct Reader {
    limits: Limits,
    prefix: PathBuf,
    /// The files being read, outermost first (canonical paths), to find include loops.
    chain: Vec<PathBuf>,
    files: usize,
    bytes: u64,
}

/// Where an include was written, for errors about the file it names.
struct Site<'a> {
    file: &'a str,
    line: usize,
}

impl Reader {
    fn file(&mut self, path: &Path, site: Option<Site>) -> Result<Vec<Directive>, Error> {
        let name = path.display().to_string();
        let fail = |msg: String| match &site {
            Some(s) => Error::at(s.file, s.line, msg),
            None => Error::at(&name, 0, msg),
        };
        let canon = path
            .canonicalize()
            .map_err(|e| fail(format!("cannot open {name}: {e}")))?;
        if let Some(i) = self.chain.iter().position(|c| *c == canon) {
            let mut cycle: Vec<String> = self.chain[i..]
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            cycle.push(canon.display().to_string());
            return Err(fail(format!(
                "include loop: {} (remove one of these includes)",
                cycle.join(" includes ")
            )));
        }
        if self.chain.len() > self.limits.max_include_depth {
            return Err(fail(format!(
                "includes nested deeper than {}: is there a loop through links?",
                self.limits.max_include_depth
            )));
        }
        self.files += 1;
        if self.files > self.limits.max_files {
            return Err(fail(format!(
                "more than {} files included: is a pattern matching too much?",
                self.limits.max_files
            )));
        }
        let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot open {name}: {e}")))?;
        if !meta.is_file() {
            return Err(fail(format!(
                "{name} is not a regular file (a directory, a device, a pipe): not a \
                 configuration file"
            )));
        }
        if meta.len() > self.limits.max_file {
            return Err(fail(format!(
                "{name} is {} bytes, over the limit of {} for one configuration file: is it \
                 the right file?",
                meta.len(),
                self.limits.max_file
            )));
        }
        self.bytes += meta.len();
        if self.bytes > self.limits.max_total {
            return Err(fail(format!(
                "the configuration's files together are over {} bytes",
                self.limits.max_total
            )));
        }
        let data = read_at_most(path, self.limits.max_file)
            .map_err(|e| fail(format!("cannot read {name}: {e}")))?;
        self.chain.push(canon);
        let out = self.bytes(&name, &data);
        self.chain.pop();
        out
    }

    fn bytes(&mut self, name: &str, data: &[u8]) -> Result<Vec<Directive>, Error> {
        let mut lx = Lexer::new(name, data);
        self.block(&mut lx, name, 0)
    }

    /// The directives up to the `}` that closes the block at `depth` (0: the file's end).
    fn block(&mut self, lx: &mut Lexer, name: &str, depth: usize) -> Result<Vec<Directive>, Error> {
        let mut out = Vec::new();
        loop {
            let (mut words, end) = lx.next_directive()?;
            match end {
                End::Eof if depth > 0 => {
                    return Err(Error::at(
                        name,
                        lx.line(),
                        "unexpected end of file, expecting \"}\": a block is not closed",
                    ))
                }
                End::Eof => return Ok(out),
                End::BlockEnd if depth == 0 => {
                    return Err(Error::at(
                        name,
                        lx.line(),
                        "unexpected \"}\": it closes no block",
                    ))
                }
                End::BlockEnd => return Ok(out),
                End::Semicolon | End::BlockStart => {}
            }
            let head: Word = words.remove(0);
            if head.text == "include" && !head.quoted {
                if end == End::BlockStart {
                    return Err(Error::at(
                        name,
                        head.line,
                        "directive \"include\" is not terminated by \";\"",
                    ));
                }
                if words.len() != 1 {
                    return Err(Error::at(
                        name,
                        head.line,
                        "invalid number of arguments in \"include\": it takes one file or pattern",
                    ));
                }
                out.extend(self.include(&words[0].text, name, head.line)?);
                continue;
            }
            let block = if end == End::BlockStart {
                if depth + 1 > self.limits.max_block_depth {
                    return Err(Error::at(
                        name,
                        head.line,
                        format!("blocks nested deeper than {}", self.limits.max_block_depth),
                    ));
                }
                Some(self.block(lx, name, depth + 1)?)
            } else {
                None
            };
            out.push(Directive {
                name: head.text,
                words,
                block,
                file: name.to_string(),
                line: head.line,
            });
        }
    }

    fn include(&mut self, pattern: &str, file: &str, line: usize) -> Result<Vec<Directive>, Error> {
        let full = self.prefix.join(pattern);
        let paths = if glob::is_pattern(pattern) {
            glob::expand(&full)
        } else {
            vec![full]
        };
        let mut out = Vec::new();
        for p in paths {
            out.extend(self.file(&p, Some(Site { file, line }))?);
        }
        Ok(out)
    }
}

/// The file's bytes, never more than `max` (+1 to see that it is over): a file that grows
/// between the size check and the read cannot make the read unbounded.
fn read_at_most(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut data)?;
    if data.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "it grew over {max} bytes while being read"
        )));
    }
    Ok(data)
}
