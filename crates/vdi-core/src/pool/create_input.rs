//! Pool create, SPEC steps 1–2: a create's input, checked without a request
//! ([`validate_create`]: the shared rules of [`crate::validate`] plus the pool's own, its size
//! and its members' names), and the namespace, which must exist (one request).

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::Api;

use super::{CreatePool, MAX_MEMBER_NAME, MAX_POOL_SIZE};
use crate::error::{Error, ErrorKind, Result, is_status};
use crate::names::{member_name, member_names};
use crate::validate;

/// A pool's size: 1 ..= [`MAX_POOL_SIZE`] members.
///
/// Errors: [`Error::Invalid`] naming the size and the range.
pub(super) fn pool_size(size: u32) -> Result<()> {
    if size == 0 || size > MAX_POOL_SIZE {
        return Err(Error::invalid(
            format!("pool size {size} is out of range: a pool has 1 to {MAX_POOL_SIZE} members"),
            format!("pass --size between 1 and {MAX_POOL_SIZE}"),
        ));
    }
    Ok(())
}

/// Checks a create request without contacting the cluster and returns the member names.
///
/// Errors ([`Error::Invalid`], each naming the value and the fix): the first of
/// [`create_problems`].
pub fn validate_create(request: &CreatePool) -> Result<Vec<String>> {
    match create_problems(request).into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(member_names(&request.name, request.size)),
    }
}

/// The part of a create request a problem is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateInput {
    /// The pool name (and the member names made of it).
    Name,
    /// The namespace.
    Namespace,
    /// The golden VM's name.
    Golden,
    /// The number of members.
    Size,
    /// The per-member clone timeout.
    Timeout,
}

/// Every problem of a create request, in this order, each judged on its own (a form marks
/// them all at once): the pool name is not a DNS-1123 label; the size is 0 or above
/// [`MAX_POOL_SIZE`]; `<name>-<size>` is longer than 63 characters (judged only when name and
/// size are good); the namespace or golden VM name is not a valid name; the timeout is outside
/// 1 s ..= 24 h ([`validate::clone_timeout`]). Each is an [`Error::Invalid`] naming the value
/// and the fix.
pub fn create_problems(request: &CreatePool) -> Vec<(CreateInput, Error)> {
    let name = &request.name;
    let mut found = Vec::new();
    let named = validate::pool_name(name).map_err(|e| found.push((CreateInput::Name, e)));
    let sized = pool_size(request.size).map_err(|e| found.push((CreateInput::Size, e)));
    let last = member_name(name, request.size);
    if named.is_ok() && sized.is_ok() && last.len() > MAX_MEMBER_NAME {
        found.push((
            CreateInput::Name,
            Error::invalid(
                format!(
                    "member name \"{last}\" would be {} characters long; VM names may have at \
                     most {MAX_MEMBER_NAME}",
                    last.len()
                ),
                format!(
                    "shorten the pool name to at most {} characters",
                    MAX_MEMBER_NAME - (last.len() - name.len())
                ),
            ),
        ));
    }
    let checks = [
        (
            CreateInput::Namespace,
            validate::namespace(&request.namespace),
        ),
        (CreateInput::Golden, validate::vm_name(&request.golden)),
        (
            CreateInput::Timeout,
            validate::clone_timeout(request.options.timeout),
        ),
    ];
    found.extend(
        checks
            .into_iter()
            .filter_map(|(input, checked)| checked.err().map(|e| (input, e))),
    );
    found
}

/// The longest name a managed pool (a DesktopPool) may have, in bytes: its members are
/// `<name>-<i>` with `i` up to [`MAX_POOL_SIZE`] (a resize may grow it that far) and a VM name
/// has at most [`MAX_MEMBER_NAME`], so 59: the CRD's `metadata.name.maxLength`.
pub const MAX_MANAGED_NAME: usize = MAX_MEMBER_NAME - "-500".len();

/// Refuses a pool name too long for a managed pool ([`MAX_MANAGED_NAME`]), before anything is
/// written: a pool made with a longer name could never get its DesktopPool.
///
/// Errors: [`Error::Invalid`] naming the name, its length and the fix.
pub fn check_managed_name(pool: &str) -> Result<()> {
    if pool.len() <= MAX_MANAGED_NAME {
        return Ok(());
    }
    Err(Error::invalid(
        format!(
            "pool name \"{pool}\" is {} characters long; a managed pool's name has at most \
             {MAX_MANAGED_NAME} (its members are <pool>-<i>, i up to {MAX_POOL_SIZE}, and a VM \
             name has at most {MAX_MEMBER_NAME}); nothing was written",
            pool.len()
        ),
        format!("shorten the pool name to at most {MAX_MANAGED_NAME} characters"),
    ))
}

/// Refuses a namespace that does not exist (one GET of the Namespace), with `fix` as the
/// hint. A user who may not read namespaces (403) gets no verdict here: the caller's next
/// request then speaks for the namespace (pool create: the golden VM lookup).
///
/// Errors: [`Error::Rejected`] `NotFound` naming the namespace; [`Error::Kube`] for another
/// failed read.
pub async fn check_namespace(client: &Client, namespace: &str, fix: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get_opt(namespace).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Error::rejected(
            ErrorKind::NotFound,
            format!("namespace \"{namespace}\" does not exist"),
            fix,
        )),
        Err(e) if is_status(&e, 403) => Ok(()),
        Err(e) => Err(Error::kube(format!("read namespace \"{namespace}\""), e)),
    }
}

/// [`check_namespace`]'s hint where a pool is made from a golden VM.
pub(super) const GOLDEN_NAMESPACE_FIX: &str =
    "pass -n with the namespace where the golden VM lives (kubectl get vm -A lists them)";

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::clone_name;
    use super::super::tests::request;
    use super::*;

    #[test]
    fn members_and_clones_are_named_after_the_pool() {
        assert_eq!(member_names("dev", 3), ["dev-1", "dev-2", "dev-3"]);
        assert_eq!(clone_name("dev-2"), "corral-vdi-clone-dev-2");
    }

    #[test]
    fn a_managed_pools_name_leaves_room_for_its_last_member() {
        let longest = "p".repeat(MAX_MANAGED_NAME);
        assert!(check_managed_name(&longest).is_ok());
        assert_eq!(member_name(&longest, MAX_POOL_SIZE).len(), MAX_MEMBER_NAME);
        let err = check_managed_name(&format!("{longest}q")).unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::Invalid);
        let text = err.to_string();
        assert!(
            text.contains("is 60 characters long") && text.contains("at most 59"),
            "{text}"
        );
        // The CRD refuses what this refuses.
        let crd: serde_json::Value = serde_yaml::from_str(crate::policy::CRD).unwrap();
        let name = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"]
            ["properties"]["name"];
        assert_eq!(name["maxLength"], MAX_MANAGED_NAME);
    }

    #[test]
    fn validation_names_the_value_and_the_fix() {
        assert_eq!(validate_create(&request("devpool", 3)).unwrap().len(), 3);
        for (name, size, needle) in [
            ("Dev_Pool", 3, "not a valid pool name"),
            ("-dev", 3, "not a valid pool name"),
            ("devpool", 0, "out of range"),
            ("devpool", MAX_POOL_SIZE + 1, "out of range"),
        ] {
            let err = validate_create(&request(name, size)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Invalid);
            assert!(err.to_string().contains(needle), "{name}/{size}: {err}");
            assert!(err.suggestion().is_some());
        }
        // 61 characters + "-1" fits; + "-10" does not.
        let long = "a".repeat(61);
        assert!(validate_create(&request(&long, 9)).is_ok());
        let err = validate_create(&request(&long, 10)).unwrap_err();
        assert!(err.to_string().contains("64 characters"), "{err}");
        assert!(err.suggestion().unwrap().contains("at most 60"), "{err:?}");
        assert!(validate_create(&request("devpool", MAX_POOL_SIZE)).is_ok());

        let mut bad_ns = request("devpool", 1);
        bad_ns.namespace = "Bad NS".into();
        assert!(
            validate_create(&bad_ns)
                .unwrap_err()
                .to_string()
                .contains("namespace")
        );
        let mut zero = request("devpool", 1);
        zero.options.timeout = Duration::ZERO;
        assert!(validate_create(&zero).is_err());
    }
}
