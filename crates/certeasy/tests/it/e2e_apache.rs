//! Apache httpd with mod_md (Debian's `apache2`; mod_md 2.6, built with ARI and profiles) gets
//! its Managed Domain's certificate from the real `certeasy serve` binary over http-01 and over
//! tls-alpn-01 (there in the profile `MDProfile` names), and serves it after a graceful restart,
//! as an operator's server does. mod_md reads Certeasy's ARI window (RFC 9773): a fresh
//! certificate is not renewed, and once an operator marks it for early renewal (`certeasy admin
//! certificates renew-early`), the next check renews it and the server serves the new one.
//!
//! httpd runs unprivileged in the foreground from its own configuration (own ServerRoot, PidFile,
//! store and loopback high ports, mapped for mod_md with `MDPortMap`), trusting only the test
//! CA's root (`MDCACertificateFile`).

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use testkit::poll::eventually;

use crate::clients::Daemon;
use crate::clients::leaf_of;
use crate::clients::renew_early;
use crate::clients::wait_served;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;

const MODULES: &str = "/usr/lib/apache2/modules";

/// How long mod_md may take to order a certificate and put it in its staging area.
const STAGED_WITHIN: Duration = Duration::from_secs(90);

fn apache2() -> PathBuf {
    // In /usr/sbin, which a non-root PATH may lack.
    let sbin = PathBuf::from("/usr/sbin/apache2");
    if sbin.is_file() {
        sbin
    } else {
        PathBuf::from("apache2")
    }
}

struct Apache {
    daemon: Daemon,
    dir: PathBuf,
    name: String,
    https: u16,
}

impl Apache {
    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// Where mod_md puts a certificate it got until the next (graceful) restart activates it.
    fn staged(&self) -> PathBuf {
        self.dir
            .join(format!("md/staging/{}/pubcert.pem", self.name))
    }

    /// Waits until mod_md has a new certificate staged, then restarts httpd gracefully (SIGUSR1),
    /// as mod_md asks an operator to, so that it serves it.
    async fn activate_staged(&mut self, env: &TestEnv) {
        let staged = self.staged();
        let found = eventually(STAGED_WITHIN, Duration::from_millis(250), async || {
            self.daemon.assert_running();
            staged.is_file().then_some(())
        })
        .await;
        assert!(
            found.is_some(),
            "mod_md staged no certificate within {STAGED_WITHIN:?}:\n{}\n{}\n--- server log ---\n{}",
            self.error_log(),
            self.daemon.log(),
            env.server_log()
        );
        self.daemon.signal("USR1");
    }
}

/// httpd's whole configuration; `md` holds the Managed Domain's own directives (challenge,
/// profile).
fn config(env: &TestEnv, dir: &Path, http: u16, https: u16, name: &str, md: &str) -> String {
    let d = dir.display();
    format!(
        r#"ServerRoot "{d}"
ServerName localhost
PidFile "{d}/httpd.pid"
DefaultRuntimeDir "{d}/run"
Mutex file:{d}/run default
ErrorLog "{d}/error.log"
LogLevel warn md:debug
LoadModule mpm_event_module {MODULES}/mod_mpm_event.so
LoadModule authz_core_module {MODULES}/mod_authz_core.so
LoadModule socache_shmcb_module {MODULES}/mod_socache_shmcb.so
LoadModule ssl_module {MODULES}/mod_ssl.so
LoadModule md_module {MODULES}/mod_md.so
StartServers 1
ServerLimit 2
ThreadLimit 4
ThreadsPerChild 4
MaxRequestWorkers 8
MinSpareThreads 1
MaxSpareThreads 8
Listen 127.0.0.1:{http}
Listen 127.0.0.1:{https}

MDStoreDir "{d}/md"
MDCertificateAuthority {directory}
MDCACertificateFile "{root}"
MDCertificateAgreement accepted
MDContactEmail apache@example.com
MDPortMap 80:{http} 443:{https}
MDRenewWindow 33%
MDRenewViaARI on
MDStapling off
{md}
MDomain {name}

<VirtualHost 127.0.0.1:{https}>
  ServerName {name}
  SSLEngine on
  Protocols http/1.1 acme-tls/1
</VirtualHost>
<VirtualHost 127.0.0.1:{http}>
  ServerName {name}
  <Location "/md-status">
    SetHandler md-status
  </Location>
</VirtualHost>
"#,
        directory = env.directory_url(),
        root = env.root_path.display(),
    )
}

/// Starts httpd for one Managed Domain answering `challenge`, and waits until it serves
/// Certeasy's certificate for it.
async fn apache_serving(env: &mut TestEnv, label: &str, md: &str) -> (Apache, String) {
    let (http, https) = (free_port(), free_port());
    env.challenge_ports(http, https);
    env.spawn_binary().await;
    let name = env.name(label);
    let dir = env.dir.path().join("apache");
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let conf = dir.join("httpd.conf");
    std::fs::write(&conf, config(env, &dir, http, https, &name, md)).unwrap();
    let mut cmd = std::process::Command::new(apache2());
    cmd.arg("-f").arg(&conf).arg("-DFOREGROUND");
    let daemon = Daemon::spawn("apache2", cmd, dir.join("stderr.log"));
    let mut apache = Apache {
        daemon,
        dir,
        name: name.clone(),
        https,
    };
    apache.activate_staged(env).await;
    let served = wait_served(env, &mut apache.daemon, https, &name, |_| true).await;
    (apache, served)
}

/// mod_md set up (and tore down) the answer to `challenge` for the domain.
fn answered(apache: &Apache, challenge: &str) {
    let log = apache.error_log();
    assert!(
        log.contains(&format!("setup {challenge}:{}", apache.name)),
        "mod_md answered {challenge}:\n{log}"
    );
}

#[tokio::test]
async fn apache_mod_md_obtains_over_http01_and_renews_when_ari_says_so() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let (mut apache, first) =
        apache_serving(&mut env, "apache-http", "MDCAChallenges http-01").await;
    let first_leaf = leaf_of(&first);
    answered(&apache, "http-01");

    // mod_md asked Certeasy's renewalInfo for the certificate it activated; the window of a
    // fresh certificate lies ahead, so nothing is renewed.
    let asked = eventually(
        Duration::from_secs(30),
        Duration::from_millis(250),
        async || {
            let log = apache.error_log();
            log.contains("CA advises renew via ARI").then_some(log)
        },
    )
    .await;
    let log = asked.unwrap_or_else(|| {
        panic!(
            "mod_md never read the ARI window:\n{}\n--- server log ---\n{}",
            apache.error_log(),
            env.server_log()
        )
    });
    assert!(
        !log.contains("CA advises renew via ARI now"),
        "a fresh certificate is not due:\n{log}"
    );
    assert!(!apache.staged().exists(), "nothing renewed:\n{log}");

    // The operator marks it: the window moves into the past, and the check that a graceful
    // restart runs renews it.
    renew_early(&env, &first_leaf).await;
    apache.daemon.signal("USR1");
    apache.activate_staged(&env).await;
    let https = apache.https;
    let name = apache.name.clone();
    let renewed = wait_served(&env, &mut apache.daemon, https, &name, |chain| {
        chain[0] != first_leaf
    })
    .await;
    assert_ne!(leaf_of(&renewed), first_leaf);
    let log = apache.error_log();
    assert!(
        log.contains("CA advises renew via ARI now"),
        "mod_md renewed because of ARI:\n{log}"
    );
}

#[tokio::test]
async fn apache_mod_md_obtains_a_profile_over_tls_alpn01_and_serves_the_certificate() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    // The shipped short-lived profile, which mod_md must get (MDProfileMandatory): 7 days.
    let md = "MDCAChallenges tls-alpn-01\nMDProfile short-lived\nMDProfileMandatory on";
    let (apache, served) = apache_serving(&mut env, "apache-tls", md).await;
    answered(&apache, "tls-alpn-01");
    let der = leaf_of(&served);
    let (_, leaf) = x509_parser::parse_x509_certificate(&der).unwrap();
    let validity = leaf.validity();
    assert_eq!(
        validity.not_after.to_datetime() - validity.not_before.to_datetime(),
        time::Duration::days(7)
    );
}
