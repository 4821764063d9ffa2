//! Connect against the sandbox: KubeVirt's subresource streams opened by vdi-core (no virtctl)
//! through the real API server's aggregator to the emulated virt-api, whose guest side is real
//! (Xvnc, sshd, FreeRDP's shadow server, an echo service on other listed ports). The CLI's
//! side of Connect is in crates/corral-vdi/tests/cli_connect.rs.
//!
//! One test binary (one sandbox): the streams, forwards and helpers here; in `same_refusals`,
//! the app's and the CLI's connect refusals compared kind by kind. The desktops both refuse
//! on are made by [`refusing_members`].

mod rdp;
mod same_refusals;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use corral_tests::{
    annotate, client_as, counting_stream_client, namespace, running_vm, streams_as, vms, wait_power,
};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vdi_core::connect::{self, PathKind};
use vdi_core::error::ErrorKind;
use vdi_core::programs;
use vdi_core::session::{HANDSHAKE_TIMEOUT, SessionKind, SessionState, Supervisor, Target};
use vdi_core::stream::{self, Subresource};

/// Waits until the emulator has marked VMI `name` in `ns` paused, or not (`paused`): the
/// condition the stream refusals follow, set on its next reconcile after the annotation.
async fn wait_paused(ns: &str, name: &str, paused: bool) {
    let vmis = corral_tests::vmis(&client_as("admin").await, ns);
    corral_tests::eventually(
        &format!("{name} paused: {paused}"),
        Duration::from_secs(20),
        || async {
            let vmi = vmis.get(name).await.ok()?;
            let marked = vmi
                .data
                .pointer("/status/conditions")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c["type"] == "Paused" && c["status"] == "True")
                });
            (marked == paused).then_some(())
        },
    )
    .await;
}

fn free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The desktops a connect is refused on, in `ns`: `run-1` running (refused only by what a
/// case adds), `nographics-1` running without a graphics device, `off-1` stopped.
async fn refusing_members(ns: &str) {
    running_vm(ns, "run-1", |_| {}).await;
    running_vm(ns, "nographics-1", |vm| {
        vm["spec"]["template"]["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] =
            json!(false);
    })
    .await;
    vms(&client_as("admin").await, ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": { "name": "off-1", "namespace": ns },
                "spec": sandbox::bootstrap::golden_spec("Halted", "off-1"),
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    wait_power(ns, "off-1", "Stopped").await;
}

#[tokio::test]
async fn each_refusal_is_explained_once_and_leaves_nothing_behind() {
    let ns = namespace("refuse").await;
    refusing_members(&ns).await;

    let counter = Arc::new(AtomicUsize::new(0));
    let client = counting_stream_client("alice", counter.clone()).await;
    let vnc = Subresource::Vnc {
        preserve_session: true,
    };
    let rdp = Subresource::PortForward { port: 3389 };
    // (VM, subresource, knob annotation, kind, what the message says)
    type Case<'a> = (
        &'a str,
        Subresource,
        Option<(&'a str, &'a str)>,
        ErrorKind,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "off-1",
            vnc,
            None,
            ErrorKind::NotFound,
            "off-1 is not running — start it",
        ),
        (
            "nographics-1",
            vnc,
            None,
            ErrorKind::Invalid,
            "has no graphics device",
        ),
        (
            "run-1",
            rdp,
            Some(("sandbox.corral.dev/paused", "true")),
            ErrorKind::Conflict,
            "run-1 is paused",
        ),
        (
            "run-1",
            rdp,
            Some(("sandbox.corral.dev/guest-ports", "22")),
            ErrorKind::Other,
            "nothing answers on port 3389 in run-1",
        ),
        (
            "run-1",
            rdp,
            Some(("sandbox.corral.dev/force-status", "portforward=503")),
            ErrorKind::Other,
            "virt-handler refused to open portforward on run-1",
        ),
        (
            "run-1",
            rdp,
            Some(("sandbox.corral.dev/force-status", "portforward=504")),
            ErrorKind::Timeout,
            "did not answer in time",
        ),
        (
            "run-1",
            vnc,
            Some(("sandbox.corral.dev/force-status", "vnc=404")),
            ErrorKind::NotFound,
            "run-1",
        ),
    ];
    let mut messages = HashSet::new();
    for (vm, sub, knob, kind, needle) in cases {
        if let Some((key, value)) = knob {
            annotate(&ns, vm, key, Some(value)).await;
            if key == "sandbox.corral.dev/paused" {
                wait_paused(&ns, vm, true).await;
            }
        }
        // A client of its own per case: the API server's aggregator may close a connection
        // after a refusal, and a request sent on it as it closes fails as Unreachable — not
        // the refusal this case is about.
        let client = counting_stream_client("alice", counter.clone()).await;
        let before = counter.load(Ordering::Relaxed);
        let err = stream::open(&client, &ns, vm, sub).await.unwrap_err();
        assert_eq!(
            counter.load(Ordering::Relaxed) - before,
            1,
            "{needle}: exactly one request, no retry"
        );
        assert_eq!(err.kind(), kind, "{err}");
        assert!(err.to_string().contains(needle), "{err}");
        assert!(err.suggestion().is_some_and(|s| !s.is_empty()));
        assert!(!err.retryable(), "{err}");
        messages.insert(err.to_string());
        if let Some((key, _)) = knob {
            annotate(&ns, vm, key, None).await;
            if key == "sandbox.corral.dev/paused" {
                // Or the next case meets a VMI still paused (it did, on a loaded machine).
                wait_paused(&ns, vm, false).await;
            }
        }
    }
    assert_eq!(messages.len(), 7, "each refusal has its own message");

    // The console and a forward refused: no session, nothing listening.
    let supervisor = Supervisor::new();
    let err = supervisor
        .start_console(client.clone(), &ns, "off-1", true)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not running"), "{err}");
    assert!(supervisor.list().is_empty());
}

#[tokio::test]
async fn paths_say_what_reaches_a_member_and_why_not() {
    let ns = namespace("paths").await;
    running_vm(&ns, "desk-1", |_| {}).await;
    let alice = streams_as("alice").await;
    let all = connect::paths(&alice, &ns, "desk-1").await.unwrap();
    assert_eq!(all.phase.as_deref(), Some("Running"));
    for kind in [PathKind::Vnc, PathKind::Rdp, PathKind::Ssh] {
        let p = all.path(kind).unwrap();
        assert!(p.available, "{kind:?}: {:?}", p.reason);
    }
    // Port 3389 closed in the guest: RDP unavailable, with the reason.
    annotate(&ns, "desk-1", "sandbox.corral.dev/guest-ports", Some("22")).await;
    let some = connect::paths(&alice, &ns, "desk-1").await.unwrap();
    let rdp = some.path(PathKind::Rdp).unwrap();
    assert!(!rdp.available);
    assert!(
        rdp.reason
            .as_deref()
            .unwrap()
            .contains("nothing answers on port 3389"),
        "{rdp:?}"
    );
    assert!(some.path(PathKind::Ssh).unwrap().available);

    // carol may not open streams: RDP/SSH (and VNC) unavailable with the permission named,
    // and no websocket is attempted.
    let counter = Arc::new(AtomicUsize::new(0));
    let carol = counting_stream_client("carol", counter.clone()).await;
    let theirs = connect::paths(&carol, &ns, "desk-1").await.unwrap();
    for (kind, permission) in [
        (PathKind::Rdp, "get virtualmachineinstances/portforward"),
        (PathKind::Ssh, "get virtualmachineinstances/portforward"),
        (PathKind::Vnc, "get virtualmachineinstances/vnc"),
    ] {
        let p = theirs.path(kind).unwrap();
        assert!(!p.available);
        assert!(
            p.reason.as_deref().unwrap().contains(permission),
            "{kind:?}: {p:?}"
        );
    }
    assert_eq!(counter.load(Ordering::Relaxed), 0, "no stream was tried");

    // Stopped: every path says so.
    vms(&client_as("admin").await, &ns)
        .patch(
            "desk-1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "runStrategy": "Halted" } })),
        )
        .await
        .unwrap();
    wait_power(&ns, "desk-1", "Stopped").await;
    let none = connect::paths(&alice, &ns, "desk-1").await.unwrap();
    assert!(
        none.paths.iter().all(
            |p| !p.available && p.reason.as_deref() == Some("desk-1 is not running — start it")
        )
    );
}

/// Writes `size` pseudo-random bytes (seeded) through a connection to `local` while reading
/// as many back, and returns the hashes of what was sent and what came back.
async fn echo_round(local: SocketAddr, seed: u64, size: usize) -> ([u8; 32], [u8; 32]) {
    let tcp = TcpStream::connect(local).await.unwrap();
    let (mut rd, mut wr) = tcp.into_split();
    let writer = tokio::spawn(async move {
        let mut hasher = Sha256::new();
        let mut state = seed;
        let mut chunk = vec![0u8; 64 * 1024];
        let mut left = size;
        while left > 0 {
            for b in chunk.iter_mut() {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                *b = (state >> 56) as u8;
            }
            let n = left.min(chunk.len());
            wr.write_all(&chunk[..n]).await.unwrap();
            hasher.update(&chunk[..n]);
            left -= n;
        }
        let sent: [u8; 32] = hasher.finalize().into();
        (sent, wr)
    });
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    while got < size {
        let n = rd.read(&mut buf).await.unwrap();
        assert!(n > 0, "the echo ended after {got} of {size} bytes");
        hasher.update(&buf[..n]);
        got += n;
    }
    let (sent, _wr) = writer.await.unwrap();
    (sent, hasher.finalize().into())
}

#[tokio::test]
async fn sixty_four_parallel_connections_through_one_forward_arrive_intact() {
    let ns = namespace("bulk").await;
    running_vm(&ns, "echo-1", |vm| {
        vm["metadata"]["annotations"]["sandbox.corral.dev/guest-ports"] = json!("22,3389,7777");
    })
    .await;
    let supervisor = Supervisor::new();
    let started = supervisor
        .start_forward(
            streams_as("alice").await,
            &ns,
            "echo-1",
            SessionKind::Forward,
            Target::Port(7777),
            None,
        )
        .await
        .unwrap();
    assert!(started.local.ip().is_loopback());
    const SIZE: usize = 8 << 20;
    let began = Instant::now();
    let rounds: Vec<_> = (0..64u64)
        .map(|k| tokio::spawn(echo_round(started.local, k + 1, SIZE)))
        .collect();
    for (k, round) in rounds.into_iter().enumerate() {
        let (sent, echoed) = round.await.unwrap();
        assert_eq!(sent, echoed, "connection {k}: what came back differs");
    }
    eprintln!(
        "64 × 8 MiB both ways through one forward in {:.1?}",
        began.elapsed()
    );
    let view = supervisor.get(started.id).unwrap();
    assert_eq!(view.connections_total, 64);
    assert_eq!(view.bytes_out, 64 * SIZE as u64);
    assert_eq!(view.bytes_in, 64 * SIZE as u64);
    let port = started.local.port();
    assert!(supervisor.stop(started.id));
    corral_tests::eventually(
        "the port free once the forward stops",
        Duration::from_secs(10),
        || async { free(port).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn helpers_live_and_die_with_their_sessions() {
    let ns = namespace("helpers").await;
    running_vm(&ns, "app-1", |_| {}).await;
    let supervisor = Supervisor::new();
    let alice = streams_as("alice").await;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let started = supervisor
            .start_forward(
                alice.clone(),
                &ns,
                "app-1",
                SessionKind::Ssh,
                Target::Port(22),
                None,
            )
            .await
            .unwrap();
        let pid = supervisor
            .attach_helper(started.id, "sleep", &["300".to_owned()], None)
            .unwrap();
        sessions.push((started, pid));
    }
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid);
    for (_, pid) in &sessions {
        assert!(alive(*pid));
    }
    // Stopped one by one: its helper and port go, the others stay.
    let (first, first_pid) = sessions[0];
    assert!(supervisor.stop(first.id));
    let what = "the first helper gone, its port free";
    corral_tests::eventually(what, Duration::from_secs(10), || async {
        (!alive(first_pid) && free(first.local.port())).then_some(())
    })
    .await;
    assert!(alive(sessions[1].1) && alive(sessions[2].1));
    assert!(matches!(
        supervisor.get(first.id).unwrap().state,
        SessionState::Ended { .. }
    ));

    // A helper that exits by itself ends its session, saying so (the time is printed: a second
    // is the target, the bound a loaded machine's).
    let started = supervisor
        .start_forward(
            alice.clone(),
            &ns,
            "app-1",
            SessionKind::Rdp,
            Target::Port(3389),
            None,
        )
        .await
        .unwrap();
    supervisor
        .attach_helper(
            started.id,
            "sh",
            &["-c".into(), "echo gone >&2; exit 3".into()],
            None,
        )
        .unwrap();
    let noticed = Instant::now();
    let reason = corral_tests::eventually("the helper's exit", Duration::from_secs(10), || async {
        match supervisor.get(started.id)?.state {
            SessionState::Ended { reason, .. } => Some(reason),
            SessionState::Active => None,
        }
    })
    .await;
    assert!(
        reason.contains("exited") && reason.contains("gone"),
        "{reason}"
    );
    eprintln!("a helper's exit was noticed after {:?}", noticed.elapsed());

    // A missing helper names its package and leaves the session for the caller to stop.
    let err = supervisor
        .attach_helper(started.id, "no-such-viewer-xyz", &[], None)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);

    // Dropping the supervisor (the app exiting) ends everything.
    let rest: Vec<(u16, u32)> = sessions[1..]
        .iter()
        .map(|(s, pid)| (s.local.port(), *pid))
        .collect();
    drop(supervisor);
    for (port, pid) in rest {
        corral_tests::eventually("helpers gone", Duration::from_secs(10), || async {
            (!alive(pid) && free(port)).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn the_console_waits_for_no_silent_client_and_refuses_a_wrong_secret() {
    let ns = namespace("consgate").await;
    running_vm(&ns, "quiet-1", |_| {}).await;
    let supervisor = Supervisor::new();
    let console = supervisor
        .start_console(streams_as("alice").await, &ns, "quiet-1", true)
        .await
        .unwrap();
    let (addr, secret) = corral_tests::console_address(&console.url);
    // A client that connects and sends nothing.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let silent_since = Instant::now();
    // A wrong secret of the same length is refused (403), however close.
    let mut wrong = secret.to_owned();
    let last = if wrong.ends_with('0') { "1" } else { "0" };
    wrong.replace_range(wrong.len() - 1.., last);
    let refused = tokio_tungstenite::connect_async(format!("ws://{addr}/{wrong}")).await;
    assert!(
        matches!(
            &refused,
            Err(tokio_tungstenite::tungstenite::Error::Http(answer))
                if answer.status() == http::StatusCode::FORBIDDEN
        ),
        "{refused:?}"
    );
    // The app's own client gets the console meanwhile (the silent one holds up no other).
    corral_tests::assert_console_speaks_rfb(&console.url).await;
    // The silent one is closed once its time for the handshake is up.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        HANDSHAKE_TIMEOUT + Duration::from_secs(5),
        silent.read_to_end(&mut rest),
    )
    .await;
    assert!(matches!(read, Ok(Ok(0))), "{read:?}");
    assert!(silent_since.elapsed() >= HANDSHAKE_TIMEOUT);
    let view = supervisor.get(console.id).unwrap();
    assert_eq!(view.connections_total, 1, "only the app's client: {view:?}");
}

#[tokio::test]
async fn the_apps_ssh_line_knows_the_host_key_whatever_the_port() {
    let ns = namespace("sshalias").await;
    running_vm(&ns, "keyed-1", |_| {}).await;
    let shared = corral_tests::sandbox();
    let known = std::env::temp_dir().join(format!("corral-known-{}", std::process::id()));
    let _ = std::fs::remove_file(&known);
    let supervisor = Supervisor::new();
    let alice = streams_as("alice").await;
    // Two forwards, two ports: the first accepts the key (under the alias), the second must
    // find it known, as the app's line gives it.
    for checking in ["accept-new", "yes"] {
        let started = supervisor
            .start_forward(
                alice.clone(),
                &ns,
                "keyed-1",
                SessionKind::Ssh,
                Target::Port(22),
                None,
            )
            .await
            .unwrap();
        let line = programs::ssh_line(started.local.port(), &shared.ssh_user, &ns, "keyed-1");
        assert!(
            line.contains(&format!("-o HostKeyAlias=vmi.keyed-1.{ns} ")),
            "{line}"
        );
        let out = tokio::process::Command::new("ssh")
            .args(programs::ssh_args(
                started.local.port(),
                &shared.ssh_user,
                &ns,
                "keyed-1",
            ))
            .arg("-i")
            .arg(&shared.ssh_client_key)
            .args(["-o", &format!("UserKnownHostsFile={}", known.display())])
            .args(["-o", &format!("StrictHostKeyChecking={checking}")])
            .args(["-o", "HashKnownHosts=no", "-o", "BatchMode=yes"])
            .args(["-o", "LogLevel=ERROR"])
            .args(["echo", "known"])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{checking}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "known");
        supervisor.stop(started.id);
    }
    let hosts = std::fs::read_to_string(&known).unwrap();
    assert!(hosts.starts_with(&format!("vmi.keyed-1.{ns} ")), "{hosts}");
    let _ = std::fs::remove_file(known);
}

/// Whether process `pid` is a zombie (exited, not yet reaped).
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st == "Z"))
        })
        .unwrap_or(false)
}
