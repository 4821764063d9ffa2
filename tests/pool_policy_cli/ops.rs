//! `vdi_core::managed::ops::adopt` and `::change::{set, resize}`: each refusal, with the
//! cluster unchanged, then adopt, set and resize writing the spec.

use corral_tests::{client_as, golden_vm, pool_vms};
use vdi_core::error::ErrorKind;
use vdi_core::managed::change::{NO_LIMIT, PolicyChanges, resize, set};
use vdi_core::managed::ops::{adopt, crd_installed, get, list};
use vdi_core::policy::{DesktopPoolSpec, OnRelease};
use vdi_core::pool::{CreateOptions, CreatePool, GOLDEN_ANNOTATION, create_pool};

use crate::{desktop_pool, fingerprint, namespace_with_golden, too_long_for_a_desktop_pool};

/// What `pool set --warm 1` and `pool resize --size <size>` of `pool` in `ns` answer `client`,
/// each expected to be refused.
async fn set_and_resize_refusals(
    client: &kube::Client,
    ns: &str,
    pool: &str,
    size: u32,
) -> [vdi_core::Error; 2] {
    let warm = PolicyChanges {
        warm: Some(1),
        ..Default::default()
    };
    [
        set(client, ns, pool, &warm).await.unwrap_err(),
        resize(client, ns, pool, size, None).await.unwrap_err(),
    ]
}

#[tokio::test]
async fn adopt_refuses_what_it_cannot_manage_and_changes_nothing() {
    let ns = namespace_with_golden("adopt-refusals").await;
    let admin = client_as("admin").await;
    assert!(crd_installed(&admin).await.unwrap());
    assert!(get(&admin, &ns, "lo").await.unwrap().is_none());
    assert!(list(&admin, Some(&ns)).await.unwrap().is_empty());

    // No members.
    let err = adopt(&admin, &ns, "nothing", None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains("has no members"), "{err}");
    assert_eq!(fingerprint(&ns, "nothing").await, None);

    // A label-only pool (the Go CLI's): its members name no golden VM.
    pool_vms(&admin, &ns, "lo", 2).await.unwrap();
    let err = adopt(&admin, &ns, "lo", None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert!(
        err.suggestion()
            .unwrap()
            .starts_with("use --from <golden-vm>"),
        "{:?}",
        err.suggestion()
    );
    assert_eq!(fingerprint(&ns, "lo").await, None);

    // A golden VM that does not exist.
    let err = adopt(&admin, &ns, "lo", Some("nope")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains("golden VM \"nope\""), "{err}");
    assert_eq!(fingerprint(&ns, "lo").await, None);

    // A member of a pool as the golden VM (its own pool's, or another's): the broker would
    // copy a desktop at every grow and reset.
    pool_vms(&admin, &ns, "other", 1).await.unwrap();
    for member in ["lo-1", "other-1"] {
        let err = adopt(&admin, &ns, "lo", Some(member)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        assert!(
            err.to_string()
                .contains(&format!("golden VM \"{member}\" is a member of pool")),
            "{err}"
        );
        assert!(
            err.suggestion()
                .unwrap()
                .starts_with("name a golden VM built for the purpose with --from"),
            "{:?}",
            err.suggestion()
        );
        assert_eq!(fingerprint(&ns, "lo").await, None);
    }

    // A name too long for a DesktopPool (60 characters): refused before any read.
    let long = too_long_for_a_desktop_pool();
    pool_vms(&admin, &ns, &long, 1).await.unwrap();
    let err = adopt(&admin, &ns, &long, Some("golden")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert!(err.to_string().contains("is 60 characters long"), "{err}");
    assert_eq!(fingerprint(&ns, &long).await, None);

    // Unmanaged: set and resize point at adopt.
    for err in set_and_resize_refusals(&admin, &ns, "lo", 3).await {
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(
            err.suggestion().unwrap().starts_with("pool adopt first"),
            "{:?}",
            err.suggestion()
        );
    }
    assert_eq!(fingerprint(&ns, "lo").await, None);

    // Adopted: the golden VM named, the size its member count, the rest the defaults (the
    // CRD's schema writes onRelease's default, keep).
    let made = adopt(&admin, &ns, "lo", Some("golden")).await.unwrap();
    let want = DesktopPoolSpec {
        golden: "golden".into(),
        size: 2,
        on_release: Some(OnRelease::Keep),
        ..Default::default()
    };
    assert_eq!(made.spec, want);
    assert_eq!(desktop_pool(&ns, "lo").await.unwrap().spec, want);

    // Managed already.
    let before = fingerprint(&ns, "lo").await;
    let err = adopt(&admin, &ns, "lo", Some("golden")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("managed already"), "{err}");
    assert_eq!(fingerprint(&ns, "lo").await, before);
}

#[tokio::test]
async fn adopt_reads_the_golden_vm_pool_create_wrote_then_set_and_resize_write_the_spec() {
    let ns = namespace_with_golden("adopt-set-resize").await;
    let admin = client_as("admin").await;
    let request = CreatePool {
        namespace: ns.clone(),
        name: "pc".into(),
        golden: "golden".into(),
        size: 2,
        options: CreateOptions::default(),
    };
    let created = create_pool(&admin, &request, |_| {}).await.unwrap();
    let vms = corral_tests::vms(&admin, &ns);
    for member in &created.members {
        let vm = vms.get(member).await.unwrap();
        assert_eq!(
            vm.metadata
                .annotations
                .unwrap_or_default()
                .get(GOLDEN_ANNOTATION)
                .map(String::as_str),
            Some("golden"),
            "{member}"
        );
    }
    // vdi-core's create makes no DesktopPool (the CLI asks for one): adopt reads the mark.
    assert_eq!(fingerprint(&ns, "pc").await, None);
    let made = adopt(&admin, &ns, "pc", None).await.unwrap();
    assert_eq!((made.spec.golden.as_str(), made.spec.size), ("golden", 2));

    // set: every field, then refusals that name the field and write nothing.
    let changes = PolicyChanges {
        warm: Some(2),
        disconnect_grace: Some("30m".into()),
        max_session: Some("8h".into()),
        idle_timeout: Some("1h".into()),
        on_release: Some(OnRelease::Reset),
        assignment: None,
    };
    let written = set(&admin, &ns, "pc", &changes).await.unwrap();
    let want = DesktopPoolSpec {
        golden: "golden".into(),
        size: 2,
        warm: Some(2),
        disconnect_grace: Some("30m".into()),
        max_session: Some("8h".into()),
        idle_timeout: Some("1h".into()),
        on_release: Some(OnRelease::Reset),
        assignment: None,
    };
    assert_eq!(written.spec, want);
    assert_eq!(desktop_pool(&ns, "pc").await.unwrap().spec, want);
    let before = fingerprint(&ns, "pc").await;
    let bad: [(PolicyChanges, &str); 3] = [
        (
            PolicyChanges {
                warm: Some(3),
                ..Default::default()
            },
            "spec.warm",
        ),
        (
            PolicyChanges {
                max_session: Some("5s".into()),
                ..Default::default()
            },
            "spec.maxSession",
        ),
        (PolicyChanges::default(), "nothing to change"),
    ];
    for (changes, field) in bad {
        let err = set(&admin, &ns, "pc", &changes).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        assert!(err.to_string().contains(field), "{field}: {err}");
        assert_eq!(fingerprint(&ns, "pc").await, before, "{field}");
    }

    // Not an administrator: RBAC refuses the write, and the refusal says whose it is.
    let alice = client_as("alice").await;
    for err in set_and_resize_refusals(&alice, &ns, "pc", 2).await {
        assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
        assert!(
            err.to_string()
                .contains("only Corral VDI administrators (group corral-vdi:admins) change a pool's settings or size"),
            "{err}"
        );
        assert!(
            err.suggestion()
                .unwrap()
                .starts_with("ask a member of corral-vdi:admins"),
            "{:?}",
            err.suggestion()
        );
        assert_eq!(fingerprint(&ns, "pc").await, before);
    }

    // resize: out of range, warm above the new size; then both at once, and a shrink.
    for size in [0, 501] {
        let err = resize(&admin, &ns, "pc", size, None).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        assert!(err.to_string().contains("out of range (1 to 500)"), "{err}");
    }
    let err = resize(&admin, &ns, "pc", 1, None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert!(
        err.suggestion().unwrap().starts_with("lower warm first"),
        "{err:?}"
    );
    assert!(
        err.suggestion().unwrap().contains("--size 1 --warm 1"),
        "{err:?}"
    );
    assert_eq!(fingerprint(&ns, "pc").await, before);

    let written = resize(&admin, &ns, "pc", 1, Some(0)).await.unwrap();
    assert_eq!((written.spec.size, written.spec.warm), (1, Some(0)));
    let written = resize(&admin, &ns, "pc", 3, None).await.unwrap();
    assert_eq!(written.spec.size, 3);
    // Removing a limit writes it away.
    let written = set(
        &admin,
        &ns,
        "pc",
        &PolicyChanges {
            max_session: Some(NO_LIMIT.into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(written.spec.max_session, None);
    assert_eq!(
        desktop_pool(&ns, "pc").await.unwrap().spec,
        DesktopPoolSpec {
            size: 3,
            warm: Some(0),
            max_session: None,
            ..want
        }
    );
}

#[tokio::test]
async fn growth_is_refused_when_the_cluster_cannot_place_the_new_members() {
    let ns = namespace_with_golden("resize-capacity").await;
    let admin = client_as("admin").await;
    // A golden VM asking for a GPU the KubeVirt CR does not permit: pool create would refuse
    // it, and so does growing a pool cloned from it.
    golden_vm(&ns, "gpu-golden", "Halted", |vm| {
        vm["spec"]["template"]["spec"]["domain"]["devices"]["gpus"] =
            serde_json::json!([{ "name": "gpu1", "deviceName": "example.com/not-permitted" }]);
    })
    .await;
    pool_vms(&admin, &ns, "gp", 1).await.unwrap();
    adopt(&admin, &ns, "gp", Some("gpu-golden")).await.unwrap();
    let before = fingerprint(&ns, "gp").await;
    let err = resize(&admin, &ns, "gp", 3, None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Refused, "{err}");
    assert!(
        err.to_string().contains("example.com/not-permitted"),
        "{err}"
    );
    assert_eq!(fingerprint(&ns, "gp").await, before);
    // Without growth there is nothing to place.
    let written = resize(&admin, &ns, "gp", 1, Some(1)).await.unwrap();
    assert_eq!(written.spec.warm, Some(1));
}
