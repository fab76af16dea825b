//! CRLs as a relying party finds and checks them, shared by the CRL and rotation tests: the URL a
//! certificate names, its CRL fetched until it shows what the test waits for, and the verdict
//! of `openssl verify -crl_check`.

use std::path::Path;
use std::time::Duration;
use std::time::Instant;

use tokio::process::Command;
use x509_parser::extensions::DistributionPointName;
use x509_parser::extensions::GeneralName;
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

use crate::harness::run;

const TIMEOUT: Duration = Duration::from_secs(120);

/// The one URL of the certificate's CRL distribution point.
pub fn distribution_point(der: &[u8]) -> String {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).unwrap();
    let mut urls = Vec::new();
    for ext in cert.extensions() {
        if let ParsedExtension::CRLDistributionPoints(points) = ext.parsed_extension() {
            for point in points.iter() {
                if let Some(DistributionPointName::FullName(names)) = &point.distribution_point {
                    for name in names {
                        if let GeneralName::URI(uri) = name {
                            urls.push((*uri).to_owned());
                        }
                    }
                }
            }
        }
    }
    assert_eq!(urls.len(), 1, "exactly one CRL URL: {urls:?}");
    urls.remove(0)
}

pub fn serial(der: &[u8]) -> Vec<u8> {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).unwrap();
    cert.raw_serial().to_vec()
}

pub fn lists(crl: &CertificateRevocationList<'_>, serial: &[u8]) -> bool {
    crl.iter_revoked_certificates()
        .any(|r| r.raw_serial() == serial)
}

/// Fetches `url` until its CRL satisfies `done` (given the bytes after the DER and the CRL);
/// returns the DER and the response headers. `not_ok` sees the status of every other response,
/// so each caller keeps its own expectation of the way there.
pub async fn fetch_until(
    url: &str,
    done: impl Fn(&[u8], &CertificateRevocationList<'_>) -> bool,
    not_ok: impl Fn(reqwest::StatusCode),
) -> (Vec<u8>, reqwest::header::HeaderMap) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = http.get(url).send().await.unwrap();
        if response.status() == 200 {
            let headers = response.headers().clone();
            let der = response.bytes().await.unwrap().to_vec();
            let (rest, crl) = CertificateRevocationList::from_der(&der).unwrap();
            if done(rest, &crl) {
                return (der, headers);
            }
        } else {
            not_ok(response.status());
        }
        assert!(
            Instant::now() < deadline,
            "{url} never reached the expected state"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `openssl verify -crl_check` of the first certificate of lego's `crt` (leaf, then the
/// intermediate) against the root and `crl_der`.
pub async fn openssl_verify(
    dir: &Path,
    label: &str,
    crt: &Path,
    crl_der: &[u8],
    root: &Path,
) -> (bool, String) {
    let leaf_pem = dir.join(format!("{label}-leaf.pem"));
    let mut leaf = Command::new("openssl");
    leaf.args(["x509", "-in"])
        .arg(crt)
        .arg("-out")
        .arg(&leaf_pem);
    let (ok, out) = run(leaf, TIMEOUT).await;
    assert!(ok, "{out}");
    let crl_path = dir.join(format!("{label}-crl.der"));
    let crl_pem = dir.join(format!("{label}-crl.pem"));
    std::fs::write(&crl_path, crl_der).unwrap();
    let mut convert = Command::new("openssl");
    convert
        .args(["crl", "-inform", "DER", "-in"])
        .arg(&crl_path)
        .arg("-out")
        .arg(&crl_pem);
    let (ok, out) = run(convert, TIMEOUT).await;
    assert!(ok, "{out}");
    let mut verify = Command::new("openssl");
    verify
        .args(["verify", "-crl_check", "-CAfile"])
        .arg(root)
        .arg("-untrusted")
        .arg(crt)
        .arg("-CRLfile")
        .arg(&crl_pem)
        .arg(&leaf_pem);
    run(verify, TIMEOUT).await
}
