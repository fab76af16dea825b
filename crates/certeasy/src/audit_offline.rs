//! `certeasy audit verify`: the audit log's hash chain checked on the database itself, with no
//! server to ask: a stopped instance's SQLite file, a backup copy (`--database
//! sqlite:///…/backups/certeasy-….db`), or a PostgreSQL database from any host that reaches it.
//! `certeasy admin audit verify` asks a running server instead (a running server holds its
//! SQLite file exclusively, so this command cannot open that one).
//!
//! Opening the database applies pending migrations, as `serve` would: a backup made by an older
//! version is brought to this version's schema first (the audit records are not changed by it).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use storage::Storage;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain on the database directly (no server): prints the head seq and hash,
    /// exits 1 naming the first broken record, or when --expect-head is not in the chain.
    Verify {
        /// The configuration file whose database to check (database.url, or the SQLite file in
        /// its data directory).
        #[arg(long, short, env = "CERTEASY_CONFIG")]
        config: Option<PathBuf>,
        /// A database URL instead of the configuration's, e.g. a backup copy
        /// (sqlite:///var/lib/certeasy/backups/certeasy-20260101T000000Z.db).
        #[arg(long, value_name = "URL")]
        database: Option<String>,
        /// A head hash kept from an earlier verify: fails unless the chain still holds it.
        #[arg(long, value_name = "HASH")]
        expect_head: Option<String>,
    },
}

/// Runs the command; exit 0 intact, 1 broken or unreachable, 2 a wrong command line or file.
pub fn run(command: AuditCommand) -> ExitCode {
    let AuditCommand::Verify {
        config,
        database,
        expect_head,
    } = command;
    let url = match database {
        Some(url) => url,
        None => match crate::config::load_or_default(config.as_deref()) {
            Ok(config) => config.database_url(),
            Err(code) => return code,
        },
    };
    // `connect` creates a missing SQLite file: an empty new database would verify "intact".
    if let Some(path) = url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        if !std::path::Path::new(path).is_file() {
            eprintln!("no database at {path}");
            return ExitCode::from(2);
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(verify(&url, expect_head)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn verify(url: &str, expect_head: Option<String>) -> anyhow::Result<bool> {
    let storage = Storage::connect(url).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot open the database: {e} (a running server's SQLite file: use `certeasy admin audit verify`, or verify a backup copy)"
        )
    })?;
    let (head_seq, _) = storage.audit_head().await?;
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(u64::try_from(head_seq).unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} records")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let started = std::time::Instant::now();
    let check = storage.verify_audit_chain(&|n| bar.set_position(n)).await?;
    bar.finish_and_clear();
    let mut ok = true;
    let stale = check.pending.is_stale(time::OffsetDateTime::now_utc());
    match &check.first_broken {
        None => println!(
            "{}: {} records verified in {:.1} s",
            intact_headline(stale),
            check.records,
            started.elapsed().as_secs_f64()
        ),
        Some(broken) => {
            ok = false;
            println!(
                "audit chain BROKEN at record {}: {}",
                broken.seq, broken.why
            );
            println!("({} records read)", check.records);
        }
    }
    println!("head seq:  {}", check.head_seq);
    println!("head hash: {}", check.head_hash);
    if check.pending.records > 0 {
        ok &= !stale;
        println!(
            "{}",
            pending_line(check.pending.records, check.pending.oldest, stale)
        );
    }
    if let Some(hash) = expect_head {
        let hash = hash.trim().to_lowercase();
        match storage.audit_seq_of_hash(&hash).await? {
            Some(seq) => println!("expected head {hash} found: record {seq}"),
            None => {
                ok = false;
                println!(
                    "expected head {hash} NOT FOUND: the chain does not contain it (rewritten or truncated)"
                );
            }
        }
    }
    storage.close().await;
    Ok(ok)
}

/// What both verify commands say first of a chain with no broken record: records committed
/// long ago and still outside it make it incomplete, not intact.
pub(crate) fn intact_headline(stale_pending: bool) -> &'static str {
    if stale_pending {
        "audit chain INCOMPLETE (committed records are not chained, see below), what is chained is intact"
    } else {
        "audit chain intact"
    }
}

/// The line both verify commands print when records wait outside the chain.
pub(crate) fn pending_line(
    records: u64,
    oldest: Option<time::OffsetDateTime>,
    stale: bool,
) -> String {
    let since = oldest
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .map(|t| format!(", the oldest from {t}"))
        .unwrap_or_default();
    if stale {
        format!(
            "pending:   {records} records committed but NOT CHAINED for over {} s{since}: sealing is failing (see the servers' logs, certeasy_worker_errors_total{{stage=\"audit_seal\"}}) or they were written by a newer version of certeasy; they are not covered by this check",
            storage::audit::STALE_PENDING.whole_seconds()
        )
    } else {
        format!(
            "pending:   {records} records committed but not yet chained{since} (not covered by this check; the sealer chains them within a second)"
        )
    }
}
