//! Certeasy's certificate authority: CA key management, CSR policy and certificate signing.
//!
//! The flow is: [`Ca::load_or_create`] and [`Profiles::new`] once at start-up; per new order
//! [`Profiles::select`] and the chosen [`Profile`]'s checks; per finalization [`check_csr`]
//! against the order's identifiers, [`Profile::check_key`], [`Profile::signing_window`], then [`Ca::prepare`] (recorded by the
//! caller) and [`Ca::issue`] with the profile. Certificates are built from policy alone (see
//! the `profile` module): a CSR contributes its public key and nothing else, so a CSR asking for
//! `cA=true` or extra extensions cannot get them.

mod alternate_chains;
mod ca;
mod ca_handle;
mod ca_key;
pub mod ceremony;
pub mod crl_distribution;
mod csr;
mod error;
mod files;
mod generate;
mod issuers;
mod key_algorithm;
mod loader;
mod pem;
mod pkcs11;
mod profile;
pub mod profiles;
mod serial;
mod settings;

pub use alternate_chains::download_pem;
pub use ca::Ca;
pub use ca::Intent;
pub use ca::IssuedCertificate;
pub use ca::RevokedEntry;
pub use ca::TlsIdentity;
pub use ca_handle::CaHandle;
pub use ca_key::CaKey;
pub use ca_key::generate_key_on_token;
pub use crl_distribution::CrlDistribution;
pub use csr::CheckedCsr;
pub use csr::check_csr;
pub use error::Error;
pub use issuers::IssuerName;
pub use issuers::IssuerSettings;
pub use issuers::RetiredIssuer;
pub use key_algorithm::KeyAlgorithm;
pub use pkcs11::TokenKey;
pub use profiles::Profile;
pub use profiles::Profiles;
pub use settings::CaSettings;
pub use settings::ExistingCa;
pub use settings::GeneratedRootKey;
pub use settings::KeySource;
pub use settings::Pkcs11Key;
pub use settings::TokenSelector;
