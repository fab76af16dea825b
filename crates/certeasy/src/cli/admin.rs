//! `certeasy admin …`: the subcommands and their flags. `admin_cli.rs` runs them.

use std::path::PathBuf;

use clap::Args;
use clap::Subcommand;
use ra::operator::DEFAULT_LIST_LIMIT;
use ra::operator::DEFAULT_REVOKE_BATCH;

use crate::admin_wire::CertificateQuery;

/// Where the admin listener is, how to prove the right to use it, and how to print: options of
/// every admin command, so they may stand anywhere after `admin`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Admin options (anywhere after `admin`)")]
pub struct AdminOptions {
    /// Base URL of the admin listener; defaults to http://<server.admin-listen> of --config,
    /// or http://127.0.0.1:14001.
    #[arg(long, global = true, env = "CERTEASY_ADMIN_URL")]
    pub admin_url: Option<String>,
    /// Configuration file to take the admin address and the token file from.
    #[arg(long, short, global = true, env = "CERTEASY_CONFIG")]
    pub config: Option<PathBuf>,
    /// File holding the admin token; defaults to server.admin-token-file of --config, or
    /// <data-dir>/admin.token.
    #[arg(long, global = true, env = "CERTEASY_ADMIN_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Your name, recorded with every change in the audit log; defaults to $SUDO_USER, then
    /// $USER. Taken as given: the token is what the server authenticates.
    #[arg(long, global = true, env = "CERTEASY_OPERATOR")]
    pub operator: Option<String>,
    /// Print the server's JSON document instead of text or a table (commands that show
    /// records; reload, ratelimit, pauses, pause and unpause print text only).
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Reload rate limits and overrides from the configuration file, and the listener's
    /// certificate files (same as SIGHUP). An invalid file is refused and what is in force stays.
    Reload,
    /// Copy the SQLite database into a backup file, while the server runs.
    ///
    /// The server writes <data-dir>/backups/certeasy-<UTC time YYYYMMDDTHHMMSSZ>.db on its own
    /// machine (the directory is created 0700; a second backup within the same second gets a
    /// suffix) and prints the file's path, size and how long the copy took (with --json, one
    /// document {"path", "bytes", "seconds"}). The file is a complete SQLite database,
    /// consistent although the server goes on serving while it is written, compacted, and
    /// created with mode 0600: it holds account and EAB keys. The running server holds its
    /// database exclusively, so this is the way to back it up online. The CA files, admin.token
    /// and unpause.key are not in it: back them up beside it (docs/operations.md).
    ///
    /// A PostgreSQL database is backed up with pg_dump instead: the server refuses this command
    /// there.
    #[command(
        after_long_help = "Examples:\n  certeasy admin backup\n  certeasy admin backup --json"
    )]
    Backup,
    /// Inspect or reset rate-limit buckets.
    Ratelimit {
        #[command(subcommand)]
        command: RatelimitCommand,
    },
    /// List, show and deactivate ACME accounts.
    Accounts {
        #[command(subcommand)]
        command: AccountsCommand,
    },
    /// List, show and revoke certificates (by serial, or in bulk by filters).
    Certificates {
        #[command(subcommand)]
        // Boxed: its filters would make every `AdminCommand` as large as this one variant.
        command: Box<CertificatesCommand>,
    },
    /// External account binding keys: create, list, revoke.
    Eab {
        #[command(subcommand)]
        command: EabCommand,
    },
    /// Blocked keys: block, unblock, list (no account or certificate may hold one).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// The audit log: list, show, export (JSON lines for a SIEM) and verify its hash chain.
    Audit {
        #[command(subcommand)]
        command: crate::admin_cli::audit::AuditCommand,
    },
    /// Rate-limit overrides kept in the database, applied by every instance within seconds
    /// without a reload: add, list (with the overrides file's), show, remove.
    Overrides {
        #[command(subcommand)]
        command: crate::admin_cli::overrides::OverridesCommand,
    },
    /// The issuing CAs: list them, activate one (issuer rotation).
    Ca {
        #[command(subcommand)]
        command: crate::admin_cli::ca::CaCommand,
    },
    /// List paused (account, identifier) pairs.
    Pauses {
        #[command(subcommand)]
        command: PausesCommand,
    },
    /// Pause identifiers of an account: its new orders naming them are refused until unpaused.
    Pause {
        /// The account id.
        #[arg(long)]
        account: i64,
        /// A file of identifiers, one per line (dns:name, ip:addr, or bare).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Identifiers (dns:name, ip:addr, or bare).
        names: Vec<String>,
    },
    /// Unpause identifiers of an account; with no names (and no --file), every pause of the account.
    Unpause {
        /// The account id.
        #[arg(long)]
        account: i64,
        /// A file of identifiers, one per line.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Identifiers (dns:name, ip:addr, or bare).
        names: Vec<String>,
    },
}

impl AdminCommand {
    /// The name of a command whose server answers text, so that `--json` has nothing to print.
    pub fn text_only(&self) -> Option<&'static str> {
        match self {
            Self::Reload => Some("reload"),
            Self::Ratelimit { .. } => Some("ratelimit"),
            Self::Pauses { .. } => Some("pauses"),
            Self::Pause { .. } => Some("pause"),
            Self::Unpause { .. } => Some("unpause"),
            Self::Backup
            | Self::Accounts { .. }
            | Self::Certificates { .. }
            | Self::Eab { .. }
            | Self::Keys { .. }
            | Self::Overrides { .. }
            | Self::Audit { .. }
            | Self::Ca { .. } => None,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum RatelimitCommand {
    /// Print a bucket's remaining tokens and when it is full again.
    Show {
        /// Limit name: global, account-creation, order-creation, san-budget, failed-validation.
        limit: String,
        /// Bucket id: an IP address, an account id, or <account id>:<identifier>.
        id: String,
    },
    /// Empty a bucket's debt so it is full at once.
    Reset {
        /// Limit name.
        limit: String,
        /// Bucket id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PausesCommand {
    /// Print the current pauses (or, with --all, also lifted ones), newest first.
    List {
        /// Only this account.
        #[arg(long)]
        account: Option<i64>,
        /// Include pairs that were unpaused.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum EabCommand {
    /// Create an external account binding key (RFC 8555 §7.3.4). Prints its key ID and HMAC key
    /// (base64url) once: give both to the subscriber's ACME client. With --json, the key's
    /// document, HMAC key included.
    Create {
        /// Allow names equal to or below this domain (repeatable). With no --domain and no
        /// --cidr, any identifier the CA allows.
        #[arg(long = "domain")]
        domains: Vec<String>,
        /// Allow IP identifiers inside this network (repeatable).
        #[arg(long = "cidr")]
        cidrs: Vec<String>,
        /// Allow this certificate profile (repeatable); none means any.
        #[arg(long = "profile")]
        profiles: Vec<String>,
        /// Longest certificate validity orders of bound accounts may ask for (e.g. 30d).
        #[arg(long)]
        max_validity: Option<String>,
        /// The key binds no new account after this long (e.g. 7d); bound accounts keep working.
        #[arg(long)]
        expires_in: Option<String>,
        /// The key may bind any number of accounts (default: one).
        #[arg(long)]
        reusable: bool,
    },
    /// List the keys with their policy and how many accounts each binds (never the HMAC keys).
    List,
    /// Revoke a key: it binds no new account. Accounts already bound keep working under its
    /// policy, unless --deactivate-accounts.
    Revoke {
        /// The key ID.
        kid: String,
        /// Also deactivate every valid account bound with the key (as `accounts deactivate`
        /// does: refused from its next request on); prints how many. Allowed on a key revoked
        /// before.
        #[arg(long)]
        deactivate_accounts: bool,
    },
}

const KEYS_HELP: &str = "\
KEY is the SHA-256 of the key's SubjectPublicKeyInfo DER, as 64 hex digits or base64:
  openssl pkey -pubin -in key.pub.pem -outform DER | sha256sum
or the path of a PEM file holding the public key, a certificate or a CSR with that key.

A blocked key gets badPublicKey at new-account and key change, and badCSR at finalize. An
account that already holds the key keeps working: deactivate it and revoke its certificates
(certeasy admin accounts deactivate, certeasy admin certificates revoke --account).

Examples:
  certeasy admin keys block 3f0c…e9 --reason \"reported compromised, ticket 4711\"
  certeasy admin keys block ./leaked-cert.pem
  certeasy admin keys unblock 3f0c…e9
  certeasy admin keys list --json";

/// `certeasy admin keys`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Block a key: no account may register it or change to it, and no certificate carries it.
    #[command(after_long_help = KEYS_HELP)]
    Block {
        /// The key: its SPKI SHA-256 (hex or base64), or a PEM file (public key, certificate,
        /// CSR).
        key: String,
        /// Why (kept with the block and listed).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Lift a block made with `keys block` (a key the blocked-keys file names stays blocked).
    #[command(after_long_help = KEYS_HELP)]
    Unblock {
        /// The key, as for `keys block`.
        key: String,
    },
    /// List the blocked keys: the database's, oldest first, then the blocked-keys file's
    /// (with --json, one array).
    List,
}

const ACCOUNTS_LIST_HELP: &str = "\
Filters (combined with AND):
  --status valid|deactivated|revoked   accounts in this state
  --contact TEXT                       a contact contains TEXT (e.g. a mail domain)

Pages: newest first, --limit rows (default 100, at most 1000); the table ends with the
--before value of the next page, and the JSON document carries it as next_before.

Examples:
  certeasy admin accounts list
  certeasy admin accounts list --status deactivated --json
  certeasy admin accounts list --contact @example.com --limit 20
  certeasy admin accounts list --before 1200";

const CERTIFICATES_LIST_HELP: &str = "\
Filters (combined with AND; dates are RFC 3339 or YYYY-MM-DD, midnight UTC; an 'after' bound
is included, a 'before' bound excluded):
  --name NAME            the certificate holds NAME exactly (dns:NAME, ip:ADDR or bare;
                         *.example.com is the wildcard name, not a pattern)
  --serial HEX           the certificate with this serial (colons allowed)
  --account ID           certificates of this account
  --issued-after DATE    issued at or after DATE
  --issued-before DATE   issued before DATE
  --expires-after DATE   not after (expiry) at or after DATE
  --expires-before DATE  expiry before DATE
  --expiring-within DUR  expiry between now and now + DUR (e.g. 7d; the server's clock)
  --revoked              only revoked certificates
  --not-revoked          only certificates that are not revoked

Pages: newest first, --limit rows (default 100, at most 1000); the table ends with the
--before value of the next page, and the JSON document carries it as next_before.

Examples:
  certeasy admin certificates list --name www.example.com
  certeasy admin certificates list --account 7 --not-revoked
  certeasy admin certificates list --expires-after 2026-01-01 --expires-before 2026-02-01 --json
  certeasy admin certificates list --expiring-within 7d --json
  certeasy admin certificates list --issued-after 2025-12-24T00:00:00Z --revoked";

const CERTIFICATES_REVOKE_HELP: &str = "\
Reasons (RFC 5280 name, case-insensitive, or code): unspecified (0), keyCompromise (1),
affiliationChanged (3), superseded (4), cessationOfOperation (5).

With a SERIAL, revokes that certificate. Without one, revokes every certificate that matches
the filters and is not revoked yet (the filters of `certificates list`; at least one is
required), in batches of --batch (default 500), each written by the server in short
transactions so that issuance goes on meanwhile. A progress bar is drawn on stderr when it is
a terminal; --json prints one summary document at the end (selected, revoked, batches,
seconds). A certificate revoked already keeps its first revocation and is skipped, so an
interrupted run is resumed by running the same command again.

Examples:
  certeasy admin certificates revoke 7f3a9c01d2 --reason keyCompromise
  certeasy admin certificates revoke 7f:3a:9c:01:d2 --reason 4
  certeasy admin certificates revoke --account 7 --reason keyCompromise
  certeasy admin certificates revoke --name old.example.com --expires-after 2026-01-01 --reason superseded --json
  certeasy admin certificates revoke --account 7 --expiring-within 7d --reason keyCompromise";

/// `certeasy admin accounts`.
#[derive(Debug, Subcommand)]
pub enum AccountsCommand {
    /// List accounts, newest first, filtered by status or contact.
    #[command(after_long_help = ACCOUNTS_LIST_HELP)]
    List {
        /// Only accounts in this state: valid, deactivated or revoked.
        #[arg(long)]
        status: Option<String>,
        /// Only accounts with a contact containing this text.
        #[arg(long)]
        contact: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Print an account: status, contacts, creation, key thumbprint, counts of orders and
    /// certificates.
    #[command(after_long_help = "Example:\n  certeasy admin accounts show 7 --json")]
    Show {
        /// The account id (the number at the end of its ACME URL).
        id: i64,
    },
    /// Deactivate an account (RFC 8555 §7.3.6): every request it signs is refused from now on,
    /// its pending authorizations are deactivated and its unfinished orders become invalid.
    /// Final; its certificates stay valid (revoke them with `certificates revoke --account`).
    /// With --json, prints the account afterwards.
    #[command(after_long_help = "Example:\n  certeasy admin accounts deactivate 7")]
    Deactivate {
        /// The account id.
        id: i64,
    },
}

/// `certeasy admin certificates`.
#[derive(Debug, Subcommand)]
pub enum CertificatesCommand {
    /// List certificates, newest first, filtered by name, serial, account, dates or revocation.
    #[command(after_long_help = CERTIFICATES_LIST_HELP)]
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Only revoked certificates.
        #[arg(long, conflicts_with = "not_revoked")]
        revoked: bool,
        /// Only certificates that are not revoked.
        #[arg(long)]
        not_revoked: bool,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Print a certificate: serial, names, account, validity, revocation (and its PEM with
    /// --pem).
    #[command(
        after_long_help = "Examples:\n  certeasy admin certificates show 7f3a9c01d2\n  certeasy admin certificates show 7F:3A:9C:01:D2 --pem > cert.pem"
    )]
    Show {
        /// The serial number in hex (colons allowed).
        serial: String,
        /// Also print the certificate and its chain as PEM.
        #[arg(long)]
        pem: bool,
    },
    /// Revoke one certificate by serial, or every unrevoked certificate matching the filters.
    #[command(after_long_help = CERTIFICATES_REVOKE_HELP)]
    Revoke {
        /// The serial number in hex (colons allowed); without it, the filters select.
        serial: Option<String>,
        /// RFC 5280 reason: name or code (see below).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        filter: FilterArgs,
        /// Certificates revoked per request of a bulk revocation (at most 5000).
        #[arg(long, default_value_t = DEFAULT_REVOKE_BATCH)]
        batch: u32,
    },
    /// Ask ARI clients (RFC 9773) to renew now: the renewal window of every matching
    /// unexpired, unrevoked certificate moves into the past, so clients that poll renewalInfo
    /// renew at their next poll. Name exactly one of SERIAL, --account and --name. With
    /// --json, prints {"count": N}.
    ///
    /// Examples: `certeasy admin certificates renew-early 5f3a…`,
    /// `certeasy admin certificates renew-early --account 7`,
    /// `certeasy admin certificates renew-early --name www.example.com`.
    RenewEarly {
        /// The serial number in hex (colons allowed).
        serial: Option<String>,
        /// Every certificate of this account.
        #[arg(long)]
        account: Option<i64>,
        /// Every certificate holding this name (dns:NAME, ip:ADDR, or bare).
        #[arg(long)]
        name: Option<String>,
    },
}

/// The keyset page of a listing.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// Rows per page (at most 1000).
    #[arg(long, default_value_t = DEFAULT_LIST_LIMIT)]
    pub limit: u32,
    /// Start below this id: the next_before of the previous page.
    #[arg(long)]
    pub before: Option<i64>,
}

/// The certificate filters shared by `list` and `revoke`.
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// The certificate holds this name (dns:NAME, ip:ADDR, or bare).
    #[arg(long)]
    name: Option<String>,
    /// The certificate with this serial (hex).
    #[arg(long = "serial", value_name = "HEX")]
    serial_filter: Option<String>,
    /// Certificates of this account.
    #[arg(long)]
    account: Option<i64>,
    /// Issued at or after (RFC 3339 or YYYY-MM-DD).
    #[arg(long)]
    issued_after: Option<String>,
    /// Issued before.
    #[arg(long)]
    issued_before: Option<String>,
    /// Expiring at or after.
    #[arg(long)]
    expires_after: Option<String>,
    /// Expiring before.
    #[arg(long)]
    expires_before: Option<String>,
    /// Expiring between the server's now and now plus this (e.g. 7d, 36h).
    #[arg(long, value_name = "DURATION", conflicts_with_all = ["expires_after", "expires_before"])]
    expiring_within: Option<String>,
}

impl FilterArgs {
    /// The filters as the admin API takes them; `revoked` from `--revoked`/`--not-revoked`.
    pub fn query(&self, revoked: Option<bool>) -> CertificateQuery {
        CertificateQuery {
            name: self.name.clone(),
            serial: self.serial_filter.clone(),
            account: self.account,
            issued_after: self.issued_after.clone(),
            issued_before: self.issued_before.clone(),
            expires_after: self.expires_after.clone(),
            expires_before: self.expires_before.clone(),
            expiring_within: self.expiring_within.clone(),
            revoked,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::Cli;
    use crate::cli::Command;

    /// The admin options of a parsed command line, and whether it parsed at all.
    fn options(args: &[&str]) -> Result<super::AdminOptions, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("certeasy").chain(args.iter().copied()))?;
        match cli.command {
            Command::Admin { options, .. } => Ok(options),
            other => panic!("not an admin command: {other:?}"),
        }
    }

    #[test]
    fn global_options_stand_before_or_after_the_subcommand() {
        for args in [
            &["admin", "--config", "c.yaml", "eab", "create", "--json"][..],
            &["admin", "eab", "create", "--config", "c.yaml", "--json"],
            &["admin", "eab", "--config", "c.yaml", "create", "--json"],
            &["admin", "--json", "eab", "create", "-c", "c.yaml"],
        ] {
            let o = options(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(o.config.as_deref().and_then(|p| p.to_str()), Some("c.yaml"));
            assert!(o.json, "{args:?}");
        }
        for args in [
            &[
                "admin",
                "--admin-url",
                "http://127.0.0.1:1",
                "--token-file",
                "t",
                "certificates",
                "list",
            ][..],
            &[
                "admin",
                "certificates",
                "list",
                "--admin-url",
                "http://127.0.0.1:1",
                "--token-file",
                "t",
            ],
        ] {
            let o = options(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(o.admin_url.as_deref(), Some("http://127.0.0.1:1"));
            assert_eq!(o.token_file.as_deref().and_then(|p| p.to_str()), Some("t"));
            assert!(!o.json);
        }
    }

    #[test]
    fn an_unknown_option_is_still_refused() {
        let e = options(&["admin", "eab", "create", "--no-such-flag"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    }
}
