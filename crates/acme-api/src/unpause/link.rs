//! What the rest of the API needs of unpausing: the settings of unpause links, and making one.
//! A leaf beside the page handlers, so that the state and the
//! settings, which hold these, do not depend on the handlers, which hold the state.

use crate::unpause::token::UnpauseClaims;
use crate::unpause::token::UnpauseKey;

/// How unpause links are made and checked.
#[derive(Debug, Clone)]
pub struct UnpauseSettings {
    pub key: Vec<u8>,
    pub version: u32,
    pub link_lifetime: time::Duration,
    /// Where the pages are reached, without a trailing slash.
    pub base_url: String,
}

/// The link shown in a pause refusal.
pub fn unpause_url(settings: &UnpauseSettings, claims: &UnpauseClaims) -> String {
    let token = UnpauseKey::new(&settings.key).sign(claims);
    format!("{}/unpause?token={token}", settings.base_url)
}
