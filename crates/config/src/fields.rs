//! Header field grammar the checks share (RFC 9110 §5).

/// `field-vchar / SP / HTAB`: a CR or LF would end the field and start another (header
/// injection), other control bytes are invalid in a field value (RFC 9110 §5.5).
pub(crate) fn is_field_value(v: &str) -> bool {
    v.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// A token (RFC 9110 §5.6.2): a field name, a media type's parts.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
