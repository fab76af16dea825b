//! The `openssl` command line as the relying party's second opinion: tests check what the CA
//! signed with a verifier that shares none of the CA's code.

use std::path::Path;
use std::process::Command;

/// Runs `openssl` with `args`: whether it succeeded, and its stdout and stderr together (openssl
/// writes its verdicts to either).
pub fn openssl(args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new("openssl");
    cmd.args(args);
    output(&mut cmd)
}

/// `openssl verify` of the PEM certificate `leaf` under the root `root`, with the intermediates
/// in `untrusted`.
pub fn verify(root: &Path, untrusted: &Path, leaf: &Path) -> (bool, String) {
    let mut cmd = Command::new("openssl");
    cmd.args(["verify", "-CAfile"])
        .arg(root)
        .arg("-untrusted")
        .arg(untrusted)
        .arg(leaf);
    output(&mut cmd)
}

/// `openssl crl -verify` of the DER CRL `crl` against the PEM certificate `ca` of its issuer;
/// with `-text`, so the output also lists the revoked serials.
pub fn verify_crl(crl: &Path, ca: &Path) -> (bool, String) {
    let mut cmd = Command::new("openssl");
    cmd.args(["crl", "-inform", "DER", "-in"])
        .arg(crl)
        .arg("-CAfile")
        .arg(ca)
        .args(["-noout", "-verify", "-text"]);
    output(&mut cmd)
}

fn output(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("openssl is installed");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
