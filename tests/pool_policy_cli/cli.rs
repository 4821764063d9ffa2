//! The CLI: `pool create` with policy flags makes the DesktopPool (a bad flag creates
//! nothing), `pool list` prints a managed pool's policy and leaves an unmanaged one as it was,
//! `pool adopt` / `set` / `resize` write the spec, and `pool delete` removes the DesktopPool.

use std::time::Duration;

use corral_tests::{client_as, pool_vms, wait_pool_members};
use kube::api::{Api, ListParams};
use vdi_core::names::POOL_LABEL;
use vdi_core::policy::{DesktopPoolSpec, OnRelease};
use vdi_core::resources::VirtualMachine;

use crate::{
    cli, desktop_pool, failed, fingerprint, gone, namespace_with_golden, ok,
    too_long_for_a_desktop_pool,
};

/// What a refused `pool create` of `pool` in `ns` must leave: no member, no clone object, no
/// DesktopPool.
async fn nothing_created(admin: &kube::Client, ns: &str, pool: &str) {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let members = vms
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
        .await
        .unwrap();
    assert!(members.items.is_empty(), "{pool}: no member made");
    let clones = corral_tests::clones(admin, ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(clones.items.is_empty(), "{pool}: no clone made");
    assert_eq!(fingerprint(ns, pool).await, None, "{pool}: no DesktopPool");
}

#[tokio::test]
async fn create_with_policy_flags_list_set_resize_and_delete() {
    let ns = namespace_with_golden("cli-policy").await;
    let admin = client_as("admin").await;

    // A bad flag is refused before anything is created.
    let err = failed(&cli(&[
        "pool", "create", "bad", "--from", "golden", "--size", "2", "--warm", "3", "-n", &ns,
    ]));
    assert!(err.contains("spec.warm: 3 is out of range"), "{err}");
    assert!(err.contains("--warm"), "{err}");
    nothing_created(&admin, &ns, "bad").await;

    // With a broker a pool is managed, so its name must leave a DesktopPool room for its 500th
    // member: 60 characters are refused before any clone (a VM name would have fitted).
    let long = too_long_for_a_desktop_pool();
    let err = failed(&cli(&[
        "pool", "create", &long, "--from", "golden", "--size", "1", "-n", &ns,
    ]));
    assert!(
        err.contains("is 60 characters long; a managed pool's name has at most 59"),
        "{err}"
    );
    assert!(err.contains("shorten the pool name to at most 59"), "{err}");
    nothing_created(&admin, &ns, &long).await;

    // With the broker installed, create makes the DesktopPool with the flags.
    let out = ok(&cli(&[
        "pool",
        "create",
        "cp",
        "--from",
        "golden",
        "--size",
        "2",
        "--warm",
        "1",
        "--on-release",
        "restart",
        "--max-session",
        "8h",
        "-n",
        &ns,
    ]));
    assert!(
        out.contains(
            "policy (DesktopPool cp): size 2, warm 1, disconnect grace 1h, max session 8h, \
             idle timeout none, on release restart"
        ),
        "{out}"
    );
    let spec = desktop_pool(&ns, "cp").await.unwrap().spec;
    assert_eq!(
        spec,
        DesktopPoolSpec {
            golden: "golden".into(),
            size: 2,
            warm: Some(1),
            max_session: Some("8h".into()),
            on_release: Some(OnRelease::Restart),
            ..Default::default()
        }
    );

    // pool list: the managed pool's policy under its heading, nothing more for a label-only
    // pool.
    pool_vms(&admin, &ns, "lo", 1).await.unwrap();
    let list = ok(&cli(&["pool", "list", "-n", &ns]));
    let cp = list
        .split("\n\n")
        .find(|p| p.starts_with("cp "))
        .unwrap_or_else(|| panic!("no pool cp in\n{list}"));
    assert!(
        cp.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("  policy: size 2, warm 1,")),
        "{cp}"
    );
    assert!(cp.contains("  broker: "), "{cp}");
    let lo = list
        .split("\n\n")
        .find(|p| p.starts_with("lo "))
        .unwrap_or_else(|| panic!("no pool lo in\n{list}"));
    assert!(!lo.contains("policy:"), "{lo}");
    assert!(
        lo.lines()
            .nth(1)
            .is_some_and(|l| l.trim_start().starts_with("MEMBER")),
        "{lo}"
    );

    // adopt, set, resize.
    let out = ok(&cli(&[
        "pool", "adopt", "lo", "--from", "golden", "-n", &ns,
    ]));
    assert!(out.contains("pool \"lo\" adopted"), "{out}");
    assert!(
        out.contains("policy: size 1, warm 0, disconnect grace 1h"),
        "{out}"
    );
    let out = ok(&cli(&[
        "pool",
        "set",
        "lo",
        "--disconnect-grace",
        "30m",
        "--idle-timeout",
        "1h",
        "-n",
        &ns,
    ]));
    assert!(out.contains("disconnect grace 30m"), "{out}");
    let before = fingerprint(&ns, "lo").await;
    let err = failed(&cli(&["pool", "resize", "lo", "--size", "0", "-n", &ns]));
    assert!(err.contains("out of range (1 to 500)"), "{err}");
    let err = failed(&cli(&[
        "pool",
        "set",
        "lo",
        "--max-session",
        "soon",
        "-n",
        &ns,
    ]));
    assert!(err.contains("\"soon\" is not a duration"), "{err}");
    assert_eq!(fingerprint(&ns, "lo").await, before);
    // resize says what the broker will do, member by member (by its own rule).
    let out = ok(&cli(&["pool", "resize", "lo", "--size", "2", "-n", &ns]));
    assert!(out.contains("\n  clones lo-2\n"), "{out}");
    assert!(!out.contains("removes"), "{out}");
    let spec = desktop_pool(&ns, "lo").await.unwrap().spec;
    assert_eq!(
        (
            spec.size,
            spec.disconnect_grace.as_deref(),
            spec.idle_timeout.as_deref()
        ),
        (2, Some("30m"), Some("1h"))
    );

    // A shrink names the free member above the size, and not the one within it.
    let out = ok(&cli(&["pool", "resize", "cp", "--size", "1", "-n", &ns]));
    assert!(out.contains("\n  removes cp-2 now\n"), "{out}");
    assert!(!out.contains("cp-1"), "{out}");
    // And the broker does it (pool delete would find cp-2 held by the broker meanwhile).
    wait_pool_members(&ns, "cp", "cp-2 removed", Duration::from_secs(60), |m| {
        m.keys().eq(["cp-1"].iter())
    })
    .await;

    // delete: the DesktopPool goes (first), then the members.
    let out = ok(&cli(&["pool", "delete", "cp", "-n", &ns]));
    assert!(out.contains("pool \"cp\" deleted"), "{out}");
    gone(&ns, "cp").await;
}
