//! HTTP/3 and QPACK error codes (RFC 9114 §8.1, RFC 9204 §6), and the error a connection or
//! a stream ends with. The codes go into QUIC's CONNECTION_CLOSE, RESET_STREAM and
//! STOP_SENDING frames, which are the caller's to send.

/// An application error code of HTTP/3 or QPACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    NoError,
    GeneralProtocol,
    Internal,
    StreamCreation,
    ClosedCriticalStream,
    FrameUnexpected,
    Frame,
    ExcessiveLoad,
    Id,
    Settings,
    MissingSettings,
    RequestRejected,
    RequestCancelled,
    RequestIncomplete,
    Message,
    Connect,
    VersionFallback,
    QpackDecompressionFailed,
    QpackEncoderStream,
    QpackDecoderStream,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 20] = [
        ErrorCode::NoError,
        ErrorCode::GeneralProtocol,
        ErrorCode::Internal,
        ErrorCode::StreamCreation,
        ErrorCode::ClosedCriticalStream,
        ErrorCode::FrameUnexpected,
        ErrorCode::Frame,
        ErrorCode::ExcessiveLoad,
        ErrorCode::Id,
        ErrorCode::Settings,
        ErrorCode::MissingSettings,
        ErrorCode::RequestRejected,
        ErrorCode::RequestCancelled,
        ErrorCode::RequestIncomplete,
        ErrorCode::Message,
        ErrorCode::Connect,
        ErrorCode::VersionFallback,
        ErrorCode::QpackDecompressionFailed,
        ErrorCode::QpackEncoderStream,
        ErrorCode::QpackDecoderStream,
    ];

    /// The code on the wire.
    pub fn code(self) -> u64 {
        match self {
            ErrorCode::NoError => 0x100,
            ErrorCode::GeneralProtocol => 0x101,
            ErrorCode::Internal => 0x102,
            ErrorCode::StreamCreation => 0x103,
            ErrorCode::ClosedCriticalStream => 0x104,
            ErrorCode::FrameUnexpected => 0x105,
            ErrorCode::Frame => 0x106,
            ErrorCode::ExcessiveLoad => 0x107,
            ErrorCode::Id => 0x108,
            ErrorCode::Settings => 0x109,
            ErrorCode::MissingSettings => 0x10a,
            ErrorCode::RequestRejected => 0x10b,
            ErrorCode::RequestCancelled => 0x10c,
            ErrorCode::RequestIncomplete => 0x10d,
            ErrorCode::Message => 0x10e,
            ErrorCode::Connect => 0x10f,
            ErrorCode::VersionFallback => 0x110,
            ErrorCode::QpackDecompressionFailed => 0x200,
            ErrorCode::QpackEncoderStream => 0x201,
            ErrorCode::QpackDecoderStream => 0x202,
        }
    }

    /// Its place in [`ErrorCode::ALL`] (a counter per code).
    pub fn index(self) -> usize {
        ErrorCode::ALL.iter().position(|&c| c == self).unwrap_or(0)
    }

    /// The name the RFCs give it (logs, metrics labels).
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::NoError => "H3_NO_ERROR",
            ErrorCode::GeneralProtocol => "H3_GENERAL_PROTOCOL_ERROR",
            ErrorCode::Internal => "H3_INTERNAL_ERROR",
            ErrorCode::StreamCreation => "H3_STREAM_CREATION_ERROR",
            ErrorCode::ClosedCriticalStream => "H3_CLOSED_CRITICAL_STREAM",
            ErrorCode::FrameUnexpected => "H3_FRAME_UNEXPECTED",
            ErrorCode::Frame => "H3_FRAME_ERROR",
            ErrorCode::ExcessiveLoad => "H3_EXCESSIVE_LOAD",
            ErrorCode::Id => "H3_ID_ERROR",
            ErrorCode::Settings => "H3_SETTINGS_ERROR",
            ErrorCode::MissingSettings => "H3_MISSING_SETTINGS",
            ErrorCode::RequestRejected => "H3_REQUEST_REJECTED",
            ErrorCode::RequestCancelled => "H3_REQUEST_CANCELLED",
            ErrorCode::RequestIncomplete => "H3_REQUEST_INCOMPLETE",
            ErrorCode::Message => "H3_MESSAGE_ERROR",
            ErrorCode::Connect => "H3_CONNECT_ERROR",
            ErrorCode::VersionFallback => "H3_VERSION_FALLBACK",
            ErrorCode::QpackDecompressionFailed => "QPACK_DECOMPRESSION_FAILED",
            ErrorCode::QpackEncoderStream => "QPACK_ENCODER_STREAM_ERROR",
            ErrorCode::QpackDecoderStream => "QPACK_DECODER_STREAM_ERROR",
        }
    }

    /// The code for a wire value, if it is one of ours (a peer may send any value, and
    /// reserved ones `0x1f * N + 0x21` as grease).
    pub fn from_code(code: u64) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.code() == code)
    }
}

/// A connection error: close the QUIC connection with `code`. Nothing more is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnError {
    pub code: ErrorCode,
    pub msg: &'static str,
}

impl ConnError {
    pub(crate) const fn new(code: ErrorCode, msg: &'static str) -> ConnError {
        ConnError { code, msg }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_rfcs() {
        assert_eq!(ErrorCode::Frame.code(), 0x106);
        assert_eq!(ErrorCode::VersionFallback.code(), 0x110);
        assert_eq!(ErrorCode::QpackDecoderStream.code(), 0x202);
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c), "{}", c.name());
        }
        assert_eq!(ErrorCode::from_code(0x21), None);
    }
}
