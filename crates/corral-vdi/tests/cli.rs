//! The `corral-vdi` binary against the sandbox: output shape, kubeconfig and context handling,
//! and refusals with a non-zero exit.

use std::process::{Command, Output};

use corral_tests::sandbox;

fn corral(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_corral-vdi"))
        .args(args)
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env_remove("RUST_LOG")
        .output()
        .expect("run corral-vdi")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn pool_list_prints_the_legacy_pool_like_the_walkthrough() {
    let out = corral(&["pool", "list"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("legacy (ns/corral-vms, 3 members: 2 free, 1 taken)"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("legacy-2"))
        .expect("a legacy-2 row");
    assert!(
        row.contains("assigned (legacy, label-only)") && row.contains("alice"),
        "{row}"
    );
    assert!(row.contains("2026-01-15T09:30:00Z"), "{row}");
}

#[test]
fn context_and_kubeconfig_flags_are_honoured() {
    let kubeconfig = sandbox().kubeconfig.display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_corral-vdi"))
        .args([
            "--kubeconfig",
            &kubeconfig,
            "--context",
            "alice",
            "pool",
            "list",
            "-n",
            "corral-vms",
        ])
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("legacy (ns/corral-vms"));

    let out = corral(&["--context", "nobody", "pool", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("context \"nobody\"") && stderr.contains("hint:"),
        "{stderr}"
    );
}

#[test]
fn forbidden_listing_fails_with_a_hint() {
    let out = corral(&["--context", "bob", "pool", "list", "-A"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing printed on stdout");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("forbidden") && stderr.contains("\"bob\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: ask a cluster administrator"),
        "{stderr}"
    );

    let out = corral(&["pool", "list", "-n", "empty-namespace"]);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        "no pools in namespace empty-namespace"
    );
}
