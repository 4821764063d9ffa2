//! A pool's `DesktopPool` from the client's side (CLI, app): read it ([`get`], [`list`]), make
//! one for a label-only pool ([`adopt`]); a new pool's is written by [`super::create`]. Changing
//! it ([`super::change`]: `set`, `resize`) lives beside this file; pool delete removes it
//! ([`crate::pool::delete_pool`]).
//!
//! A cluster without the CRD (no broker was ever installed) is an ordinary cluster for an
//! unmanaged pool: reads answer "none" there, never an error; only a write that needs the CRD
//! says how to install it ([`CRD_MISSING_FIX`]).

use std::collections::BTreeSet;

use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use crate::error::{Error, ErrorKind, Result, is_status};
use crate::names::POOL_LABEL;
use crate::policy::{Assignment, DesktopPool, DesktopPoolSpec, OnRelease};
use crate::pool::GOLDEN_ANNOTATION;
use crate::resources::VirtualMachine;
use crate::validate;

/// The DesktopPool API (`<group>/<version>`) discovery is asked about.
pub const GROUP_VERSION: &str = "corral.dev/v1alpha1";
/// The resource's plural name, as discovery lists it.
const PLURAL: &str = "desktoppools";
/// Field manager of the client's DesktopPool writes.
pub const FIELD_MANAGER: &str = "corral-vdi";
/// The fix for a write on a cluster without the CRD.
pub const CRD_MISSING_FIX: &str = "install the broker: corral-vdi broker install (it installs \
     the DesktopPool CRD and runs the pool policy)";

/// `DesktopPool "lab" in namespace "corral-vms"`, for messages.
pub(crate) fn object_words(ns: &str, pool: &str) -> String {
    format!("DesktopPool \"{pool}\" in namespace \"{ns}\"")
}

/// The DesktopPool of `pool` in `ns`, or `None` when the pool is unmanaged, including on a
/// cluster without the CRD (the API server's 404 for an unknown resource).
///
/// Errors: [`Error::Invalid`] for a bad namespace or pool name (no request); [`Error::Kube`]
/// naming the object for any other failure (403: RBAC does not let the caller read
/// DesktopPools).
pub async fn get(client: &Client, ns: &str, pool: &str) -> Result<Option<DesktopPool>> {
    validate::namespace(ns)?;
    validate::pool_name(pool)?;
    // No CRD: the API server answers a plain-text "404 page not found", which is no Status
    // of reason NotFound (what `get_opt` looks for), so the code alone is judged.
    match Api::<DesktopPool>::namespaced(client.clone(), ns)
        .get(pool)
        .await
    {
        Ok(found) => Ok(Some(found)),
        Err(e) if is_status(&e, 404) => Ok(None),
        Err(e) => Err(Error::kube(format!("read {}", object_words(ns, pool)), e)),
    }
}

/// Every DesktopPool of `ns` (all namespaces with `None`), sorted by namespace and name;
/// empty on a cluster without the CRD.
///
/// Errors: [`Error::Invalid`] for a bad namespace (no request); [`Error::Kube`] for any
/// failure but a 404 (a 403: RBAC does not let the caller list DesktopPools there).
pub async fn list(client: &Client, ns: Option<&str>) -> Result<Vec<DesktopPool>> {
    let api: Api<DesktopPool> = match ns {
        Some(ns) => {
            validate::namespace(ns)?;
            Api::namespaced(client.clone(), ns)
        }
        None => Api::all(client.clone()),
    };
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            let mut pools = list.items;
            pools.sort_by_key(|p| (p.namespace().unwrap_or_default(), p.name_any()));
            Ok(pools)
        }
        Err(e) if is_status(&e, 404) => Ok(Vec::new()),
        Err(e) => Err(Error::kube(
            match ns {
                Some(ns) => format!("list DesktopPools in namespace \"{ns}\""),
                None => "list DesktopPools in all namespaces".to_owned(),
            },
            e,
        )),
    }
}

/// Whether the API server serves DesktopPools (the CRD is installed), asked through
/// discovery (`/apis/corral.dev/v1alpha1`, readable by every signed-in user).
///
/// Errors: [`Error::Kube`] when discovery fails otherwise than with a 404.
pub async fn crd_installed(client: &Client) -> Result<bool> {
    match client.list_api_group_resources(GROUP_VERSION).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == PLURAL)),
        Err(e) if is_status(&e, 404) => Ok(false),
        Err(e) => Err(Error::kube(
            format!("ask the API server whether it serves {GROUP_VERSION} DesktopPools"),
            e,
        )),
    }
}

/// The DesktopPool of `pool`, which must exist, for a change: the refusals of an unmanaged
/// pool and of a cluster without the CRD.
///
/// Errors: [`Error::Rejected`] `NotFound` for either (the fix: `pool adopt`, or installing
/// the broker); those of [`get`].
pub(crate) async fn managed(client: &Client, ns: &str, pool: &str) -> Result<DesktopPool> {
    if let Some(found) = get(client, ns, pool).await? {
        return Ok(found);
    }
    if !crd_installed(client).await? {
        return Err(crd_missing(ns, pool));
    }
    Err(Error::rejected(
        ErrorKind::NotFound,
        format!(
            "pool \"{pool}\" in namespace \"{ns}\" is not managed: it has no DesktopPool, so it \
             has no policy to change"
        ),
        format!("pool adopt first: corral-vdi pool adopt {pool} -n {ns}"),
    ))
}

/// The refusal of a write on a cluster without the CRD.
fn crd_missing(ns: &str, pool: &str) -> Error {
    Error::rejected(
        ErrorKind::NotFound,
        format!(
            "cannot manage pool \"{pool}\" in namespace \"{ns}\": this cluster has no DesktopPool \
             CRD ({GROUP_VERSION}); nothing was written"
        ),
        CRD_MISSING_FIX,
    )
}

/// The golden VM the members' [`GOLDEN_ANNOTATION`] name, when they all name the same one.
fn golden_of(members: &[VirtualMachine]) -> Option<String> {
    let named: BTreeSet<&String> = members
        .iter()
        .filter_map(|vm| vm.annotations().get(GOLDEN_ANNOTATION))
        .collect();
    match named.into_iter().collect::<Vec<_>>().as_slice() {
        [one] if !one.is_empty() => Some((*one).clone()),
        _ => None,
    }
}

/// Makes the DesktopPool of an existing label-only pool: the golden VM is `from`, else the one
/// its members were cloned from ([`GOLDEN_ANNOTATION`], written by pool create), the size its
/// current member count, everything else the defaults (the unmanaged behaviour: no warm
/// member, one-hour Lease, no limits, `onRelease: keep`).
///
/// Errors, each before anything is written: [`Error::Invalid`] for a bad name, or one too
/// long for a DesktopPool ([`crate::pool::check_managed_name`]; no request);
/// [`Error::Rejected`] `NotFound` when the cluster has no CRD (fix: install the broker), the
/// pool has no members, or the golden VM named does not exist in the namespace; `Conflict`
/// when the pool is managed already (also when another adopt won the race); `Invalid` when
/// the golden VM is unknown (fix: `--from <golden-vm>`), is a pool member (any pool's: the
/// broker clones it at every grow and reset), or the member count is out of range;
/// [`Error::Kube`] naming the object for a failed request (403 included).
pub async fn adopt(
    client: &Client,
    ns: &str,
    pool: &str,
    from: Option<&str>,
) -> Result<DesktopPool> {
    validate::namespace(ns)?;
    validate::pool_name(pool)?;
    crate::pool::check_managed_name(pool)?;
    if let Some(from) = from {
        validate::vm_name(from)?;
    }
    let already = |ns: &str| {
        Error::rejected(
            ErrorKind::Conflict,
            format!(
                "pool \"{pool}\" in namespace \"{ns}\" is managed already (it has a DesktopPool)"
            ),
            format!(
                "change its policy with corral-vdi pool set {pool} -n {ns}, or its size with pool resize"
            ),
        )
    };
    if get(client, ns, pool).await?.is_some() {
        return Err(already(ns));
    }
    if !crd_installed(client).await? {
        return Err(crd_missing(ns, pool));
    }
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let members = crate::pool::list_members(&vms, ns, pool).await?;
    if members.is_empty() {
        return Err(Error::rejected(
            ErrorKind::NotFound,
            format!(
                "pool \"{pool}\" has no members in namespace \"{ns}\" (no VirtualMachine carries \
                 {POOL_LABEL}={pool}): there is nothing to adopt"
            ),
            format!(
                "check the name and the namespace (corral-vdi pool list -n {ns}), or make the pool \
                 with corral-vdi pool create {pool} --from <golden-vm> --size N"
            ),
        ));
    }
    let golden = match from.map(str::to_owned).or_else(|| golden_of(&members)) {
        Some(golden) => golden,
        None => {
            return Err(Error::rejected(
                ErrorKind::Invalid,
                format!(
                    "the golden VM of pool \"{pool}\" in namespace \"{ns}\" is unknown: its members \
                     do not name one ({GOLDEN_ANNOTATION}; pools made by the Go CLI or before it \
                     was written do not); nothing was written"
                ),
                format!(
                    "use --from <golden-vm>: corral-vdi pool adopt {pool} -n {ns} --from <golden-vm>"
                ),
            ));
        }
    };
    crate::pool::adopted_golden(client, ns, &golden).await?;
    let spec = DesktopPoolSpec {
        golden,
        size: i32::try_from(members.len()).unwrap_or(i32::MAX),
        ..Default::default()
    };
    spec.policy().map_err(|e| {
        Error::rejected(
            ErrorKind::Invalid,
            format!("pool \"{pool}\" in namespace \"{ns}\" cannot be adopted as it is: {e}"),
            "delete members until the pool is within the bounds, then adopt it",
        )
    })?;
    match create(client, ns, pool, spec).await {
        Err(e) if e.status_code() == Some(409) => Err(already(ns)),
        other => other,
    }
}

/// Creates the DesktopPool `pool` in `ns` with `spec`.
///
/// Errors: [`Error::Kube`] naming the object (409 when it exists).
pub(super) async fn create(
    client: &Client,
    ns: &str,
    pool: &str,
    spec: DesktopPoolSpec,
) -> Result<DesktopPool> {
    let object = DesktopPool {
        metadata: ObjectMeta {
            name: Some(pool.to_owned()),
            namespace: Some(ns.to_owned()),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let made = Api::<DesktopPool>::namespaced(client.clone(), ns)
        .create(&params, &object)
        .await
        .map_err(|e| Error::kube(format!("create {}", object_words(ns, pool)), e))?;
    tracing::info!(namespace = %ns, pool, golden = %made.spec.golden, size = made.spec.size, "DesktopPool created");
    Ok(made)
}

/// `keep`, `restart` or `reset` as an [`OnRelease`].
///
/// Errors: a sentence naming the text and the choices.
pub fn parse_on_release(text: &str) -> std::result::Result<OnRelease, String> {
    [OnRelease::Keep, OnRelease::Restart, OnRelease::Reset]
        .into_iter()
        .find(|o| o.as_str() == text)
        .ok_or_else(|| format!("\"{text}\" is not one of keep, restart, reset"))
}

/// Reads an assignment as the CLI's `--assignment` takes it: `floating` or `dedicated`.
///
/// Errors: a sentence naming the text and the choices.
pub fn parse_assignment(text: &str) -> std::result::Result<Assignment, String> {
    [Assignment::Floating, Assignment::Dedicated]
        .into_iter()
        .find(|a| a.as_str() == text)
        .ok_or_else(|| format!("\"{text}\" is not one of floating, dedicated"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(golden: Option<&str>) -> VirtualMachine {
        let mut vm: VirtualMachine = serde_json::from_value(
            serde_json::json!({ "metadata": { "name": "p-1" }, "spec": {} }),
        )
        .unwrap();
        if let Some(g) = golden {
            vm.annotations_mut()
                .insert(GOLDEN_ANNOTATION.into(), g.into());
        }
        vm
    }

    #[test]
    fn the_golden_vm_is_known_only_when_the_members_agree() {
        assert_eq!(
            golden_of(&[vm(Some("g")), vm(Some("g")), vm(None)]),
            Some("g".into())
        );
        assert_eq!(golden_of(&[vm(Some("g")), vm(Some("h"))]), None);
        assert_eq!(golden_of(&[vm(None)]), None);
        assert_eq!(golden_of(&[vm(Some(""))]), None);
    }

    #[test]
    fn on_release_reads_the_spec_words() {
        assert_eq!(parse_on_release("reset"), Ok(OnRelease::Reset));
        assert!(
            parse_on_release("Reset")
                .unwrap_err()
                .contains("keep, restart, reset")
        );
    }
}
