//! Writes the hand-made seed corpora under `testdata/fuzz/<target>/`: real signed JWS bodies,
//! real CSRs, identifiers, configuration files and overrides files, each valid or one step from
//! valid, so the fuzzers start at the parsers' deep paths instead of at "not JSON".
//!
//! Run from the repository root: `cargo run --manifest-path fuzz/Cargo.toml --example make_seeds`.
//! Files are named by their content's purpose; re-running replaces them (keys are fresh each time).

use std::fs;
use std::path::{Path, PathBuf};

use acme_jose::Algorithm;
use acme_jose::sign::SigningKey;
use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use serde_json::json;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let root = Path::new("testdata/fuzz");
    jws(&root.join("jws"))?;
    csr(&root.join("csr"))?;
    identifier(&root.join("identifier"))?;
    config(&root.join("config"))?;
    overrides(&root.join("overrides"))?;
    Ok(())
}

fn write(dir: &Path, name: &str, data: impl AsRef<[u8]>) -> Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join(name), data)?;
    Ok(())
}

fn jws(dir: &Path) -> Result<()> {
    let url = "https://127.0.0.1:14000/acme/new-account";
    let nonce = Some("oFvnlFP1wIhRlYS2jTaXbA");
    let kid = "https://127.0.0.1:14000/acme/acct/1";
    let payload = json!({"termsOfServiceAgreed": true, "contact": ["mailto:a@example.com"]});
    for (name, alg) in [
        ("es256", Algorithm::Es256),
        ("es384", Algorithm::Es384),
        ("eddsa", Algorithm::EdDsa),
        ("rs256", Algorithm::Rs256),
        ("ps256", Algorithm::Ps256),
    ] {
        let key = SigningKey::generate(alg)?;
        write(
            dir,
            &format!("{name}-new-account.json"),
            key.sign_acme(url, nonce, None, Some(&payload))?,
        )?;
        write(
            dir,
            &format!("{name}-kid-post-as-get.json"),
            key.sign_acme(url, nonce, Some(kid), None)?,
        )?;
    }
    let key = SigningKey::generate(Algorithm::Es256)?;
    // Near misses: each breaks one rule the parser enforces.
    write(
        dir,
        "near-empty-object-payload.json",
        key.sign_acme(url, nonce, Some(kid), Some(&json!({})))?,
    )?;
    write(
        dir,
        "near-repeated-header-name.json",
        key.sign_flattened_raw(
            &format!(
                r#"{{"alg":"ES256","kid":"{kid}","url":"{url}","url":"https://127.0.0.1/x"}}"#
            ),
            b"{}",
        )?,
    )?;
    write(
        dir,
        "near-alg-none.json",
        key.sign_flattened(json!({"alg": "none", "kid": kid, "url": url}), b"")?,
    )?;
    write(
        dir,
        "near-jwk-and-kid.json",
        key.sign_flattened(
            json!({"jwk": key.public_jwk().to_json(), "kid": kid, "url": url, "nonce": "n"}),
            b"",
        )?,
    )?;
    let body: serde_json::Value =
        serde_json::from_str(&key.sign_acme(url, nonce, None, Some(&payload))?)?;
    let part = |m: &str| body[m].as_str().unwrap_or_default().to_owned();
    write(
        dir,
        "near-compact.txt",
        format!(
            "{}.{}.{}",
            part("protected"),
            part("payload"),
            part("signature")
        ),
    )?;
    write(
        dir,
        "near-general-serialization.json",
        json!({"payload": part("payload"), "signatures": [{"protected": part("protected"), "signature": part("signature")}]})
            .to_string(),
    )?;
    write(
        dir,
        "near-unprotected-header.json",
        json!({"protected": part("protected"), "header": {"kid": kid}, "payload": part("payload"), "signature": part("signature")})
            .to_string(),
    )?;
    write(
        dir,
        "near-padded-base64.json",
        json!({"protected": format!("{}==", part("protected")), "payload": part("payload"), "signature": part("signature")})
            .to_string(),
    )?;
    write(dir, "near-repeated-member.json", {
        let mut text = body.to_string();
        text.insert_str(1, &format!(r#""payload":"{}","#, part("payload")));
        text
    })?;
    Ok(())
}

fn csr_der(key: &KeyPair, names: &[SanType], common_name: Option<&str>) -> Result<Vec<u8>> {
    let mut params = CertificateParams::default();
    params.subject_alt_names = names.to_vec();
    if let Some(cn) = common_name {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    Ok(params.serialize_request(key)?.der().to_vec())
}

fn csr(dir: &Path) -> Result<()> {
    // The fuzz target checks CSRs against this order (fuzz_targets/csr.rs, NAMES).
    let order = [
        SanType::DnsName("example.com".try_into()?),
        SanType::DnsName("www.example.com".try_into()?),
        SanType::IpAddress("192.0.2.1".parse()?),
    ];
    let p256 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let p384 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384)?;
    let rsa = KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256)?;
    let ed25519 = KeyPair::generate_for(&rcgen::PKCS_ED25519)?;
    write(
        dir,
        "p256.der",
        csr_der(&p256, &order, Some("example.com"))?,
    )?;
    write(dir, "p384.der", csr_der(&p384, &order, None)?)?;
    write(
        dir,
        "rsa2048.der",
        csr_der(&rsa, &order, Some("www.example.com"))?,
    )?;
    // Near misses.
    write(
        dir,
        "near-ed25519-key.der",
        csr_der(&ed25519, &order, None)?,
    )?;
    write(
        dir,
        "near-missing-name.der",
        csr_der(&p256, &order[..2], None)?,
    )?;
    write(
        dir,
        "near-cn-not-in-san.der",
        csr_der(&p256, &order, Some("other.example.com"))?,
    )?;
    write(
        dir,
        "near-email-san.der",
        csr_der(
            &p256,
            &[
                order[0].clone(),
                SanType::Rfc822Name("a@example.com".try_into()?),
            ],
            None,
        )?,
    )?;
    write(
        dir,
        "near-wildcard-and-uppercase.der",
        csr_der(
            &p256,
            &[
                SanType::DnsName("*.Example.COM".try_into()?),
                SanType::DnsName("EXAMPLE.com.".try_into()?),
                SanType::IpAddress("2001:db8::1".parse()?),
            ],
            None,
        )?,
    )?;
    let mut tampered = csr_der(&p256, &order, None)?;
    if let Some(last) = tampered.last_mut() {
        *last ^= 1;
    }
    write(dir, "near-bad-signature.der", tampered)?;
    let mut trailing = csr_der(&p256, &order, None)?;
    trailing.push(0);
    write(dir, "near-trailing-byte.der", trailing)?;
    Ok(())
}

fn identifier(dir: &Path) -> Result<()> {
    let seeds: [(&str, &str); 16] = [
        ("dns-plain", "dns\nexample.com"),
        ("dns-upper-trailing-dot", "dns\nWWW.Example.COM."),
        (
            "dns-wildcard",
            "dns\n*.example.com\nallow-domain example.com",
        ),
        (
            "dns-idna",
            "dns\nxn--bcher-kva.example\ndeny-domain example",
        ),
        ("dns-bad-idna", "dns\nxn--zz.example"),
        ("dns-unicode", "dns\nbücher.example"),
        ("dns-empty-label", "dns\na..example.com"),
        ("dns-inner-wildcard", "dns\na.*.example.com"),
        (
            "dns-long-label",
            "dns\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com",
        ),
        ("dns-digits-tld", "dns\nexample.123"),
        ("dns-ip-text", "dns\n192.0.2.1"),
        (
            "ip-v4",
            "ip\n192.0.2.1\nallow-cidr 192.0.2.0/24\ndeny-cidr 192.0.2.128/25",
        ),
        ("ip-v6", "ip\n2001:DB8:0:0::1\ndeny-cidr 2001:db8::/32"),
        ("ip-v4-mapped", "ip\n::ffff:10.0.0.1\nallow-cidr 10.0.0.0/8"),
        ("ip-bad", "ip\n10.0.0.256"),
        ("other-type", "email\na@example.com"),
    ];
    for (name, text) in seeds {
        write(dir, &format!("{name}.txt"), text)?;
    }
    Ok(())
}

fn config(dir: &Path) -> Result<()> {
    for file in ["certeasy.yaml", "scale.yaml"] {
        fs::copy(PathBuf::from("config").join(file), {
            fs::create_dir_all(dir)?;
            dir.join(file)
        })?;
    }
    let seeds: [(&str, &str); 6] = [
        (
            "near-unknown-key.yaml",
            "server:\n  listen: 127.0.0.1:14000\n  lisen: 127.0.0.1:1\n",
        ),
        (
            "near-duplicate-key.yaml",
            "validation:\n  workers: 4\n  workers: 8\n",
        ),
        ("near-wrong-type.yaml", "validation:\n  workers: many\n"),
        (
            "near-norway-bool.yaml",
            "validation:\n  allow-loopback: yes\n",
        ),
        (
            "near-misplaced-key.yaml",
            "rate-limiting:\n  redis:\n    url: redis://127.0.0.1:6379\n",
        ),
        ("near-zero-workers.yaml", "validation:\n  workers: 0\n"),
    ];
    for (name, text) in seeds {
        write(dir, name, text)?;
    }
    Ok(())
}

fn overrides(dir: &Path) -> Result<()> {
    let seeds: [(&str, &str); 10] = [
        (
            "docs-example.yaml",
            "- limit: order-creation\n  burst: 50\n  count: 500\n  period: 1h\n  ids: [\"1234\", \"5678\"]\n  comment: \"CI fleet\"\n- limit: global\n  requests-per-minute: 2000\n  burst: 200\n  ids: [\"10.1.0.0/16\", \"192.0.2.7\"]\n",
        ),
        (
            "own-keys.yaml",
            "- limit: account-creation\n  per-ip-per-hour: 50\n  ids: [\"2001:db8::/48\"]\n- limit: san-budget\n  san-budget-per-account-per-hour: 5000\n  ids: [\"42\"]\n- limit: failed-validation\n  max-per-window: 20\n  window: 30m\n  ids: [\"42\"]\n- limit: zombie-pausing\n  max-consecutive-failures: 100\n  forgive-one-per: 1d\n  ids: [\"42\"]\n- limit: order-creation\n  orders-per-account-per-hour: 1000\n  order-burst: 100\n  ids: [\"7\"]\n",
        ),
        ("empty.yaml", ""),
        ("empty-list.yaml", "[]\n"),
        (
            "near-unknown-limit.yaml",
            "- limit: globl\n  burst: 1\n  ids: [\"10.0.0.1\"]\n",
        ),
        (
            "near-zero-burst.yaml",
            "- limit: global\n  burst: 0\n  ids: [\"10.0.0.1\"]\n",
        ),
        (
            "near-wrong-id-kind.yaml",
            "- limit: order-creation\n  count: 5\n  ids: [\"10.0.0.1\"]\n",
        ),
        (
            "near-repeated-id.yaml",
            "- limit: global\n  burst: 5\n  ids: [\"10.0.0.1\"]\n- limit: global\n  burst: 6\n  ids: [\"10.0.0.1\"]\n",
        ),
        (
            "near-two-counts.yaml",
            "- limit: global\n  count: 5\n  requests-per-minute: 6\n  ids: [\"10.0.0.0/8\"]\n",
        ),
        (
            "near-huge-numbers.yaml",
            "- limit: global\n  burst: 18446744073709551615\n  count: 18446744073709551615\n  period: 1ns\n  ids: [\"0.0.0.0/0\"]\n",
        ),
    ];
    for (name, text) in seeds {
        write(dir, name, text)?;
    }
    Ok(())
}
