//! The pools view's reads of `DesktopPool`s ([`crate::policy`]): optional by nature. A cluster
//! without the CRD (no broker was ever installed: 404), or a user whom RBAC does not let read
//! them (403), has no managed pools as far as the view can tell: its pools show unmanaged, and
//! nothing fails. Any other failure is logged and also leaves the pools unmanaged, so the
//! policies never cost the view its VMs and Leases.

use kube::Client;
use kube::api::{Api, ListParams};

use crate::error::{Error, ErrorKind};
use crate::policy::DesktopPool;
use crate::scope::Scope;

/// Whether a failed read of DesktopPools only means "no managed pools here": the CRD is not
/// installed (404) or RBAC hides them (403).
pub(super) fn absent(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::NotFound | ErrorKind::Forbidden)
}

/// Logs a failed read of DesktopPools, quietly when it only means [`absent`].
pub(super) fn log_failure(error: &Error) {
    if absent(error.kind()) {
        tracing::debug!(%error, "DesktopPools not readable here: pools show unmanaged");
    } else {
        tracing::warn!(%error, "DesktopPools could not be read: pools show unmanaged meanwhile");
    }
}

/// Lists the DesktopPools in `scope` once; none when they cannot be read (see the module doc:
/// a 404 or 403 quietly, anything else with a warning in the log). `pool list` prints them.
pub async fn list(client: &Client, scope: &Scope) -> Vec<DesktopPool> {
    let api: Api<DesktopPool> = super::api(client, scope);
    match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            log_failure(&Error::kube(
                format!("list DesktopPools {}", super::where_(scope)),
                e,
            ));
            Vec::new()
        }
    }
}
