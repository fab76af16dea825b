//! The CSR policy (`issuance::check_csr`), fed raw DER.
//!
//! The seeds are CSRs for [`NAMES`]; a CSR accepted for that set must be refused for any other
//! set, since the names must equal the order's identifiers exactly.
#![no_main]

use std::sync::OnceLock;

use acme_core::identifier::Identifier;
use libfuzzer_sys::fuzz_target;

/// The order the seed CSRs were made for (examples/make_seeds.rs uses the same names).
const NAMES: [&str; 3] = ["dns:example.com", "dns:www.example.com", "ip:192.0.2.1"];

fn order() -> &'static [Identifier] {
    static ORDER: OnceLock<Vec<Identifier>> = OnceLock::new();
    ORDER.get_or_init(|| {
        NAMES
            .iter()
            .map(|n| {
                let (kind, value) = n.split_once(':').expect("kind:value");
                Identifier::parse(kind, value).expect("a valid identifier")
            })
            .collect()
    })
}

fuzz_target!(|der: &[u8]| {
    let Ok(checked) = issuance::check_csr(der, order()) else {
        return;
    };
    // Only the public key is taken from the CSR, and it is a piece of the CSR.
    let spki = checked.spki_der();
    assert!(!spki.is_empty());
    assert!(
        der.windows(spki.len()).any(|w| w == spki),
        "the certified key is not the CSR's"
    );
    // The same CSR does not fit an order with one name fewer.
    assert!(
        issuance::check_csr(der, &order()[1..]).is_err(),
        "a CSR with an extra name was accepted"
    );
});
