//! The app and the CLI refuse a connect the same way, in the same order, leaving nothing
//! behind: both are adapters over one vdi-core call per action (`connect::Connector`).
//!
//! For every refusal kind — bad input, no helper program, no folder for the `.rdp` file, the
//! member not running or not there, no permission for the subresource, no graphics device,
//! someone viewing, the guest port closed, the local port in use — the CLI binary is run and
//! the app's call is made (the `Connector` method its Tauri command is, with the command's
//! arguments: `app_adapters_are_one_core_call_each` holds the commands to that), and both
//! must give the same message and fix (the kind is checked on the core's side: the CLI prints
//! no kind). Cases where two refusals apply at once show the order: input, then helper
//! programs and local files (no request), then the cluster, then listening. Nothing moved: no
//! session kept, nothing listening, no file written, and no stream tried when the refusal
//! needs no cluster (a counting client).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use corral_tests::{annotate, cli_binary, counting_stream_client, namespace, sandbox, streams_as};
use vdi_core::connect::{Connector, PortSpec};
use vdi_core::error::ErrorKind;
use vdi_core::programs::HelperSearch;
use vdi_core::session::Supervisor;
use vdi_core::stream::{self, Subresource};

use super::refusing_members;

/// A connect action, as the app's command (or, for `port-forward` and `ssh -l`, the core's own
/// call the CLI adapts) and as the CLI's command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// App `open_viewer` / CLI `vnc`.
    Viewer,
    /// App `open_rdp` / CLI `rdp`.
    Rdp,
    /// App `save_rdp_file` / CLI `rdp --rdp-file`.
    RdpFile,
    /// `Connector::forward_ports` / CLI `port-forward MEMBER 3389`.
    Forward,
}

const ACTIONS: [Action; 4] = [
    Action::Viewer,
    Action::Rdp,
    Action::RdpFile,
    Action::Forward,
];

/// Where a case runs: as whom, which helper programs are installed, where the `.rdp` file
/// goes, and the local port asked for.
struct Setting<'a> {
    user: &'a str,
    /// A folder in `PATH`'s format: the CLI's `PATH`, the core's [`HelperSearch`].
    helpers: &'a Path,
    rdp_file: PathBuf,
    local_port: Option<u16>,
}

/// One refusal, as the core gave it and as the CLI printed it.
struct Refusal {
    kind: ErrorKind,
    message: String,
    suggestion: String,
    /// Streams the core tried before it refused.
    streams_tried: usize,
}

/// The core's call for `action` on `member`, with a supervisor of its own, helpers looked
/// for in `setting.helpers`; asserts it refused and left no session.
async fn core_refusal(action: Action, ns: &str, member: &str, setting: &Setting<'_>) -> Refusal {
    let counter = Arc::new(AtomicUsize::new(0));
    let connector = Connector {
        client: counting_stream_client(setting.user, counter.clone()).await,
        supervisor: Supervisor::new(),
        helpers: HelperSearch::in_dirs(setting.helpers),
    };
    let port = setting.local_port;
    let result = match action {
        Action::Viewer => connector
            .open_viewer(ns, member, false, port)
            .await
            .map(|_| ()),
        Action::Rdp => connector.open_rdp(ns, member, port).await.map(|_| ()),
        Action::RdpFile => connector
            .save_rdp_file(ns, member, port, &setting.rdp_file)
            .await
            .map(|_| ()),
        Action::Forward => connector
            .forward_ports(
                ns,
                member,
                &[PortSpec {
                    local: port,
                    remote: 3389,
                }],
            )
            .await
            .map(|_| ()),
    };
    let err = result.expect_err("the core refuses");
    assert!(
        connector.supervisor.list().is_empty(),
        "{action:?} {member}: a session was kept after the refusal"
    );
    Refusal {
        kind: err.kind(),
        message: err.to_string(),
        suggestion: err.suggestion().unwrap_or_default(),
        streams_tried: counter.load(Ordering::Relaxed),
    }
}

/// The CLI's command line for `action`.
fn cli_args(action: Action, ns: &str, member: &str, setting: &Setting<'_>) -> Vec<String> {
    let mut args: Vec<String> = ["--context", setting.user]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let port = setting.local_port;
    match action {
        Action::Viewer => args.extend(["vnc".to_owned(), member.to_owned()]),
        Action::Rdp => args.extend(["rdp".to_owned(), member.to_owned()]),
        Action::RdpFile => args.extend([
            "rdp".to_owned(),
            member.to_owned(),
            "--rdp-file".to_owned(),
            setting.rdp_file.display().to_string(),
        ]),
        Action::Forward => args.extend([
            "port-forward".to_owned(),
            member.to_owned(),
            port.map_or("3389".to_owned(), |p| format!("{p}:3389")),
        ]),
    }
    if let Some(p) = port
        && action != Action::Forward
    {
        args.extend(["--port".to_owned(), p.to_string()]);
    }
    args.extend(["-n".to_owned(), ns.to_owned()]);
    args
}

/// Runs the CLI with `args`, `PATH` set to `helpers`; asserts it failed (exit 1, nothing on
/// stdout) and returns its stderr.
fn cli_refusal(args: &[String], helpers: &Path) -> String {
    let out = Command::new(cli_binary())
        .args(args)
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env("PATH", helpers)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{args:?}: nothing is printed as started: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// Runs `action` on `member` through the core and through the CLI; asserts both refused with
/// the same message and fix, the core with `kind` after `streams` stream attempts, that no
/// `.rdp` file was left, and returns the message.
async fn same_refusal(
    action: Action,
    ns: &str,
    member: &str,
    setting: &Setting<'_>,
    (kind, needle, streams): (ErrorKind, &str, usize),
) -> String {
    let core = core_refusal(action, ns, member, setting).await;
    let what = format!("{action:?} on {member}");
    assert_eq!(core.kind, kind, "{what}: {}", core.message);
    assert!(core.message.contains(needle), "{what}: {}", core.message);
    assert!(!core.suggestion.is_empty(), "{what}: a fix is given");
    assert_eq!(
        core.streams_tried, streams,
        "{what}: {} refused after {} stream attempts",
        core.message, core.streams_tried
    );
    let stderr = cli_refusal(&cli_args(action, ns, member, setting), setting.helpers);
    assert_eq!(
        stderr,
        format!("error: {}\nhint: {}\n", core.message, core.suggestion),
        "{what}: the CLI and the app say the same"
    );
    assert!(!setting.rdp_file.exists(), "{what}: no .rdp file is left");
    core.message
}

/// Asserts `stderr` is the CLI's rendering of `err`, an input refusal.
fn assert_cli_says(stderr: &str, err: &vdi_core::Error) {
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert_eq!(
        stderr,
        format!("error: {err}\nhint: {}\n", err.suggestion().unwrap())
    );
}

/// A folder holding `programs` as stand-ins (links to `true`: a refusal never starts them).
fn helper_folder(name: &str, programs: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("corral-refusals-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let truth = which_true();
    for program in programs {
        std::os::unix::fs::symlink(&truth, dir.join(program)).unwrap();
    }
    dir
}

fn which_true() -> PathBuf {
    ["/usr/bin/true", "/bin/true"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("true is installed")
}

#[tokio::test]
async fn the_app_and_the_cli_refuse_each_connect_alike_in_the_same_order() {
    let ns = namespace("refusals").await;
    refusing_members(&ns).await;

    let installed = helper_folder("installed", &["remote-viewer", "xfreerdp"]);
    let none = helper_folder("none", &[]);
    let files = std::env::temp_dir().join(format!("corral-refusals-{}-rdp", std::process::id()));
    std::fs::create_dir_all(&files).unwrap();
    let setting = |user, helpers, rdp_file: &str, local_port| Setting {
        user,
        helpers,
        rdp_file: files.join(rdp_file),
        local_port,
    };
    let alice = setting("alice", &installed, "desk.rdp", None);
    let mut messages = std::collections::HashSet::new();

    // 1. Input, before anything else: a bad name wins over a missing helper and the cluster.
    for action in ACTIONS {
        let bare = setting("alice", &none, "desk.rdp", None);
        let bad = (ErrorKind::Invalid, "is not a valid member name", 0);
        messages.insert(same_refusal(action, &ns, "Run_1", &bare, bad).await);
    }
    // A bad port and a bad user: the same parse and the same check.
    let bad_port = "0".parse::<PortSpec>().unwrap_err();
    let as_alice = |words: &[&str]| -> Vec<String> {
        let mut args = vec!["--context".to_owned(), "alice".to_owned()];
        args.extend(words.iter().map(|w| (*w).to_owned()));
        args.extend(["-n".to_owned(), ns.clone()]);
        args
    };
    let stderr = cli_refusal(&as_alice(&["port-forward", "run-1", "0"]), &installed);
    assert_cli_says(&stderr, &bad_port);
    let counter = Arc::new(AtomicUsize::new(0));
    let app = Connector::new(
        counting_stream_client("alice", counter.clone()).await,
        Supervisor::new(),
    );
    let ssh_with = helper_folder("ssh", &["ssh"]);
    // A guest login ssh would misread: split in two words on the line to copy, or read as
    // its own option (`-oProxyCommand=x@127.0.0.1`). The CLI is given it attached to
    // `--login=` (clap would take a bare `-o…` for a flag of its own).
    for (login, says) in [
        (" alice", "contains a space"),
        ("al ice", "\"al ice\" contains a space"),
        ("-oProxyCommand=x", "\"-oProxyCommand=x\" starts with '-'"),
    ] {
        let bad_user = app.open_ssh(&ns, "run-1", login).await.unwrap_err();
        assert!(bad_user.to_string().contains(says), "{login:?}: {bad_user}");
        let cli_login = format!("--login={login}");
        let stderr = cli_refusal(&as_alice(&["ssh", "run-1", &cli_login]), &ssh_with);
        assert_cli_says(&stderr, &bad_user);
    }
    assert_eq!(
        counter.load(Ordering::Relaxed),
        0,
        "no stream for bad input"
    );
    assert!(app.supervisor.list().is_empty());

    // 2. Helper programs and the file's folder, before the cluster: off-1 is not running
    // either, yet no stream is tried.
    let bare = setting("alice", &none, "desk.rdp", None);
    for (action, needle) in [
        (Action::Viewer, "no VNC viewer is installed"),
        (Action::Rdp, "no RDP client is installed"),
    ] {
        let missing = (ErrorKind::NotFound, needle, 0);
        messages.insert(same_refusal(action, &ns, "off-1", &bare, missing).await);
    }
    let nowhere = setting("alice", &installed, "no-such-folder/desk.rdp", None);
    let no_folder = (ErrorKind::Invalid, "there is no folder", 0);
    messages.insert(same_refusal(Action::RdpFile, &ns, "off-1", &nowhere, no_folder).await);

    // 3. The cluster, once per action: not running, not there, not permitted, no graphics
    // (and below, after listening: the port closed, someone viewing).
    let not_running = (ErrorKind::NotFound, "off-1 is not running — start it", 1);
    let forbidden = (ErrorKind::Forbidden, "run-1", 1);
    let carol = setting("carol", &installed, "desk.rdp", None);
    for action in ACTIONS {
        messages.insert(same_refusal(action, &ns, "off-1", &alice, not_running).await);
        messages.insert(
            same_refusal(
                action,
                &ns,
                "nosuch-1",
                &alice,
                (ErrorKind::NotFound, "nosuch-1", 1),
            )
            .await,
        );
        messages.insert(same_refusal(action, &ns, "run-1", &carol, forbidden).await);
    }
    let no_graphics = (ErrorKind::Invalid, "has no graphics device", 1);
    messages.insert(same_refusal(Action::Viewer, &ns, "nographics-1", &alice, no_graphics).await);
    // 4. Listening, last: a local port in use is said only after the cluster said yes — and
    // when the cluster says no, its refusal comes first.
    let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let busy_port = setting("alice", &installed, "desk.rdp", Some(port));
    for action in ACTIONS {
        let in_use = (ErrorKind::Invalid, "cannot listen on 127.0.0.1:", 1);
        messages.insert(same_refusal(action, &ns, "run-1", &busy_port, in_use).await);
        same_refusal(action, &ns, "off-1", &busy_port, not_running).await;
    }

    annotate(&ns, "run-1", "sandbox.corral.dev/guest-ports", Some("22")).await;
    let closed = (ErrorKind::Other, "nothing answers on port 3389 in run-1", 1);
    for action in [Action::Rdp, Action::RdpFile, Action::Forward] {
        messages.insert(same_refusal(action, &ns, "run-1", &alice, closed).await);
    }
    {
        // Someone views run-1's console (keeping others out, as a viewer does): last, as
        // the console may stay taken for a moment after they leave.
        let _viewer = stream::open(
            &streams_as("bob").await,
            &ns,
            "run-1",
            Subresource::Vnc {
                preserve_session: false,
            },
        )
        .await
        .unwrap();
        let busy = (ErrorKind::Busy, "run-1", 1);
        messages.insert(same_refusal(Action::Viewer, &ns, "run-1", &alice, busy).await);
    }

    assert!(
        messages.len() >= 10,
        "each refusal kind has its own words: {messages:#?}"
    );
    for dir in [installed, none, ssh_with, files] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The app's connect commands, in src-tauri/src/connect.rs, with their whitespace removed:
/// each must be the one `Connector` call the test above makes with the same arguments (the app
/// asks for no local port), so what the test shows of the core is what the app does.
#[test]
fn app_adapters_are_one_core_call_each() {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../src-tauri/src/connect.rs"),
    )
    .unwrap();
    let body = |command: &str| -> String {
        let start = source
            .find(&format!("pub async fn {command}("))
            .unwrap_or_else(|| panic!("no command {command}"));
        let open = start + source[start..].find(") -> ").unwrap();
        let from = open + source[open..].find('{').unwrap() + 1;
        let to = from + source[from..].find("\n}\n").unwrap();
        source[from..to].split_whitespace().collect()
    };
    for (command, call) in [
        (
            "open_viewer",
            "connector(&state)?.open_viewer(&namespace,&member,take_over,None).await.map_err(ErrorView::from)",
        ),
        (
            "open_rdp",
            "connector(&state)?.open_rdp(&namespace,&member,None).await.map_err(ErrorView::from)",
        ),
        (
            "open_ssh",
            "connector(&state)?.open_ssh(&namespace,&member,&user).await.map_err(ErrorView::from)",
        ),
    ] {
        assert_eq!(body(command), call, "{command}");
    }
    // Saving an .rdp file first picks the folder (the app's own: downloads, else home).
    let save = body("save_rdp_file");
    assert!(
        save.ends_with(
            "letpath=dir.join(format!(\"{member}.rdp\"));connector(&state)?.save_rdp_file(&namespace,&member,None,&path).await.map_err(ErrorView::from)"
        ),
        "{save}"
    );
    assert_eq!(save.matches("connector(").count(), 1, "{save}");
    let connector = source
        .split("fn connector(")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .unwrap();
    assert!(
        connector.contains("Connector::new(") && connector.contains("state.supervisor.clone()"),
        "the app's connector: its stream client and its supervisor, helpers on PATH: {connector}"
    );
}

/// Without a broker (this binary's sandbox runs none), the CLI says once on stderr what the
/// client-side flow means, for `connect` and `pool list` (assign too, the same call), and the
/// app's badge says it in the same words (`link::establish`'s broker badge): the ordinary user
/// alice may not read the broker's Lease (no manifest, so no Role: "unknown"), the
/// administrator finds none ("absent"); both get the notice.
#[tokio::test]
async fn the_app_and_the_cli_say_alike_what_no_broker_means() {
    use vdi_core::claim::cluster_half::NO_BROKER_NOTICE;
    let ns = namespace("no-broker").await;
    refusing_members(&ns).await;
    for user in ["alice", "admin"] {
        for words in [vec!["pool", "list"], vec!["connect", "run-1"]] {
            let mut args = vec!["--context", user];
            args.extend(&words);
            args.extend(["-n", &ns]);
            let out = Command::new(cli_binary())
                .args(&args)
                .env("KUBECONFIG", &sandbox().kubeconfig)
                .env_remove("RUST_LOG")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{args:?}: {stderr}");
            assert_eq!(stderr, format!("warning: {NO_BROKER_NOTICE}\n"), "{args:?}");
        }
        let source = vdi_core::cluster::KubeconfigSource {
            path: Some(sandbox().kubeconfig.clone()),
            impersonate: None,
        };
        let scope = vdi_core::scope::Scope::Namespace(ns.clone());
        let link = vdi_core::link::establish(&source, Some(user), &scope)
            .await
            .unwrap();
        let badge = link.broker_live.borrow().clone();
        assert_eq!(badge.text, "no broker", "{user}");
        assert_eq!(badge.notice.as_deref(), Some(NO_BROKER_NOTICE), "{user}");
        assert!(
            badge.detail.starts_with(NO_BROKER_NOTICE),
            "{user}: {}",
            badge.detail
        );
        let state = link.broker.as_ref().map(|b| b.state);
        let expected = if user == "admin" {
            vdi_core::broker::BrokerState::Absent
        } else {
            vdi_core::broker::BrokerState::Unknown
        };
        assert_eq!(state, Some(expected), "{user}");
    }
}
