//! Integration tests of the whole server: in-process flows with instant-acme, hostile raw
//! requests, restarts, and end-to-end runs of the real `certeasy` binary driven by lego and
//! certbot. One test binary, so linking is paid once.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod admin_auth;
mod admin_records;
mod alternate_chains;
mod ari;
mod at_once;
mod audit;
mod audit_cluster;
mod bounded_work;
mod browser;
mod caa;
mod ceremony;
mod certcheck;
mod clients;
mod cluster;
mod crl;
mod crlcheck;
mod dns_account;
mod dns_persist;
mod e2e_apache;
mod e2e_caddy;
mod e2e_certbot;
mod e2e_certbot_pypi;
mod e2e_lego;
mod e2e_traefik;
mod eab;
mod evidence;
mod exclusive;
mod failure_reports;
mod flow;
mod harness;
mod hostile;
mod hsm;
mod issuer_reload;
mod key_change;
mod kill_under_load;
mod listener;
mod metrics_named;
mod nonce_instances;
mod overrides;
mod profile_policy;
mod profiles;
mod pruning;
mod ratelimit;
mod ratelimit_policies;
mod raw;
mod redis_outage;
mod restart;
mod retries;
mod rfc_answers;
mod rotation;
mod test_mode;
mod weak_keys;
mod zombie;
