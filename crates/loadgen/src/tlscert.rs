//! A throw-away CA and listener certificate for a server under test (Pebble's Debian package
//! ships no `test/certs`).

use anyhow::Context;
use rcgen::BasicConstraints;
use rcgen::CertificateParams;
use rcgen::DnType;
use rcgen::IsCa;
use rcgen::Issuer;
use rcgen::KeyPair;
use rcgen::KeyUsagePurpose;

use crate::cli::TlsCertArgs;

/// Writes `root.pem` (trust this), `cert.pem` (localhost, 127.0.0.1) and `key.pem`.
pub(crate) fn write(args: &TlsCertArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let root_key = KeyPair::generate()?;
    let mut root_params = CertificateParams::default();
    root_params
        .distinguished_name
        .push(DnType::CommonName, "certeasy-loadgen test root");
    root_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    root_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let root = root_params.self_signed(&root_key)?;

    let leaf_key = KeyPair::generate()?;
    let mut leaf_params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let issuer = Issuer::new(root_params, root_key);
    let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;

    let write = |name: &str, pem: String| {
        let path = args.out.join(name);
        std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))
    };
    write("root.pem", root.pem())?;
    write("cert.pem", format!("{}{}", leaf.pem(), root.pem()))?;
    write("key.pem", leaf_key.serialize_pem())?;
    Ok(())
}
