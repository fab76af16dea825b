//! SoftHSM2, a PKCS#11 token in files, for the tests of a CA key kept on a token.
//!
//! SoftHSM2 finds its token directory through the configuration file named by the environment
//! variable `SOFTHSM2_CONF`, read once when the module is initialized in a process. A test may
//! not set environment variables (the workspace forbids `unsafe`, and `set_var` is), and tests of
//! one binary may share a process; so [`isolated`] runs the calling test again in a child
//! process of the test binary whose environment names a fresh SoftHSM2 directory of its own: the
//! child (and every process it starts, such as `certeasy serve`) sees only that test's tokens.
//!
//! The module is looked for where Debian's `softhsm2` package puts it, or at
//! `CERTEASY_TEST_PKCS11_MODULE`. Without it the test fails saying what to install; it is never
//! skipped (scripts/test.sh installs the package).

use std::path::Path;
use std::path::PathBuf;
use std::process::Command;

use rcgen::BasicConstraints;
use rcgen::CertificateParams;
use rcgen::DnType;
use rcgen::IsCa;
use rcgen::KeyUsagePurpose;

/// Names the SoftHSM2 directory in the child process [`isolated`] starts.
const DIR_VAR: &str = "CERTEASY_TEST_SOFTHSM_DIR";
/// Where Debian and source builds install the module.
const MODULE_CANDIDATES: &[&str] = &[
    "/usr/lib/softhsm/libsofthsm2.so",
    "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/local/lib/softhsm/libsofthsm2.so",
];
/// The security officer's PIN of every test token.
pub const SO_PIN: &str = "so-pin-1234";

/// The SoftHSM2 PKCS#11 module: `CERTEASY_TEST_PKCS11_MODULE`, or where the Debian package
/// installs it. Panics, saying what to install, when there is none.
pub fn module() -> PathBuf {
    if let Some(path) = std::env::var_os("CERTEASY_TEST_PKCS11_MODULE") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "CERTEASY_TEST_PKCS11_MODULE={} is not a file",
            path.display()
        );
        return path;
    }
    MODULE_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "SoftHSM2 is not installed (no libsofthsm2.so in {}): install the Debian package softhsm2 (scripts/test.sh does), or set CERTEASY_TEST_PKCS11_MODULE",
                MODULE_CANDIDATES.join(", ")
            )
        })
}

/// A SoftHSM2 configuration and token directory of one test.
#[derive(Debug)]
pub struct SoftHsm {
    dir: PathBuf,
}

/// A token made by [`SoftHsm::init_token`].
#[derive(Debug, Clone)]
pub struct TestToken {
    /// The token's label.
    pub label: String,
    /// The user PIN.
    pub pin: String,
    /// A file holding the user PIN, mode 0600.
    pub pin_file: PathBuf,
}

/// Runs the calling test in a child process with a SoftHSM2 directory of its own; `test` is the
/// test's full name in its binary (`module::function`). In the parent: waits for the child,
/// panics with its output unless it passed, and returns `None` (the test then returns). In the
/// child: returns the SoftHSM2 to use.
///
/// ```ignore
/// let Some(hsm) = testkit::softhsm::isolated("hsm::the_test") else { return };
/// ```
pub fn isolated(test: &str) -> Option<SoftHsm> {
    if let Some(dir) = std::env::var_os(DIR_VAR) {
        return Some(SoftHsm {
            dir: PathBuf::from(dir),
        });
    }
    let dir = fresh_dir();
    let output = again_in(dir.path())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{test} failed in its SoftHSM2 process ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    // libtest exits 0 when the filter matches nothing: the child must really have run it.
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in its SoftHSM2 process (is the name right?):\n{stdout}\n{stderr}"
    );
    None
}

/// For a benchmark (a `main` of its own): runs this program again with the same arguments in a
/// child process with a fresh SoftHSM2 directory, and exits with the child's status. In the
/// child: returns the SoftHSM2 to use.
pub fn in_own_process() -> SoftHsm {
    if let Some(dir) = std::env::var_os(DIR_VAR) {
        return SoftHsm {
            dir: PathBuf::from(dir),
        };
    }
    let dir = fresh_dir();
    let status = again_in(dir.path())
        .args(std::env::args_os().skip(1))
        .status()
        .expect("the program runs again");
    drop(dir);
    std::process::exit(status.code().unwrap_or(1));
}

/// A temporary SoftHSM2 directory: its configuration and an empty token directory.
fn fresh_dir() -> tempfile::TempDir {
    assert!(
        Command::new("softhsm2-util")
            .arg("--version")
            .output()
            .is_ok(),
        "softhsm2-util is not installed: install the Debian package softhsm2 (scripts/test.sh does)"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tokens = dir.path().join("tokens");
    std::fs::create_dir(&tokens).expect("the token directory");
    std::fs::write(
        conf_path(dir.path()),
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n",
            tokens.display()
        ),
    )
    .expect("the SoftHSM2 configuration");
    dir
}

/// This program again, its environment naming the SoftHSM2 directory `dir`.
fn again_in(dir: &Path) -> Command {
    let exe = std::env::current_exe().expect("the program's path");
    let mut cmd = Command::new(exe);
    cmd.env(DIR_VAR, dir)
        .env("SOFTHSM2_CONF", conf_path(dir))
        .env("CERTEASY_TEST_PKCS11_MODULE", module());
    cmd
}

fn conf_path(dir: &Path) -> PathBuf {
    dir.join("softhsm2.conf")
}

impl SoftHsm {
    /// The PKCS#11 module.
    pub fn module(&self) -> PathBuf {
        module()
    }

    /// The directory of this SoftHSM2 (its configuration and tokens); files a test makes may go
    /// here too.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Initializes a fresh token labelled `label` with `softhsm2-util --init-token --free`, with
    /// user PIN `pin`, and writes the PIN to a file of mode 0600.
    pub fn init_token(&self, label: &str, pin: &str) -> TestToken {
        let output = Command::new("softhsm2-util")
            .args([
                "--init-token",
                "--free",
                "--label",
                label,
                "--so-pin",
                SO_PIN,
            ])
            .args(["--pin", pin])
            .env("SOFTHSM2_CONF", conf_path(&self.dir))
            .output()
            .expect("softhsm2-util runs");
        assert!(
            output.status.success(),
            "softhsm2-util --init-token failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let pin_file = self.write_pin(&format!("{label}.pin"), pin);
        TestToken {
            label: label.to_owned(),
            pin: pin.to_owned(),
            pin_file,
        }
    }

    /// Writes `pin` to the file `name` in this directory, mode 0600.
    pub fn write_pin(&self, name: &str, pin: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.join(name);
        std::fs::write(&path, format!("{pin}\n")).expect("the PIN file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .expect("chmod 600 the PIN file");
        path
    }
}

/// The parameters of a CA certificate `CN=cn` around a token's key, as an operator would make
/// them (a root in a file, or the issuing CA whose key is on the token): a CA, with path length
/// `path_len` (`None`: unconstrained), that signs certificates and CRLs. The caller sets the
/// validity, which each test ties to its own clock.
pub fn ca_params(cn: &str, path_len: Option<u8>) -> CertificateParams {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).expect("no names is a valid name list");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(match path_len {
        Some(n) => BasicConstraints::Constrained(n),
        None => BasicConstraints::Unconstrained,
    });
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    params
}
