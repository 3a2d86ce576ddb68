//! Errors at `FILE:LINE`.

/// A configuration that cannot be read, at the place nginx would name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub file: String,
    /// 1-based; 0 when the error is about the file as a whole (it cannot be opened).
    pub line: usize,
    pub message: String,
}

impl Error {
    pub fn at(file: &str, line: usize, message: impl Into<String>) -> Error {
        Error {
            file: file.to_string(),
            line,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for Error {}
