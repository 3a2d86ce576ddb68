//! The tree: directives with their words, their block, and where they were written.

use crate::lexer::Word;

/// A whole configuration, includes expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// The main file, as given.
    pub file: String,
    /// The directory relative `include`s are resolved against (nginx's conf prefix).
    pub prefix: std::path::PathBuf,
    pub directives: Vec<Directive>,
}

/// One directive: `name arg...;` or `name arg... { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub name: String,
    pub words: Vec<Word>,
    /// The block's directives, for a directive written with `{ ... }`.
    pub block: Option<Vec<Directive>>,
    /// The file it was written in (an included file's own path).
    pub file: String,
    /// The line of its name.
    pub line: usize,
}

impl Directive {
    /// The arguments' text (after unescaping).
    pub fn args(&self) -> Vec<&str> {
        self.words.iter().map(|w| w.text.as_str()).collect()
    }

    /// `FILE:LINE`.
    pub fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// The block's directives (empty for a simple directive).
    pub fn children(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or(&[])
    }
}
