//! Pool policy on a cluster without the DesktopPool CRD (this binary's sandbox runs no broker,
//! so nothing installed it): reads answer "unmanaged", never an error; adopt, set and resize
//! say how to install the broker and change nothing; `pool create` refuses policy flags before
//! creating anything; a plain create and delete work as before.

use corral_tests::{cli_binary, client_as, golden_vm, namespace, pool_vms, sandbox};
use vdi_core::error::ErrorKind;
use vdi_core::managed::change::{PolicyChanges, resize, set};
use vdi_core::managed::ops::{CRD_MISSING_FIX, adopt, crd_installed, get, list};

use crate::world;

#[tokio::test]
async fn without_the_crd_pools_read_unmanaged_and_policy_writes_are_refused() {
    let admin = client_as("admin").await;
    let ns = namespace("no-crd").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    pool_vms(&admin, &ns, "lo", 2).await.unwrap();
    assert!(!crd_installed(&admin).await.unwrap());
    assert!(get(&admin, &ns, "lo").await.unwrap().is_none());
    assert!(list(&admin, Some(&ns)).await.unwrap().is_empty());
    assert!(list(&admin, None).await.unwrap().is_empty());
    let before = world(&ns).await;

    let warm = PolicyChanges {
        warm: Some(1),
        ..Default::default()
    };
    for err in [
        adopt(&admin, &ns, "lo", Some("gold")).await.unwrap_err(),
        set(&admin, &ns, "lo", &warm).await.unwrap_err(),
        resize(&admin, &ns, "lo", 3, None).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("no DesktopPool CRD"), "{err}");
        assert_eq!(err.suggestion().as_deref(), Some(CRD_MISSING_FIX));
    }
    assert_eq!(world(&ns).await, before);

    // The CLI: policy flags need a broker, refused before anything is created; without them
    // the pool is made unmanaged, and the listing shows no policy.
    let cli = |args: &[&str]| {
        std::process::Command::new(cli_binary())
            .arg("--kubeconfig")
            .arg(&sandbox().kubeconfig)
            .args(["--context", "admin"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = cli(&[
        "pool", "create", "pp", "--from", "gold", "--size", "1", "--warm", "1", "-n", &ns,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("this cluster has no broker"), "{stderr}");
    assert!(stderr.contains("corral-vdi broker install"), "{stderr}");
    assert_eq!(world(&ns).await, before);
    let out = cli(&[
        "pool", "create", "pp", "--from", "gold", "--size", "1", "-n", &ns,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("policy"), "{stdout}");
    let out = cli(&["pool", "list", "-n", &ns]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !stdout.contains("policy:"),
        "{stdout}"
    );
    let out = cli(&["pool", "delete", "pp", "-n", &ns]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
