//! `certeasy ca …`: the key ceremony and the offline root, run on this machine's files with no
//! server (`issuance::ceremony` does the work; this module reads the configuration, checks
//! where keys may go and tells the operator what to keep where).
//!
//! - `ca init`: the ceremony. A root, the issuing intermediate (file key, or a key made on a
//!   PKCS#11 token) and the listener's intermediate in the CA directory, the root key only at
//!   `--root-key-out`, never in the data directory unless `--allow-root-key-in-data-dir`.
//! - `ca new-intermediate`: the next issuer (rotation): a CSR for an offline or external root,
//!   or its certificate signed by the offline root brought in for the occasion; prints the
//!   `ca.issuers` entry to add.
//! - `ca move-root-key`: takes a root key that a first start (or an older Certeasy) left on the
//!   server to where the operator keeps it.
//!
//! Exit codes: 0 done; 1 the ceremony failed (nothing half-written: keys and certificates are
//! written atomically and never overwritten); 2 the command line or the configuration is wrong.

use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;

use acme_core::duration::ConfigDuration;
use clap::Subcommand;
use issuance::CaSettings;
use issuance::ceremony;
use issuance::ceremony::IntermediateSigner;
use issuance::ceremony::NameConstraints;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::config::Config;

/// `certeasy ca`.
#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// The key ceremony: create the root and the first intermediates, the root key offline.
    ///
    /// Writes into the CA directory (<data-dir>/ca of --config, or --ca-dir) what `certeasy
    /// serve` needs: root.pem (the certificate clients trust), intermediate.pem and its key
    /// intermediate.key (0600; or the key on a PKCS#11 token with --pkcs11-module), and the
    /// listener's intermediate listener.pem and listener.key (it signs only Certeasy's own HTTPS
    /// certificate). The root's private key is written only to --root-key-out (0600), which
    /// must lie outside the data directory: take it offline afterwards (removable media, a
    /// safe). `serve` never needs it; `ca new-intermediate` does, when the next intermediate is
    /// made. Names, key algorithm and lifetimes come from the `ca:` section of --config.
    ///
    /// With --name-constraints the issuing intermediate carries a critical nameConstraints
    /// extension made from `identifiers:` (allow-domains and allow-cidrs permitted,
    /// deny-domains and deny-cidrs excluded): clients then refuse any certificate it signs for
    /// another name, even one signed with a stolen intermediate key.
    ///
    /// Refuses to run when the CA directory already holds a CA, or the root key file exists.
    Init(InitArgs),
    /// Make the next intermediate (issuer rotation): a CSR, or a certificate signed by the
    /// offline root.
    ///
    /// Generates <out-dir>/<name>.key (0600; or a key on a PKCS#11 token) and either writes a
    /// CSR (--csr-out) for an offline or external root to sign, or signs the intermediate here
    /// with the offline root (--root-cert and --root-key) into <out-dir>/<name>.pem. Prints the
    /// `ca.issuers` entry to add to the configuration; `certeasy admin ca activate <name>` then
    /// makes it the issuer of new orders.
    NewIntermediate(NewIntermediateArgs),
    /// Move the root's private key off the server: to --to (0600), copied atomically, read back
    /// and checked against root.pem, then removed where it was.
    ///
    /// Without --from, the key is looked for where Certeasy left it: <data-dir>/ca/root.key (an
    /// older Certeasy), then <data-dir>.root-offline/root.key (a first start without a
    /// ceremony).
    MoveRootKey(MoveRootKeyArgs),
}

/// Where a key made on a PKCS#11 token goes.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Key on a PKCS#11 token (HSM)")]
pub struct Pkcs11Args {
    /// Make the intermediate's key on a token of this PKCS#11 module (the vendor's shared
    /// library, e.g. /usr/lib/softhsm/libsofthsm2.so) instead of in a file.
    #[arg(long, value_name = "PATH", requires_all = ["token_label", "key_label", "pin_file"])]
    pub pkcs11_module: Option<PathBuf>,
    /// The token's label.
    #[arg(long, value_name = "LABEL", requires = "pkcs11_module")]
    pub token_label: Option<String>,
    /// The label (CKA_LABEL) to give the new key.
    #[arg(long, value_name = "LABEL", requires = "pkcs11_module")]
    pub key_label: Option<String>,
    /// A file holding the token's user PIN.
    #[arg(long, value_name = "PATH", requires = "pkcs11_module")]
    pub pin_file: Option<PathBuf>,
}

/// `certeasy ca init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The configuration file (its data-dir, `ca:` and, for --name-constraints, `identifiers:`);
    /// without it, the built-in defaults.
    #[arg(long, short, env = "CERTEASY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where to write the root's private key (must not exist). Not in the data directory.
    #[arg(long, value_name = "PATH")]
    pub root_key_out: PathBuf,
    /// Accept a --root-key-out inside the data directory or the CA directory (every start of
    /// `serve` will then warn about it).
    #[arg(long)]
    pub allow_root_key_in_data_dir: bool,
    /// The CA directory to create the CA in [default: <data-dir>/ca].
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<PathBuf>,
    /// Put a critical nameConstraints extension on the issuing intermediate, from the
    /// identifier policy (`identifiers:` of --config).
    #[arg(long, alias = "name-constraints-from-config")]
    pub name_constraints: bool,
    #[command(flatten)]
    pub pkcs11: Pkcs11Args,
    /// Print one JSON object instead of the text, for scripts.
    #[arg(long)]
    pub json: bool,
}

/// `certeasy ca new-intermediate`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("signer").required(true).args(["csr_out", "root_cert"]))]
pub struct NewIntermediateArgs {
    /// The configuration file (its data-dir, `ca:` and, for --name-constraints, `identifiers:`).
    #[arg(long, short, env = "CERTEASY_CONFIG")]
    pub config: Option<PathBuf>,
    /// The issuer's name in `ca.issuers`: 1 to 32 of a-z, 0-9 and -, not "default". The files
    /// are <name>.pem and <name>.key.
    #[arg(long)]
    pub name: String,
    /// Write a certificate signing request here, for an offline or external root to sign (the
    /// signed certificate then goes to <out-dir>/<name>.pem).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["root_cert", "root_key"])]
    pub csr_out: Option<PathBuf>,
    /// Sign here with the offline root: its certificate...
    #[arg(long, value_name = "PATH", requires = "root_key")]
    pub root_cert: Option<PathBuf>,
    /// ...and its private key.
    #[arg(long, value_name = "PATH", requires = "root_cert")]
    pub root_key: Option<PathBuf>,
    /// Where <name>.pem and <name>.key go [default: <data-dir>/ca].
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// CN= of the intermediate [default: ca.intermediate-common-name and the name].
    #[arg(long, value_name = "CN")]
    pub common_name: Option<String>,
    /// Lifetime, e.g. 1825d [default: ca.intermediate-validity]; never beyond the root's.
    #[arg(long, value_name = "DURATION")]
    pub validity: Option<ConfigDuration>,
    /// Put a critical nameConstraints extension on the intermediate, from the identifier
    /// policy (`identifiers:` of --config); in a CSR, as a requested extension.
    #[arg(long, alias = "name-constraints-from-config")]
    pub name_constraints: bool,
    #[command(flatten)]
    pub pkcs11: Pkcs11Args,
    /// Print one JSON object instead of the text, for scripts.
    #[arg(long)]
    pub json: bool,
}

/// `certeasy ca move-root-key`.
#[derive(Debug, clap::Args)]
pub struct MoveRootKeyArgs {
    /// The configuration file (its data-dir).
    #[arg(long, short, env = "CERTEASY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where to move the key (must not exist; not in the data directory).
    #[arg(long, value_name = "PATH")]
    pub to: PathBuf,
    /// The key to move [default: where Certeasy left it].
    #[arg(long, value_name = "PATH")]
    pub from: Option<PathBuf>,
    /// Print one JSON object instead of the text, for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs one `certeasy ca` command.
pub fn run(command: CaCommand) -> ExitCode {
    let result = match command {
        CaCommand::Init(args) => init(&args),
        CaCommand::NewIntermediate(args) => new_intermediate(&args),
        CaCommand::MoveRootKey(args) => move_root_key(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("certeasy ca: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Code(code)) => code,
        Err(Failure::Ceremony(e)) => {
            eprintln!("certeasy ca: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why a command stopped.
enum Failure {
    /// The command line or the configuration asks for something impossible (exit 2).
    Usage(String),
    /// Already reported (a bad configuration file).
    Code(ExitCode),
    /// The ceremony itself failed (exit 1).
    Ceremony(issuance::Error),
}

impl From<issuance::Error> for Failure {
    fn from(e: issuance::Error) -> Self {
        Self::Ceremony(e)
    }
}

fn load_config(path: Option<&Path>) -> Result<Config, Failure> {
    crate::config::load_or_default(path).map_err(Failure::Code)
}

/// The generated-CA settings of `config` for a CA in `dir`.
fn ca_settings(config: &Config, dir: PathBuf) -> CaSettings {
    let c = &config.ca;
    let mut settings = CaSettings::new(dir);
    settings.key_algorithm = c.key_algorithm;
    settings.organization = c.organization.clone();
    settings.root_common_name = c.root_common_name.clone();
    settings.intermediate_common_name = c.intermediate_common_name.clone();
    settings.root_validity = c.root_validity.time();
    settings.intermediate_validity = c.intermediate_validity.time();
    settings
}

fn name_constraints(config: &Config, wanted: bool) -> Result<Option<NameConstraints>, Failure> {
    if !wanted {
        return Ok(None);
    }
    NameConstraints::from_policy(&config.identifiers.policy())
        .map(Some)
        .map_err(|e| Failure::Usage(format!("--name-constraints: {e}")))
}

/// Refuses a key file inside the data directory (or `also`, the CA directory).
fn refuse_inside(what: &str, path: &Path, data_dir: &Path, also: &Path) -> Result<(), Failure> {
    for dir in [data_dir, also] {
        if ceremony::is_inside(path, dir) {
            return Err(Failure::Usage(format!(
                "{what} {} is inside {}: the root key must be kept out of the data directory (offline); choose another place, or pass --allow-root-key-in-data-dir to accept it",
                path.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

impl Pkcs11Args {
    /// The key to make on a token, when --pkcs11-module is given (clap requires the rest then).
    fn key(&self) -> Result<Option<issuance::Pkcs11Key>, Failure> {
        let Some(module) = &self.pkcs11_module else {
            return Ok(None);
        };
        match (&self.token_label, &self.key_label, &self.pin_file) {
            (Some(token), Some(key_label), Some(pin_file)) => Ok(Some(issuance::Pkcs11Key {
                module: module.clone(),
                token: issuance::TokenSelector::Label(token.clone()),
                key_label: key_label.clone(),
                pin_file: pin_file.clone(),
            })),
            _ => Err(Failure::Usage(
                "--pkcs11-module needs --token-label, --key-label and --pin-file".to_owned(),
            )),
        }
    }
}

/// The `pkcs11:` block of the configuration (docs/configuration.md) for `key`, indented by
/// `indent` spaces.
fn pkcs11_yaml(key: &issuance::Pkcs11Key, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let token = match &key.token {
        issuance::TokenSelector::Label(label) => {
            format!("{pad}  token-label: {}\n", yaml_text(label))
        }
        issuance::TokenSelector::Slot(slot) => format!("{pad}  slot: {slot}\n"),
    };
    format!(
        "{pad}pkcs11:\n{pad}  module: {}\n{token}{pad}  key-label: {}\n{pad}  pin-file: {}\n",
        yaml_path(&key.module),
        yaml_text(&key.key_label),
        yaml_path(&key.pin_file)
    )
}

fn init(args: &InitArgs) -> Result<(), Failure> {
    let config = load_config(args.config.as_deref())?;
    if config.ca.existing.is_configured() && args.ca_dir.is_none() {
        return Err(Failure::Usage(
            "the configuration names an existing CA (ca.existing), which `serve` loads instead of <data-dir>/ca; remove ca.existing, or give --ca-dir for a CA made elsewhere".to_owned(),
        ));
    }
    let ca_dir = args
        .ca_dir
        .clone()
        .unwrap_or_else(|| config.data_dir.join("ca"));
    if !args.allow_root_key_in_data_dir {
        refuse_inside(
            "--root-key-out",
            &args.root_key_out,
            &config.data_dir,
            &ca_dir,
        )?;
    }
    let constraints = name_constraints(&config, args.name_constraints)?;
    let token = args.pkcs11.key()?;
    let settings = ca_settings(&config, ca_dir.clone());
    let request = ceremony::InitRequest {
        settings: &settings,
        root_key_out: &args.root_key_out,
        name_constraints: constraints.as_ref(),
        root_key_in_ca_dir_allowed: args.allow_root_key_in_data_dir,
    };
    let made = match &token {
        None => ceremony::init(&request, OffsetDateTime::now_utc())?,
        Some(key) => {
            ceremony::check_init(&request)?;
            let on_token = issuance::generate_key_on_token(key, config.ca.key_algorithm)?;
            ceremony::init_with_key(&request, &on_token, OffsetDateTime::now_utc())?
        }
    };
    // With the key on a token `serve` loads the CA as an existing one, which names the token.
    let existing_yaml = token.as_ref().map(|key| {
        format!(
            "ca:\n  existing:\n    certificate: {}\n{}    chain: {}\n",
            yaml_path(&made.intermediate_certificate),
            pkcs11_yaml(key, 4),
            yaml_path(&made.root_certificate)
        )
    });
    let shown = |p: &Path| absolute(p).display().to_string();
    if args.json {
        let object = serde_json::json!({
            "ca-dir": shown(&ca_dir),
            "root": {
                "certificate": shown(&made.root_certificate),
                "key": shown(&made.root_key),
                "sha256-fingerprint": made.root_sha256,
                "not-after": rfc3339(made.root_not_after),
                "keep": "key offline; certificate to every client",
            },
            "intermediate": {
                "certificate": shown(&made.intermediate_certificate),
                "key": made.intermediate_key.as_deref().map(shown),
                "not-after": rfc3339(made.intermediate_not_after),
                "pkcs11-key-label": token.as_ref().map(|k| k.key_label.clone()),
                "name-constraints": constraints.as_ref().map(NameConstraints::describe),
                "keep": "on the server",
            },
            "configuration": existing_yaml,
            "listener": {
                "certificate": shown(&made.listener_certificate),
                "key": shown(&made.listener_key),
                "keep": "on the server",
            },
        });
        println!("{object}");
        return Ok(());
    }
    println!(
        "Key ceremony done: a new root and its intermediates in {}.\n",
        shown(&ca_dir)
    );
    println!("KEEP OFFLINE (not on the server; needed only to sign the next intermediate):");
    println!(
        "  root private key       {}  (mode 0600)",
        shown(&made.root_key)
    );
    println!("    Move it to removable media or a safe now, and keep a second copy apart.");
    println!(
        "    `certeasy serve` never reads it; `certeasy ca new-intermediate --root-key` does.\n"
    );
    println!("DISTRIBUTE to every client that must trust this CA:");
    println!("  root certificate       {}", shown(&made.root_certificate));
    println!("    SHA-256 fingerprint  {}", made.root_sha256);
    println!(
        "    valid until          {}\n",
        rfc3339(made.root_not_after)
    );
    println!("STAYS ON THE SERVER ({}):", shown(&ca_dir));
    match &made.intermediate_key {
        Some(key) => println!(
            "  issuing intermediate   {} and its key {} (0600)",
            shown(&made.intermediate_certificate),
            shown(key)
        ),
        None => println!(
            "  issuing intermediate   {} (its key is on the token)",
            shown(&made.intermediate_certificate)
        ),
    }
    println!(
        "  listener intermediate  {} and its key {} (0600)",
        shown(&made.listener_certificate),
        shown(&made.listener_key)
    );
    println!(
        "    valid until          {}",
        rfc3339(made.intermediate_not_after)
    );
    if let Some(constraints) = &constraints {
        println!("\nName constraints (critical) on the issuing intermediate:");
        for line in constraints.describe() {
            println!("  {line}");
        }
    }
    match &existing_yaml {
        None => println!("\nNext: start `certeasy serve` with the same configuration."),
        Some(yaml) => {
            println!(
                "\nNext: add this to the configuration (the issuing key is on the token), then start `certeasy serve`:\n"
            );
            print!("{yaml}");
        }
    }
    Ok(())
}

fn new_intermediate(args: &NewIntermediateArgs) -> Result<(), Failure> {
    let config = load_config(args.config.as_deref())?;
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| config.data_dir.join("ca"));
    let constraints = name_constraints(&config, args.name_constraints)?;
    let token = args.pkcs11.key()?;
    let common_name = args
        .common_name
        .clone()
        .unwrap_or_else(|| format!("{} {}", config.ca.intermediate_common_name, args.name));
    let validity = args
        .validity
        .unwrap_or(config.ca.intermediate_validity)
        .time();
    let request = ceremony::IntermediateRequest {
        name: &args.name,
        organization: &config.ca.organization,
        common_name: &common_name,
        key_algorithm: config.ca.key_algorithm,
        validity,
        out_dir: &out_dir,
        name_constraints: constraints.as_ref(),
    };
    let signer = match (&args.csr_out, &args.root_cert, &args.root_key) {
        (Some(csr), _, _) => IntermediateSigner::Csr(csr),
        (None, Some(certificate), Some(key)) => IntermediateSigner::Root { certificate, key },
        _ => {
            return Err(Failure::Usage(
                "give --csr-out, or --root-cert with --root-key".to_owned(),
            ));
        }
    };
    let made = match &token {
        None => ceremony::new_intermediate(&request, signer, OffsetDateTime::now_utc())?,
        Some(key) => {
            ceremony::check_new_intermediate(&request, signer, true, OffsetDateTime::now_utc())?;
            let on_token = issuance::generate_key_on_token(key, config.ca.key_algorithm)?;
            ceremony::new_intermediate_with_key(
                &request,
                signer,
                &on_token,
                OffsetDateTime::now_utc(),
            )?
        }
    };
    let certificate = made
        .certificate
        .clone()
        .unwrap_or_else(|| out_dir.join(format!("{}.pem", args.name)));
    let entry = issuers_entry(
        &args.name,
        &certificate,
        made.key.as_deref(),
        token.as_ref(),
        made.chain.as_deref(),
    );
    if args.json {
        let object = serde_json::json!({
            "name": args.name,
            "certificate": made.certificate.as_deref().map(|p| absolute(p).display().to_string()),
            "key": made.key.as_deref().map(|p| absolute(p).display().to_string()),
            "csr": made.csr.as_deref().map(|p| absolute(p).display().to_string()),
            "not-after": made.not_after.map(rfc3339),
            "name-constraints": constraints.as_ref().map(NameConstraints::describe),
            "issuers-entry": entry,
        });
        println!("{object}");
        return Ok(());
    }
    if let Some(csr) = &made.csr {
        println!(
            "Wrote the request {} for the intermediate {:?}.",
            absolute(csr).display(),
            args.name
        );
        println!(
            "Have the root sign it (with OpenSSL: openssl x509 -req -in {} -CA root.pem -CAkey root.key -copy_extensions copy -days 1825 -out {}), then put the certificate at {}.",
            absolute(csr).display(),
            absolute(&certificate).display(),
            absolute(&certificate).display()
        );
    } else {
        println!(
            "Signed the intermediate {:?} with the offline root: {}.",
            args.name,
            absolute(&certificate).display()
        );
        println!("The root key is no longer needed: take it offline again.");
    }
    if let Some(key) = &made.key {
        println!(
            "Its private key: {} (0600): it stays on the server.",
            absolute(key).display()
        );
    }
    if let Some(key) = &token {
        println!(
            "Its private key is on the token, labelled {:?}: it never leaves it.",
            key.key_label
        );
    }
    if let Some(constraints) = &constraints {
        println!("Name constraints (critical):");
        for line in constraints.describe() {
            println!("  {line}");
        }
    }
    println!(
        "\nAdd this entry to the configuration, reload every instance (SIGHUP or `certeasy admin reload`; no restart), then `certeasy admin ca activate {}`:\n",
        args.name
    );
    print!("{entry}");
    Ok(())
}

/// The `ca.issuers` entry (docs/configuration.md) for the new intermediate, as YAML.
fn issuers_entry(
    name: &str,
    certificate: &Path,
    key: Option<&Path>,
    token: Option<&issuance::Pkcs11Key>,
    chain: Option<&Path>,
) -> String {
    let mut yaml = format!(
        "ca:\n  issuers:\n    - name: {name}\n      certificate: {}\n",
        yaml_path(certificate)
    );
    if let Some(key) = key {
        yaml.push_str(&format!("      private-key: {}\n", yaml_path(key)));
    }
    if let Some(token) = token {
        yaml.push_str(&pkcs11_yaml(token, 6));
    }
    match chain {
        Some(chain) => yaml.push_str(&format!("      chain: {}\n", yaml_path(chain))),
        None => yaml.push_str(
            "      chain: /path/to/root.pem   # the certificate of the root that signs it\n",
        ),
    }
    yaml
}

/// A path as a YAML scalar: plain when it is made of ordinary characters, JSON-quoted (which
/// YAML reads) otherwise.
fn yaml_path(path: &Path) -> String {
    let text = absolute(path).display().to_string();
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c));
    if plain {
        text
    } else {
        serde_json::Value::String(text).to_string()
    }
}

/// A text as a YAML scalar: plain when made of ordinary characters, JSON-quoted otherwise.
fn yaml_text(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if plain {
        text.to_owned()
    } else {
        serde_json::Value::String(text.to_owned()).to_string()
    }
}

fn move_root_key(args: &MoveRootKeyArgs) -> Result<(), Failure> {
    let config = load_config(args.config.as_deref())?;
    let ca_dir = config.data_dir.join("ca");
    refuse_inside("--to", &args.to, &config.data_dir, &ca_dir)?;
    let from = match &args.from {
        Some(from) => from.clone(),
        None => {
            let legacy = ca_dir.join("root.key");
            let issuance::GeneratedRootKey::KeepAt(beside) =
                issuance::GeneratedRootKey::beside(&config.data_dir)
            else {
                return Err(Failure::Usage("give --from".to_owned()));
            };
            if legacy.is_file() {
                legacy
            } else if beside.is_file() {
                beside
            } else {
                return Err(Failure::Usage(format!(
                    "no root key on this machine: neither {} nor {} exists (give --from)",
                    legacy.display(),
                    beside.display()
                )));
            }
        }
    };
    let root_pem = ca_dir.join("root.pem");
    let check = root_pem.is_file().then_some(root_pem.as_path());
    ceremony::move_root_key(&from, &args.to, check)?;
    if args.json {
        let object = serde_json::json!({
            "from": absolute(&from).display().to_string(),
            "to": absolute(&args.to).display().to_string(),
            "checked-against": check.map(|p| absolute(p).display().to_string()),
        });
        println!("{object}");
    } else {
        println!(
            "Moved the root key from {} to {} (0600){}.",
            absolute(&from).display(),
            absolute(&args.to).display(),
            check.map_or_else(String::new, |p| format!(
                ", checked against {}",
                absolute(p).display()
            ))
        );
        println!("Keep it offline; `certeasy serve` does not need it.");
    }
    Ok(())
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}
