//! A minimal strict DER reader: just enough for SubjectPublicKeyInfo and RSAPublicKey.
//!
//! Pulling in a full X.509 parser for three structures would add a large dependency to a crate
//! that sits on the request path of every ACME call; these few tags are easy to read strictly.

pub(crate) const TAG_INTEGER: u8 = 0x02;
pub(crate) const TAG_BIT_STRING: u8 = 0x03;
pub(crate) const TAG_NULL: u8 = 0x05;
pub(crate) const TAG_OID: u8 = 0x06;
pub(crate) const TAG_SEQUENCE: u8 = 0x30;

/// Why DER could not be read; the caller turns it into a `badPublicKey` detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DerError(pub(crate) &'static str);

/// Reads consecutive TLV elements from a byte slice.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    pub(crate) fn peek_tag(&self) -> Option<u8> {
        self.data.first().copied()
    }

    /// Reads one element with the expected tag and returns its contents.
    pub(crate) fn read(&mut self, tag: u8) -> Result<&'a [u8], DerError> {
        let (&actual, rest) = self.data.split_first().ok_or(DerError("truncated DER"))?;
        if actual != tag {
            return Err(DerError("unexpected DER tag"));
        }
        let (&first, mut rest) = rest.split_first().ok_or(DerError("truncated DER length"))?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 {
                return Err(DerError("unsupported DER length"));
            }
            if rest.len() < count {
                return Err(DerError("truncated DER length"));
            }
            let (len_bytes, after) = rest.split_at(count);
            rest = after;
            if len_bytes[0] == 0 {
                return Err(DerError("non-minimal DER length"));
            }
            let len = len_bytes
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            if len < 0x80 {
                return Err(DerError("non-minimal DER length"));
            }
            len
        };
        if rest.len() < len {
            return Err(DerError("truncated DER contents"));
        }
        let (contents, after) = rest.split_at(len);
        self.data = after;
        Ok(contents)
    }

    /// Reads a non-negative INTEGER and returns its magnitude without leading zero bytes.
    pub(crate) fn read_unsigned_integer(&mut self) -> Result<&'a [u8], DerError> {
        let bytes = self.read(TAG_INTEGER)?;
        match bytes {
            [] => Err(DerError("empty DER integer")),
            [first, ..] if first & 0x80 != 0 => Err(DerError("negative DER integer")),
            [0] => Err(DerError("zero where a positive integer is required")),
            [0, second, ..] if second & 0x80 == 0 => Err(DerError("non-minimal DER integer")),
            [0, rest @ ..] => Ok(rest),
            _ => Ok(bytes),
        }
    }

    /// Reads a BIT STRING that must have no unused bits, as keys always do.
    pub(crate) fn read_bit_string(&mut self) -> Result<&'a [u8], DerError> {
        match self.read(TAG_BIT_STRING)?.split_first() {
            Some((0, bits)) => Ok(bits),
            Some(_) => Err(DerError("BIT STRING with unused bits")),
            None => Err(DerError("empty BIT STRING")),
        }
    }

    /// Fails unless every byte was consumed, so trailing garbage is never ignored.
    pub(crate) fn finish(&self) -> Result<(), DerError> {
        if self.data.is_empty() {
            Ok(())
        } else {
            Err(DerError("trailing data after DER element"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_short_and_long_lengths() {
        let mut long = vec![TAG_SEQUENCE, 0x81, 0x80];
        long.extend([0u8; 0x80]);
        let mut r = Reader::new(&long);
        assert_eq!(r.read(TAG_SEQUENCE).unwrap().len(), 0x80);
        r.finish().unwrap();

        let mut r = Reader::new(&[TAG_NULL, 0x00]);
        assert_eq!(r.read(TAG_NULL).unwrap(), b"");
        r.finish().unwrap();
    }

    #[test]
    fn refuses_non_minimal_and_truncated() {
        assert!(Reader::new(&[TAG_NULL, 0x81, 0x00]).read(TAG_NULL).is_err());
        assert!(
            Reader::new(&[TAG_SEQUENCE, 0x02, 0x05])
                .read(TAG_SEQUENCE)
                .is_err()
        );
        assert!(Reader::new(&[TAG_NULL, 0x00]).read(TAG_SEQUENCE).is_err());
        assert!(
            Reader::new(&[TAG_INTEGER, 0x02, 0x00, 0x01])
                .read_unsigned_integer()
                .is_err()
        );
        assert!(
            Reader::new(&[TAG_INTEGER, 0x01, 0x80])
                .read_unsigned_integer()
                .is_err()
        );
        assert_eq!(
            Reader::new(&[TAG_INTEGER, 0x02, 0x00, 0x80])
                .read_unsigned_integer()
                .unwrap(),
            [0x80]
        );
        assert!(
            Reader::new(&[TAG_BIT_STRING, 0x02, 0x01, 0xff])
                .read_bit_string()
                .is_err()
        );
    }
}
