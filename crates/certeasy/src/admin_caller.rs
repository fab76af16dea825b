//! Who calls `/admin/*`: found by `admin::require_token`, read by every admin route that
//! changes something (for its audit record). A leaf module, so that the route modules
//! (`admin_eab`, `admin_keys`, `admin_issuers`) and the router that mounts them need not import
//! each other.

use ra::audit::Requester;

/// The caller as `admin::require_token` found it: the token's identity (never the token), the
/// operator the caller names, and the peer address.
#[derive(Debug, Clone)]
pub struct AdminCaller(pub Requester);
