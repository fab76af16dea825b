//! The issuing CA key on a PKCS#11 token (an HSM, or SoftHSM2 for testing).
//!
//! An auditor's first question about a CA is where its issuing key is. With a key on a token the
//! answer is "in the HSM, and nowhere else": this module holds only a handle to the private key
//! (a PKCS#11 object handle, a number) and asks the token to sign. The key is generated on the
//! token as sensitive and not extractable ([`generate_token_key`]), so no file, memory dump or
//! backup of the host holds it.
//!
//! What is signed is the same as for a file key (rcgen builds the certificate or CRL and hands
//! the to-be-signed bytes to [`TokenKey`] through [`rcgen::SigningKey`]):
//! - ECDSA P-256 / P-384: the digest (SHA-256 / SHA-384) is computed here with aws-lc-rs and the
//!   token signs it with `CKM_ECDSA`, the mechanism every HSM has (the hash-and-sign
//!   `CKM_ECDSA_SHA256` is optional in PKCS#11). The token's raw `r || s` is turned into the DER
//!   `ECDSA-Sig-Value` X.509 expects.
//! - RSA: `CKM_SHA256_RSA_PKCS` over the whole message.
//!
//! Sessions: PKCS#11 sessions may not be used by two threads at once, and the login state is the
//! application's, shared by all its sessions with the token. A [`TokenKey`] keeps a small pool of
//! logged-in sessions (one per concurrent signer, idle ones kept), so concurrent finalizations
//! sign in parallel when the token can; a session that fails because the token was reset or
//! logged out is dropped and the signature is tried once more on a fresh, logged-in session.
//!
//! The PIN is read from a file that only its owner may read (a file readable by its group or
//! others is refused), kept in a zeroizing secret for the re-login above, and never written to a
//! log or an error. A module is loaded and initialized once per process and never finalized:
//! keys of several issuers on one token share it.

use std::fmt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::PoisonError;

use cryptoki::context::CInitializeArgs;
use cryptoki::context::CInitializeFlags;
use cryptoki::context::Pkcs11;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::Attribute;
use cryptoki::object::AttributeType;
use cryptoki::object::KeyType;
use cryptoki::object::ObjectClass;
use cryptoki::object::ObjectHandle;
use cryptoki::session::Session;
use cryptoki::session::UserType;
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use rcgen::SignatureAlgorithm;

use crate::error::Error;
use crate::files;
use crate::key_algorithm::KeyAlgorithm;
use crate::settings::Pkcs11Key;
use crate::settings::TokenSelector;

/// DER of the OID of NIST P-256 (prime256v1), as CKA_EC_PARAMS holds it.
const P256_PARAMS: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// DER of the OID of NIST P-384 (secp384r1).
const P384_PARAMS: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
/// Idle sessions kept per key; more are opened while more threads sign at once, and closed after.
const IDLE_SESSIONS: usize = 8;

/// Loaded and initialized modules, by path: a module is initialized once per process.
static MODULES: Mutex<Vec<(PathBuf, Pkcs11)>> = Mutex::new(Vec::new());

/// The kind of key on the token and how it signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    EcdsaP256,
    EcdsaP384,
    Rsa,
}

impl Kind {
    fn algorithm(self) -> &'static SignatureAlgorithm {
        match self {
            Self::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            Self::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            Self::Rsa => &rcgen::PKCS_RSA_SHA256,
        }
    }

    /// Bytes of one coordinate (and of r and s).
    fn field_len(self) -> usize {
        match self {
            Self::EcdsaP256 => 32,
            Self::EcdsaP384 => 48,
            Self::Rsa => 0,
        }
    }
}

/// One token of a module, logged in as the user.
struct Token {
    context: Pkcs11,
    slot: Slot,
    pin: AuthPin,
    /// How messages name it: `token "certeasy" (slot 123) of /usr/lib/softhsm/libsofthsm2.so`.
    name: String,
}

impl Token {
    /// Loads the module, finds the token and checks the PIN with a first login.
    fn open(key: &Pkcs11Key) -> Result<(Self, Session), Error> {
        let pin = read_pin(&key.pin_file)?;
        let context = module(&key.module)?;
        let slot = find_slot(&context, &key.token, &key.module)?;
        let label = context
            .get_token_info(slot)
            .map(|info| info.label().trim_end().to_owned())
            .unwrap_or_default();
        let token = Self {
            context,
            slot,
            pin,
            name: format!(
                "token {label:?} (slot {}) of {}",
                slot.id(),
                key.module.display()
            ),
        };
        let session = token.session(false).map_err(|e| match e {
            cryptoki::error::Error::Pkcs11(RvError::PinIncorrect, _) => Error::InvalidCa(format!(
                "the PIN in {} is not the user PIN of the {} (CKR_PIN_INCORRECT)",
                key.pin_file.display(),
                token.name
            )),
            cryptoki::error::Error::Pkcs11(RvError::PinLocked, _) => Error::InvalidCa(format!(
                "the user PIN of the {} is locked (CKR_PIN_LOCKED): too many wrong PINs; the token's security officer must reset it",
                token.name
            )),
            other => Error::InvalidCa(format!(
                "cannot log in to the {}: {}",
                token.name,
                ck(&other)
            )),
        })?;
        Ok((token, session))
    }

    /// A new session, logged in (the login is the application's: a second session finds the user
    /// logged in already).
    fn session(&self, read_write: bool) -> cryptoki::error::Result<Session> {
        let session = if read_write {
            self.context.open_rw_session(self.slot)?
        } else {
            self.context.open_ro_session(self.slot)?
        };
        match session.login(UserType::User, Some(&self.pin)) {
            Ok(()) | Err(cryptoki::error::Error::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => {
                Ok(session)
            }
            Err(e) => Err(e),
        }
    }
}

/// A private key on a PKCS#11 token: a handle and its public key, never the private key.
pub struct TokenKey {
    token: Token,
    label: String,
    private: ObjectHandle,
    kind: Kind,
    /// The public key as X.509's subjectPublicKey holds it: the uncompressed EC point, or the
    /// DER PKCS#1 RSAPublicKey.
    public: Vec<u8>,
    /// Idle logged-in sessions.
    sessions: Mutex<Vec<Session>>,
}

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenKey")
            .field("token", &self.token.name)
            .field("label", &self.label)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl TokenKey {
    /// Opens the key `key` names: loads the module, finds the token, logs in with the PIN of its
    /// pin file, and finds the private key by its label and its public key (a public key object
    /// of the same label or CKA_ID, a certificate object of the same label, or for RSA the
    /// private key's public attributes). Each failure is an [`Error::InvalidCa`] naming what is
    /// wrong: the module, the token, the PIN file, the label.
    pub fn open(key: &Pkcs11Key) -> Result<Self, Error> {
        let (token, session) = Token::open(key)?;
        let (private, kind, public) = find_key(&session, &key.key_label, &token.name)?;
        Ok(Self {
            token,
            label: key.key_label.clone(),
            private,
            kind,
            public,
            sessions: Mutex::new(vec![session]),
        })
    }

    /// The key's label (CKA_LABEL).
    pub fn label(&self) -> &str {
        &self.label
    }

    pub(crate) fn der_bytes(&self) -> &[u8] {
        &self.public
    }

    pub(crate) fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.kind.algorithm()
    }

    pub(crate) fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        self.try_sign(msg).map_err(|e| {
            tracing::error!(token = %self.token.name, key_label = %self.label, error = %e, "the PKCS#11 token did not sign");
            rcgen::Error::RemoteKeyError
        })
    }

    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        match self.kind {
            Kind::Rsa => {
                self.with_session(|s| s.sign(&Mechanism::Sha256RsaPkcs, self.private, msg))
            }
            Kind::EcdsaP256 | Kind::EcdsaP384 => {
                let digest_alg = if self.kind == Kind::EcdsaP256 {
                    &aws_lc_rs::digest::SHA256
                } else {
                    &aws_lc_rs::digest::SHA384
                };
                let digest = aws_lc_rs::digest::digest(digest_alg, msg);
                let raw = self
                    .with_session(|s| s.sign(&Mechanism::Ecdsa, self.private, digest.as_ref()))?;
                ecdsa_signature_der(&raw, self.kind.field_len())
            }
        }
    }

    /// Runs `op` on an idle session (or a new one); once more on a fresh session when the
    /// session was lost (token reset, logged out).
    fn with_session<T>(
        &self,
        op: impl Fn(&Session) -> cryptoki::error::Result<T>,
    ) -> Result<T, String> {
        let idle = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let session = match idle {
            Some(session) => session,
            None => self.token.session(false).map_err(|e| ck(&e))?,
        };
        let (session, result) = match op(&session) {
            Err(e) if session_lost(&e) => {
                tracing::warn!(token = %self.token.name, error = %ck(&e), "a PKCS#11 session was lost; signing again on a new one");
                drop(session);
                let fresh = self.token.session(false).map_err(|e| ck(&e))?;
                let result = op(&fresh);
                (fresh, result)
            }
            other => (session, other),
        };
        match result {
            Ok(value) => {
                let mut idle = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
                if idle.len() < IDLE_SESSIONS {
                    idle.push(session);
                }
                Ok(value)
            }
            Err(e) => Err(ck(&e)),
        }
    }
}

/// Errors after which the session is of no further use.
fn session_lost(e: &cryptoki::error::Error) -> bool {
    matches!(
        e,
        cryptoki::error::Error::Pkcs11(
            RvError::SessionHandleInvalid
                | RvError::SessionClosed
                | RvError::UserNotLoggedIn
                | RvError::DeviceRemoved
                | RvError::TokenNotPresent
                | RvError::DeviceError,
            _
        )
    )
}

/// Generates a key pair on the token `key` names, labelled `key.key_label`, for the CA
/// ceremony: the private key is created sensitive and not extractable, so it can sign and never
/// leave the token. Refused if a private key of that label is already there. Returns the
/// opened key (`ca_key::generate_key_on_token` wraps it as a [`crate::CaKey`]).
pub(crate) fn generate_token_key(
    key: &Pkcs11Key,
    algorithm: KeyAlgorithm,
) -> Result<TokenKey, Error> {
    {
        let (token, _probe) = Token::open(key)?;
        let session = token.session(true).map_err(|e| {
            Error::InvalidCa(format!(
                "cannot open a read-write session with the {}: {}",
                token.name,
                ck(&e)
            ))
        })?;
        let existing = session
            .find_objects(&[
                Attribute::Class(ObjectClass::PRIVATE_KEY),
                Attribute::Label(key.key_label.as_bytes().to_vec()),
            ])
            .map_err(|e| Error::InvalidCa(format!("{}: {}", token.name, ck(&e))))?;
        if !existing.is_empty() {
            return Err(Error::InvalidCa(format!(
                "the {} already holds a private key labelled {:?}; choose another label",
                token.name, key.key_label
            )));
        }
        let mut id = [0_u8; 16];
        aws_lc_rs::rand::SecureRandom::fill(&aws_lc_rs::rand::SystemRandom::new(), &mut id)
            .map_err(|_| Error::Signing("the system random number generator failed".to_owned()))?;
        let label = key.key_label.as_bytes().to_vec();
        let mut public = vec![
            Attribute::Token(true),
            Attribute::Private(false),
            Attribute::Verify(true),
            Attribute::Label(label.clone()),
            Attribute::Id(id.to_vec()),
        ];
        let private = vec![
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            Attribute::Extractable(false),
            Attribute::Sign(true),
            Attribute::Label(label),
            Attribute::Id(id.to_vec()),
        ];
        let mechanism = match algorithm {
            KeyAlgorithm::EcdsaP256 | KeyAlgorithm::EcdsaP384 => {
                let params = if algorithm == KeyAlgorithm::EcdsaP256 {
                    P256_PARAMS
                } else {
                    P384_PARAMS
                };
                public.push(Attribute::EcParams(params.to_vec()));
                Mechanism::EccKeyPairGen
            }
            KeyAlgorithm::Rsa2048 | KeyAlgorithm::Rsa3072 | KeyAlgorithm::Rsa4096 => {
                let bits: u64 = match algorithm {
                    KeyAlgorithm::Rsa2048 => 2048,
                    KeyAlgorithm::Rsa3072 => 3072,
                    _ => 4096,
                };
                public.push(Attribute::ModulusBits(bits.into()));
                public.push(Attribute::PublicExponent(vec![0x01, 0x00, 0x01]));
                Mechanism::RsaPkcsKeyPairGen
            }
        };
        session
            .generate_key_pair(&mechanism, &public, &private)
            .map_err(|e| {
                Error::InvalidCa(format!(
                    "the {} could not generate a {} key: {}",
                    token.name,
                    algorithm.as_str(),
                    ck(&e)
                ))
            })?;
        tracing::info!(token = %token.name, key_label = %key.key_label, key_algorithm = algorithm.as_str(), "generated a key pair on the PKCS#11 token (sensitive, not extractable)");
    }
    TokenKey::open(key)
}

/// The module at `path`, loaded and initialized once per process.
fn module(path: &Path) -> Result<Pkcs11, Error> {
    let mut modules = MODULES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, context)) = modules.iter().find(|(p, _)| p == path) {
        return Ok(context.clone());
    }
    if !path.is_file() {
        return Err(Error::InvalidCa(format!(
            "the PKCS#11 module {} does not exist (for SoftHSM2: apt-get install softhsm2, module /usr/lib/softhsm/libsofthsm2.so)",
            path.display()
        )));
    }
    let context = Pkcs11::new(path).map_err(|e| {
        Error::InvalidCa(format!(
            "the PKCS#11 module {} cannot be loaded: {e}",
            path.display()
        ))
    })?;
    match context.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK)) {
        Ok(()) | Err(cryptoki::error::Error::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
        Err(e) => {
            return Err(Error::InvalidCa(format!(
                "the PKCS#11 module {} cannot be initialized: {}",
                path.display(),
                ck(&e)
            )));
        }
    }
    modules.push((path.to_path_buf(), context.clone()));
    Ok(context)
}

fn find_slot(context: &Pkcs11, selector: &TokenSelector, module: &Path) -> Result<Slot, Error> {
    let slots = context.get_slots_with_token().map_err(|e| {
        Error::InvalidCa(format!(
            "the PKCS#11 module {} cannot list its slots: {}",
            module.display(),
            ck(&e)
        ))
    })?;
    let mut seen = Vec::new();
    for slot in slots {
        let Ok(info) = context.get_token_info(slot) else {
            continue;
        };
        if !info.token_initialized() {
            continue;
        }
        let label = info.label().trim_end().to_owned();
        let found = match selector {
            TokenSelector::Label(wanted) => *wanted == label,
            TokenSelector::Slot(id) => *id == slot.id(),
        };
        if found {
            return Ok(slot);
        }
        seen.push(format!("{label:?} in slot {}", slot.id()));
    }
    let wanted = match selector {
        TokenSelector::Label(label) => format!("no initialized token labelled {label:?}"),
        TokenSelector::Slot(id) => format!("no initialized token in slot {id}"),
    };
    let there = if seen.is_empty() {
        "it has no initialized token".to_owned()
    } else {
        format!("its tokens: {}", seen.join(", "))
    };
    Err(Error::InvalidCa(format!(
        "the PKCS#11 module {} has {wanted}; {there}",
        module.display()
    )))
}

/// Reads the user PIN; a pin file its group or others may read is refused.
fn read_pin(path: &Path) -> Result<AuthPin, Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(Error::InvalidCa(format!(
                "the PIN file {} may be read by other users (mode {:o}); chmod 600 it",
                path.display(),
                mode & 0o777
            )));
        }
    }
    let text = files::read_to_string(path)?;
    let pin = text.trim_end_matches(['\r', '\n']);
    if pin.is_empty() {
        return Err(Error::InvalidCa(format!(
            "the PIN file {} is empty",
            path.display()
        )));
    }
    Ok(AuthPin::new(pin.into()))
}

/// The private key labelled `label`, its kind and its public key.
fn find_key(
    session: &Session,
    label: &str,
    token: &str,
) -> Result<(ObjectHandle, Kind, Vec<u8>), Error> {
    let fail = |what: String| Error::InvalidCa(format!("{token}: {what}"));
    let by_label = |class: ObjectClass| {
        session
            .find_objects(&[
                Attribute::Class(class),
                Attribute::Label(label.as_bytes().to_vec()),
            ])
            .map_err(|e| fail(ck(&e)))
    };
    let private = match by_label(ObjectClass::PRIVATE_KEY)?.as_slice() {
        [one] => *one,
        [] => {
            let labels = private_key_labels(session).unwrap_or_default();
            return Err(fail(format!(
                "no private key labelled {label:?}; the private keys there are labelled: {}",
                if labels.is_empty() {
                    "(none)".to_owned()
                } else {
                    labels.join(", ")
                }
            )));
        }
        many => {
            return Err(fail(format!(
                "{} private keys are labelled {label:?}; give the CA key a label of its own",
                many.len()
            )));
        }
    };
    let attrs = session
        .get_attributes(
            private,
            &[
                AttributeType::KeyType,
                AttributeType::EcParams,
                AttributeType::Id,
                AttributeType::Modulus,
                AttributeType::PublicExponent,
            ],
        )
        .map_err(|e| fail(format!("the private key labelled {label:?}: {}", ck(&e))))?;
    let mut key_type = None;
    let mut ec_params = None;
    let mut id = None;
    let mut modulus = None;
    let mut exponent = None;
    for attr in attrs {
        match attr {
            Attribute::KeyType(t) => key_type = Some(t),
            Attribute::EcParams(p) => ec_params = Some(p),
            Attribute::Id(i) => id = Some(i),
            Attribute::Modulus(m) => modulus = Some(m),
            Attribute::PublicExponent(e) => exponent = Some(e),
            _ => {}
        }
    }
    let kind = match key_type {
        Some(KeyType::EC) => match ec_params.as_deref() {
            Some(P256_PARAMS) => Kind::EcdsaP256,
            Some(P384_PARAMS) => Kind::EcdsaP384,
            _ => {
                return Err(fail(format!(
                    "the private key labelled {label:?} is on a curve Certeasy does not sign with (P-256 and P-384 are supported)"
                )));
            }
        },
        Some(KeyType::RSA) => Kind::Rsa,
        other => {
            return Err(fail(format!(
                "the private key labelled {label:?} is of type {}; Certeasy signs with EC (P-256, P-384) and RSA keys",
                other.map_or_else(|| "unknown".to_owned(), |t| t.to_string())
            )));
        }
    };

    // The public key: a public key object (by label, then by CKA_ID), a certificate object of
    // the same label, or the RSA private key's public attributes.
    let mut publics = by_label(ObjectClass::PUBLIC_KEY)?;
    if publics.is_empty()
        && let Some(id) = id.filter(|id| !id.is_empty())
    {
        publics = session
            .find_objects(&[Attribute::Class(ObjectClass::PUBLIC_KEY), Attribute::Id(id)])
            .map_err(|e| fail(ck(&e)))?;
    }
    if let [public] = publics.as_slice() {
        let public = public_key_of(session, *public, kind)
            .map_err(|what| fail(format!("the public key labelled {label:?}: {what}")))?;
        return Ok((private, kind, public));
    }
    if let [cert] = by_label(ObjectClass::CERTIFICATE)?.as_slice() {
        let value = session
            .get_attributes(*cert, &[AttributeType::Value])
            .map_err(|e| fail(ck(&e)))?;
        if let Some(Attribute::Value(der)) = value.into_iter().next() {
            let (_, parsed) = x509_parser::parse_x509_certificate(&der).map_err(|e| {
                fail(format!(
                    "the certificate labelled {label:?} cannot be parsed: {e}"
                ))
            })?;
            return Ok((
                private,
                kind,
                parsed.public_key().subject_public_key.data.to_vec(),
            ));
        }
    }
    if let (Kind::Rsa, Some(modulus), Some(exponent)) = (kind, modulus, exponent) {
        return Ok((private, kind, der_two_integers(&modulus, &exponent)));
    }
    Err(fail(format!(
        "the private key labelled {label:?} has no public key beside it (a public key or certificate object of the same label or CKA_ID); import one"
    )))
}

/// The public key of a public key object as X.509 holds it.
fn public_key_of(session: &Session, object: ObjectHandle, kind: Kind) -> Result<Vec<u8>, String> {
    let attrs = session
        .get_attributes(
            object,
            &[
                AttributeType::EcPoint,
                AttributeType::Modulus,
                AttributeType::PublicExponent,
            ],
        )
        .map_err(|e| ck(&e))?;
    let mut point = None;
    let mut modulus = None;
    let mut exponent = None;
    for attr in attrs {
        match attr {
            Attribute::EcPoint(p) => point = Some(p),
            Attribute::Modulus(m) => modulus = Some(m),
            Attribute::PublicExponent(e) => exponent = Some(e),
            _ => {}
        }
    }
    match kind {
        Kind::Rsa => match (modulus, exponent) {
            (Some(n), Some(e)) => Ok(der_two_integers(&n, &e)),
            _ => Err("it lacks CKA_MODULUS or CKA_PUBLIC_EXPONENT".to_owned()),
        },
        Kind::EcdsaP256 | Kind::EcdsaP384 => {
            let point = point.ok_or_else(|| "it lacks CKA_EC_POINT".to_owned())?;
            ec_point(&point, kind.field_len())
        }
    }
}

/// CKA_EC_POINT is a DER OCTET STRING around the uncompressed point (PKCS#11 2.40); some
/// modules give the bare point.
fn ec_point(value: &[u8], field_len: usize) -> Result<Vec<u8>, String> {
    let len = 1 + 2 * field_len;
    if value.len() == len && value[0] == 0x04 {
        return Ok(value.to_vec());
    }
    if value.len() == len + 2
        && value[0] == 0x04
        && usize::from(value[1]) == len
        && value[2] == 0x04
    {
        return Ok(value[2..].to_vec());
    }
    Err(format!(
        "CKA_EC_POINT is not an uncompressed point of {len} bytes"
    ))
}

/// The DER ECDSA-Sig-Value of a raw `r || s` signature.
fn ecdsa_signature_der(raw: &[u8], field_len: usize) -> Result<Vec<u8>, String> {
    if raw.len() != 2 * field_len {
        return Err(format!(
            "the token returned an ECDSA signature of {} bytes, not {}",
            raw.len(),
            2 * field_len
        ));
    }
    let (r, s) = raw.split_at(field_len);
    Ok(der_two_integers(r, s))
}

/// `SEQUENCE { INTEGER a, INTEGER b }` of two unsigned big-endian numbers: both an
/// ECDSA-Sig-Value and a PKCS#1 RSAPublicKey.
fn der_two_integers(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut body = der_unsigned_integer(a);
    body.extend(der_unsigned_integer(b));
    let mut out = vec![0x30];
    der_length(body.len(), &mut out);
    out.extend(body);
    out
}

fn der_unsigned_integer(bytes: &[u8]) -> Vec<u8> {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    let digits = &bytes[first..];
    let mut content = Vec::with_capacity(digits.len() + 1);
    if digits.first().is_none_or(|b| b & 0x80 != 0) {
        content.push(0);
    }
    content.extend_from_slice(digits);
    let mut out = vec![0x02];
    der_length(content.len(), &mut out);
    out.extend(content);
    out
}

fn der_length(len: usize, out: &mut Vec<u8>) {
    if len < 0x80 {
        // Fits: just checked.
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let first = bytes
            .iter()
            .position(|b| *b != 0)
            .unwrap_or(bytes.len() - 1);
        let significant = &bytes[first..];
        // At most size_of::<usize>() bytes.
        out.push(0x80 | significant.len() as u8);
        out.extend_from_slice(significant);
    }
}

fn private_key_labels(session: &Session) -> cryptoki::error::Result<Vec<String>> {
    let mut labels = Vec::new();
    for key in session.find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)])? {
        if let Some(Attribute::Label(label)) = session
            .get_attributes(key, &[AttributeType::Label])?
            .into_iter()
            .next()
        {
            labels.push(format!("{:?}", String::from_utf8_lossy(&label)));
        }
    }
    Ok(labels)
}

/// A PKCS#11 error in short: the function and the return value (`Login: PinIncorrect`).
fn ck(e: &cryptoki::error::Error) -> String {
    match e {
        cryptoki::error::Error::Pkcs11(rv, function) => format!("C_{function:?}: {rv:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::der_two_integers;
    use super::ec_point;
    use super::ecdsa_signature_der;

    /// A raw r || s becomes a DER signature aws-lc-rs's ASN.1 verifier reads: leading zeros
    /// dropped, a zero added before a high bit.
    #[test]
    fn raw_ecdsa_signatures_become_der() {
        let mut raw = vec![0_u8; 64];
        raw[1] = 0x7f; // r = 0x7f00.. with one leading zero byte
        raw[32] = 0x80; // s has its high bit set
        let der = ecdsa_signature_der(&raw, 32).unwrap();
        assert_eq!(der[0], 0x30);
        assert_eq!(&der[2..5], &[0x02, 31, 0x7f]);
        assert_eq!(&der[2 + 2 + 31..2 + 2 + 31 + 3], &[0x02, 33, 0x00]);
        assert_eq!(usize::from(der[1]), der.len() - 2);
        assert!(ecdsa_signature_der(&raw[..63], 32).is_err());
    }

    #[test]
    fn long_sequences_use_long_lengths() {
        let n = vec![0xc5_u8; 256];
        let der = der_two_integers(&n, &[1, 0, 1]);
        assert_eq!(&der[..4], &[0x30, 0x82, 0x01, 0x0a]);
        assert_eq!(&der[4..8], &[0x02, 0x82, 0x01, 0x01]);
        assert_eq!(der.len(), 4 + 0x10a);
    }

    #[test]
    fn ec_points_are_read_bare_or_wrapped() {
        let mut point = vec![0x04];
        point.extend([7_u8; 64]);
        assert_eq!(ec_point(&point, 32).unwrap(), point);
        let mut wrapped = vec![0x04, 65];
        wrapped.extend(&point);
        assert_eq!(ec_point(&wrapped, 32).unwrap(), point);
        assert!(ec_point(&point[..64], 32).is_err());
    }
}
