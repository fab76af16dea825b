//! Public JSON Web Keys (RFC 7517, RFC 7518 §6, RFC 8037) and their thumbprints (RFC 7638).

use std::fmt;

use aws_lc_rs::digest;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};
use serde_json::{Map, Value, json};

use crate::algorithm::Algorithm;
use crate::b64;
use crate::error::Error;

/// The smallest RSA modulus accepted for account keys (CA/B Forum baseline and RFC 7518 §3.3).
pub const MIN_RSA_BITS: usize = 2048;
/// The largest RSA modulus accepted; bigger keys only cost verification time.
pub const MAX_RSA_BITS: usize = 8192;

/// Members that only private keys carry. A client that sends one has leaked its private key, and
/// accepting the JWK would let the server keep that secret, so it is refused outright.
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// The elliptic curves supported for ECDSA account keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EcCurve {
    /// NIST P-256 (secp256r1), used with ES256.
    P256,
    /// NIST P-384 (secp384r1), used with ES384.
    P384,
}

impl EcCurve {
    /// The JWK `crv` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::P256 => "P-256",
            Self::P384 => "P-384",
        }
    }

    /// The length in bytes of each affine coordinate.
    pub fn coordinate_len(self) -> usize {
        match self {
            Self::P256 => 32,
            Self::P384 => 48,
        }
    }

    /// The only JWS algorithm that may be used with this curve.
    pub fn algorithm(self) -> Algorithm {
        match self {
            Self::P256 => Algorithm::Es256,
            Self::P384 => Algorithm::Es384,
        }
    }
}

/// A public key as ACME accounts use them. Private keys cannot be represented.
///
/// Byte fields hold the unpadded big-endian values exactly as the JWK members decode, so the
/// thumbprint computed here matches the one the client computed from its own JWK.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Jwk {
    /// An RSA key: modulus and public exponent, big-endian without leading zero bytes.
    Rsa {
        /// Modulus.
        n: Vec<u8>,
        /// Public exponent.
        e: Vec<u8>,
    },
    /// An ECDSA key: affine coordinates, each exactly the curve's coordinate length.
    Ec {
        /// Curve.
        curve: EcCurve,
        /// X coordinate.
        x: Vec<u8>,
        /// Y coordinate.
        y: Vec<u8>,
    },
    /// An Ed25519 key (`kty` `OKP`, RFC 8037): the 32-byte encoded point.
    Ed25519 {
        /// Public key bytes.
        x: Vec<u8>,
    },
}

impl fmt::Debug for Jwk {
    /// Shows the key type and thumbprint rather than kilobytes of modulus in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Jwk({}, {})", self.describe(), self.thumbprint())
    }
}

impl Jwk {
    /// Parses a public JWK strictly.
    ///
    /// `kty` and `crv` must name a supported key, coordinates must have the exact curve length,
    /// RSA integers must be minimally encoded, and private members are refused. Other members
    /// (`alg`, `use`, `kid`, ...) are ignored as RFC 7517 §4 allows.
    pub fn from_json(value: &Value) -> Result<Jwk, Error> {
        let Value::Object(map) = value else {
            return Err(Error::bad_key("jwk must be a JSON object"));
        };
        if let Some(member) = PRIVATE_MEMBERS.iter().find(|m| map.contains_key(**m)) {
            return Err(Error::bad_key(format!(
                "jwk contains the private key member \"{member}\"; send only the public key \
                 (and consider this private key compromised)"
            )));
        }
        let kty = string_member(map, "kty")?;
        match kty {
            "RSA" => Self::rsa_from_json(map),
            "EC" => Self::ec_from_json(map),
            "OKP" => Self::okp_from_json(map),
            "oct" => Err(Error::bad_key(
                "jwk kty \"oct\" is a symmetric key; ACME needs a public key",
            )),
            other => Err(Error::bad_key(format!(
                "jwk kty \"{other}\" is not supported; use RSA, EC (P-256, P-384) or OKP (Ed25519)"
            ))),
        }
    }

    fn rsa_from_json(map: &Map<String, Value>) -> Result<Jwk, Error> {
        let n = bytes_member(map, "n")?;
        let e = bytes_member(map, "e")?;
        Self::rsa_from_parts(n, e)
    }

    /// Validates RSA components; shared by the JWK and SPKI paths so both accept the same keys.
    pub(crate) fn rsa_from_parts(n: Vec<u8>, e: Vec<u8>) -> Result<Jwk, Error> {
        match n.first() {
            None => return Err(Error::bad_key("RSA modulus n is empty")),
            Some(0) => {
                return Err(Error::bad_key(
                    "RSA modulus n has a leading zero byte; RFC 7518 §6.3.1.1 requires the minimal encoding",
                ));
            }
            Some(_) => {}
        }
        if n.last().is_some_and(|b| b & 1 == 0) {
            return Err(Error::bad_key(
                "RSA modulus n is even, so it is not a valid RSA modulus",
            ));
        }
        match e.first() {
            None => return Err(Error::bad_key("RSA exponent e is empty")),
            Some(0) => {
                return Err(Error::bad_key(
                    "RSA exponent e has a leading zero byte; RFC 7518 §6.3.1.2 requires the minimal encoding",
                ));
            }
            Some(_) => {}
        }
        if e.len() > 4 {
            return Err(Error::bad_key(
                "RSA exponent e is larger than 32 bits; use e = 65537",
            ));
        }
        let e_value = e.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        if e_value < 3 || e_value % 2 == 0 {
            return Err(Error::bad_key(format!(
                "RSA exponent e = {e_value} is invalid; it must be odd and at least 3 (use 65537)"
            )));
        }
        Ok(Jwk::Rsa { n, e })
    }

    fn ec_from_json(map: &Map<String, Value>) -> Result<Jwk, Error> {
        let curve = match string_member(map, "crv")? {
            "P-256" => EcCurve::P256,
            "P-384" => EcCurve::P384,
            other => {
                return Err(Error::bad_key(format!(
                    "jwk EC curve \"{other}\" is not supported; use P-256 or P-384"
                )));
            }
        };
        let x = bytes_member(map, "x")?;
        let y = bytes_member(map, "y")?;
        Self::ec_from_parts(curve, x, y)
    }

    /// Validates an EC point; shared by the JWK and SPKI paths.
    pub(crate) fn ec_from_parts(curve: EcCurve, x: Vec<u8>, y: Vec<u8>) -> Result<Jwk, Error> {
        let len = curve.coordinate_len();
        for (name, coordinate) in [("x", &x), ("y", &y)] {
            if coordinate.len() != len {
                return Err(Error::bad_key(format!(
                    "jwk {} coordinate {name} is {} bytes; it must be exactly {len} (RFC 7518 §6.2.1.2)",
                    curve.as_str(),
                    coordinate.len()
                )));
            }
        }
        let jwk = Jwk::Ec { curve, x, y };
        // Checking the point now turns an off-curve key into badPublicKey at registration rather
        // than a confusing signature failure later.
        let verification = match curve {
            EcCurve::P256 => &ECDSA_P256_SHA256_FIXED,
            EcCurve::P384 => &ECDSA_P384_SHA384_FIXED,
        };
        if let Some(point) = jwk.ec_uncompressed_point() {
            UnparsedPublicKey::new(verification, point)
                .parse()
                .map_err(|_| {
                    Error::bad_key(format!("jwk {} point is not on the curve", curve.as_str()))
                })?;
        }
        Ok(jwk)
    }

    fn okp_from_json(map: &Map<String, Value>) -> Result<Jwk, Error> {
        match string_member(map, "crv")? {
            "Ed25519" => {}
            other => {
                return Err(Error::bad_key(format!(
                    "jwk OKP curve \"{other}\" is not supported; only Ed25519 is"
                )));
            }
        }
        Self::ed25519_from_parts(bytes_member(map, "x")?)
    }

    pub(crate) fn ed25519_from_parts(x: Vec<u8>) -> Result<Jwk, Error> {
        if x.len() != 32 {
            return Err(Error::bad_key(format!(
                "jwk Ed25519 public key x is {} bytes; it must be exactly 32 (RFC 8037 §2)",
                x.len()
            )));
        }
        Ok(Jwk::Ed25519 { x })
    }

    /// The JWK with only the members RFC 7638 requires, so nothing the client sent beyond the key
    /// itself is echoed back or stored.
    pub fn to_json(&self) -> Value {
        match self {
            Jwk::Rsa { n, e } => json!({"kty": "RSA", "n": b64::encode(n), "e": b64::encode(e)}),
            Jwk::Ec { curve, x, y } => json!({
                "kty": "EC",
                "crv": curve.as_str(),
                "x": b64::encode(x),
                "y": b64::encode(y),
            }),
            Jwk::Ed25519 { x } => json!({"kty": "OKP", "crv": "Ed25519", "x": b64::encode(x)}),
        }
    }

    /// The RFC 7638 thumbprint: SHA-256 over the canonical JSON, base64url without padding.
    ///
    /// The canonical form is written by hand (members in lexicographic order, no whitespace)
    /// because every value is base64url or a fixed name and needs no escaping.
    pub fn thumbprint(&self) -> String {
        let canonical = match self {
            Jwk::Rsa { n, e } => {
                format!(
                    r#"{{"e":"{}","kty":"RSA","n":"{}"}}"#,
                    b64::encode(e),
                    b64::encode(n)
                )
            }
            Jwk::Ec { curve, x, y } => format!(
                r#"{{"crv":"{}","kty":"EC","x":"{}","y":"{}"}}"#,
                curve.as_str(),
                b64::encode(x),
                b64::encode(y)
            ),
            Jwk::Ed25519 { x } => format!(
                r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
                b64::encode(x)
            ),
        };
        b64::encode(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    }

    /// A short human description for error messages, such as "RSA 2048" or "ECDSA P-256".
    pub fn describe(&self) -> String {
        match self {
            Jwk::Rsa { .. } => format!("RSA {}", self.rsa_bits().unwrap_or(0)),
            Jwk::Ec { curve, .. } => format!("ECDSA {}", curve.as_str()),
            Jwk::Ed25519 { .. } => "Ed25519".to_owned(),
        }
    }

    /// The RSA modulus size in bits, or `None` for other key types.
    pub fn rsa_bits(&self) -> Option<usize> {
        match self {
            Jwk::Rsa { n, .. } => Some(match n.iter().position(|b| *b != 0) {
                Some(i) => (n.len() - i - 1) * 8 + (8 - n[i].leading_zeros() as usize),
                None => 0,
            }),
            Jwk::Ec { .. } | Jwk::Ed25519 { .. } => None,
        }
    }

    /// Whether `alg` may be used with this key.
    pub fn supports(&self, alg: Algorithm) -> bool {
        match self {
            Jwk::Rsa { .. } => matches!(alg, Algorithm::Rs256 | Algorithm::Ps256),
            Jwk::Ec { curve, .. } => curve.algorithm() == alg,
            Jwk::Ed25519 { .. } => alg == Algorithm::EdDsa,
        }
    }

    /// Refuses an `alg` that does not fit this key, naming what would.
    pub fn check_algorithm(&self, alg: Algorithm) -> Result<(), Error> {
        if self.supports(alg) {
            return Ok(());
        }
        let fitting = match self {
            Jwk::Rsa { .. } => "RS256 or PS256".to_owned(),
            Jwk::Ec { curve, .. } => curve.algorithm().as_str().to_owned(),
            Jwk::Ed25519 { .. } => "EdDSA".to_owned(),
        };
        Err(Error::bad_alg(format!(
            "JWS alg {alg} cannot be used with a {} key; this key signs with {fitting}",
            self.describe()
        )))
    }

    /// Refuses keys too weak (or too large) to accept, before any signature work is done.
    pub fn check_strength(&self) -> Result<(), Error> {
        match self.rsa_bits() {
            Some(bits) if bits < MIN_RSA_BITS => Err(Error::bad_key(format!(
                "RSA key has {bits} bits; at least {MIN_RSA_BITS} are required"
            ))),
            Some(bits) if bits > MAX_RSA_BITS => Err(Error::bad_key(format!(
                "RSA key has {bits} bits; at most {MAX_RSA_BITS} are supported"
            ))),
            _ => Ok(()),
        }
    }

    /// `0x04 || x || y`, the form aws-lc-rs takes for EC public keys.
    pub(crate) fn ec_uncompressed_point(&self) -> Option<Vec<u8>> {
        match self {
            Jwk::Ec { x, y, .. } => {
                let mut point = Vec::with_capacity(1 + x.len() + y.len());
                point.push(0x04);
                point.extend_from_slice(x);
                point.extend_from_slice(y);
                Some(point)
            }
            Jwk::Rsa { .. } | Jwk::Ed25519 { .. } => None,
        }
    }
}

fn string_member<'a>(map: &'a Map<String, Value>, name: &str) -> Result<&'a str, Error> {
    match map.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(Error::bad_key(format!(
            "jwk member \"{name}\" must be a string"
        ))),
        None => Err(Error::bad_key(format!("jwk has no \"{name}\" member"))),
    }
}

fn bytes_member(map: &Map<String, Value>, name: &str) -> Result<Vec<u8>, Error> {
    let text = string_member(map, name)?;
    b64::decode(text, &format!("jwk member \"{name}\"")).map_err(|e| match e {
        Error::Malformed(detail) => Error::BadPublicKey(detail),
        other => other,
    })
}
