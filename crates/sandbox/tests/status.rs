//! `sandbox status` says what actually serves: a running sandbox whose kube-apiserver is
//! stopped (SIGSTOP, as a wedged or zombie server looks from outside) is reported as not
//! answering, with exit status 1, and as answering again once it continues.

use std::process::{Command, Output};

fn sandbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(args)
        .output()
        .expect("run sandbox")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The pids of the kube-apiserver processes started from this sandbox's state folder.
fn apiservers(name: &str) -> Vec<String> {
    let out = Command::new("pgrep")
        .args(["-f", &format!("kube-apiserver.*{name}")])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn status_tells_a_running_process_from_an_answering_api_server() {
    let name = format!("status-test-{}", std::process::id());
    let up = sandbox(&["up", "--name", &name]);
    assert!(up.status.success(), "{}", text(&up));

    let ok = sandbox(&["status", "--name", &name]);
    let said = text(&ok);
    assert!(ok.status.success(), "{said}");
    assert!(
        said.contains("kube-apiserver v") && said.contains("answering"),
        "{said}"
    );

    let pids = apiservers(&name);
    assert!(!pids.is_empty(), "no kube-apiserver of {name} found");
    let signal = |sig: &str| {
        for pid in &pids {
            Command::new("kill").args([sig, pid]).status().unwrap();
        }
    };
    signal("-STOP");
    let wedged = sandbox(&["status", "--name", &name]);
    signal("-CONT");
    let said = text(&wedged);
    assert_eq!(wedged.status.code(), Some(1), "{said}");
    assert!(
        said.contains("but its API server does not answer: no answer within 3 s")
            && said.contains(&format!("fix: sandbox down --name {name}")),
        "{said}"
    );

    let again = sandbox(&["status", "--name", &name]);
    assert!(again.status.success(), "{}", text(&again));
    let down = sandbox(&["down", "--name", &name]);
    assert!(down.status.success(), "{}", text(&down));
    let gone = sandbox(&["status", "--name", &name]);
    assert!(text(&gone).contains("not running"), "{}", text(&gone));
}
