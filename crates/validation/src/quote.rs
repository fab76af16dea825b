//! How anything a target served is quoted in a problem detail.
//!
//! Problem details are stored, shown to the subscriber and logged by the caller, so what a
//! target (or a DNS zone) served is quoted only as a short prefix of plain printable ASCII: enough
//! to recognise a wrong token, an error page or a wrong name, too little to carry anything of
//! value, and nothing that can move a terminal cursor or hide text.

/// Bytes quoted at most, before escaping (Boulder reads at most 128 bytes of an http-01 body).
pub(crate) const QUOTED_BYTES: usize = 64;

/// At most [`QUOTED_BYTES`] of `bytes`, between double quotes, with every byte outside printable
/// ASCII (and `"`, `'`, `\`) escaped as [`<[u8]>::escape_ascii`] does (`\n`, `\x1b`, `\xe2`…);
/// `...` follows when there was more. The result is at most `4 * QUOTED_BYTES + 5` characters.
pub(crate) fn quote_prefix(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(QUOTED_BYTES)];
    let ellipsis = if bytes.len() > QUOTED_BYTES {
        "..."
    } else {
        ""
    };
    format!("\"{}\"{ellipsis}", shown.escape_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_short_escaped_prefixes() {
        assert_eq!(quote_prefix(b"tok3n.other"), "\"tok3n.other\"");
        assert_eq!(
            quote_prefix(b"a\x1b[31mred\r\nb\"c\\\x00\xff"),
            "\"a\\x1b[31mred\\r\\nb\\\"c\\\\\\x00\\xff\""
        );
        let long = "x".repeat(1000);
        assert_eq!(
            quote_prefix(long.as_bytes()),
            format!("\"{}\"...", "x".repeat(QUOTED_BYTES))
        );
        let controls = vec![0x07_u8; 1000];
        let quoted = quote_prefix(&controls);
        assert!(quoted.len() <= 4 * QUOTED_BYTES + 5);
        assert!(quoted.chars().all(|c| c.is_ascii_graphic()));
        // Bidi overrides and other non-ASCII text are escaped byte by byte.
        assert_eq!(quote_prefix("\u{202e}".as_bytes()), "\"\\xe2\\x80\\xae\"");
    }
}
