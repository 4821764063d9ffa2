//! Before a connection is opened (a console, a forward, RDP, SSH from the CLI): whether the
//! caller may open it, by the rule the app's rows show ([`super::offers::may_connect`]), so
//! that a refusal names the holder or the missing member instead of arriving as the API
//! server's 403 on a subresource (or drowning in ssh's own output).

use kube::ResourceExt;
use kube::api::Api;

use super::cluster_half;
use super::offers::{Viewer, may_connect};
use super::rules::no_such_member;
use crate::error::{Error, ErrorKind, Result, is_status};
use crate::identity::Actor;
use crate::names::{POOL_LABEL, lease_name};
use crate::resources::VirtualMachine;
use crate::state::{ClaimSide, member_view_on};
use crate::validate;

/// Checks that `actor` may connect to the member `member` in `ns`, before anything is opened.
/// On a cluster without a broker RBAC alone decides, and the stream's own refusal says it (in
/// the words the app's connect gives): only the broker's status is read. With a broker, only
/// the member's holder and administrators may (SPEC "Broker": access follows the claim), and
/// the caller holds no right on the subresources that could say why: reads the VM and its
/// Lease; a VM that is no pool member, or a VM or Lease the caller may not read (403), is
/// left to the stream.
///
/// Errors: [`Error::Invalid`] for a bad namespace or member name (no request);
/// [`Error::Rejected`] `NotFound` when the namespace has no such VirtualMachine ("no such
/// member"), `Forbidden` when someone else holds it or nobody does (naming the holder and the
/// command that claims a desktop); [`Error::Kube`] for a failed read.
pub async fn check_connect(actor: &Actor, ns: &str, member: &str) -> Result<()> {
    validate::namespace(ns)?;
    validate::member_name(member)?;
    let client = actor.client();
    let broker = crate::broker::status(client).await.ok();
    let side = cluster_half::side(broker.as_ref());
    if side == ClaimSide::Client {
        return Ok(());
    }
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vm = match vms.get_opt(member).await {
        Ok(Some(vm)) => vm,
        Ok(None) => return Err(no_such_member(ns, member, "")),
        Err(e) if is_status(&e, 403) => return Ok(()),
        Err(e) => {
            return Err(Error::kube(
                format!("read VirtualMachine \"{member}\" in namespace \"{ns}\""),
                e,
            ));
        }
    };
    let Some(pool) = vm.labels().get(POOL_LABEL).cloned() else {
        return Ok(());
    };
    let lease = match crate::lease::get(client, ns, &lease_name(member)).await {
        Ok(lease) => lease,
        Err(e) if e.status_code() == Some(403) => return Ok(()),
        Err(e) => return Err(e),
    };
    let view = member_view_on(&vm, lease.as_ref(), actor.clock().now(), side);
    let viewer = Viewer {
        username: actor.username().to_owned(),
        admin: actor.identity().is_admin(),
        guarded: false,
        side,
    };
    let offer = may_connect(&view, &viewer);
    if offer.allowed {
        return Ok(());
    }
    Err(Error::rejected(
        ErrorKind::Forbidden,
        offer
            .reason
            .unwrap_or_else(|| format!("{member} is not yours")),
        format!(
            "claim a desktop of your own: corral-vdi assign {pool} {} -n {ns}",
            actor.username()
        ),
    ))
}
